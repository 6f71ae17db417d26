"""What NVML says about one GPU beyond its live figures: the return codes and readable names the
sampler sorts failures by, and the health record (ECC and remapped rows, PCIe replays, slowdown
time, energy, MIG instances, Xid and ECC events) as plain frozen values.

The NVML calls that read the health record live here too; each goes through the caller's `read`
function, which sorts failures as the rest of the sampling does (not supported → hidden)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

# NVML return codes. They are part of the driver's ABI, so plain numbers are safe even when the
# injected module (a test fake, an old binding) does not define every constant.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
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
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_PERF_POLICY_POWER = 0
NVML_PERF_POLICY_THERMAL = 1
NVML_DEVICE_MIG_ENABLE = 1
# Event types (nvmlEventType*): single- and double-bit ECC errors and Xid critical errors.
EVENT_SINGLE_BIT_ECC = 0x0001
EVENT_DOUBLE_BIT_ECC = 0x0002
EVENT_XID_CRITICAL = 0x0008
HEALTH_EVENTS = EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC | EVENT_XID_CRITICAL

# A GPU that answers one of these is treated as lost: its runs are not computing while the paid
# hours go on, which is worth a red alert rather than a blank cell.
LOST_CODES = frozenset({NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED, NVML_ERROR_GPU_NOT_FOUND, NVML_ERROR_UNKNOWN})

INIT_REASONS = {
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
# Reasons that are power or thermal slowdown: what `gpu-throttled` measures.
POWER_THERMAL_REASONS = frozenset(
    {"SW power cap", "HW slowdown", "SW thermal slowdown", "HW thermal slowdown", "HW power brake slowdown"}
)

LABELS = {
    "utilization_percent": "utilization",
    "memory": "memory use",
    "temperature_c": "temperature",
    "power_draw_w": "power draw",
    "power_limit_w": "power limit",
    "sm_clock_mhz": "SM clock",
    "memory_clock_mhz": "memory clock",
    "throttle_reasons": "clock-slowdown reasons",
    "processes": "GPU processes",
    "serial": "serial number",
    "ecc_corrected": "corrected ECC errors",
    "ecc_uncorrected": "uncorrected ECC errors",
    "remapped_rows": "remapped rows",
    "retired_pages": "retired pages",
    "pcie_replays": "PCIe replay counter",
    "power_slowdown_s": "time in power slowdown",
    "thermal_slowdown_s": "time in thermal slowdown",
    "energy_j": "energy counter",
    "mig": "MIG mode",
    "mig_instances": "MIG instances",
}


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


def as_int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def watts(milliwatts: Any) -> float | None:
    value = as_int(milliwatts)
    return None if value is None else round(value / 1000.0, 1)


def text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def error_text(error: BaseException) -> str:
    try:
        said = str(error)
    except Exception:  # str() of an NVMLError with an unknown code calls into the library
        said = ""
    return said or type(error).__name__


# ---------------------------------------------------------------- the health record


@dataclass(frozen=True, slots=True)
class GpuCounters:
    """Cumulative health counters at one reading; None where the GPU does not report the field.
    ECC counts are volatile (since the driver loaded); slowdown times are seconds."""

    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    retired_pages_single: int | None = None
    retired_pages_double: int | None = None
    pcie_replays: int | None = None
    power_slowdown_s: float | None = None
    thermal_slowdown_s: float | None = None
    energy_j: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The reported fields only: a field the GPU does not report is absent, never 0."""
        names = _COUNTER_NAMES or _counter_names()
        return {name: value for name in names if (value := getattr(self, name)) is not None}

    @classmethod
    def from_dict(cls, data: Any) -> GpuCounters:
        if not isinstance(data, dict):
            return cls()
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names and isinstance(v, (int, float, bool))})

    def since(self, base: GpuCounters | None) -> dict[str, Any]:
        """Deltas from `base` for the counting fields (flags are shown as they are now)."""
        out: dict[str, Any] = {}
        for name, value in self.as_dict().items():
            before = getattr(base, name, None) if base is not None else None
            if isinstance(value, bool) or before is None or isinstance(before, bool):
                out[name] = value if isinstance(value, bool) else (0 if isinstance(value, int) else 0.0)
            else:
                delta = value - before
                out[name] = round(delta, 3) if isinstance(delta, float) else delta
        return out


_COUNTER_NAMES: tuple[str, ...] = ()  # GpuCounters' field names, looked up once (as_dict runs every tick)


