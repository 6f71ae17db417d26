"""The alerts no campaign declares: a run's process gone without `finished`, a stopped run still
writing, a stream that cannot be read, the pilot decision due. Each comes out as a `Pending`
alert that the engine logs once (under the run log's lock)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cockpit.common.times import iso, parse_ts, utc_minute
from cockpit.live.metric_values import seconds_to_datetime
from cockpit.live.metrics import MetricsStream
from cockpit.live.runs import run_start
from cockpit.record.runlog import RecordedState

RUN_DIED = "run-died"
STOPPED_STILL_RUNNING = "stopped-still-running"
STREAM_UNREADABLE = "stream-unreadable"
PILOT_DUE = "pilot-due"
STOPPED_GRACE_SECONDS = 120.0  # lines this long after a stop are a shutdown's last words, not a run going on


@dataclass
class Pending:
    """An alert (or an auto-stop's) not yet in the run log; one the disk refused is kept and
    written at the next tick."""

    key: str
    fields: dict[str, Any]
    line: int | None = None  # the metrics line that triggered it, with the stream's inode in fields


def stream_identity(stream: MetricsStream) -> dict[str, Any]:
    """Which writing of a run's file an alert about one of its lines is about."""
    return {"stream_inode": stream.position.inode, "stream_generation": stream.generation}


def built_in_alerts(
    streams: Mapping[str, MetricsStream], plan: Any, now: datetime, recorded: RecordedState,
    alive: Mapping[str, bool | None], dead: Mapping[str, Any], run_pids: Mapping[str, int],
) -> tuple[list[Pending], datetime | None]:
    """(the alerts due now, when the pilot decision fell due if it is due and not recorded).

    `plan`: the campaign as frozen at the start; `dead`: run → the process check that found the
    run's own process gone."""
    pending: list[Pending] = []
    now_s = now.timestamp()

    def alert(rule: str, run_id: str | None, message: str, severity: str, line: int | None = None, **fields: Any) -> None:
        key = f"{rule}|{run_id or ''}"
        body = {"rule": rule, "run": run_id, "message": message, "severity": severity, **fields}
        if line is None:
            body["once"] = True  # a standing condition: said once while it holds
        else:
            body["line"] = line  # the stream's line it is about: logged once per line of each writing
        pending.append(Pending(key, body, line))

    for run_id, stream in streams.items():
        track = stream.track
        stop = recorded.stop_of(run_id)
        if stream.error:
            alert(STREAM_UNREADABLE, run_id,
                  f"{run_id}: its metrics cannot be read: {stream.error}; no rule sees its lines until the path "
                  "holds a readable file (check [[run]] metrics in campaign.toml, the file's type and permissions)",
                  "critical")
        check = dead.get(run_id)
        if check is not None and stop is None and track.finished is None and track.started:
            pid = track.started["pid"]
            gone = {"reused": "its pid now belongs to another process",
                    "not-the-run": "its pid belongs to a process older than the run"}.get(check.outcome, "it has ended")
            silence = ago(now_s - track.last_line_ts) if track.last_line_ts is not None else "no line yet"
            step = "none" if track.last_step is None else str(track.last_step)
            alert(RUN_DIED, run_id,
                  f"{run_id}: its process (pid {pid}) died without a `finished` event ({gone}); "
                  f"last step {step}, last line {silence}",
                  "critical", track.started.get("line"), pid=pid, step=track.last_step, **stream_identity(stream))
        if stop is not None and track.finished is None and alive.get(run_id) is not False:
            stopped_at = parse_ts(stop["ts"]) if isinstance(stop.get("ts"), str) else None
            if stopped_at is not None and track.last_ts is not None and track.last_ts > stopped_at.timestamp() + STOPPED_GRACE_SECONDS:
                alert(STOPPED_STILL_RUNNING, run_id, _still_running_text(stream, stop, stopped_at, now_s, alive, run_pids),
                      "critical", pid=run_pids.get(run_id), step=track.last_step)

    pilot_due_at = None
    pilot = plan.model.pilot
    stream = streams.get(pilot.run) if pilot is not None else None
    if pilot is not None and stream is not None and recorded.pilot_decision is None:
        start = run_start(stream.track) or stream.track.first_ts
        due = seconds_to_datetime(start + pilot.decide_after_hours * 3600.0) if start is not None else None
        if due is not None and now >= due:
            pilot_due_at = due
            alert(PILOT_DUE, pilot.run,
                  f"pilot decision due: {pilot.run} started {_utc_text(seconds_to_datetime(start))} and the "
                  f"{pilot.decide_after_hours:g} h set for the decision passed at {_utc_text(due)}; record it: "
                  "continue, drop-optional or revise (key d, or `cockpit decide DIR ...`)",
                  "warning", due=iso(due))
    return pending, pilot_due_at


def _still_running_text(stream, stop, stopped_at, now_s, alive, run_pids) -> str:
    run_id, track = stream.run_id, stream.track
    signal = stop.get("signal") or {}
    sent = "SIGTERM was sent" if signal.get("sent") else "no signal was sent"
    step = f", step {track.last_step}" if track.last_step is not None else ""
    pid = run_pids.get(run_id)
    if pid is not None and alive.get(run_id):
        how = f"send it the signal: kill -TERM {pid} (its own process, checked)"
    elif pid is not None:
        how = f"its pid {pid} is in another pid namespace or on another host: send SIGTERM where it runs (e.g. docker kill --signal TERM …)"
    else:
        how = "it reported no pid: send SIGTERM where it runs"
    return (
        f"{run_id}: recorded as stopped at {_utc_text(stopped_at)} ({sent}) but its process goes on writing metrics "
        f"(last line {ago(now_s - track.last_ts)}{step}): the lot is still paying for it; {how}"
    )


def ago(seconds: float) -> str:
    """How long ago, for a message: "45 s ago", "12 min ago", "3.5 h ago"."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _utc_text(moment: datetime | None) -> str:
    return utc_minute(moment) if moment else "an unknown time"
