"""`cockpit plan DIR [--json] [--extra-hours H]`: the end-to-end calendar, window fit, lot options
and reduced protocols, as readable tables with a text Gantt, or as one JSON object (docs/json-output.md)."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cockpit.common.text import escape_control, json_safe
from cockpit.plan.load import load_campaign
from cockpit.plan.schedule import PlanReport, Schedule, describe_tiers, plan_report

GANTT_LABEL = 10  # "retrieval " — the lane names' column
GANTT_WIDTH = 64  # bar columns: label + bars + lot-end marker stay within 80 columns
TICK_STEPS = (1, 2, 3, 6, 12, 24, 48, 72, 168, 336, 720, 1440, 2880, 8760, 17520, 87840)
LEGEND_KEYS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def run(args) -> int:
    from cockpit.errors import UsageError

    extra = float(getattr(args, "extra_hours", 0.0) or 0.0)
    if extra < 0:
        raise UsageError(f"--extra-hours must not be negative (got {extra:g})")
    campaign = load_campaign(args.dir)
    report = plan_report(campaign, extra_hours=extra)
    if args.json:
        print(json_safe(json.dumps(as_json(report), ensure_ascii=False, indent=2)))
    else:
        show(report, Console(highlight=False))
        if not report.fits:
            print(
                f"cockpit: the plan does not fit the {report.days}-day lot: "
                f"{hours(report.committed_hours)} h committed, over by {hours(report.over_by_hours)} h",
                file=sys.stderr,
            )
    return 0 if report.fits else 1


# ---------------------------------------------------------------- JSON


def money(amount) -> str:
    return f"{amount:.2f}"


def as_json(report: PlanReport) -> dict[str, Any]:
    """The `plan --json` fields (docs/json-output.md), and the figures behind them."""
    plan = report.schedule
    return {
        "campaign": report.campaign_id,
        "gpu_model": report.gpu_model,
        "gpu_count": report.gpu_count,
        "days": report.days,
        "lot_price_usd": money(report.lot_price_usd),
        "window_hours": report.window_hours,
        "committed_hours": report.committed_hours,
        "uncommitted_hours": report.uncommitted_hours,
        "fits": report.fits,
        "over_by_hours": report.over_by_hours,
        "planned_hours": plan.committed_hours,
        "extra_hours": report.extra_hours,
        "retrieval": {
            "start_hours": plan.retrieval_start_hours,
            "end_hours": plan.committed_hours,
            "hours": plan.retrieval_hours,
        },
        "busy_hours_per_gpu": {str(gpu): busy for gpu, busy in sorted(plan.busy_hours_per_gpu.items())},
        "human_hours": plan.human_hours,
        "schedule": [
            {
                "id": slot.id,
                "kind": slot.kind,
                "tier": slot.tier,
                "gpus": list(slot.gpus),
                "start_hours": slot.start_hours,
                "end_hours": slot.end_hours,
                "hours": slot.hours,
            }
            for slot in plan.slots
        ],
        "options": [
            {
                "label": option.label,
                "days": option.days,
                "lots": option.lots,
                "gpus_per_lot": option.gpus_per_lot,
                "price_usd": money(option.price_usd),
                "window_hours": option.window_hours,
                "committed_hours": option.committed_hours,
                "fits": option.fits,
                "current": option.current,
                "source": option.source,
            }
            for option in report.options
        ],
        "reduced": [
            {
                "label": describe_tiers(protocol.tiers),
                "tiers": list(protocol.tiers),
                "kept": list(protocol.kept),
                "dropped": list(protocol.dropped),
                "committed_hours": protocol.committed_hours,
                "fits": protocol.fits,
                "over_by_hours": protocol.over_by_hours,
            }
            for protocol in report.reduced
        ],
        "notes": list(report.notes),
    }


# ---------------------------------------------------------------- text


def hours(value: float) -> str:
    """48.0 → "48", 0.5 → "0.5", 1/3 → "0.33"."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _plain(value: object) -> Text:
    """A table cell from the campaign's own words (ids, kinds, labels): shown as written, never
    read as Rich markup, its control characters escaped."""
    return Text(escape_control(value))


def _yes(fits: bool) -> Text:
    return Text("fits", style="green") if fits else Text("does not fit", style="bold red")


