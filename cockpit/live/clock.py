"""The live lot clock: elapsed and remaining lot time, the remaining plan re-estimated from measured
progress, the projected finish and the window alerts. Pure arithmetic: `now` is always passed in,
so tests run a 72-hour lot in milliseconds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Any

from cockpit.common.times import hours_in, utc_minute
from cockpit.plan.schedule import Schedule, schedule

RULE = "lot-window"
RUNNING = "running"
PENDING = "pending"
# States in which an item takes no more lot time: a stopped or failed run is an expense, not work left.
ENDED_STATES = frozenset({"finished", "stopped", "failed", "done", "killed", "crashed", "exited"})


class ClockPhase(StrEnum):
    """Where the lot is in its window (`ClockReading.phase`)."""

    NO_START = "no_start"  # [lot] has no start: nothing to count from
    NOT_STARTED = "not_started"
    RUNNING = "running"
    ENDED = "ended"

# The farthest the clock projects: work measured to end later than this (one step a day of 10^12
# steps) is shown as ending then, not as a date no calendar holds. A century past any lot's end.
HORIZON_HOURS = 100 * 366 * 24.0


@dataclass(slots=True)  # not frozen: the engine makes one a run a tick, and a frozen one costs 3 × to build
class ItemProgress:
    """What is known of one task or run. Runs report themselves; tasks rarely do.

    `state`: "pending", "running", or an ended state ("finished", "stopped", "failed").
    `step`/`step_at`: the last step seen and when; `total_steps` overrides the plan's.
    `steps_per_hour`: a measured rate, when the caller has a better one than step / time since start.
    """

    state: str = PENDING
    started_at: datetime | None = None
    ended_at: datetime | None = None
    step: int | None = None
    step_at: datetime | None = None
    total_steps: int | None = None
    steps_per_hour: float | None = None


@dataclass(frozen=True)
class WindowAlert:
    """An alert about the lot's window; `key` is stable so the engine logs each one once."""

    key: str  # "lot-window:6h", "lot-window:overrun", "lot-window:ended"
    message: str
    level: str = "warning"  # "warning" | "critical"
    threshold_hours: float | None = None
    rule: str = RULE
    run: None = None


@dataclass(frozen=True)
class ClockReading:
    """The lot clock at `now`. Hours are None where the lot has no start to count from."""

    phase: ClockPhase
    message: str
    now: datetime
    lot_start: datetime | None
    lot_end: datetime | None
    window_hours: float
    elapsed_hours: float | None  # since the lot start, 0 before it, at most the window
    remaining_hours: float | None  # to the lot end, the whole window before it starts, 0 after it
    retrieval_hours: float
    committed_remaining_hours: float  # the remaining plan from now (or the start), retrieval included
    projected_finish: datetime | None  # when the last item ends
    projected_retrieval_end: datetime | None
    projected_overrun_hours: float | None  # how far retrieval's end passes the lot end, 0 if not
    remaining_by_item: dict[str, float] = field(default_factory=dict)  # work left, hours
    plan: Schedule | None = None  # the remaining plan, hours from max(now, lot start)
    planned: Schedule | None = None  # the whole plan, hours from the lot start
    alerts: tuple[WindowAlert, ...] = ()

    @property
    def started(self) -> bool:
        """The lot has a start and it has passed."""
        return self.phase in (ClockPhase.RUNNING, ClockPhase.ENDED)

    @property
    def fits(self) -> bool | None:
        """Projected finish plus retrieval ends by the lot's end (None without a start)."""
        return None if self.projected_overrun_hours is None else self.projected_overrun_hours == 0

    @property
    def committed_hours(self) -> float | None:
        """The whole plan, end to end with retrieval, as planned from the lot start."""
        return self.planned.committed_hours if self.planned else None

    @property
    def uncommitted_hours(self) -> float | None:
        return None if self.planned is None else self.window_hours - self.planned.committed_hours



def projected(base: datetime, hours: float) -> datetime:
    """`base` plus `hours` of work, the hours bounded by the clock's horizon (never an overflow)."""
    if not hours > 0:  # also NaN
        return base
    return base + timedelta(hours=min(float(hours), HORIZON_HOURS))


