"""The GPUs' health record: counters taken at the lot's first sample and shown as deltas since,
the built-in GPU alerts (`gpu-xid`, `gpu-ecc`, `gpu-throttled`, `gpu-idle`), the `gpu_health`
run-log event that records each incident once, and the energy each run drew.

A failing rented GPU costs its renter paid hours, and only evidence gets them back: each incident
is written with the GPU's index, UUID, serial, name, the driver version, the kind, the Xid code and
the counters before and after, in the same locked transaction as its alert, so two cockpits on
one campaign record it once. Baselines and energy live in `.cockpit/gpu-health.json`."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from cockpit.common.files import write_atomic
from cockpit.common.layout import STATE_DIR, state_dir
from cockpit.common.times import iso, parse_ts
from cockpit.live.gpu import GpuSample, GpuSnapshot
from cockpit.live.gpu_fields import POWER_THERMAL_REASONS, GpuCounters, GpuEvent
from cockpit.live.xid import APPLICATION, HARDWARE, xid_info

GPU_XID = "gpu-xid"
GPU_ECC = "gpu-ecc"
GPU_THROTTLED = "gpu-throttled"
GPU_IDLE = "gpu-idle"
HEALTH_EVENT = "gpu_health"
HEALTH_FILE = "gpu-health.json"  # .cockpit/gpu-health.json: baselines and energy per run
SAVE_SECONDS = 30.0
GAP_SECONDS = 60.0  # a longer gap between readings is time no cockpit watched: its energy is not attributed
SAME_XID_SECONDS = 60.0  # the same Xid on the same GPU within this is one incident (two cockpits, a burst)


@dataclass(frozen=True)
class Thresholds:
    """When the standing GPU alerts fire ([health] in campaign.toml)."""

    throttle_percent: float = 20.0
    throttle_minutes: float = 10.0
    idle_percent: float = 5.0
    idle_minutes: float = 10.0

    @classmethod
    def of(cls, settings: Any) -> Thresholds:
        if settings is None:
            return cls()
        return cls(**{name: float(getattr(settings, name)) for name in cls.__dataclass_fields__ if hasattr(settings, name)})


@dataclass
class _Gpu:
    """What the monitor remembers of one GPU between ticks."""

    uuid: str
    index: int
    name: str = ""
    serial: str | None = None
    baseline: GpuCounters | None = None
    baseline_at: str | None = None
    previous: GpuCounters | None = None  # the reading before the latest one
    latest: GpuCounters | None = None
    slowdown: deque = field(default_factory=deque)  # (epoch seconds, cumulative slowdown seconds)
    slowdown_source: str | None = None
    slowdown_total: float = 0.0  # integrated from the clock-event reasons where no counter says it
    last_seen: float | None = None
    low_since: float | None = None
    ecc_said: tuple | None = None
    double_bit_events: int = 0
    energy_j: float = 0.0  # since the baseline, as measured
    last_energy: float | None = None
    simulated: bool = False
    since_cache: tuple | None = None  # (latest, baseline, latest.since(baseline)): asked twice a tick


def _since_start(gpu: _Gpu) -> dict[str, Any]:
    """The GPU's counters as deltas from the lot's first sample (empty before any reading)."""
    latest, base = gpu.latest, gpu.baseline
    if latest is None:
        return {}
    cached = gpu.since_cache
    if cached is None or cached[0] is not latest or cached[1] is not base:
        cached = gpu.since_cache = (latest, base, latest.since(base))
    return cached[2]


def _label(gpu: _Gpu) -> str:
    serial = f", serial {gpu.serial}" if gpu.serial else ""
    return f"GPU {gpu.index} ({gpu.name}{serial})"


def _runs_text(runs: list[str]) -> str:
    return ", ".join(runs) if runs else "no run"


class HealthMonitor:
    """Fed one GPU snapshot a tick with the runs that use each GPU; answers the alerts due (as
    (key, fields) pairs for the engine's alert path) and keeps the per-GPU view and energy."""

    def __init__(self, directory: str | Path | None, settings: Any = None, *, persist: bool = True,
                 monotonic: Any = None):
        self.directory = Path(directory) if directory is not None else None
        self.thresholds = Thresholds.of(settings)
        self.persist = persist and directory is not None
        self._gpus: dict[str, _Gpu] = {}
        self._seen_event = 0
        self._said: set[str] = set()
        self.notices: list[str] = []
        self.runs_energy_j: dict[str, float] = {}
        self.unattributed_j = 0.0
        self._dirty = False
        self._saved_at: float | None = None
        self._monotonic = monotonic
        self.driver_version: str | None = None
        self._load()

    # ------------------------------------------------------------ one tick

    def observe(self, now: datetime, snapshot: GpuSnapshot, running: dict[str, list[int]]) -> list[tuple[str, dict[str, Any]]]:
        """The alerts due now. `running` maps each running run to the GPU indexes it uses."""
        out: list[tuple[str, dict[str, Any]]] = []
        runs_on: dict[int, list[str]] = {}
        for run, indexes in running.items():
            for index in indexes:
                runs_on.setdefault(index, []).append(run)
        if snapshot.driver_version:
            self.driver_version = snapshot.driver_version
        if snapshot.events_note:
            self._notice(snapshot.events_note)
        t = now.timestamp()
        by_index: dict[int, _Gpu] = {}
        for sample in snapshot.samples:
            gpu = self._gpu(sample, now)
            if gpu is None:
                continue
            by_index[sample.index] = gpu
            runs = sorted(runs_on.get(sample.index, []))
            if sample.counters is not None and sample.counters != gpu.latest:
                gpu.previous, gpu.latest = gpu.latest, sample.counters
                self._energy(gpu, sample.counters, t, runs)
            if not sample.lost:
                out += self._standing(gpu, sample, t, runs)
            out += self._ecc(gpu, sample, runs, now)
            gpu.last_seen = t
        for event in snapshot.events:
            if event.number <= self._seen_event:
                continue
            self._seen_event = event.number
            gpu = by_index.get(event.index)
            if gpu is not None:
                out += self._event(gpu, event, sorted(runs_on.get(event.index, [])))
        self._save()
        return out

    def _gpu(self, sample: GpuSample, now: datetime) -> _Gpu | None:
        key = sample.uuid or f"index-{sample.index}"
        gpu = self._gpus.get(key)
        if gpu is None:
            gpu = self._gpus[key] = _Gpu(key, sample.index)
        gpu.index, gpu.name = sample.index, sample.name
        gpu.serial = sample.serial or gpu.serial
        gpu.simulated = sample.simulated
        if gpu.baseline is None and sample.counters is not None:
            gpu.baseline, gpu.baseline_at = sample.counters, iso(now)  # the lot's first sample
            self._dirty = True
        return gpu

    def _energy(self, gpu: _Gpu, counters: GpuCounters, t: float, runs: list[str]) -> None:
        energy = counters.energy_j
        if energy is None:
            return
        if gpu.last_energy is not None and energy >= gpu.last_energy:
            delta = energy - gpu.last_energy
            gpu.energy_j += delta
            watched = gpu.last_seen is not None and t - gpu.last_seen <= GAP_SECONDS
            if runs and watched:
                for run in runs:
                    self.runs_energy_j[run] = self.runs_energy_j.get(run, 0.0) + delta / len(runs)
            else:
                self.unattributed_j += delta
            self._dirty = True
        gpu.last_energy = energy

    # ------------------------------------------------------------ the standing conditions

    def _standing(self, gpu: _Gpu, sample: GpuSample, t: float, runs: list[str]) -> list[tuple[str, dict[str, Any]]]:
        out = []
        percent = self._slowdown_percent(gpu, sample, t)
        th = self.thresholds
        if runs and percent is not None and percent >= th.throttle_percent:
            reasons = ", ".join(r for r in sample.slowed_by if r in POWER_THERMAL_REASONS) or "slowdown counters"
            message = (f"{_label(gpu)}: in power or thermal slowdown {percent:.0f} % of the last {th.throttle_minutes:g} min "
                       f"while {_runs_text(runs)} use it ({reasons}); the lot's hours go on at full price while it runs slowed")
            out.append(self._alert(GPU_THROTTLED, gpu, message, "warning", "throttle", None, runs, t, once=True,
                                   extra={"slowdown_percent": round(percent, 1)}))
        utilization = sample.utilization_percent
        if runs and utilization is not None and utilization < th.idle_percent:
            gpu.low_since = gpu.low_since if gpu.low_since is not None else t
        else:
            gpu.low_since = None
        if gpu.low_since is not None and t - gpu.low_since >= th.idle_minutes * 60.0:
            minutes = (t - gpu.low_since) / 60.0
            message = (f"{_label(gpu)}: utilization under {th.idle_percent:g} % for {minutes:.0f} min while "
                       f"{_runs_text(runs)} run on it: the lot is burning while the GPU waits (a hung run or a starved data loader?)")
            out.append(self._alert(GPU_IDLE, gpu, message, "warning", "idle", None, runs, gpu.low_since, once=True))
        return out

    def _slowdown_percent(self, gpu: _Gpu, sample: GpuSample, t: float) -> float | None:
        """Percent of the last window in power or thermal slowdown; None until a whole window is seen.
        From the violation counters where the GPU keeps them, else from the sampled clock-event reasons."""
        counters = sample.counters
        if counters is not None and (counters.power_slowdown_s is not None or counters.thermal_slowdown_s is not None):
            source, total = "counters", (counters.power_slowdown_s or 0.0) + (counters.thermal_slowdown_s or 0.0)
        elif sample.throttle_reasons is not None:
            source = "reasons"
            if gpu.slowdown and gpu.last_seen is not None and any(r in POWER_THERMAL_REASONS for r in sample.slowed_by):
                gpu.slowdown_total += min(GAP_SECONDS, max(0.0, t - gpu.last_seen))
            total = gpu.slowdown_total
        else:
            gpu.slowdown.clear()
            return None
        if gpu.slowdown_source != source:
            gpu.slowdown.clear()
            gpu.slowdown_source = source
        window = self.thresholds.throttle_minutes * 60.0
        gpu.slowdown.append((t, total))
        while len(gpu.slowdown) > 1 and gpu.slowdown[1][0] <= t - window:
            gpu.slowdown.popleft()
        start_t, start_total = gpu.slowdown[0]
        if t - start_t < window * 0.999:
            return None
        return min(100.0, max(0.0, 100.0 * (total - start_total) / (t - start_t)))

    # ------------------------------------------------------------ ECC and Xid

    def _ecc(self, gpu: _Gpu, sample: GpuSample, runs: list[str], now: datetime) -> list[tuple[str, dict[str, Any]]]:
        latest = gpu.latest
        if latest is None and not gpu.double_bit_events:
            return []
        since = _since_start(gpu)
        uncorrected = since.get("ecc_uncorrected", 0) or 0
        double = since.get("retired_pages_double", 0) or 0
        failed = bool(latest.remap_failed) if latest is not None else False
        signature = (uncorrected, failed, double, gpu.double_bit_events)
        if not (uncorrected > 0 or failed or double > 0 or gpu.double_bit_events):
            return []
        if gpu.ecc_said is not None and signature <= gpu.ecc_said:
            return []
        gpu.ecc_said = signature
        parts = []
        if uncorrected:
            parts.append(f"{uncorrected} uncorrected ECC error{'s' if uncorrected != 1 else ''} since the lot's first sample")
        if failed:
            parts.append("a row remap failed (the memory cannot be repaired: the GPU needs replacing)")
        if double:
            parts.append(f"{double} page{'s' if double != 1 else ''} retired for double-bit errors")
        if gpu.double_bit_events and not parts:
            parts.append("NVML reported a double-bit ECC error")
        message = f"{_label(gpu)}: " + "; ".join(parts) + f"; runs on it: {_runs_text(runs)}; its results may be corrupt"
        absolute = latest.as_dict() if latest is not None else {}
        incident = (f"ecc:{gpu.uuid}:{absolute.get('ecc_uncorrected')}:{absolute.get('remap_failed')}:"
                    f"{absolute.get('retired_pages_double')}:{gpu.double_bit_events if latest is None else ''}")
        return [self._alert(GPU_ECC, gpu, message, "critical", "ecc", None, runs, now.timestamp(), incident=incident)]

    def _event(self, gpu: _Gpu, event: GpuEvent, runs: list[str]) -> list[tuple[str, dict[str, Any]]]:
        if event.kind == "ecc":
            if event.detail == "double-bit":
                gpu.double_bit_events += 1
            return []
        if event.xid is None:
            return []
        info = xid_info(event.xid)
        if info.cls == APPLICATION:
            self._notice(f"{_label(gpu)}: {info.describe()}, not the GPU's; no alert (runs on it: {_runs_text(runs)})")
            return []
        message = f"{_label(gpu)}: {info.describe()}; runs on it: {_runs_text(runs)}"
        if info.cls == HARDWARE:
            message += "; the run log keeps the evidence for the provider (gpu_health)"
        incident = f"xid:{gpu.uuid}:{event.xid}:{event.at.replace(microsecond=0).isoformat()}"
        severity = "critical" if info.cls == HARDWARE else "warning"
        return [self._alert(GPU_XID, gpu, message, severity, "xid", event.xid, runs, event.at.timestamp(),
                            incident=incident, key_suffix=f":{event.xid}", extra={"xid_class": info.cls, "meaning": info.meaning})]

    # ------------------------------------------------------------ alerts and their evidence

    def _alert(self, rule: str, gpu: _Gpu, message: str, severity: str, kind: str, xid: int | None, runs: list[str],
               at: float, *, once: bool = False, incident: str | None = None, key_suffix: str = "",
               extra: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        observed_text = iso(datetime.fromtimestamp(at, tz=timezone.utc))
        evidence = {
            "gpu": gpu.index, "uuid": None if gpu.uuid.startswith("index-") else gpu.uuid, "serial": gpu.serial,
            "name": gpu.name, "driver_version": self.driver_version, "kind": kind, "xid": xid,
            "counters_at_start": gpu.baseline.as_dict() if gpu.baseline else None,
            "counters_before": gpu.previous.as_dict() if gpu.previous else (gpu.baseline.as_dict() if gpu.baseline else None),
            "counters_after": gpu.latest.as_dict() if gpu.latest else None,
            "observed_at": observed_text, "runs": runs, "rule": rule,
            "incident": incident or f"{kind}:{gpu.uuid}:{observed_text[:16]}",
            **(extra or {}),
        }
        if gpu.simulated:
            evidence["simulated"] = True  # the demo's faults: never passed off as a real GPU's
        fields = {"rule": rule, "run": None, "message": message, "severity": severity, "gpu": gpu.index, "health": evidence}
        if once:
            fields["once"] = True
        return f"{rule}:{gpu.index}{key_suffix}", fields

    def _notice(self, text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            self.notices.append(text)

    # ------------------------------------------------------------ the view

    def view(self, sample: GpuSample) -> dict[str, Any] | None:
        """What `status` shows of one GPU's health: counters now, deltas since the lot's first
        sample, slowdown share of the window, MIG instances. Unreported fields are absent."""
        gpu = self._gpus.get(sample.uuid or f"index-{sample.index}")
        if gpu is None:
            return None
        out: dict[str, Any] = {"serial": gpu.serial}
        if gpu.latest is not None:
            out["counters"] = gpu.latest.as_dict()
            out["since_start"] = dict(_since_start(gpu))
            out["baseline_at"] = gpu.baseline_at
        if gpu.slowdown and len(gpu.slowdown) > 1:
            (t0, s0), (t1, s1) = gpu.slowdown[0], gpu.slowdown[-1]
            if t1 > t0:
                out["slowdown_percent"] = round(min(100.0, 100.0 * (s1 - s0) / (t1 - t0)), 1)
        if gpu.energy_j:
            out["energy_kwh_since_start"] = round(gpu.energy_j / 3.6e6, 4)
        return out

    # ------------------------------------------------------------ persistence

    def _path(self) -> Path | None:
        return self.directory / STATE_DIR / HEALTH_FILE if self.directory is not None else None

    def _load(self) -> None:
        path = self._path()
        if path is None:
            return
        data = read_health_file(self.directory)
        for uuid, entry in (data.get("gpus") or {}).items():
            if not isinstance(entry, dict):
                continue
            gpu = _Gpu(uuid, int(entry.get("index", 0)) if isinstance(entry.get("index"), int) else 0)
            gpu.serial, gpu.name = entry.get("serial"), str(entry.get("name") or "")
            gpu.simulated = bool(entry.get("simulated"))
            if isinstance(entry.get("baseline"), dict):
                gpu.baseline = GpuCounters.from_dict(entry["baseline"])
                gpu.baseline_at = entry.get("baseline_at")
            gpu.energy_j = float(entry.get("energy_j") or 0.0)
            last = entry.get("last_energy_j")
            gpu.last_energy = float(last) if isinstance(last, (int, float)) else None
            self._gpus[uuid] = gpu
        self.runs_energy_j = {k: float(v) for k, v in (data.get("runs_energy_j") or {}).items() if isinstance(v, (int, float))}
        self.unattributed_j = float(data.get("unattributed_energy_j") or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "gpus": {
                uuid: {"index": g.index, "name": g.name, "serial": g.serial, "baseline": g.baseline.as_dict() if g.baseline else None,
                       "baseline_at": g.baseline_at, "energy_j": round(g.energy_j, 3), "last_energy_j": g.last_energy,
                       "simulated": g.simulated}
                for uuid, g in self._gpus.items()
            },
            "runs_energy_j": {run: round(j, 3) for run, j in sorted(self.runs_energy_j.items())},
            "unattributed_energy_j": round(self.unattributed_j, 3),
        }

    def _save(self, force: bool = False) -> None:
        if not self.persist or not (self._dirty or force):
            return
        now = self._monotonic() if self._monotonic else None
        if not force and now is not None and self._saved_at is not None and now - self._saved_at < SAVE_SECONDS:
            return
        try:
            write_atomic(state_dir(self.directory) / HEALTH_FILE, json.dumps(self.to_dict(), sort_keys=True))
        except OSError as error:
            self._notice(f"cannot save the GPU health record in .cockpit/ ({error.strerror or error}); "
                         "energy per run is kept in memory until the disk takes it")
            return
        self._saved_at, self._dirty = now, False

    def close(self) -> None:
        self._save(force=True)


_SHOWN = (  # (field, words) of the counters a person reads in `status`, when they moved since the lot's start
    ("ecc_uncorrected", "uncorrected ECC errors"), ("ecc_corrected", "corrected ECC errors"),
    ("remapped_uncorrectable", "rows remapped (uncorrectable)"), ("remapped_correctable", "rows remapped (correctable)"),
    ("retired_pages_double", "pages retired (double-bit)"), ("retired_pages_single", "pages retired (single-bit)"),
    ("pcie_replays", "PCIe replays"),
)


def health_lines(gpu: Any) -> list[str]:
    """Short lines for `status` on one GPU view: MIG instances (utilization not reported, never
    0 %), the counters that moved since the lot's first sample, slowdown, energy."""
    lines = []
    instances = getattr(gpu, "mig_instances", None)
    if instances is not None:
        parts = [f"{m.index}: {m.memory_used_bytes / 2**30:.1f}/{m.memory_total_bytes / 2**30:.0f} GiB"
                 if m.memory_used_bytes is not None and m.memory_total_bytes else f"{m.index}: memory not reported"
                 for m in instances]
        lines.append(f"MIG on, utilization not reported; {len(instances)} instance{'s' if len(instances) != 1 else ''}"
                     + (": " + ", ".join(parts) if parts else ""))
    health = getattr(gpu, "health", None) or {}
    since = health.get("since_start") or {}
    moved = [f"{words} +{since[name]}" for name, words in _SHOWN if isinstance(since.get(name), int) and since[name] > 0]
    counters = health.get("counters") or {}
    if counters.get("remap_failed"):
        moved.append("a row remap FAILED")
    elif counters.get("remap_pending"):
        moved.append("a row remap pending (reset the GPU)")
    slowed = (since.get("power_slowdown_s") or 0.0) + (since.get("thermal_slowdown_s") or 0.0)
    if slowed >= 1.0:
        moved.append(f"{slowed:.0f} s in power/thermal slowdown")
    if moved:
        lines.append("since the lot's first sample: " + ", ".join(moved))
    return lines


def read_health_file(directory: str | Path) -> dict[str, Any]:
    """`.cockpit/gpu-health.json` as written by the monitor; {} when absent or unreadable."""
    try:
        data = json.loads((Path(directory) / STATE_DIR / HEALTH_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# ---------------------------------------------------------------- the run-log side


def record_incident(tx: Any, events: list[dict[str, Any]], fields: dict[str, Any]) -> bool:
    """Inside the engine's run-log transaction, before an alert carrying `health` evidence is
    appended: write its `gpu_health` event and put the event's seq into the alert (`health_seq`).
    False when the run log has this incident already (another cockpit, or before a restart): then
    neither is written."""
    evidence = fields.pop("health", None)
    if not isinstance(evidence, dict):
        return True
    if _recorded(events, evidence):
        return False
    written = tx.append(HEALTH_EVENT, run=None, **evidence)
    events.append(written)
    fields["health_seq"] = written.get("seq")
    return True


def _recorded(events: list[dict[str, Any]], evidence: dict[str, Any]) -> bool:
    at = parse_ts(evidence.get("observed_at")) if isinstance(evidence.get("observed_at"), str) else None
    for event in events:
        if event.get("type") != HEALTH_EVENT:
            continue
        if event.get("incident") == evidence.get("incident"):
            return True
        if evidence.get("kind") == "xid" and event.get("kind") == "xid" and event.get("uuid") == evidence.get("uuid") \
                and event.get("xid") == evidence.get("xid") and at is not None:
            other = parse_ts(event.get("observed_at")) if isinstance(event.get("observed_at"), str) else None
            if other is not None and abs(other - at) <= timedelta(seconds=SAME_XID_SECONDS):
                return True
    return False
