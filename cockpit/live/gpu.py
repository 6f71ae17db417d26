"""GPU sampling for the live engine: one adapter over NVML (nvidia-ml-py's `pynvml`), a background
sampler that keeps NVML off the UI thread, and a simulated source for tests, benchmarks and the demo.

NVML fails in many ways on rented boxes; none of them may take the cockpit down. Failures are sorted
into classes (no library/driver, a field not supported, a binding newer than the driver, a GPU lost,
a hung call) and each one degrades a field, a GPU or the whole panel, and says why.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import ModuleType
from typing import Any, Protocol

from cockpit.common.times import iso, utc_now



def _logger():
    """The module's logger, imported on first use: only failures are logged, and `status` starts
    faster without the logging package."""
    import logging

    return logging.getLogger("cockpit.live.gpu")

Clock = Callable[[], datetime]
Monotonic = Callable[[], float]

# NVML return codes. They are part of the driver's ABI, so plain numbers are safe even when the
# injected module (a test fake, an old binding) does not define every constant.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2

# A GPU that answers one of these is treated as lost: its runs are not computing while the paid
# hours go on, which is worth a red alert rather than a blank cell.
_LOST_CODES = frozenset({NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED, NVML_ERROR_GPU_NOT_FOUND, NVML_ERROR_UNKNOWN})

_LOST_CONSEQUENCE = "its runs are not computing while the lot's hours go on"

_INIT_REASONS = {
    NVML_ERROR_LIBRARY_NOT_FOUND: "libnvidia-ml.so not found (no NVIDIA driver installed on this machine)",
    NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded",
    NVML_ERROR_NO_PERMISSION: "no permission to open the GPU devices (/dev/nvidia*)",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "the NVIDIA driver and libnvidia-ml.so versions differ (driver updated without a reboot?)",
    NVML_ERROR_OPERATING_SYSTEM: "the operating system refused the NVIDIA driver's request",
    NVML_ERROR_IRQ_ISSUE: "the NVIDIA driver reports an interrupt problem",
    NVML_ERROR_CORRUPTED_INFOROM: "a GPU's infoROM is corrupted",
    NVML_ERROR_GPU_IS_LOST: "a GPU is lost (fell off the bus or needs a reset)",
    NVML_ERROR_UNKNOWN: "the NVIDIA driver returned an unknown error",
}

# Clock-event ("throttle") reason bits, as nvidia-smi names them.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x0001, "GPU idle"),
    (0x0002, "applications clocks setting"),
    (0x0004, "SW power cap"),
    (0x0008, "HW slowdown"),
    (0x0010, "sync boost"),
    (0x0020, "SW thermal slowdown"),
    (0x0040, "HW thermal slowdown"),
    (0x0080, "HW power brake slowdown"),
    (0x0100, "display clock setting"),
)
# Reasons that do not mean a run is being slowed down.
BENIGN_THROTTLE_REASONS = frozenset({"GPU idle", "applications clocks setting", "display clock setting"})


def throttle_reason_names(bits: int) -> tuple[str, ...]:
    """Readable names for a clock-event reason bit mask; unknown bits are named by their value."""
    names = [name for bit, name in THROTTLE_REASONS if bits & bit]
    known = 0
    for bit, _ in THROTTLE_REASONS:
        known |= bit
    rest = bits & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"reason {bit:#x}")
            rest &= ~bit
        bit <<= 1
    return tuple(names)


# ---------------------------------------------------------------------------------------------
# Samples


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process NVML sees on a GPU. `used_memory_bytes` is None where the driver cannot say."""

    pid: int
    used_memory_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "used_memory_bytes": self.used_memory_bytes}


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one moment. A None value is unknown for this sample; a name in `hidden` is a field
    this GPU does not support, which the view should not show at all."""

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

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.name})"

    @property
    def slowed_by(self) -> tuple[str, ...]:
        """Clock-event reasons that actually slow a run down (idle and settings left out)."""
        return tuple(r for r in self.throttle_reasons or () if r not in BENIGN_THROTTLE_REASONS)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "taken_at": iso(self.taken_at),
            "utilization_percent": self.utilization_percent,
            "memory_used_bytes": self.memory_used_bytes,
            "memory_total_bytes": self.memory_total_bytes,
            "temperature_c": self.temperature_c,
            "power_draw_w": self.power_draw_w,
            "power_limit_w": self.power_limit_w,
            "sm_clock_mhz": self.sm_clock_mhz,
            "memory_clock_mhz": self.memory_clock_mhz,
            "throttle_reasons": list(self.throttle_reasons) if self.throttle_reasons is not None else None,
            "processes": [p.to_json() for p in self.processes] if self.processes is not None else None,
            "hidden": sorted(self.hidden),
            "lost": self.lost,
            "lost_reason": self.lost_reason,
            "simulated": self.simulated,
        }


@dataclass(frozen=True, slots=True)
class GpuAlert:
    """A condition the operator must see: `rule` is "gpu-lost" or "nvml-not-answering"."""

    rule: str
    message: str
    gpu_index: int | None = None
    gpu_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "run": None, "message": self.message, "gpu": self.gpu_index}


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """Everything the view needs about the GPUs, frozen. `warnings` holds each once-only warning
    given so far; `alerts` holds the conditions active now."""

    available: bool
    reason: str | None = None
    samples: tuple[GpuSample, ...] = ()
    warnings: tuple[str, ...] = ()
    alerts: tuple[GpuAlert, ...] = ()
    taken_at: datetime | None = None
    simulated: bool = False
    answering: bool = True

    def age_seconds(self, now: datetime | None = None) -> float | None:
        if self.taken_at is None:
            return None
        return max(0.0, ((now or utc_now()) - self.taken_at).total_seconds())

    def nvml_json(self) -> dict[str, Any]:
        """The `nvml` object of `status --json`."""
        out: dict[str, Any] = {"available": self.available, "reason": self.reason}
        if self.simulated:
            out["simulated"] = True
        return out

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        return {
            "nvml": self.nvml_json(),
            "gpus": [s.to_json() for s in self.samples],
            "warnings": list(self.warnings),
            "alerts": [a.to_json() for a in self.alerts],
            "taken_at": iso(self.taken_at) if self.taken_at else None,
            "age_seconds": self.age_seconds(now),
            "answering": self.answering,
        }


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
    hidden: set[str] = field(default_factory=set)
    lost_reason: str | None = None
    lost_checked: float = 0.0
    slow: dict[str, tuple[Any, float]] = field(default_factory=dict)


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _error_text(error: BaseException) -> str:
    try:
        text = str(error)
    except Exception:  # str() of an NVMLError with an unknown code calls into the library
        text = ""
    return text or type(error).__name__


class NvmlSource:
    """Samples every GPU through NVML. Initialises on the first `sample()` (in the sampler's thread:
    nvmlInit can take seconds on a box without persistence mode) and shuts down once in `close()`.

    `nvml` is the pynvml module or a stand-in with the same names; None imports nvidia-ml-py.
    """

    # The power limit rarely changes (nvidia-smi -pl); asking for it every second is waste.
    SLOW_FIELD_SECONDS = 30.0
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

    def _init_reason(self, error: BaseException) -> str:
        code = getattr(error, "value", None)
        if isinstance(code, int) and code in _INIT_REASONS:
            return _INIT_REASONS[code]
        return _error_text(error)

    def _describe(self, gpu: _Gpu) -> None:
        """Name and UUID never change: asked once, kept for the alerts that name the GPU."""
        nvml = self._nvml
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
            return GpuSnapshot(
                available=True, samples=samples, warnings=tuple(self._warnings), alerts=alerts, taken_at=started
            )

    def _warn_once(self, key: str, message: str) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        self._warnings.append(message)
        _logger().warning(message)

    def _lost_sample(self, gpu: _Gpu) -> GpuSample:
        return GpuSample(
            index=gpu.index, name=gpu.name, uuid=gpu.uuid, taken_at=self._clock(),
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
            utilization = self._field(gpu, "utilization_percent", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
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
        )

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


_LABELS = {
    "utilization_percent": "utilization",
    "memory": "memory use",
    "temperature_c": "temperature",
    "power_draw_w": "power draw",
    "power_limit_w": "power limit",
    "sm_clock_mhz": "SM clock",
    "memory_clock_mhz": "memory clock",
    "throttle_reasons": "clock-slowdown reasons",
    "processes": "GPU processes",
}


def _int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _watts(milliwatts: Any) -> float | None:
    value = _int(milliwatts)
    return None if value is None else round(value / 1000.0, 1)


def _processes(raw: Iterable[Any]) -> tuple[GpuProcess, ...]:
    out: dict[int, GpuProcess] = {}
    for entry in raw:
        pid = _int(getattr(entry, "pid", None))
        if pid is None:
            continue
        used = _int(getattr(entry, "usedGpuMemory", None))
        if used is not None and used >= 2**63:  # NVML_VALUE_NOT_AVAILABLE on older bindings
            used = None
        out[pid] = GpuProcess(pid, used)  # one entry per pid: MPS can list a pid twice
    return tuple(out.values())


# ---------------------------------------------------------------------------------------------
# Background sampler


class GpuSampler:
    """Runs a source's `sample()` on its own daemon thread every `interval` seconds and keeps the
    latest snapshot. Readers (the UI thread, the headless loop) never touch NVML: `latest()` only
    reads an attribute. When no sweep has finished for `stall_factor` × `interval`, the snapshot
    says NVML is not answering: a hung driver call must show, not freeze the screen."""

    def __init__(
        self,
        source: GpuSource,
        *,
        interval: float = 1.0,
        stall_factor: float = 5.0,
        clock: Clock = utc_now,
        monotonic: Monotonic = time.monotonic,
    ):
        if interval <= 0:
            raise ValueError("the GPU sampling interval must be positive")
        self.source = source
        self.interval = float(interval)
        self.stall_after = float(interval) * float(stall_factor)
        self._clock = clock
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._latest = GpuSnapshot(available=False, reason="waiting for the first GPU sample")
        self._progress_at = monotonic()  # the last moment the thread proved it is alive
        self._closed = False

    def start(self) -> GpuSampler:
        if self._thread is None and not self._closed:
            self._progress_at = self._monotonic()
            self._thread = threading.Thread(target=self._run, name="cockpit-gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        next_due = self._monotonic()
        while not self._stop.is_set():
            try:
                snapshot = self.source.sample()
            except Exception as error:  # a bug in a source must not kill sampling for good
                _logger().exception("GPU sampling failed")
                snapshot = GpuSnapshot(
                    available=False, reason=f"GPU sampling failed: {_error_text(error)}", taken_at=self._clock()
                )
            self._latest = snapshot
            now = self._monotonic()
            self._progress_at = now
            # Fixed rate, no catching up: a slow sweep delays the next one instead of piling up.
            next_due = max(next_due + self.interval, now)
            self._stop.wait(max(0.0, next_due - now))

    def latest(self) -> GpuSnapshot:
        """The newest snapshot, at once, never blocking."""
        snapshot = self._latest
        if self._thread is None or self._closed:
            return snapshot
        silent = self._monotonic() - self._progress_at
        if silent <= self.stall_after:
            return snapshot
        alert = GpuAlert(
            "nvml-not-answering",
            f"NVML is not answering: no GPU sample for {silent:.0f} s (a driver call is hung); "
            + ("GPU figures shown are stale" if snapshot.samples else "no GPU figures yet"),
        )
        return replace(snapshot, answering=False, alerts=snapshot.alerts + (alert,))

    def age_seconds(self) -> float | None:
        """Seconds since the latest snapshot was taken; None before the first one."""
        return self._latest.age_seconds(self._clock())

    @property
    def answering(self) -> bool:
        return self.latest().answering

    def close(self, timeout: float = 2.0) -> None:
        """Stop the thread and shut the source down, once. A thread stuck in the driver is left
        behind (it is a daemon); the source then skips its shutdown."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.source.close()

    def __enter__(self) -> GpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# Simulated GPUs


