"""GPU sampling for the live engine: the GPU records and one adapter over NVML (nvidia-ml-py's
`pynvml`). The background sampler that keeps NVML off the UI thread is in `gpu_sampler`, the
simulated GPUs for tests, benchmarks and the demo in `fake_gpus`, the health fields in `gpu_fields`.

NVML fails in many ways on rented boxes; none of them may take the cockpit down. Failures are sorted
into classes (no library/driver, a field not supported, a binding newer than the driver, a GPU lost,
a hung call) and each one degrades a field, a GPU or the whole panel, and says why.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import ModuleType
from typing import Any, Protocol

from cockpit.common.times import utc_now
from cockpit.live.gpu_fields import (  # noqa: F401  the codes and names are read from here too
    BENIGN_THROTTLE_REASONS,
    INIT_REASONS as _INIT_REASONS,
    LABELS as _LABELS,
    LOST_CODES as _LOST_CODES,
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_TEMPERATURE_GPU,
    THROTTLE_REASONS,
    GpuCounters,
    GpuEvent,
    MigInstance,
    as_int as _int,
    error_text as _error_text,
    processes_of,
    read_counters,
    read_mig,
    text as _text,
    throttle_reason_names,
    watts as _watts,
)
from cockpit.live.gpu_events import EventWatcher


def _logger():
    """The module's logger, imported on first use: only failures are logged, and `status` starts
    faster without the logging package."""
    import logging

    return logging.getLogger("cockpit.live.gpu")

Clock = Callable[[], datetime]
Monotonic = Callable[[], float]

_LOST_CONSEQUENCE = "its runs are not computing while the lot's hours go on"


# ---------------------------------------------------------------------------------------------
# Samples


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process NVML sees on a GPU. `used_memory_bytes` is None where the driver cannot say."""

    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one moment. A None value is unknown for this sample; a name in `hidden` is a field
    this GPU does not support, which the view should not show at all. On a MIG GPU `mig_instances`
    holds each instance's memory and `utilization_percent` stays None: NVML reports none for MIG."""

    index: int
    name: str
    uuid: str | None
    taken_at: datetime
    utilization_percent: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    throttle_reasons: tuple[str, ...] | None = None
    processes: tuple[GpuProcess, ...] | None = None
    hidden: frozenset[str] = frozenset()
    lost: bool = False
    lost_reason: str | None = None
    simulated: bool = False
    serial: str | None = None
    counters: GpuCounters | None = None  # the health counters; None where none is reported
    mig_instances: tuple[MigInstance, ...] | None = None  # None: MIG off (or unknown)

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.name})"

    @property
    def slowed_by(self) -> tuple[str, ...]:
        """Clock-event reasons that actually slow a run down (idle and settings left out)."""
        return tuple(r for r in self.throttle_reasons or () if r not in BENIGN_THROTTLE_REASONS)

    @property
    def mig(self) -> bool:
        return self.mig_instances is not None


@dataclass(frozen=True, slots=True)
class GpuAlert:
    """A condition the operator must see: `rule` is "gpu-lost" or "nvml-not-answering"."""

    rule: str
    message: str
    gpu_index: int | None = None
    gpu_name: str | None = None


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """Everything the view needs about the GPUs, frozen. `warnings` holds each once-only warning
    given so far; `alerts` holds the conditions active now; `events` the newest Xid and ECC events
    (each with a growing `number`: a reader keeps the last one it has handled)."""

    available: bool
    reason: str | None = None
    samples: tuple[GpuSample, ...] = ()
    warnings: tuple[str, ...] = ()
    alerts: tuple[GpuAlert, ...] = ()
    taken_at: datetime | None = None
    simulated: bool = False
    answering: bool = True
    events: tuple[GpuEvent, ...] = ()
    driver_version: str | None = None
    events_watched: bool | None = None  # None: not tried (no NVML); False: not supported, counters polled
    events_note: str | None = None  # why Xid/ECC events are not watched, said once by the view

    def age_seconds(self, now: datetime | None = None) -> float | None:
        if self.taken_at is None:
            return None
        return max(0.0, ((now or utc_now()) - self.taken_at).total_seconds())


