"""Simulated GPUs with plausible, moving numbers, for tests, benchmarks and the demo, and the GPU
faults they can be made to suffer (`cockpit demo --gpu-fault KIND@SECONDS`): an Xid, an ECC
error, thermal slowdown, a GPU left idle. The faults arrive through the same records a real GPU
gives (an Xid event, counters that move), so what the cockpit does with them is what it does on
hardware. Every sample says `simulated=True`: simulated numbers are never shown as measured."""

from __future__ import annotations

import math
import random
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from cockpit.common.times import utc_now
from cockpit.live.gpu import _LOST_CONSEQUENCE, GpuAlert, GpuProcess, GpuSample, GpuSnapshot
from cockpit.live.gpu_fields import GpuCounters, GpuEvent, MigInstance

Clock = Callable[[], datetime]

# What each fault kind does to the simulated GPU.
FAULT_KINDS = {
    "xid79": "Xid 79: the GPU falls off the bus (it is lost from then on)",
    "xid48": "Xid 48: a double-bit ECC error (one uncorrected error, a row remap pending)",
    "ecc": "uncorrected ECC errors and a failed row remap, without an Xid",
    "throttle": "hardware thermal slowdown from then on",
    "idle": "utilization under 2 % from then on, as with a hung run",
}
SIMULATED_DRIVER = "simulated"


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: KIND on GPU `gpu`, `after_seconds` after the simulation started."""

    kind: str
    after_seconds: float
    gpu: int = 0

    def describe(self) -> str:
        return f"{self.kind}@{self.after_seconds:g} on GPU {self.gpu}: {FAULT_KINDS[self.kind]}"


_FAULT = re.compile(r"^(?P<kind>[a-z0-9]+)@(?P<seconds>\d+(?:\.\d+)?)(?::(?P<gpu>\d+))?$")


def parse_fault(text: str) -> Fault:
    """`KIND@SECONDS` (or `KIND@SECONDS:GPU`); a ValueError says what is wrong and what is allowed."""
    match = _FAULT.match(text.strip().lower())
    kinds = ", ".join(FAULT_KINDS)
    if match is None:
        raise ValueError(f"--gpu-fault {text!r}: write KIND@SECONDS, e.g. xid79@20 (KIND one of {kinds})")
    kind = match["kind"]
    if kind not in FAULT_KINDS:
        raise ValueError(f"--gpu-fault {text!r}: no fault kind {kind!r}; the kinds are {kinds}")
    return Fault(kind, float(match["seconds"]), int(match["gpu"] or 0))


class FakeGpus:
    """Simulated GPUs. Deterministic for a given seed: values move per sample, not with the wall
    clock. `faults` fire when the injected clock passes their time since the first sample; a test
    may also call `inject(kind, gpu)` at once. `mig` makes every GPU a MIG GPU with two instances."""

    def __init__(
        self,
        count: int = 2,
        *,
        name: str = "NVIDIA H100 80GB HBM3",
        memory_total_bytes: int = 80 * 1024**3,
        power_limit_w: float = 700.0,
        seed: int = 0,
        clock: Clock = utc_now,
        faults: Iterable[Fault] = (),
        mig: bool = False,
    ):
        if count < 0:
            raise ValueError("a simulated box cannot hold a negative number of GPUs")
        self._rng = random.Random(seed)
        self._clock = clock
        self._lock = threading.Lock()
        self._name = name
        self._total = int(memory_total_bytes)
        self._limit = float(power_limit_w)
        self._step = 0
        self._load = [self._rng.uniform(0.75, 0.98) for _ in range(count)]
        self._memory = [self._rng.uniform(0.5, 0.85) for _ in range(count)]
        self._temperature = [self._rng.uniform(55.0, 70.0) for _ in range(count)]
        self._counters = [GpuCounters(0, 0, 0, 0, False, False, None, None, 0, 0.0, 0.0, 0.0) for _ in range(count)]
        self._processes: dict[int, tuple[GpuProcess, ...]] = {}
        self._lost: dict[int, str] = {}
        self._throttled: set[int] = set()
        self._idle: set[int] = set()
        self._events: list[GpuEvent] = []
        self._faults = sorted(faults, key=lambda f: f.after_seconds)
        self._started: datetime | None = None
        self._last: datetime | None = None
        self._mig = mig
        self.closed = 0

    @property
    def count(self) -> int:
        return len(self._load)

    def set_processes(self, index: int, processes: Iterable[tuple[int, int | None]]) -> None:
        """Say which (pid, GPU memory bytes) a simulated GPU runs, e.g. the demo's toy trainers."""
        with self._lock:
            self._processes[index] = tuple(GpuProcess(int(pid), used) for pid, used in processes)

    def lose(self, index: int, reason: str = "GPU is lost") -> None:
        """Simulate a GPU falling off the bus (without the Xid a real one reports: see `inject`)."""
        with self._lock:
            self._lost[index] = reason

    def inject(self, kind: str, gpu: int = 0) -> None:
        """Make fault `kind` (one of FAULT_KINDS) happen now on GPU `gpu`."""
        with self._lock:
            self._apply(Fault(kind, 0.0, gpu), self._clock())

    def _apply(self, fault: Fault, at: datetime) -> None:
        index = fault.gpu
        if not 0 <= index < self.count:
            return
        counters = self._counters[index]
        if fault.kind == "xid79":
            self._event(index, "xid", 79, at)
            self._lost[index] = "GPU has fallen off the bus (Xid 79)"
        elif fault.kind == "xid48":
            self._event(index, "xid", 48, at)
            self._event(index, "ecc", None, at, "double-bit")
            self._counters[index] = replace(counters, ecc_uncorrected=counters.ecc_uncorrected + 1, remap_pending=True,
                                            remapped_uncorrectable=counters.remapped_uncorrectable + 1)
        elif fault.kind == "ecc":
            self._counters[index] = replace(counters, ecc_uncorrected=counters.ecc_uncorrected + 2, remap_failed=True)
        elif fault.kind == "throttle":
            self._throttled.add(index)
        elif fault.kind == "idle":
            self._idle.add(index)
        else:
            raise ValueError(f"no fault kind {fault.kind!r}; the kinds are {', '.join(FAULT_KINDS)}")

    def _event(self, index: int, kind: str, xid: int | None, at: datetime, detail: str | None = None) -> None:
        self._events.append(GpuEvent(len(self._events) + 1, index, self._uuid(index), kind, xid, at, detail))
        del self._events[:-256]

    def sample(self) -> GpuSnapshot:
        with self._lock:
            self._step += 1
            taken = self._clock()
            if self._started is None:
                self._started = taken
            while self._faults and (taken - self._started).total_seconds() >= self._faults[0].after_seconds:
                self._apply(self._faults.pop(0), taken)
            seconds = max(0.0, (taken - self._last).total_seconds()) if self._last is not None else 0.0
            self._last = taken
            samples = []
            for index in range(self.count):
                if index in self._lost:
                    samples.append(
                        GpuSample(index=index, name=self._name, uuid=self._uuid(index), taken_at=taken, serial=self._serial(index),
                                  lost=True, lost_reason=self._lost[index], simulated=True)
                    )
                    continue
                samples.append(self._move(index, taken, seconds))
            alerts = tuple(
                GpuAlert("gpu-lost", f"{s.label} is lost: {s.lost_reason}; {_LOST_CONSEQUENCE} (simulated)", s.index, s.name)
                for s in samples if s.lost
            )
            return GpuSnapshot(available=True, samples=tuple(samples), alerts=alerts, taken_at=taken, simulated=True,
                               events=tuple(self._events), driver_version=SIMULATED_DRIVER, events_watched=True)

    def _uuid(self, index: int) -> str:
        return f"GPU-simulated-{index:04d}"

    def _serial(self, index: int) -> str:
        return f"SIM{index:010d}"

    def _move(self, index: int, taken: datetime, seconds: float) -> GpuSample:
        rng = self._rng
        # A bounded random walk with a slow wave: eval phases dip the load every few minutes.
        wave = 0.08 * math.sin(self._step / 90.0 + index)
        load = min(1.0, max(0.05, self._load[index] + rng.gauss(0.0, 0.03)))
        self._load[index] = load
        shown = min(1.0, max(0.0, load + wave))
        if index in self._idle:
            shown = rng.uniform(0.0, 0.02)
        memory = min(0.97, max(0.05, self._memory[index] + rng.gauss(0.0, 0.002)))
        self._memory[index] = memory
        target = 38.0 + 45.0 * shown + (10.0 if index in self._throttled else 0.0)
        temperature = self._temperature[index] + 0.2 * (target - self._temperature[index]) + rng.gauss(0.0, 0.3)
        self._temperature[index] = temperature
        power = min(self._limit, self._limit * (0.18 + 0.8 * shown) + rng.gauss(0.0, 5.0))
        reasons: tuple[str, ...] = ()
        if shown < 0.1:
            reasons = ("GPU idle",)
        elif index in self._throttled:
            reasons = ("HW thermal slowdown",)
        elif power >= self._limit * 0.97:
            reasons = ("SW power cap",)
        power = max(0.0, power)
        counters = self._counters[index]
        self._counters[index] = counters = replace(
            counters,
            energy_j=round((counters.energy_j or 0.0) + power * seconds, 3),
            power_slowdown_s=round((counters.power_slowdown_s or 0.0) + (seconds if "SW power cap" in reasons else 0.0), 3),
            thermal_slowdown_s=round((counters.thermal_slowdown_s or 0.0) + (seconds if index in self._throttled else 0.0), 3),
        )
        used = int(self._total * memory)
        instances = None
        if self._mig:
            half = self._total // 2
            instances = (MigInstance(0, f"MIG-simulated-{index}-0", min(used, half), half),
                         MigInstance(1, f"MIG-simulated-{index}-1", max(0, used - half), half))
        return GpuSample(
            index=index,
            name=self._name,
            uuid=self._uuid(index),
            taken_at=taken,
            utilization_percent=None if self._mig else int(round(shown * 100)),
            memory_used_bytes=used,
            memory_total_bytes=self._total,
            temperature_c=int(round(temperature)),
            power_draw_w=round(power, 1),
            power_limit_w=self._limit,
            sm_clock_mhz=int(1980 - (200 if reasons and reasons[0] != "GPU idle" else 0) - rng.randint(0, 30)),
            memory_clock_mhz=2619,
            throttle_reasons=reasons,
            processes=self._processes.get(index, ()),
            simulated=True,
            serial=self._serial(index),
            counters=counters,
            mig_instances=instances,
        )

    def close(self) -> None:
        self.closed += 1
