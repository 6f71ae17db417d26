"""`cockpit check DIR [--json]`: validate the campaign file and say what is worth knowing about it."""

from __future__ import annotations

import json
import sys

from cockpit.common.text import escape_control
from cockpit.plan.campaign import CampaignError
from cockpit.plan.load import load_campaign
from cockpit.record.start import plan_drift


def _print(text: str) -> None:
    print(escape_control(text))  # ids, names and notes are read from the campaign's files


def _notes(campaign) -> list[str]:
    notes = [f"{what}: {path} (outside the campaign folder)" for what, path in campaign.outside_paths()]
    notes += list(campaign.warnings)
    drift = plan_drift(campaign)
    if drift:
        notes.append(drift)
    return notes


def _json(args) -> int:
    """One JSON object on stdout, valid or not: `valid`, `file`, `findings` (file, line, table,
    item, key, where, message, fix), `notes`, and for a valid file its `campaign` and `lot`."""
    try:
        campaign = load_campaign(args.dir)
    except CampaignError as error:
        file = error.findings[0].file if error.findings else str(args.dir)
        json.dump({"valid": False, "file": file, "findings": [f.as_json() for f in error.findings], "notes": []},
                  sys.stdout, indent=2, ensure_ascii=False)
        print()
        return 1
    lot = campaign.lot
    model = campaign.model
    json.dump({
        "valid": True,
        "file": str(campaign.file),
        "findings": [],
        "notes": _notes(campaign),
        "campaign": campaign.id,
        "schema": 1,
        "lot": {
            "gpu_model": lot.gpu_model, "gpus": lot.gpu_count, "days": lot.days,
            "price_usd": str(campaign.price),
            "price_source": "as written" if lot.price_usd is not None else "catalogue",
            "order_ref": lot.order_ref,
            "start": lot.start.isoformat().replace("+00:00", "Z") if lot.start else None,
        },
        "counts": {"tasks": len(model.tasks), "runs": len(model.runs),
                   "stop_rules": len(model.stop_rules), "deliverables": len(model.deliverables)},
    }, sys.stdout, indent=2, ensure_ascii=False)
    print()
    return 0


def run(args) -> int:
    if getattr(args, "json", False):
        return _json(args)
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