class FakeGpus:
    """Simulated GPUs with plausible, moving numbers, for tests, benchmarks and the demo. Every
    sample says `simulated=True` so the view labels it: simulated numbers are never shown as measured.
    Deterministic for a given seed: values move per sample, not with the wall clock."""

    def __init__(
        self,
        count: int = 2,
        *,
        name: str = "NVIDIA H100 80GB HBM3",
        memory_total_bytes: int = 80 * 1024**3,
        power_limit_w: float = 700.0,
        seed: int = 0,
        clock: Clock = utc_now,
    ):
        if count < 0:
            raise ValueError("a simulated box cannot hold a negative number of GPUs")
        import random

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
        self._processes: dict[int, tuple[GpuProcess, ...]] = {}
        self._lost: dict[int, str] = {}
        self.closed = 0

    @property
    def count(self) -> int:
        return len(self._load)

    def set_processes(self, index: int, processes: Iterable[tuple[int, int | None]]) -> None:
        """Say which (pid, GPU memory bytes) a simulated GPU runs, e.g. the demo's toy trainers."""
        with self._lock:
            self._processes[index] = tuple(GpuProcess(int(pid), used) for pid, used in processes)

    def lose(self, index: int, reason: str = "GPU is lost") -> None:
        """Simulate a GPU falling off the bus."""
        with self._lock:
            self._lost[index] = reason

    def sample(self) -> GpuSnapshot:
        with self._lock:
            self._step += 1
            taken = self._clock()
            samples = []
            for index in range(self.count):
                if index in self._lost:
                    samples.append(
                        GpuSample(index=index, name=self._name, uuid=self._uuid(index), taken_at=taken,
                                  lost=True, lost_reason=self._lost[index], simulated=True)
                    )
                    continue
                samples.append(self._move(index, taken))
            alerts = tuple(
                GpuAlert("gpu-lost", f"{s.label} is lost: {s.lost_reason}; {_LOST_CONSEQUENCE} (simulated)", s.index, s.name)
                for s in samples if s.lost
            )
            return GpuSnapshot(available=True, samples=tuple(samples), alerts=alerts, taken_at=taken, simulated=True)

    def _uuid(self, index: int) -> str:
        return f"GPU-simulated-{index:04d}"

    def _move(self, index: int, taken: datetime) -> GpuSample:
        rng = self._rng
        # A bounded random walk with a slow wave: eval phases dip the load every few minutes.
        wave = 0.08 * math.sin(self._step / 90.0 + index)
        load = min(1.0, max(0.05, self._load[index] + rng.gauss(0.0, 0.03)))
        self._load[index] = load
        shown = min(1.0, max(0.0, load + wave))
        memory = min(0.97, max(0.05, self._memory[index] + rng.gauss(0.0, 0.002)))
        self._memory[index] = memory
        target = 38.0 + 45.0 * shown
        temperature = self._temperature[index] + 0.2 * (target - self._temperature[index]) + rng.gauss(0.0, 0.3)
        self._temperature[index] = temperature
        power = min(self._limit, self._limit * (0.18 + 0.8 * shown) + rng.gauss(0.0, 5.0))
        reasons: tuple[str, ...] = ()
        if shown < 0.1:
            reasons = ("GPU idle",)
        elif power >= self._limit * 0.97:
            reasons = ("SW power cap",)
        return GpuSample(
            index=index,
            name=self._name,
            uuid=self._uuid(index),
            taken_at=taken,
            utilization_percent=int(round(shown * 100)),
            memory_used_bytes=int(self._total * memory),
            memory_total_bytes=self._total,
            temperature_c=int(round(temperature)),
            power_draw_w=round(max(0.0, power), 1),
            power_limit_w=self._limit,
            sm_clock_mhz=int(1980 - (200 if "SW power cap" in reasons else 0) - rng.randint(0, 30)),
            memory_clock_mhz=2619,
            throttle_reasons=reasons,
            processes=self._processes.get(index, ()),
            simulated=True,
        )

    def close(self) -> None:
        self.closed += 1


def open_gpu_source(environ: Mapping[str, str] | None = None, nvml: Any | None = None) -> NvmlSource:
    """The measured source for this machine. It never raises: without NVML its snapshots say why."""
    return NvmlSource(nvml, environ=environ)
