"""One run as the engine and the commands see it: its state (`RunState`), when its process
started, and, outside the engine's loop, its track brought up to date, its last metrics for a
stop event and its own process signalled."""

from __future__ import annotations

import math
import os
from enum import StrEnum
from typing import Any

from cockpit.common.layout import METRICS_FILE, RUNS_DIR
from cockpit.live.host import HostProcesses
from cockpit.live.saved_state import load_state, state_file
from cockpit.live.track import RunTrack, last_metrics
from cockpit.plan.campaign import Campaign


class RunState(StrEnum):
    """A run's state in the views and in `status --json` (`runs[].state`)."""

    PLANNED = "planned"  # nothing reported yet
    RUNNING = "running"
    FINISHED = "finished"  # said `finished` with a status that means a clean end
    FAILED = "failed"  # said `finished` with any other status
    STOPPED = "stopped"  # a stop is recorded in the run log
    ENDED = "ended"  # its process is gone and it never said `finished`
    UNREADABLE = "unreadable"  # its metrics path holds no readable file: nothing it says is seen


# What the lot clock makes of each state (`ItemProgress.state`): a run not started is pending, one
# whose process ended without `finished` failed, one whose stream cannot be read is still counted
# as running (its process may well be).
CLOCK_STATES: dict[str, str] = {
    RunState.PLANNED: "pending",
    RunState.ENDED: "failed",
    RunState.UNREADABLE: "running",
}


def run_state(track: RunTrack, stop: dict[str, Any] | None, alive: bool | None, unreadable: bool = False) -> RunState:
    """`stop`: the run's recorded stop, if any; `alive`: whether its own process was found (None:
    not known here, e.g. another pid namespace); `unreadable`: its metrics path cannot be read."""
    if stop is not None:
        return RunState.STOPPED
    if unreadable:
        return RunState.UNREADABLE
    if track.finished is not None:
        return RunState.FINISHED if track.finished_cleanly else RunState.FAILED
    if not track.lines and not track.started:
        return RunState.PLANNED
    if alive is False:
        return RunState.ENDED
    return RunState.RUNNING


def run_start(track: RunTrack) -> float | None:
    """When the run's process started (epoch seconds), as its latest `started` event says."""
    started = track.started or {}
    ts = started.get("ts")
    return ts if isinstance(ts, (int, float)) else track.first_started_ts


def start_bounds(track: RunTrack) -> dict[str, float]:
    """A start taken from when the `started` line was read only bounds the process's start from
    above (it began before the line was read): no "started too long before" check then."""
    return {"startup_allowance_s": math.inf} if track.started and track.started_ts_read else {}


def undeclared_runs_notice(campaign: Campaign) -> str | None:
    """One notice for metrics folders under runs/ that no declared id owns (a typo in a run id
    reads as a run that never reports); None when there are none."""
    directory = campaign.directory
    folder = directory / RUNS_DIR
    declared = {item.id for item in campaign.items}
    used = set()
    for run in campaign.runs:
        for path in (run.metrics_path(directory), run.checkpoints_path(directory)):
            try:
                used.add(path.relative_to(folder).parts[0])
            except (ValueError, IndexError):
                pass
    names = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(".") or entry.name in declared or entry.name in used:
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False) and os.path.isfile(os.path.join(entry.path, METRICS_FILE)):
                        names.append(entry.name)
                except OSError:
                    continue
    except OSError:
        return None
    if not names:
        return None
    names.sort()
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"runs/ holds metrics of {len(names)} id{'s' if len(names) != 1 else ''} the campaign does not declare "
        f"({shown}): they are ignored; declare each as a [[run]] in campaign.toml, or move it out of runs/"
    )


# ---------------------------------------------------------------- for the command line


def track_of(campaign: Campaign, run_id: str) -> RunTrack | None:
    """The run's summary, brought up to date from the saved position (reads only new bytes)."""
    run = campaign.run(run_id)
    if run is None:
        return None
    path = run.metrics_path(campaign.directory)
    saved = load_state(state_file(campaign.directory))
    stream = saved.stream(run_id, path)
    stream.poll()
    return stream.track


def last_metrics_of_run(campaign: Campaign, run_id: str, *, track: RunTrack | None = None) -> dict[str, Any]:
    """The run's last step and metric values, for a stop event ({} when it has reported nothing)."""
    track = track or track_of(campaign, run_id)
    if track is None or (not track.lines and not track.started):
        return {}
    return last_metrics(track)


def terminate_run_of(
    campaign: Campaign, run_id: str, *, host: HostProcesses | None = None, track: RunTrack | None = None
) -> dict[str, Any]:
    """SIGTERM to the run's own process only: the pid of its `started` event, checked to be the
    same user's and started when the run said it started (a reused pid is never signalled)."""
    track = track or track_of(campaign, run_id)
    started = (track.started if track else None) or {}
    pid = started.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return {"sent": False, "detail": f"run '{run_id}' has reported no pid (no `started` event), so no process was signalled"}
    result = (host or HostProcesses()).terminate_run(pid, run_start(track), **start_bounds(track))
    return {"sent": result.sent, "pid": pid, "outcome": result.outcome, "detail": result.message}