def _utc(moment: datetime) -> datetime:
    """A naive time is read as UTC; everything inside is tz-aware UTC."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def _when(moment: datetime) -> str:
    return utc_minute(moment)


def duration(hours: float) -> str:
    """5.7 → "5 h 42 min", 6 → "6 h", 0.25 → "15 min"."""
    minutes = max(0, round(hours * 60))
    whole, rest = divmod(minutes, 60)
    if whole and rest:
        return f"{whole} h {rest} min"
    if whole:
        return f"{whole} h"
    return f"{rest} min"


def _topological(items: list[Any]) -> list[Any]:
    """Items with everything they come after first, otherwise in file order."""
    by_id = {i.id: i for i in items}
    seen: set[str] = set()
    ordered: list[Any] = []
    for root in items:
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:  # depth first, post-order, without recursion
            item, expanded = stack.pop()
            if expanded:
                ordered.append(item)
                continue
            if item.id in seen:
                continue
            seen.add(item.id)
            stack.append((item, True))
            for dependency in reversed(item.after):
                if dependency in by_id and dependency not in seen:
                    stack.append((by_id[dependency], False))
    return ordered


def _running_hours(item: Any, progress: ItemProgress, now: datetime) -> float:
    """Work left in a running item: measured step rate × steps left, else plan minus time spent."""
    total = progress.total_steps or getattr(item, "total_steps", None)
    rate = progress.steps_per_hour
    if rate is None and progress.step and progress.started_at and progress.step_at:
        spent = hours_in(_utc(progress.step_at) - _utc(progress.started_at))
        if spent > 0:
            rate = progress.step / spent
    if total and progress.step is not None and rate and rate > 0:
        return min(HORIZON_HOURS, max(0.0, (total - progress.step) / rate))
    if progress.started_at is not None:
        return max(0.0, float(item.hours) - hours_in(now - _utc(progress.started_at)))
    return float(item.hours)


def remaining_work(
    items: list[Any],
    planned: Schedule,
    lot_start: datetime,
    now: datetime,
    progress: Mapping[str, ItemProgress],
) -> tuple[dict[str, float], set[str]]:
    """Hours of work left per item at `now`, and the ids of items under way.

    Finished items 0. A running run: measured rate × steps left, else its hours minus the time
    since it started (never below 0). A run not started: its planned hours. A task nobody reports
    on follows the plan once what it comes after has finished: it starts at its planned time (or
    when its inputs finished, if later) and takes its planned hours. Anything that a started item
    comes after is done, whatever was (not) reported about it.
    """
    by_id = {i.id: i for i in items}
    started = [i for i in items if (p := progress.get(i.id)) and (p.state == RUNNING or p.state in ENDED_STATES)]
    done: set[str] = set()
    stack = [d for i in started for d in i.after]
    while stack:
        dependency = stack.pop()
        if dependency in by_id and dependency not in done:
            done.add(dependency)
            stack.extend(by_id[dependency].after)

    slots = {slot.id: slot for slot in planned.slots}
    left: dict[str, float] = {}
    finished_at: dict[str, datetime | None] = {}  # None: finished, time unknown
    under_way: set[str] = set()
    for item in _topological(items):
        state = progress.get(item.id)
        hours = float(item.hours)
        if item.id in done or (state and state.state in ENDED_STATES):
            left[item.id] = 0.0
            finished_at[item.id] = _utc(state.ended_at) if state and state.ended_at else None
        elif state and state.state == RUNNING:
            left[item.id] = _running_hours(item, state, now)
            under_way.add(item.id)
        elif state is None and not hasattr(item, "role"):
            # A task: it cannot have begun before its inputs were finished.
            inputs = [d for d in item.after if d in by_id]
            if any(d not in finished_at for d in inputs):
                left[item.id] = hours
                continue
            slot = slots.get(item.id)
            begin = lot_start + timedelta(hours=slot.start_hours if slot else 0.0)
            for dependency in inputs:
                if finished_at[dependency] is not None:
                    begin = max(begin, finished_at[dependency])
            end = begin + timedelta(hours=hours)
            if end <= now:
                left[item.id] = 0.0
                finished_at[item.id] = end
            else:
                left[item.id] = min(hours, hours_in(end - now))
                if begin < now:
                    under_way.add(item.id)
        else:
            left[item.id] = hours
    return left, under_way


def lot_clock(
    campaign: Any,
    now: datetime,
    progress: Mapping[str, ItemProgress] | None = None,
    planned: Schedule | None = None,
) -> ClockReading:
    """The lot clock for `campaign` (a loaded Campaign, ideally built from the frozen plan) at `now`.

    `progress` maps item ids to what is known of them. `planned` is the campaign's schedule from
    the lot start, if the caller keeps it (it only changes with the campaign file).
    """
    now = _utc(now)
    progress = progress or {}
    lot = campaign.lot
    settings = campaign.model.calendar
    retrieval = float(settings.retrieval_hours)
    items = list(campaign.items)
    window = float(lot.window_hours)
    if planned is None:
        planned = schedule(items, lot.gpu_count, retrieval)

    if lot.start is None:
        return ClockReading(
            phase=ClockPhase.NO_START,
            message=(
                "the lot clock needs [lot].start: add the lot's start to campaign.toml, "
                "e.g. start = 2026-11-30T08:00:00Z"
            ),
            now=now,
            lot_start=None,
            lot_end=None,
            window_hours=window,
            elapsed_hours=None,
            remaining_hours=None,
            retrieval_hours=retrieval,
            committed_remaining_hours=planned.committed_hours,
            projected_finish=None,
            projected_retrieval_end=None,
            projected_overrun_hours=None,
            remaining_by_item={s.id: s.hours for s in planned.slots},
            plan=planned,
            planned=planned,
        )

    start = _utc(lot.start)
    end = start + timedelta(days=lot.days)
    origin = max(now, start)
    left, under_way = remaining_work(items, planned, start, origin, progress)
    # Items under way hold their GPUs now: place them first so nothing jumps in before them.
    order = [i for i in items if i.id in under_way] + [i for i in items if i.id not in under_way]
    replan = schedule(order, lot.gpu_count, retrieval, hours=left)
    finish = projected(origin, replan.retrieval_start_hours)
    retrieval_end = projected(origin, replan.committed_hours)
    overrun = max(0.0, hours_in(retrieval_end - end))
    elapsed = min(window, max(0.0, hours_in(now - start)))
    remaining = window if now < start else max(0.0, hours_in(end - now))
    unfinished = [i.id for i in items if left.get(i.id, 0.0) > 0]

    alerts: list[WindowAlert] = []
    if now < start:
        phase = ClockPhase.NOT_STARTED
        message = f"the lot has not started: it starts at {_when(start)}, in {duration(hours_in(start - now))}"
    elif now < end:
        phase = ClockPhase.RUNNING
        message = (
            f"{duration(elapsed)} elapsed, {duration(remaining)} left; the lot ends at {_when(end)}"
        )
        for threshold in sorted(set(settings.warn_before_end_hours), reverse=True):
            if remaining <= threshold:
                alerts.append(
                    WindowAlert(
                        key=f"{RULE}:{threshold:g}h",
                        message=(
                            f"the lot ends at {_when(end)} in {duration(remaining)}"
                            + (
                                f"; retrieval takes {duration(retrieval)}: copy results off the box before then"
                                if retrieval
                                else ""
                            )
                        ),
                        level="warning",
                        threshold_hours=float(threshold),
                    )
                )
    else:
        phase = ClockPhase.ENDED
        message = f"the lot ended at {_when(end)}, {duration(hours_in(now - end))} ago"
        alerts.append(
            WindowAlert(
                key=f"{RULE}:ended",
                message=message
                + (
                    f", with {len(unfinished)} item{'s' if len(unfinished) != 1 else ''} unfinished: "
                    + ", ".join(unfinished)
                    if unfinished
                    else ""
                ),
                level="critical",
            )
        )
    if phase != ClockPhase.ENDED and overrun > 0:
        pace = "at the measured pace" if phase == ClockPhase.RUNNING else "as planned"
        alerts.append(
            WindowAlert(
                key=f"{RULE}:overrun",
                message=(
                    f"{pace} the plan ends at {_when(finish)} and retrieval at {_when(retrieval_end)}: "
                    f"{duration(overrun)} after the lot ends at {_when(end)}"
                ),
                level="critical",
            )
        )

    return ClockReading(
        phase=phase,
        message=message,
        now=now,
        lot_start=start,
        lot_end=end,
        window_hours=window,
        elapsed_hours=elapsed,
        remaining_hours=remaining,
        retrieval_hours=retrieval,
        committed_remaining_hours=replan.committed_hours,
        projected_finish=finish,
        projected_retrieval_end=retrieval_end,
        projected_overrun_hours=overrun,
        remaining_by_item=left,
        plan=replan,
        planned=planned,
        alerts=tuple(alerts),
    )
