"""The frozen snapshot of a campaign at one moment: what the engine produces and every view
(the TUI, `status`, `status --json`) renders. Plain data, no behaviour beside its JSON form.

A view type takes what its source record (a GPU sample, the host sample, the clock reading, the
lot) says under the same name as it is (`_from_source`): each `of()` names only what the view
calls differently or adds, so a field added to both needs no copying code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from cockpit.common.text import json_safe
from cockpit.common.times import iso

if TYPE_CHECKING:
    from cockpit.live.clock import ClockReading
    from cockpit.live.gpu import GpuProcess, GpuSample, GpuSnapshot
    from cockpit.live.host import HostSample

_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _from_source(view: type, source: Any, **given: Any) -> Any:
    """A `view` whose fields not in `given` are read from `source` under the same names.
    `given` is for what the view names differently, or means differently under the same name."""
    names = _FIELD_NAMES.get(view)
    if names is None:
        names = _FIELD_NAMES[view] = tuple(f.name for f in fields(view))
    return view(**{name: getattr(source, name) for name in names if name not in given}, **given)


@dataclass(frozen=True)
class LotView:
    """The lot as bought: model, GPUs, days, its price and its dates."""

    campaign_id: str
    question: str | None
    gpu_model: str
    gpus: int
    days: int
    price_usd: Decimal
    order_ref: str | None
    start: datetime | None
    end: datetime | None

    @classmethod
    def of(cls, lot: Any, *, campaign_id: str, question: str | None, price_usd: Decimal) -> LotView:
        """From the campaign's [lot] table (`plan.campaign.Lot`)."""
        return _from_source(cls, lot, campaign_id=campaign_id, question=question, gpus=lot.gpu_count, price_usd=price_usd)


@dataclass(frozen=True)
class ClockView:
    """The lot's clock at the snapshot: elapsed, left, committed work left, projected finish."""

    now: datetime
    started: bool  # the lot has a start and it has passed
    elapsed_hours: float | None
    remaining_hours: float | None  # to the lot's end
    window_hours: float
    committed_hours: float  # the plan, end to end with retrieval
    committed_remaining_hours: float | None  # the remaining plan, re-estimated from measured progress
    uncommitted_hours: float
    projected_finish: datetime | None  # end of the remaining plan, retrieval included
    retrieval_hours: float
    fits: bool | None  # projected finish (retrieval included) before the lot's end
    message: str | None = None  # e.g. "[lot] has no start: the clock needs one"

    @classmethod
    def of(cls, reading: ClockReading, now: datetime) -> ClockView:
        """From the clock's reading at `now` (the snapshot's moment as the engine's clock gave it):
        the view's projected finish is the end of retrieval."""
        return _from_source(cls, reading, now=now, projected_finish=reading.projected_retrieval_end)


@dataclass(frozen=True)
class NvmlView:
    """Whether NVML answers, and why not when it does not."""

    available: bool
    reason: str | None
    simulated: bool = False
    sample_age_seconds: float | None = None
    warnings: tuple[str, ...] = ()

    @classmethod
    def of(cls, gpus: GpuSnapshot, now: datetime) -> NvmlView:
        return _from_source(cls, gpus, sample_age_seconds=gpus.age_seconds(now), warnings=tuple(gpus.warnings))


@dataclass(frozen=True)
class GpuProcessView:
    """One process holding memory on a GPU, and the run it belongs to if known."""

    pid: int
    used_memory_bytes: int | None
    run: str | None
    container: bool = False  # NVML's pid is not visible here (the cockpit or the run is in a container)

    @classmethod
    def of(cls, process: GpuProcess, runs: Mapping[int, str], container: bool = False) -> GpuProcessView:
        """`runs`: pid → the run it belongs to, where known; `container`: NVML's pids are not ours."""
        return _from_source(cls, process, run=runs.get(process.pid), container=container)


