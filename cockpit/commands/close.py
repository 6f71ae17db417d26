"""`cockpit close DIR [--json]`: verify the deliverables, write `DIR/closing/`, record `closed`.

Exit 0 when every deliverable is accepted, 1 otherwise; the closing folder is written either way.
`--json` prints exactly what `closing/summary.json` holds.
"""

from __future__ import annotations

import shlex
import sys
import textwrap
from cockpit.close.closing import ClosingOutcome, close_campaign
from cockpit.close.figures import stop_cause
from cockpit.close.summary import summary_json
from cockpit.common.text import escape_control

WIDTH = 80


def run(args) -> int:
    closing = close_campaign(args.dir)
    if args.json:
        sys.stdout.write(summary_json(closing.facts))
        for warning in _outside(closing):
            print(f"cockpit: note: {warning}", file=sys.stderr)
    else:
        show(closing)
    if not closing.all_accepted:
        rejected = len(closing.facts.rejections)
        print(
            escape_control(f"cockpit: {rejected} of {closing.facts.deliverables_total} deliverables rejected; "
                           f"the causes are in {closing.folder / 'report.md'}"),
            file=sys.stderr,
        )
    return closing.exit_code


def _outside(closing: ClosingOutcome) -> list[str]:
    """Deliverables written outside the campaign folder: they may not travel with it when it is copied off the box."""
    return [
        f"{what.removeprefix('path of ')}: {path} is outside the campaign folder; copy it off the box with the campaign folder"
        for what, path in closing.campaign.outside_paths() if what.startswith("path of deliverable ")
    ]


def _wrap(text: str, indent: int) -> str:
    return textwrap.fill(  # a path or an id is never cut at its hyphens
        escape_control(text), WIDTH, initial_indent=" " * indent, subsequent_indent=" " * indent,
        break_on_hyphens=False, break_long_words=False,
    )


def _out(text: str) -> None:
    """One line, or lines wrapped by `_wrap`: ids, causes, reasons and notes come from files, runs
    and people, so every line is shown with its control characters escaped."""
    print("\n".join(escape_control(line) for line in text.split("\n")))


def show(closing: ClosingOutcome) -> None:
    s = closing.facts
    out = _out
    out(f"closing {s.campaign} — written to {closing.folder}/")
    out(_wrap("report.md, summary.json, manifest.json, plan.toml, runlog.jsonl, RELOAD.md", 2))
    event = closing.closed_event or {}
    if closing.recorded:
        out(f"  recorded: closed — seq {event.get('seq')} in runlog.jsonl")
    else:
        out(
            f"  the campaign is closed already with the same content (seq {event.get('seq')}, {event.get('ts')}): "
            "nothing new was recorded; files regenerated"
        )
    out(_wrap(s.times.timing, 2))
    for warning in [*s.warnings, *_outside(closing)]:
        out(_wrap(f"note: {warning}", 2))

    out("")
    out(f"deliverables: {s.accepted} of {s.deliverables_total} accepted")
    for item in s.deliverables:
        out(f"  {item.verdict:<9} {escape_control(item.id)}")
        if item.cause:
            out(_wrap(item.cause, 12))
    if not s.deliverables:
        out("  the campaign declares no deliverable")

    out("")
    out("budget")
    out(f"  lot price                      {s.lot_price_usd:>10} USD")
    for expense in s.other_expenses:
        out(f"  other expense, kept apart      {expense.usd:>10} USD  {escape_control(expense.label)}")
    if s.cost_per_accepted_usd is not None:
        out(f"  lot price per accepted         {s.cost_per_accepted_usd:>10} USD  ({s.lot_price_usd} / {s.accepted})")
    else:
        out(f"  lot price per accepted         undefined: 0 deliverables accepted; the lot cost {s.lot_price_usd} USD")

    out("")
    out("conclusion")
    out(_wrap(s.conclusion.text, 2))

    out("")
    out("planned vs actual (hours)                planned  measured  deviation")
    for row in s.planned_vs_actual:
        planned = f"{row.planned_hours:g}" if row.planned_hours is not None else "—"
        measured = f"{row.measured_hours:g}" if row.measured_hours is not None else "not measured"
        deviation = f"{row.deviation_hours:+g}" if row.deviation_hours is not None else ""
        label = escape_control(f"{row.id} ({row.type})")
        out(f"  {label[:38]:<38} {planned:>7}  {measured:>8}  {deviation:>9}".rstrip())

    from cockpit.close.incidents import incidents_text  # the GPU evidence for the provider, and kWh

    for indent, line in incidents_text(s):
        out(_wrap(line, indent) if line else "")

    open_alerts = [a for a in s.alerts if not a.acknowledged]
    if s.alerts:
        out("")
        out(f"alerts: {len(s.alerts)} raised, {len(open_alerts)} not acknowledged")
        for alert in open_alerts:
            where = f" --run {alert.run}" if alert.run else ""
            out(_wrap(f"open: {alert.rule}{' on ' + alert.run if alert.run else ''}: {alert.message or ''}".rstrip(": "), 2))
            out("    once a person looked, acknowledge it:")
            out(f"    cockpit ack {shlex.quote(str(closing.campaign.directory))} {alert.rule}{where}")

    if s.decisions or s.stops or s.notes:
        out("")
    for decision in s.decisions:
        out(_wrap(f"pilot decision: {decision.decision}" + (f" — {decision.note}" if decision.note else ""), 0))
    for stop in s.stops:
        out(_wrap(f"stop: {stop.run} — {stop_cause(stop.rule, stop.reason)} ({stop.source})", 0))
    for note in s.notes:
        out(_wrap(f"note{' [' + note.run + ']' if note.run else ''}: {note.text}", 0))
    out("")
    out(f"the whole story on one page: {closing.folder / 'report.md'}")


__all__ = ["run", "show"]
