"""Writing the tick's pending alerts in the run log: each alert once while it stays open, never
twice for the same line of the same stream, and a standing condition ("once" alerts: a window
threshold, a lost GPU) once while it holds, unless it cleared since (re-armed).

The check is made twice: against the run log as the engine has followed it (no lock: most ticks
have nothing new to write), then again under the run log's lock, so a TUI and a headless watcher
on the same campaign never log the same alert twice."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cockpit.live.builtin_alerts import Pending
from cockpit.live.gpu_health import record_incident
from cockpit.plan.campaign import Campaign
from cockpit.record.events import EventType
from cockpit.record.runlog import RecordedState, RunLog, alert_key
from cockpit.record.start import start_in

LineIdentity = tuple[str, Any, Any, Any]


def line_identity(key: str, fields: dict[str, Any], line: Any) -> LineIdentity:
    """What makes an alert the same alert of the same line: its key, the stream's inode and
    generation (a rewritten file is a new writing even where the inode number comes back), the line."""
    return (key, fields.get("stream_inode"), fields.get("stream_generation"), line)


def alert_lines(events: Iterable[dict[str, Any]]) -> set[LineIdentity]:
    """The line identities of the alert events among `events`."""
    return {line_identity(alert_key(e), e, e.get("line")) for e in events if e["type"] == EventType.ALERT}


def to_log(
    pending: list[Pending], open_keys: set[str], logged_lines: set[LineIdentity], rearmed: set[str]
) -> tuple[list[Pending], list[Pending]]:
    """(alerts to write, alerts already logged for the same line of the same file)."""
    open_keys = set(open_keys)
    ever_keys = {identity[0] for identity in logged_lines}
    keep: list[Pending] = []
    repeated: list[Pending] = []
    for item in pending:
        if item.key in open_keys:
            continue
        if item.line is not None and line_identity(item.key, item.fields, item.line) in logged_lines:
            repeated.append(item)  # the same line of the same file, re-read after the saved state was lost
            continue
        if item.fields.get("once") and item.key in ever_keys and item.key not in rearmed:
            continue  # a standing condition (a window threshold, a lost GPU): said once while it holds
        keep.append(item)
        open_keys.add(item.key)
    return keep, repeated


@dataclass
class Logged:
    """What `log_alerts` did: the events it wrote, the alerts it skipped as repeated lines (their
    rule must be re-armed for later lines), and whether it consumed a re-armed key."""

    written: list[dict[str, Any]] = field(default_factory=list)
    repeated: list[Pending] = field(default_factory=list)
    rearmed_used: bool = False


def log_alerts(
    log: RunLog,
    campaign: Campaign,
    pending: list[Pending],
    recorded: RecordedState,
    logged_lines: set[LineIdentity],
    rearmed: set[str],
) -> Logged:
    """Append each alert not already open (nor logged for the same line); the lock is taken only
    when the run log as followed so far leaves something to write. `rearmed` loses the keys it
    writes."""
    open_keys = {a.key for a in recorded.active_alerts}
    keep, repeated = to_log(pending, open_keys, logged_lines, rearmed)
    result = Logged(repeated=repeated)
    if not keep:
        return result
    with log.transaction() as tx:  # checked again under the lock: another cockpit may have logged it
        events = tx.read().events
        keep, _ = to_log(keep, {a.key for a in RecordedState.from_events(events).active_alerts}, alert_lines(events), rearmed)
        if keep:  # an alert is a recording: the run log begins with `campaign_started`
            start_in(tx, campaign, events)
        for item in keep:
            fields = {k: v for k, v in item.fields.items() if k != "once"}
            if not record_incident(tx, events, fields):  # a GPU incident: its gpu_health evidence first, once
                continue
            result.written.append(tx.append(EventType.ALERT, key=item.key, **fields))
            if item.key in rearmed:
                rearmed.discard(item.key)
                result.rearmed_used = True
    return result