class GpuSource(Protocol):
    """What the sampler needs: a blocking `sample()` and an idempotent `close()`."""

    def sample(self) -> GpuSnapshot: ...

    def close(self) -> None: ...


def nvml_turned_off(environ: Mapping[str, str] | None = None) -> bool:
    value = (os.environ if environ is None else environ).get("COCKPIT_NVML", "")
    return value.strip().lower() in {"off", "0", "false", "no"}


# ---------------------------------------------------------------------------------------------
# NVML


class _GpuLostError(Exception):
    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


@dataclass
class _Gpu:
    """One NVML device handle and the fields it turned out not to support."""

    index: int
    handle: Any = None
    name: str = "unknown GPU"
    uuid: str | None = None
    serial: str | None = None
    hidden: set[str] = field(default_factory=set)
    lost_reason: str | None = None
    lost_checked: float = 0.0
    slow: dict[str, tuple[Any, float]] = field(default_factory=dict)
    health: tuple[GpuCounters | None, tuple[MigInstance, ...] | None, float] | None = None  # (counters, MIG, when read)
    unsupported: set[str] = field(default_factory=set)  # health fields this GPU does not report


class NvmlSource:
    """Samples every GPU through NVML. Initialises on the first `sample()` (in the sampler's thread:
    nvmlInit can take seconds on a box without persistence mode) and shuts down once in `close()`.

    `nvml` is the pynvml module or a stand-in with the same names; None imports nvidia-ml-py.
    """

    # The power limit rarely changes (nvidia-smi -pl); asking for it every second is waste.
    SLOW_FIELD_SECONDS = 30.0
    # Health counters (ECC, remapped rows, replays, slowdown time, energy) and MIG instances move
    # slowly and are judged over minutes: read every few seconds, not every sweep.
    HEALTH_FIELD_SECONDS = 5.0
    # A lost GPU is probed again this often, in case the error was a passing one.
    LOST_RETRY_SECONDS = 30.0
    SHUTDOWN_WAIT_SECONDS = 1.0

    _FUNCTIONS: dict[str, tuple[str, ...]] = {
        # Newest first: a binding newer than the driver names functions the driver lacks.
        "throttle_reasons": ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        "processes": (
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetComputeRunningProcesses_v2",
            "nvmlDeviceGetComputeRunningProcesses",
        ),
    }

    def __init__(
        self,
        nvml: ModuleType | Any | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Clock = utc_now,
        monotonic: Monotonic = time.monotonic,
    ):
        self._nvml = nvml
        self._environ = environ
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()  # held while a sweep talks to NVML, so close() never races it
        self._opened = False
        self._initialised = False
        self._closed = False
        self._reason: str | None = None
        self._gpus: list[_Gpu] = []
        self._warnings: list[str] = []
        self._warned: set[str] = set()
        self._chosen: dict[str, str] = {}
        self._events: EventWatcher | None = None
        self._driver_version: str | None = None

    # -- lifecycle

    @property
    def available(self) -> bool | None:
        """None until the first sample has tried to initialise NVML."""
        return None if not self._opened else self._reason is None

    @property
    def reason(self) -> str | None:
        return self._reason

    def _open(self) -> None:
        self._opened = True
        if nvml_turned_off(self._environ):
            self._reason = "NVML unavailable: turned off by COCKPIT_NVML=off"
            return
        if self._nvml is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError:
                self._reason = "NVML unavailable: the pynvml module (nvidia-ml-py) is not installed"
                return
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except AttributeError:
            # Another package named pynvml shadows nvidia-ml-py's (the old community binding).
            self._reason = "NVML unavailable: the pynvml module is not nvidia-ml-py's (reinstall nvidia-ml-py)"
            return
        except Exception as error:
            self._reason = "NVML unavailable: " + self._init_reason(error)
            return
        self._initialised = True
        atexit.register(self.close)
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as error:
            self._reason = "NVML unavailable: cannot count the GPUs: " + self._init_reason(error)
            return
        if count <= 0:
            self._reason = "NVML unavailable: the driver reports no GPU"
            return
        for index in range(count):
            gpu = _Gpu(index)
            self._gpus.append(gpu)
            try:
                gpu.handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception as error:
                gpu.lost_reason = _error_text(error)
                gpu.lost_checked = self._monotonic()
                continue
            self._describe(gpu)
        try:
            self._driver_version = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:
            pass
        self._watch_events()

    def _watch_events(self) -> None:
        """Xid and ECC events on their own thread (where the driver offers none, `events_note` says so)."""
        devices = [(gpu.index, gpu.handle, gpu.uuid) for gpu in self._gpus if gpu.handle is not None]
        self._events = EventWatcher(self._nvml, devices, self._clock).start()

    def _events_note(self) -> str | None:
        events = self._events
        if events is None:
            return None
        if events.stopped_by:
            return f"NVML: {events.stopped_by}"
        if events.problem and not events.registered:
            return (f"NVML: GPU events (Xid, ECC) are not delivered here ({events.problem}); "
                    "the ECC and remapped-row counters are polled instead")
        return f"NVML: {events.problem}" if events.problem else None

    def _init_reason(self, error: BaseException) -> str:
        code = getattr(error, "value", None)
        if isinstance(code, int) and code in _INIT_REASONS:
            return _INIT_REASONS[code]
        return _error_text(error)

    def _describe(self, gpu: _Gpu) -> None:
        """Name, UUID and serial never change: asked once, kept for the alerts that name the GPU."""
        nvml = self._nvml
        try:
            gpu.serial = _text(nvml.nvmlDeviceGetSerial(gpu.handle))
        except Exception:
            pass  # consumer GPUs have none
        try:
            gpu.name = _text(nvml.nvmlDeviceGetName(gpu.handle))
        except Exception:
            pass
        try:
            gpu.uuid = _text(nvml.nvmlDeviceGetUUID(gpu.handle))
        except Exception:
            pass

    def close(self) -> None:
        """Shut NVML down once. Skipped when a sweep is stuck inside the driver: shutting down under
        a running call frees memory that call still uses (the OS reclaims it at exit anyway)."""
        if self._closed:
            return
        if not self._lock.acquire(timeout=self.SHUTDOWN_WAIT_SECONDS):
            _logger().warning("NVML shutdown skipped: a GPU query is still running")
            self._closed = True
            return
        try:
            if self._closed:
                return
            self._closed = True
            atexit.unregister(self.close)
            if self._events is not None and not self._events.stop():
                _logger().warning("NVML shutdown skipped: the GPU event wait is still running")
                self._initialised = False
            if self._initialised:
                self._initialised = False
                try:
                    self._nvml.nvmlShutdown()
                except Exception as error:
                    _logger().debug("nvmlShutdown failed: %s", error)
        finally:
            self._lock.release()

    def __enter__(self) -> NvmlSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sampling

    def sample(self) -> GpuSnapshot:
        """One sweep over every GPU. Blocks for as long as the driver takes: call it from a thread."""
        with self._lock:
            if self._closed:
                return GpuSnapshot(available=False, reason="NVML unavailable: the GPU source is closed", taken_at=self._clock())
            if not self._opened:
                self._open()
            started = self._clock()
            if self._reason is not None:
                return GpuSnapshot(available=False, reason=self._reason, warnings=tuple(self._warnings), taken_at=started)
            samples = tuple(self._sample_gpu(gpu) for gpu in self._gpus)
            alerts = tuple(
                GpuAlert("gpu-lost", f"{s.label} is lost: {s.lost_reason}; {_LOST_CONSEQUENCE}", s.index, s.name)
                for s in samples
                if s.lost
            )
            events = self._events
            return GpuSnapshot(
                available=True, samples=samples, warnings=tuple(self._warnings), alerts=alerts, taken_at=started,
                events=events.events() if events else (), driver_version=self._driver_version,
                events_watched=bool(events and events.registered and not events.stopped_by),
                events_note=self._events_note(),
            )

    def _warn_once(self, key: str, message: str) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        self._warnings.append(message)
        _logger().warning(message)

    def _lost_sample(self, gpu: _Gpu) -> GpuSample:
        return GpuSample(
            index=gpu.index, name=gpu.name, uuid=gpu.uuid, taken_at=self._clock(), serial=gpu.serial,
            hidden=frozenset(gpu.hidden), lost=True,
            lost_reason=f'NVML answered "{gpu.lost_reason}"',
        )

    def _sample_gpu(self, gpu: _Gpu) -> GpuSample:
        nvml = self._nvml
        if gpu.lost_reason is not None:
            if self._monotonic() - gpu.lost_checked < self.LOST_RETRY_SECONDS:
                return self._lost_sample(gpu)
            gpu.lost_checked = self._monotonic()
            try:
                gpu.handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
                nvml.nvmlDeviceGetMemoryInfo(gpu.handle)
            except Exception:
                return self._lost_sample(gpu)
            gpu.lost_reason = None
            if gpu.name == "unknown GPU":
                self._describe(gpu)
            self._warn_once(f"recovered-{gpu.index}", f"GPU {gpu.index} ({gpu.name}) answers again after being lost")
        handle = gpu.handle
        try:
            counters, mig = self._health(gpu)
            utilization = None if mig is not None else self._field(
                gpu, "utilization_percent", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            memory = self._field(gpu, "memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
            temperature = self._field(
                gpu, "temperature_c", lambda: nvml.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU)
            )
            power_mw = self._field(gpu, "power_draw_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
            limit_mw = self._slow_field(gpu, "power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
            sm_clock = self._field(gpu, "sm_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM))
            mem_clock = self._field(gpu, "memory_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_MEM))
            reasons = self._versioned_field(gpu, "throttle_reasons", handle)
            processes = self._versioned_field(gpu, "processes", handle)
        except _GpuLostError as lost:
            gpu.lost_reason = _error_text(lost.error)
            gpu.lost_checked = self._monotonic()
            return self._lost_sample(gpu)
        hidden = set(gpu.hidden)
        if "memory" in hidden:
            hidden.discard("memory")
            hidden.update({"memory_used_bytes", "memory_total_bytes"})
        return GpuSample(
            index=gpu.index,
            name=gpu.name,
            uuid=gpu.uuid,
            taken_at=self._clock(),
            utilization_percent=_int(utilization),
            memory_used_bytes=_int(getattr(memory, "used", None)),
            memory_total_bytes=_int(getattr(memory, "total", None)),
            temperature_c=_int(temperature),
            power_draw_w=_watts(power_mw),
            power_limit_w=_watts(limit_mw),
            sm_clock_mhz=_int(sm_clock),
            memory_clock_mhz=_int(mem_clock),
            throttle_reasons=throttle_reason_names(int(reasons)) if isinstance(reasons, int) else None,
            processes=_processes(processes) if processes is not None else None,
            hidden=frozenset(hidden),
            serial=gpu.serial,
            counters=counters,
            mig_instances=mig,
        )

    def _health(self, gpu: _Gpu) -> tuple[GpuCounters | None, tuple[MigInstance, ...] | None]:
        now = self._monotonic()
        if gpu.health is not None and now - gpu.health[2] < self.HEALTH_FIELD_SECONDS:
            return gpu.health[0], gpu.health[1]
        read = lambda name, call: self._health_field(gpu, name, call)  # noqa: E731
        counters = read_counters(self._nvml, gpu.handle, read)
        mig = read_mig(self._nvml, gpu.handle, read)
        gpu.health = (counters if counters.as_dict() else None, mig, now)
        return gpu.health[0], gpu.health[1]

    def _health_field(self, gpu: _Gpu, name: str, call: Callable[[], Any]) -> Any:
        """A health field: one the GPU (or an old binding) does not offer is left out for good,
        silently: most GPUs lack some of them, and an absent counter is not a fault."""
        if name in gpu.unsupported:
            return None
        try:
            return call()
        except AttributeError:  # nvidia-ml-py older than the field
            gpu.unsupported.add(name)
            return None
        except Exception as error:
            code = getattr(error, "value", None)
            if code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION) or self._is_function_missing(error):
                gpu.unsupported.add(name)
                return None
            if code in _LOST_CODES:
                raise _GpuLostError(error) from None
            self._warn_once(f"error-{name}-{type(error).__name__}",
                            f"NVML: reading {_LABELS.get(name, name)} on GPU {gpu.index} failed: {_error_text(error)}")
            return None

    def _field(self, gpu: _Gpu, name: str, call: Callable[[], Any]) -> Any:
        """One NVML call, sorted by how it fails. Returns None when the value is unknown."""
        if name in gpu.hidden:
            return None  # not supported here: never asked again
        try:
            return call()
        except Exception as error:
            return self._failed(gpu, name, error, None)

    def _failed(self, gpu: _Gpu, name: str, error: BaseException, function: str | None) -> None:
        code = getattr(error, "value", None)
        if self._is_function_missing(error):
            gpu.hidden.add(name)
            what = function or name
            self._warn_once(
                f"missing-{what}",
                f"NVML: the driver lacks {what} (nvidia-ml-py is newer than the driver); {_LABELS.get(name, name)} hidden",
            )
            return None
        if code == NVML_ERROR_NOT_SUPPORTED:
            gpu.hidden.add(name)
            return None
        if code == NVML_ERROR_NO_PERMISSION:
            gpu.hidden.add(name)
            self._warn_once(
                f"permission-{name}",
                f"NVML: no permission to read {_LABELS.get(name, name)} on GPU {gpu.index}; hidden",
            )
            return None
        if code in _LOST_CODES:
            raise _GpuLostError(error)
        # Anything else (a timeout, no data yet, a decoding error) is a gap in this sample only.
        self._warn_once(
            f"error-{name}-{type(error).__name__}",
            f"NVML: reading {_LABELS.get(name, name)} on GPU {gpu.index} failed: {_error_text(error)}",
        )
        return None

    def _is_function_missing(self, error: BaseException) -> bool:
        if getattr(error, "value", None) == NVML_ERROR_FUNCTION_NOT_FOUND:
            return True
        mismatch = getattr(self._nvml, "NVMLLibraryMismatchError", None)
        return isinstance(mismatch, type) and isinstance(error, mismatch)

    def _slow_field(self, gpu: _Gpu, name: str, call: Callable[[], Any]) -> Any:
        cached = gpu.slow.get(name)
        now = self._monotonic()
        if cached is not None and now - cached[1] < self.SLOW_FIELD_SECONDS:
            return cached[0]
        value = self._field(gpu, name, call)
        if value is not None:
            gpu.slow[name] = (value, now)
        return value

    def _versioned_field(self, gpu: _Gpu, name: str, handle: Any) -> Any:
        """Fields whose NVML function was renamed or versioned: the first one the driver has wins,
        and the choice is kept (it is the same for every GPU of one driver)."""
        if name in gpu.hidden:
            return None
        chosen = self._chosen.get(name)
        candidates = (chosen,) if chosen else self._FUNCTIONS[name]
        missing: BaseException | None = None
        for function in candidates:
            call = getattr(self._nvml, function, None)
            if not callable(call):
                continue
            try:
                value = call(handle)
            except Exception as error:
                if self._is_function_missing(error):
                    missing = error
                    continue
                return self._failed(gpu, name, error, function)
            self._chosen[name] = function
            return value
        gpu.hidden.add(name)
        self._warn_once(
            f"missing-{name}",
            f"NVML: the driver lacks {candidates[0]} and its older forms (nvidia-ml-py is newer than the driver); "
            f"{_LABELS.get(name, name)} hidden" + (f" ({_error_text(missing)})" if missing else ""),
        )
        return None


def _processes(raw: Iterable[Any]) -> tuple[GpuProcess, ...]:
    return tuple(GpuProcess(pid, used) for pid, used in processes_of(raw))


def open_gpu_source(environ: Mapping[str, str] | None = None, nvml: Any | None = None) -> NvmlSource:
    """The measured source for this machine. It never raises: without NVML its snapshots say why."""
    return NvmlSource(nvml, environ=environ)


def __getattr__(name: str) -> Any:
    """The sampler and the simulated GPUs live in their own modules; the old names still work."""
    if name == "GpuSampler":
        from cockpit.live.gpu_sampler import GpuSampler

        return GpuSampler
    if name == "FakeGpus":
        from cockpit.live.fake_gpus import FakeGpus

        return FakeGpus
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
