"""What the runs measured against what was planned: each run's metrics file read to its end
(start, end, last values), the plan frozen at the start (else today's campaign.toml, flagged),
and planned start, end and hours beside the measured ones."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cockpit.close.figures import display_path, round_hours
from cockpit.close.summary import PlannedRow
from cockpit.common.layout import FROZEN_PLAN, STATE_DIR
from cockpit.common.times import iso
from cockpit.live.metric_values import seconds_to_datetime
from cockpit.live.metrics import MetricsStream
from cockpit.live.saved_state import SavedState
from cockpit.plan.campaign import Campaign, CampaignError
from cockpit.plan.load import read_campaign_text
from cockpit.plan.schedule import schedule
from cockpit.record.runlog import RecordedState
from cockpit.record.start import frozen_plan_text


# ---------------------------------------------------------------- measured runs


@dataclass(frozen=True)
class RunMeasure:
    """What a run's metrics file says about its time and its last values."""

    run: str
    metrics_path: str
    found: bool
    error: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    finished_status: str | None = None
    last_values: dict[str, Any] = field(default_factory=dict)
    lines: int = 0
    bad_lines: int = 0

    @property
    def hours(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return (self.end - self.start).total_seconds() / 3600.0

    @property
    def state(self) -> str:
        if not self.found:
            return "no metrics file"
        if self.error:
            return "metrics unreadable"
        if self.start is None:
            return "no timed line"
        if self.finished_status:
            return f"finished ({self.finished_status})"
        return "no finished event"


def measure_run(run_id: str, path: Path, base: Path, saved: SavedState | None = None) -> RunMeasure:
    """Read the metrics file to its end: start = `started` event (else first line), end =
    `finished` event (else last line). With the engine's `saved` state, reading resumes where
    the engine left it (the same file, checked by inode and first bytes), else from the start."""
    shown = display_path(path, base)
    stream = saved.stream(run_id, path) if saved is not None else MetricsStream(run_id, path)
    while True:
        result = stream.poll()
        if result.missing:
            return RunMeasure(run_id, shown, found=False)
        if result.error:
            return RunMeasure(run_id, shown, found=True, error=result.error)
        if not result.more:
            break
    track = stream.track
    start_seconds = track.first_started_ts if track.first_started_ts is not None else track.first_ts
    finished = track.finished
    end_seconds = finished.get("ts") if finished and finished.get("ts") is not None else track.last_ts
    return RunMeasure(
        run_id,
        shown,
        found=True,
        start=seconds_to_datetime(start_seconds),
        end=seconds_to_datetime(end_seconds),
        finished_status=finished.get("status") if finished else None,
        last_values=dict(track.metric_values),
        lines=track.lines,
        bad_lines=track.bad_lines,
    )



# ---------------------------------------------------------------- the plan, frozen or not


@dataclass(frozen=True)
class PlanSource:
    campaign: Campaign
    frozen: bool
    text: str
    label: str  # where it came from, in words
    problem: str | None = None  # why the frozen plan was not used, when it exists


def plan_source(campaign: Campaign) -> PlanSource:
    """The plan frozen at the start; else today's campaign.toml, flagged."""
    frozen = frozen_plan_text(campaign.directory)
    if frozen is None:
        return PlanSource(
            campaign, False, campaign.text,
            "campaign.toml as it is today — no plan was frozen (the campaign never started in the cockpit)",
        )
    try:
        plan = read_campaign_text(frozen, campaign.directory, f"{STATE_DIR}/{FROZEN_PLAN}")
    except CampaignError as error:
        return PlanSource(
            campaign, False, campaign.text,
            f"campaign.toml as it is today — the frozen plan {STATE_DIR}/{FROZEN_PLAN} does not load",
            problem=str(error.findings[0]) if error.findings else "invalid",
        )
    return PlanSource(plan, True, frozen, f"the plan frozen at the start ({STATE_DIR}/{FROZEN_PLAN})")


def planned_vs_actual(
    plan: Campaign, today: Campaign, measures: Mapping[str, RunMeasure], state: RecordedState
) -> list[PlannedRow]:
    """Each planned item with its planned start/end/hours beside the measured ones (runs only)."""
    lot_start = plan.lot.start or today.lot.start
    placed = schedule(plan.items, plan.lot.gpu_count, plan.model.calendar.retrieval_hours)
    notes_by_run: dict[str, list[str]] = {}
    for note in state.notes:
        if note.get("run"):
            notes_by_run.setdefault(note["run"], []).append(str(note.get("text", "")))
    rows: list[PlannedRow] = []

    def at(hours: float | None) -> str | None:
        if lot_start is None or hours is None:
            return None
        return iso(lot_start + timedelta(hours=hours))

    def since_start(moment: datetime | None) -> float | None:
        if lot_start is None or moment is None:
            return None
        return round_hours((moment - lot_start).total_seconds() / 3600.0)

    planned_ids = set()
    for slot in placed.slots:
        item = next(i for i in plan.items if i.id == slot.id)
        is_run = plan.run(slot.id) is not None
        planned_ids.add(slot.id)
        row: dict[str, Any] = {
            "id": slot.id,
            "type": "run" if is_run else "task",
            "kind": slot.kind,
            "tier": slot.tier,
            "role": item.role.value if is_run else None,
            "gpus": list(slot.gpus),
            "planned_start": at(slot.start_hours),
            "planned_end": at(slot.end_hours),
            "planned_start_hours": round_hours(slot.start_hours),
            "planned_end_hours": round_hours(slot.end_hours),
            "planned_hours": round_hours(slot.hours),
        }
        row.update(_measured_fields(measures.get(slot.id) if is_run else None, since_start, slot.hours))
        row["stopped"] = state.stop_of(slot.id) is not None if is_run else False
        row["notes"] = notes_by_run.get(slot.id, [])
        rows.append(PlannedRow(**row))
    for run in today.runs:  # runs added after the plan was frozen: measured, never planned
        if run.id in planned_ids:
            continue
        row = {
            "id": run.id, "type": "run", "kind": "machine", "tier": run.tier.value, "role": run.role.value,
            "gpus": run.gpu_list, "planned_start": None, "planned_end": None, "planned_start_hours": None,
            "planned_end_hours": None, "planned_hours": None,
        }
        row.update(_measured_fields(measures.get(run.id), since_start, None))
        row["state"] = "not in the frozen plan; " + row["state"]
        row["stopped"] = state.stop_of(run.id) is not None
        row["notes"] = notes_by_run.get(run.id, [])
        rows.append(PlannedRow(**row))
    return rows


def _measured_fields(measure: RunMeasure | None, since_start, planned_hours: float | None) -> dict[str, Any]:
    if measure is None or measure.hours is None:
        state = "not measured" if measure is None else f"not measured ({measure.state})"
        return {
            "measured": False, "measured_start": None, "measured_end": None, "measured_start_hours": None,
            "measured_end_hours": None, "measured_hours": None, "deviation_hours": None, "state": state,
        }
    hours = measure.hours
    return {
        "measured": True,
        "measured_start": iso(measure.start),
        "measured_end": iso(measure.end),
        "measured_start_hours": since_start(measure.start),
        "measured_end_hours": since_start(measure.end),
        "measured_hours": round_hours(hours),
        "deviation_hours": round_hours(hours - planned_hours) if planned_hours is not None else None,
        "state": measure.state,
    }