def show(report: PlanReport, console: Console) -> None:
    plan = report.schedule
    console.print(
        escape_control(
            f"{report.campaign_id} · {report.gpu_model} × {report.gpu_count} · "
            f"{report.days}-day lot ({hours(report.window_hours)} h) · "
            f"{money(report.lot_price_usd)} USD for the lot"
        ),
        markup=False,
    )

    table = Table(title="Calendar", title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("item")
    table.add_column("kind")
    table.add_column("tier")
    table.add_column("GPUs")
    table.add_column("start h", justify="right")
    table.add_column("end h", justify="right")
    table.add_column("hours", justify="right")
    for slot in plan.slots:
        table.add_row(
            _plain(slot.id),
            _plain(slot.kind),
            _plain(slot.tier),
            ", ".join(str(g) for g in slot.gpus) or "–",
            hours(slot.start_hours),
            hours(slot.end_hours),
            hours(slot.hours),
        )
    if plan.retrieval_hours:
        table.add_row(
            "retrieval", "", "", "", hours(plan.retrieval_start_hours), hours(plan.committed_hours),
            hours(plan.retrieval_hours),
        )
    console.print()
    console.print(table)

    console.print()
    facts = Table.grid(padding=(0, 2))
    facts.add_column()
    facts.add_column()
    facts.add_row("Window", f"{hours(report.window_hours)} h")
    committed = f"{hours(report.committed_hours)} h, retrieval included"
    if report.extra_hours:
        committed += f" ({hours(plan.committed_hours)} h planned + {hours(report.extra_hours)} h extra)"
    facts.add_row("Committed", committed)
    if report.fits:
        facts.add_row("Uncommitted", Text(f"{hours(report.uncommitted_hours)} h: the plan fits this lot", style="green"))
    else:
        facts.add_row("Over by", Text(f"{hours(report.over_by_hours)} h: the plan does not fit this lot", style="bold red"))
    busy = " · ".join(
        f"GPU {gpu} {hours(value)} h" for gpu, value in sorted(plan.busy_hours_per_gpu.items())
    )
    facts.add_row("Busy", f"{busy} · human {hours(plan.human_hours)} h")
    console.print(facts, markup=False)

    console.print()
    for line in gantt(plan, report.window_hours, report.gpu_count, report.extra_hours):
        console.print(escape_control(line), markup=False, highlight=False, soft_wrap=True)

    options = Table(title="Lot options", title_justify="left", show_edge=False, pad_edge=False)
    options.add_column("option")
    options.add_column("price USD", justify="right")
    options.add_column("window h", justify="right")
    options.add_column("committed h", justify="right")
    options.add_column("fit")
    for option in report.options:
        options.add_row(
            _plain(option.label + (" (yours)" if option.current else "")),
            money(option.price_usd),
            hours(option.window_hours),
            hours(option.committed_hours),
            _yes(option.fits),
        )
    console.print()
    console.print(options)

    reduced = Table(
        title=f"Reduced protocols in the current {report.days}-day lot",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    reduced.add_column("keeps")
    reduced.add_column("drops")
    reduced.add_column("committed h", justify="right")
    reduced.add_column("fit")
    for protocol in report.reduced:
        reduced.add_row(
            _plain(describe_tiers(protocol.tiers)),
            _plain(", ".join(protocol.dropped) or "nothing"),
            hours(protocol.committed_hours),
            _yes(protocol.fits),
        )
    console.print()
    console.print(reduced)

    console.print()
    notes = Table.grid(padding=(0, 1))
    notes.add_column()
    notes.add_column()
    for note in report.notes:
        notes.add_row("·", _plain(note))
    console.print(notes, markup=False)


def gantt(plan: Schedule, window_hours: float, gpu_count: int, extra_hours: float = 0.0) -> list[str]:
    """A text Gantt of the lanes (GPU 0, GPU 1, …, human, retrieval) within 80 columns.

    One letter an item (the legend says which), `R` retrieval, `+` the extra hours, and a `|`
    where the lot ends.
    """
    total = max(window_hours, plan.committed_hours + extra_hours) or 1.0
    scale = total / GANTT_WIDTH  # hours per column

    def column(at: float) -> int:
        return min(GANTT_WIDTH, max(0, round(at / scale)))

    def paint(lane: list[str], start: float, end: float, key: str, over: bool = True) -> None:
        first, last = column(start), column(end)
        if end > start and last <= first:  # a short item still shows, one column wide
            last = min(GANTT_WIDTH, first + 1)
            first = last - 1
        for index in range(first, last):
            if over or lane[index] == " ":
                lane[index] = key

    keys = {slot.id: LEGEND_KEYS[i % len(LEGEND_KEYS)] for i, slot in enumerate(plan.slots)}
    lanes: dict[str, list[str]] = {f"GPU {g}": [" "] * GANTT_WIDTH for g in range(gpu_count)}
    lanes["human"] = [" "] * GANTT_WIDTH
    retrieval_lane = bool(plan.retrieval_hours or extra_hours)
    if retrieval_lane:
        lanes["retrieval"] = [" "] * GANTT_WIDTH
    for slot in plan.slots:
        if slot.kind == "human":
            paint(lanes["human"], slot.start_hours, slot.end_hours, keys[slot.id])
        for gpu in slot.gpus:
            paint(lanes[f"GPU {gpu}"], slot.start_hours, slot.end_hours, keys[slot.id])
    if plan.retrieval_hours:
        paint(lanes["retrieval"], plan.retrieval_start_hours, plan.committed_hours, "R")
    if extra_hours:
        paint(lanes["retrieval"], plan.committed_hours, plan.committed_hours + extra_hours, "+", over=False)

    end = column(window_hours)
    lines = [f"Gantt: 1 column ≈ {hours(scale)} h, | = the lot ends at {hours(window_hours)} h"]
    axis = [" "] * (GANTT_WIDTH + 1)
    step = next((s for s in TICK_STEPS if total / s <= 6), TICK_STEPS[-1])
    ticks = [index * step for index in range(int(total // step) + 1)]
    for tick in [window_hours, *ticks]:  # the lot's end first, so it always has its label
        label = hours(tick)
        position = min(column(tick), GANTT_WIDTH + 1 - len(label))
        if all(c == " " for c in axis[max(0, position - 1): position + len(label) + 1]):
            axis[position: position + len(label)] = label
    lines.append(" " * GANTT_LABEL + "".join(axis).rstrip())
    for name, cells in lanes.items():
        row = cells + [" "]
        if row[end] in " +":  # the lot's end shows unless an item's own letter is there
            row[end] = "|"
        lines.append(f"{name:<{GANTT_LABEL}}" + "".join(row).rstrip())

    legend = [f"{keys[s.id]} {s.id}" for s in plan.slots]
    if plan.retrieval_hours:
        legend.append("R retrieval")
    if extra_hours:
        legend.append("+ extra hours")
    line = ""
    for entry in legend:
        candidate = f"{line}  {entry}" if line else entry
        if len(candidate) > 78 and line:
            lines.append(line)
            line = entry
        else:
            line = candidate
    if line:
        lines.append(line)
    return lines