@dataclass(frozen=True)
class GpuView:
    """One GPU's reading, with the age of the sample it comes from."""

    index: int
    name: str
    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    throttle_reasons: tuple[str, ...] = ()
    processes: tuple[GpuProcessView, ...] = ()
    lost: bool = False
    simulated: bool = False
    utilization_history: tuple[float, ...] = ()  # oldest first, bounded
    memory_history: tuple[float, ...] = ()  # percent used, oldest first, bounded
    serial: str | None = None
    mig_instances: tuple[Any, ...] | None = None  # MIG on: each instance's memory; utilization is not reported
    health: dict[str, Any] | None = field(default=None, hash=False)  # counters now and since the lot's first sample (live.gpu_health)
    uuid: str | None = None  # NVML's GPU UUID: names the same GPU across reboots and index changes (last: fields are given by position)

    @property
    def mig(self) -> bool:
        return self.mig_instances is not None

    @classmethod
    def of(
        cls, sample: GpuSample, process_runs: Mapping[int, str], utilization_history: Iterable[float],
        memory_history: Iterable[float], *, container: bool = False, health: dict[str, Any] | None = None,
    ) -> GpuView:
        """From one GPU sample. The view's throttle reasons are those that slow a run down (the
        sample's own `throttle_reasons` also holds idle and settings), and its power is in watts."""
        return _from_source(
            cls, sample,
            power_watts=sample.power_draw_w,
            power_limit_watts=sample.power_limit_w,
            throttle_reasons=sample.slowed_by,
            processes=tuple(GpuProcessView.of(p, process_runs, container) for p in sample.processes or ()),
            utilization_history=tuple(utilization_history),
            memory_history=tuple(memory_history),
            health=health,
        )


@dataclass(frozen=True)
class HostView:
    """The host's CPU, memory and the campaign folder's disk."""

    cpu_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    disk_used_bytes: int | None
    disk_total_bytes: int | None
    disk_free_bytes: int | None

    @classmethod
    def of(cls, host: HostSample) -> HostView:
        return _from_source(cls, host)


@dataclass(frozen=True)
class RunView:
    """One run as the views show it: progress, rates, last metrics, state, alerts."""

    id: str
    role: str
    tier: str
    state: str  # a RunState (cockpit/live/runs.py): planned | running | finished | failed | stopped | ended | unreadable
    step: int | None
    total_steps: int | None
    loss: float | None
    quality: float | None  # the closing metric's last value
    last: dict[str, Any]  # last value of every metric reported
    eta: datetime | None
    last_checkpoint_at: datetime | None
    resume_verified: bool
    resume_verified_at: datetime | None
    pid: int | None
    alive: bool | None
    bad_lines: int = 0
    bad_fields: int = 0  # implausible values ignored in lines that were read (a ts in 1970, seconds in ns)
    stop_reason: str | None = None
    save_advice: dict[str, Any] | None = None  # for a running run that reported a save time (resume.save_advice)


@dataclass(frozen=True)
class AlertView:
    """One active alert, and whether the run log has it."""

    rule: str
    run: str | None
    message: str
    ts: datetime | None
    seq: int | None  # the run log's seq of the alert event
    acknowledged: bool = False
    severity: str = "warning"  # warning | critical
    key: str = ""  # what acknowledging it names (decisions.acknowledge(..., key=))


@dataclass(frozen=True)
class Snapshot:
    """Everything the engine knows at one tick."""

    taken_at: datetime
    lot: LotView
    clock: ClockView
    nvml: NvmlView
    gpus: tuple[GpuView, ...]
    host: HostView | None
    runs: tuple[RunView, ...]
    alerts: tuple[AlertView, ...]  # active (unacknowledged) alerts, newest first
    notices: tuple[str, ...] = field(default_factory=tuple)  # plan drift, container pids, bad lines …
    pilot_due_at: datetime | None = None  # when the pilot decision fell due, while none is recorded
    series: Any = None  # charts (issue 20): a cockpit.live.series.SeriesView, left out of the JSON

    def run(self, run_id: str) -> RunView | None:
        return next((r for r in self.runs if r.id == run_id), None)


class SnapshotSource(Protocol):
    """What a view needs from the engine: one blocking call (run it off the UI thread)."""

    def tick(self) -> Snapshot: ...


# ---------------------------------------------------------------- JSON (status --json)


def _time(value: datetime | None) -> str | None:
    return iso(value) if value else None


def _rounded_hours(value: float | None) -> float | None:
    """Hours in `status --json`: to the 3rd decimal (3.6 s)."""
    return None if value is None else round(value, 3)


