"""The text of a notification: plain, short enough for a phone, and enough to act on without the
box — the campaign, the host, what happened (run, rule, value, step), the lot's time left and
whether the plan still fits, and the exact command to run. Every string that came from a file, a
run or a person is escaped (`escape_control`): a message carries no terminal escape."""

from __future__ import annotations

import shlex
import socket
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from cockpit.common.text import escape_control
from cockpit.common.times import parse_ts, utc_minute
from cockpit.notify.claim import Item

MAX_LISTED = 12  # a burst lists this many, then counts the rest


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return escape_control(value)


def _when(event: dict[str, Any]) -> str:
    moment = parse_ts(event["ts"]) if isinstance(event.get("ts"), str) else None
    return utc_minute(moment) if moment else "?"


def _cockpit(*words: str) -> str:
    return "cockpit " + " ".join(shlex.quote(escape_control(w)) for w in words)


def _alert_lines(item: Item, directory: str, stopped: bool) -> list[str]:
    event = item.event
    rule, run = str(event.get("rule") or "?"), event.get("run")
    what = escape_control(event.get("message") or rule)
    head = f"ALERT [{escape_control(rule)}]" + (f" run {escape_control(run)}" if run else "") + f": {what}"
    figures = []
    if event.get("value") is not None:
        figures.append(f"value {_value(event.get('value'))}")
    if event.get("step") is not None:
        figures.append(f"step {_value(event.get('step'))}")
    lines = [head + (f" ({', '.join(figures)})" if figures else "") + f" — {_when(event)}"]
    if run and not stopped and event.get("action") != "stop":
        lines.append(f"  stop it:  {_cockpit('stop', directory, str(run), '--rule', rule, '--signal')}")
    lines.append(f"  seen it:  {_cockpit('ack', directory, rule, *(('--run', str(run)) if run else ()))}")
    return lines


def _stop_lines(item: Item, signal: dict[str, Any] | None, alert: Item | None, directory: str) -> list[str]:
    event = item.event
    cause = f"rule {event['rule']}" if event.get("rule") else f"reason: {event.get('reason')}"
    source = {"auto": "by the stop rule", "key": "from the cockpit", "cli": "from the command line"}.get(
        str(event.get("source")), f"by {event.get('source')}"
    )
    last = event.get("last") or {}
    figures = ", ".join(f"{k} {_value(v)}" for k, v in list(last.items()) if k != "ts")[:200] if isinstance(last, dict) else ""
    outcome = signal or event.get("signal") or {}
    if outcome.get("sent"):
        sent = "SIGTERM sent"
    elif outcome.get("requested"):
        sent = "no signal sent" + (f": {outcome['detail']}" if outcome.get("detail") else "")
    else:
        sent = "no signal asked for"
    lines = [
        escape_control(f"STOPPED run {event.get('run')} ({cause}, {source}) — {sent}")
        + (f"; last {escape_control(figures)}" if figures else "") + f" — {_when(event)}"
    ]
    if alert is not None:  # the alert that made the stop rule act: what it saw
        lines.append(f"  why:  {escape_control(alert.event.get('message') or alert.event.get('rule'))}")
    lines.append(f"  a mistake?  {_cockpit('void', directory, str(event.get('seq')), '--reason', 'TEXT')}")
    return lines


def _closed_lines(item: Item) -> list[str]:
    event = item.event
    cost = event.get("cost_per_accepted_usd")
    return [escape_control(
        f"CLOSED: {event.get('accepted')} of {event.get('deliverables')} deliverables accepted; lot {event.get('lot_price_usd')} USD; "
        + (f"{cost} USD per accepted deliverable" if cost else "no accepted deliverable, so no cost per deliverable")
        + f"; report in {event.get('folder') or 'closing/'}"
    ) + f" — {_when(event)}"]


def _lot_line(snapshot: Any) -> str | None:
    """The lot's time left and whether the plan fits, from the latest snapshot."""
    clock = getattr(snapshot, "clock", None)
    if clock is None or clock.remaining_hours is None:
        return None
    end = getattr(snapshot.lot, "end", None)
    text = f"lot: {clock.remaining_hours:.1f} h left" + (f" (ends {utc_minute(end)})" if end else "")
    if clock.fits is True:
        text += "; the plan fits"
    elif clock.fits is False:
        finish = clock.projected_finish
        text += "; the plan does NOT fit: with retrieval it ends " + (utc_minute(finish) if isinstance(finish, datetime) else "after the lot")
    return text


def compose(
    items: Sequence[Item],
    *,
    campaign_id: str,
    directory: str | Path,
    snapshot: Any = None,
    signals: dict[int, dict[str, Any]] | None = None,
    host: str | None = None,
) -> tuple[str, str]:
    """(title, body) of one message for `items` (a burst is one message listing them)."""
    signals = signals or {}
    host = host or socket.gethostname()
    directory = str(directory)
    stopped_runs = {i.event.get("run") for i in items if i.kind == "stop"}
    stop_rules = {(i.event.get("rule"), i.event.get("run")) for i in items if i.kind == "stop"}
    alerts_of = {(i.event.get("rule"), i.event.get("run")): i for i in items if i.kind in ("alert", "window")}
    shown: list[Item] = []
    for item in items:  # an auto-stop's alert and its stop are one line: the stop
        if item.kind in ("alert", "window") and (item.event.get("rule"), item.event.get("run")) in stop_rules:
            continue
        shown.append(item)
    lines: list[str] = []
    for item in shown[:MAX_LISTED]:
        if item.kind in ("alert", "window"):
            lines += _alert_lines(item, directory, item.event.get("run") in stopped_runs)
        elif item.kind == "stop":
            lines += _stop_lines(item, signals.get(item.seq), alerts_of.get((item.event.get("rule"), item.event.get("run"))), directory)
        else:
            lines += _closed_lines(item)
    if len(shown) > MAX_LISTED:
        lines.append(f"… and {len(shown) - MAX_LISTED} more: {_cockpit('log', directory)}")
    first = shown[0] if shown else None
    if len(shown) == 1 and first is not None:
        if first.kind == "stop":
            subject = f"stopped {first.event.get('run')}" + (f" ({first.event.get('rule')})" if first.event.get("rule") else "")
        elif first.kind == "closed":
            subject = "closed"
        else:
            subject = f"{first.event.get('rule')}" + (f" on {first.event.get('run')}" if first.event.get("run") else "")
    else:
        subject = f"{len(shown)} events"
    title = escape_control(f"cockpit {campaign_id} on {host}: {subject}")
    lot = _lot_line(snapshot)
    body = [escape_control(f"campaign {campaign_id} on host {host}, folder {directory}"), *lines]
    if lot:
        body.append(lot)
    body.append(f"status:  {_cockpit('status', directory)}")
    return title, "\n".join(body)


def trial_message(campaign_id: str, directory: str | Path, host: str | None = None) -> tuple[str, str]:
    host = host or socket.gethostname()
    return (
        escape_control(f"cockpit {campaign_id} on {host}: test notification"),
        escape_control(f"A test from `cockpit notify --test` for campaign {campaign_id} on host {host}, folder {directory}. "
                       "Alerts and stops of this campaign will arrive here.", keep_newlines=True),
    )