def _counter_names() -> tuple[str, ...]:
    global _COUNTER_NAMES
    _COUNTER_NAMES = tuple(f.name for f in fields(GpuCounters))
    return _COUNTER_NAMES


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG instance of a GPU: its own memory; NVML reports no utilization for it."""

    index: int
    uuid: str | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuEvent:
    """An event NVML delivered (or the simulation made): an Xid critical error or an ECC error.
    `number` grows by one per event of the source, so a reader can tell which it has seen."""

    number: int
    index: int
    uuid: str | None
    kind: str  # "xid" | "ecc"
    xid: int | None
    at: datetime
    detail: str | None = None


Read = Callable[[str, Callable[[], Any]], Any]


def read_counters(nvml: Any, handle: Any, read: Read) -> GpuCounters:
    """Every health counter once, each through `read(name, call)` (None: unknown or unsupported)."""

    def ecc(kind: int) -> Any:
        return nvml.nvmlDeviceGetTotalEccErrors(handle, kind, NVML_VOLATILE_ECC)

    corrected = read("ecc_corrected", lambda: ecc(NVML_MEMORY_ERROR_TYPE_CORRECTED))
    uncorrected = read("ecc_uncorrected", lambda: ecc(NVML_MEMORY_ERROR_TYPE_UNCORRECTED))
    rows = read("remapped_rows", lambda: nvml.nvmlDeviceGetRemappedRows(handle))
    single = double = None
    if rows is None:  # GPUs before Ampere retire pages instead of remapping rows
        single = read("retired_pages", lambda: nvml.nvmlDeviceGetRetiredPages(
            handle, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS))
        if single is not None:
            double = read("retired_pages", lambda: nvml.nvmlDeviceGetRetiredPages(
                handle, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))
    replays = read("pcie_replays", lambda: nvml.nvmlDeviceGetPcieReplayCounter(handle))
    power = read("power_slowdown_s", lambda: nvml.nvmlDeviceGetViolationStatus(handle, NVML_PERF_POLICY_POWER))
    thermal = read("thermal_slowdown_s", lambda: nvml.nvmlDeviceGetViolationStatus(handle, NVML_PERF_POLICY_THERMAL))
    energy = read("energy_j", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
    remap = tuple(rows) if isinstance(rows, (tuple, list)) and len(rows) >= 4 else None
    return GpuCounters(
        ecc_corrected=as_int(corrected),
        ecc_uncorrected=as_int(uncorrected),
        remapped_correctable=as_int(remap[0]) if remap else None,
        remapped_uncorrectable=as_int(remap[1]) if remap else None,
        remap_pending=bool(remap[2]) if remap else None,
        remap_failed=bool(remap[3]) if remap else None,
        retired_pages_single=len(single) if isinstance(single, (list, tuple)) else None,
        retired_pages_double=len(double) if isinstance(double, (list, tuple)) else None,
        pcie_replays=as_int(replays),
        power_slowdown_s=_violation_seconds(power),
        thermal_slowdown_s=_violation_seconds(thermal),
        energy_j=None if as_int(energy) is None else round(as_int(energy) / 1000.0, 3),  # NVML counts millijoules
    )


def _violation_seconds(value: Any) -> float | None:
    nanoseconds = as_int(getattr(value, "violationTime", None))
    return None if nanoseconds is None else round(nanoseconds / 1e9, 3)


def read_mig(nvml: Any, handle: Any, read: Read) -> tuple[MigInstance, ...] | None:
    """The GPU's MIG instances when MIG is on; None when it is off or the GPU cannot say."""
    mode = read("mig", lambda: nvml.nvmlDeviceGetMigMode(handle))
    current = mode[0] if isinstance(mode, (tuple, list)) and mode else mode
    if as_int(current) != NVML_DEVICE_MIG_ENABLE:
        return None
    count = as_int(read("mig_instances", lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle))) or 0
    instances = []
    for slot in range(count):
        try:
            instance = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception:  # an empty slot answers "not found"
            continue
        try:
            memory = nvml.nvmlDeviceGetMemoryInfo(instance)
        except Exception:
            memory = None
        try:
            uuid = text(nvml.nvmlDeviceGetUUID(instance))
        except Exception:
            uuid = None
        instances.append(MigInstance(slot, uuid, as_int(getattr(memory, "used", None)), as_int(getattr(memory, "total", None))))
    return tuple(instances)


def processes_of(raw: Iterable[Any]) -> tuple[Any, ...]:
    """(pid, used memory) pairs from NVML's process entries, one per pid (MPS can list a pid twice)."""
    out: dict[int, int | None] = {}
    for entry in raw:
        pid = as_int(getattr(entry, "pid", None))
        if pid is None:
            continue
        used = as_int(getattr(entry, "usedGpuMemory", None))
        if used is not None and used >= 2**63:  # NVML_VALUE_NOT_AVAILABLE on older bindings
            used = None
        out[pid] = used
    return tuple(out.items())