def _number(value: Any) -> Any:
    """Non-finite metric values stay visible in strict JSON as their names."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def status_json(snapshot: Snapshot, extra: dict[str, Any] | None = None) -> str:
    """`status --json`'s text for one snapshot (`extra` adds fields, e.g. the other lots); the
    exporter's /snapshot.json serves the same text."""
    body = to_json(snapshot)
    if extra:
        body.update(extra)
    return json_safe(json.dumps(body, ensure_ascii=False, allow_nan=False))


def to_json(snapshot: Snapshot) -> dict[str, Any]:
    """`status --json`: the documented fields (docs/json-output.md), plus what the TUI shows."""
    clock, lot = snapshot.clock, snapshot.lot
    return {
        "campaign": lot.campaign_id,
        "taken_at": _time(snapshot.taken_at),
        "lot": {
            "gpu_model": lot.gpu_model,
            "gpus": lot.gpus,
            "days": lot.days,
            "price_usd": f"{lot.price_usd:.2f}",
            "order_ref": lot.order_ref,
            "start": _time(lot.start),
            "end": _time(lot.end),
        },
        "started": clock.started,
        "elapsed_hours": _rounded_hours(clock.elapsed_hours),
        "remaining_hours": _rounded_hours(clock.remaining_hours),
        "window_hours": _rounded_hours(clock.window_hours),
        "committed_hours": _rounded_hours(clock.committed_hours),
        "committed_remaining_hours": _rounded_hours(clock.committed_remaining_hours),
        "uncommitted_hours": _rounded_hours(clock.uncommitted_hours),
        "projected_finish": _time(clock.projected_finish),
        "fits": clock.fits,
        "clock_message": clock.message,
        "nvml": {"available": snapshot.nvml.available, "reason": snapshot.nvml.reason, "simulated": snapshot.nvml.simulated},
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "simulated": g.simulated,
                "lost": g.lost,
                "utilization_percent": g.utilization_percent,
                "memory_used_bytes": g.memory_used_bytes,
                "memory_total_bytes": g.memory_total_bytes,
                "temperature_c": g.temperature_c,
                "power_watts": g.power_watts,
                "power_limit_watts": g.power_limit_watts,
                "sm_clock_mhz": g.sm_clock_mhz,
                "memory_clock_mhz": g.memory_clock_mhz,
                "throttle_reasons": list(g.throttle_reasons),
                "processes": [{"pid": p.pid, "used_memory_bytes": p.used_memory_bytes, "run": p.run, "container": p.container}
                              for p in g.processes],
                "serial": g.serial,
                "mig": g.mig,
                "mig_instances": None if g.mig_instances is None else [
                    {"index": m.index, "uuid": m.uuid, "memory_used_bytes": m.memory_used_bytes, "memory_total_bytes": m.memory_total_bytes}
                    for m in g.mig_instances
                ],
                "health": g.health,
            }
            for g in snapshot.gpus
        ],
        "host": None if snapshot.host is None else {
            "cpu_percent": snapshot.host.cpu_percent,
            "memory_used_bytes": snapshot.host.memory_used_bytes,
            "memory_total_bytes": snapshot.host.memory_total_bytes,
            "disk_free_bytes": snapshot.host.disk_free_bytes,
        },
        "runs": [
            {
                "id": r.id,
                "role": r.role,
                "tier": r.tier,
                "state": r.state,
                "step": r.step,
                "total_steps": r.total_steps,
                "last": {k: _number(v) for k, v in r.last.items()},
                "loss": _number(r.loss),
                "quality": _number(r.quality),
                "eta": _time(r.eta),
                "last_checkpoint_at": _time(r.last_checkpoint_at),
                "resume_verified": r.resume_verified,
                "pid": r.pid,
                "alive": r.alive,
                "bad_lines": r.bad_lines,
                "bad_fields": r.bad_fields,
                "stop_reason": r.stop_reason,
                "save_advice": r.save_advice,
            }
            for r in snapshot.runs
        ],
        "alerts": [
            {"rule": a.rule, "run": a.run, "message": a.message, "ts": _time(a.ts), "seq": a.seq, "severity": a.severity, "key": a.key}
            for a in snapshot.alerts
        ],
        "notices": list(snapshot.notices),
        "pilot_due_at": _time(snapshot.pilot_due_at),
    }
