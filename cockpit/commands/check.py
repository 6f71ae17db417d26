"""`cockpit check DIR`: validate the campaign file and say what is worth knowing about it."""

from __future__ import annotations

from cockpit.common.text import escape_control
from cockpit.plan.load import load_campaign
from cockpit.record.start import plan_drift


def _print(text: str) -> None:
    print(escape_control(text))  # ids, names and notes are read from the campaign's files


def run(args) -> int:
    campaign = load_campaign(args.dir)
    lot = campaign.lot
    model = campaign.model
    source = "as written" if lot.price_usd is not None else "from the catalogue"
    _print(f"{campaign.file}: valid (schema 1)")
    _print(f"  campaign  {campaign.id}")
    _print(
        f"  lot       {lot.gpu_model} × {lot.gpu_count}, {lot.days} days, "
        f"{campaign.price} USD for the lot ({source})"
        + (f", order {lot.order_ref}" if lot.order_ref else "")
    )
    _print(
        f"  items     {len(model.tasks)} task{'s' if len(model.tasks) != 1 else ''}, "
        f"{len(model.runs)} run{'s' if len(model.runs) != 1 else ''}, "
        f"{len(model.stop_rules)} stop rule{'s' if len(model.stop_rules) != 1 else ''}, "
        f"{len(model.deliverables)} deliverable{'s' if len(model.deliverables) != 1 else ''}"
    )
    for what, path in campaign.outside_paths():  # written so on purpose, often (a scratch disk): said once, not refused
        print(f"  path      {what}: {path} (outside the campaign folder)")
    for warning in campaign.warnings:
        _print(f"  note: {warning}")
    drift = plan_drift(campaign)
    if drift:
        _print(f"  note: {drift}")
    return 0
