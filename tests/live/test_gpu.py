"""GPU sampling without a GPU: a fake pynvml module (raising the real binding's error classes) drives
every failure class the cockpit must survive, and the background sampler is checked for never
blocking its reader."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pynvml as real
import pytest

from cockpit.live.fake_gpus import FakeGpus
from cockpit.live.gpu import NvmlSource, open_gpu_source, throttle_reason_names
from cockpit.live.gpu_sampler import GpuSampler

GIB = 1024**3
T0 = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)


class Ticker:
    """An injected clock pair: wall time and monotonic seconds, moved by hand."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def monotonic(self) -> float:
        return self.seconds

    def clock(self) -> datetime:
        return T0 + timedelta(seconds=self.seconds)


def gpu_spec(index: int, **overrides: Any) -> dict[str, Any]:
    spec = {
        "name": "NVIDIA H200",
        "uuid": f"GPU-0000-{index}",
        "util": SimpleNamespace(gpu=90 + index, memory=40),
        "memory": SimpleNamespace(used=(60 + index) * GIB, total=141 * GIB, free=(81 - index) * GIB),
        "temp": 61 + index,
        "power": 512_345,  # milliwatts
        "limit": 700_000,
        "sm": 1980,
        "mem_clock": 3201,
        "reasons": 0x4 | 0x1,
        "procs": [SimpleNamespace(pid=4242 + index, usedGpuMemory=50 * GIB), SimpleNamespace(pid=77, usedGpuMemory=None)],
    }
    spec.update(overrides)
    return spec


class FakeNvml:
    """Stands in for the pynvml module. Handles are GPU indexes. A value in a spec that is an
    exception is raised; a callable is called (so a test can make a call hang)."""

    NVMLError = real.NVMLError
    NVMLLibraryMismatchError = real.NVMLLibraryMismatchError

    def __init__(self, gpus: list[dict[str, Any]], init_error: BaseException | None = None):
        self.gpus = gpus
        self.init_error = init_error
        self.calls: Counter[Any] = Counter()

    def _get(self, function: str, handle: int, key: str) -> Any:
        self.calls[(function, handle)] += 1
        value = self.gpus[handle][key]
        if isinstance(value, BaseException):
            raise value
        if callable(value):
            return value()
        return value

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self.calls[("nvmlDeviceGetHandleByIndex", index)] += 1
        handle = self.gpus[index].get("handle", index)
        if isinstance(handle, BaseException):
            raise handle
        return handle

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._get("nvmlDeviceGetName", handle, "name")

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return self._get("nvmlDeviceGetUUID", handle, "uuid").encode()  # older bindings return bytes

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return self._get("nvmlDeviceGetUtilizationRates", handle, "util")

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return self._get("nvmlDeviceGetMemoryInfo", handle, "memory")

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == real.NVML_TEMPERATURE_GPU
        return self._get("nvmlDeviceGetTemperature", handle, "temp")

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._get("nvmlDeviceGetPowerUsage", handle, "power")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return self._get("nvmlDeviceGetEnforcedPowerLimit", handle, "limit")

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        key = {real.NVML_CLOCK_SM: "sm", real.NVML_CLOCK_MEM: "mem_clock"}[clock]
        return self._get(f"nvmlDeviceGetClockInfo/{key}", handle, key)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self._get("nvmlDeviceGetCurrentClocksEventReasons", handle, "reasons")

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: int) -> list[Any]:
        return self._get("nvmlDeviceGetComputeRunningProcesses_v3", handle, "procs")


def make_source(fake: FakeNvml, ticker: Ticker | None = None, **kwargs: Any) -> NvmlSource:
    ticker = ticker or Ticker()
    return NvmlSource(fake, environ={}, clock=ticker.clock, monotonic=ticker.monotonic, **kwargs)


def test_two_gpus_are_sampled_into_typed_values():
    fake = FakeNvml([gpu_spec(0), gpu_spec(1)])
    source = make_source(fake)
    snapshot = source.sample()
    assert snapshot.available and snapshot.reason is None
    assert snapshot.taken_at == T0
    assert [s.index for s in snapshot.samples] == [0, 1]
    first, second = snapshot.samples
    assert first.name == "NVIDIA H200" and first.uuid == "GPU-0000-0"
    assert first.utilization_percent == 90 and second.utilization_percent == 91
    assert first.memory_used_bytes == 60 * GIB and first.memory_total_bytes == 141 * GIB
    assert first.temperature_c == 61
    assert first.power_draw_w == 512.3 and first.power_limit_w == 700.0
    assert first.sm_clock_mhz == 1980 and first.memory_clock_mhz == 3201
    assert first.throttle_reasons == ("GPU idle", "SW power cap")
    assert first.slowed_by == ("SW power cap",)
    assert [(p.pid, p.used_memory_bytes) for p in first.processes] == [(4242, 50 * GIB), (77, None)]
    assert not first.lost and not first.simulated and first.hidden == frozenset()
    assert snapshot.alerts == () and snapshot.warnings == ()
    assert fake.calls["nvmlInit"] == 1
    assert snapshot.age_seconds(T0 + timedelta(seconds=3)) == 3.0


def test_the_sampled_figures_reach_status_json_through_the_engine(seed_campaign):
    """The one JSON form of GPU samples is `status --json`'s (the engine's snapshot), not the source's."""
    from cockpit.live.engine import Engine
    from cockpit.live.snapshot import to_json
    from cockpit.plan.load import load_campaign

    fake = FakeNvml([gpu_spec(0), gpu_spec(1)])
    ticker = Ticker()
    engine = Engine(load_campaign(seed_campaign), clock=ticker.clock, gpus=make_source(fake, ticker), persist=False)
    document = to_json(engine.tick())
    assert document["nvml"] == {"available": True, "reason": None, "simulated": False}
    process = document["gpus"][1]["processes"][0]
    assert (process["pid"], process["used_memory_bytes"], process["run"]) == (4243, 50 * GIB, None)
    assert document["gpus"][0]["utilization_percent"] == 90 and document["gpus"][0]["name"] == "NVIDIA H200"


def test_nvml_is_initialised_once_over_many_samples():
    fake = FakeNvml([gpu_spec(0)])
    source = make_source(fake)
    for _ in range(5):
        source.sample()
    assert fake.calls["nvmlInit"] == 1
    assert fake.calls[("nvmlDeviceGetName", 0)] == 1  # the name never changes: asked once


def test_a_field_not_supported_is_hidden_for_good_and_never_asked_again():
    fake = FakeNvml([gpu_spec(0, power=real.NVMLError_NotSupported()), gpu_spec(1)])
    source = make_source(fake)
    for _ in range(4):
        snapshot = source.sample()
    first, second = snapshot.samples
    assert "power_draw_w" in first.hidden and first.power_draw_w is None
    assert fake.calls[("nvmlDeviceGetPowerUsage", 0)] == 1
    assert fake.calls[("nvmlDeviceGetPowerUsage", 1)] == 4  # the other GPU is unaffected
    assert second.power_draw_w == 512.3 and "power_draw_w" not in second.hidden
    assert first.utilization_percent == 90  # the rest of the GPU still reports
    assert snapshot.warnings == ()  # "not supported" is a fact about the card, not a warning


def test_memory_not_supported_hides_both_memory_fields():
    fake = FakeNvml([gpu_spec(0, memory=real.NVMLError_NotSupported())])
    sample = make_source(fake).sample().samples[0]
    assert {"memory_used_bytes", "memory_total_bytes"} <= sample.hidden
    assert sample.memory_used_bytes is None and sample.memory_total_bytes is None


def test_function_missing_from_an_older_driver_warns_once_and_hides_the_field():
    fake = FakeNvml([gpu_spec(0, reasons=real.NVMLError_FunctionNotFound()), gpu_spec(1, reasons=real.NVMLError_FunctionNotFound())])
    source = make_source(fake)
    for _ in range(3):
        snapshot = source.sample()
    assert len(snapshot.warnings) == 1
    assert "nvmlDeviceGetCurrentClocksEventReasons" in snapshot.warnings[0]
    assert "newer than the driver" in snapshot.warnings[0]
    for sample in snapshot.samples:
        assert sample.throttle_reasons is None and "throttle_reasons" in sample.hidden
    assert fake.calls[("nvmlDeviceGetCurrentClocksEventReasons", 0)] == 1
    assert fake.calls[("nvmlDeviceGetCurrentClocksEventReasons", 1)] == 1


def test_function_missing_falls_back_to_the_older_name_when_the_driver_has_it():
    class OldDriver(FakeNvml):
        def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
            self.calls[("throttle", handle)] += 1
            return 0x40

    fake = OldDriver([gpu_spec(0, reasons=real.NVMLError_FunctionNotFound())])
    source = make_source(fake)
    for _ in range(3):
        snapshot = source.sample()
    assert snapshot.samples[0].throttle_reasons == ("HW thermal slowdown",)
    assert snapshot.warnings == ()
    # The working name is remembered: the missing one is not tried on every sample.
    assert fake.calls[("nvmlDeviceGetCurrentClocksEventReasons", 0)] == 1
    assert fake.calls[("throttle", 0)] == 3


def test_library_mismatch_error_of_unversioned_functions_counts_as_function_missing():
    class Unversioned(FakeNvml):
        nvmlDeviceGetComputeRunningProcesses_v3 = None  # this binding only has the wrapped name

        def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
            self.calls[("unversioned", handle)] += 1
            raise real.NVMLLibraryMismatchError("Unversioned function called")

    fake = Unversioned([gpu_spec(0)])
    source = make_source(fake)
    source.sample()
    snapshot = source.sample()
    assert snapshot.samples[0].processes is None and "processes" in snapshot.samples[0].hidden
    assert len(snapshot.warnings) == 1 and "GPU processes hidden" in snapshot.warnings[0]
    assert fake.calls[("unversioned", 0)] == 1


def test_a_gpu_lost_mid_run_raises_an_alert_naming_it_and_the_other_gpu_goes_on():
    ticker = Ticker()
    fake = FakeNvml([gpu_spec(0), gpu_spec(1)])
    source = make_source(fake, ticker)
    assert source.sample().alerts == ()

    fake.gpus[1]["util"] = real.NVMLError_GpuIsLost()
    ticker.seconds = 1.0
    snapshot = source.sample()
    assert snapshot.available
    zero, one = snapshot.samples
    assert not zero.lost and zero.utilization_percent == 90
    assert one.lost and one.name == "NVIDIA H200" and one.utilization_percent is None
    assert len(snapshot.alerts) == 1
    alert = snapshot.alerts[0]
    assert alert.rule == "gpu-lost" and alert.gpu_index == 1 and alert.gpu_name == "NVIDIA H200"
    assert alert.message.startswith("GPU 1 (NVIDIA H200) is lost: ")
    assert "GPU is lost" in alert.message
    assert not hasattr(alert, "run")  # a GPU's alert names no run: the engine logs it with run None

    # A lost GPU is not hammered every second; the alert stays while it is lost.
    before = sum(n for key, n in fake.calls.items() if isinstance(key, tuple) and key[1] == 1)
    for second in range(2, 6):
        ticker.seconds = float(second)
        snapshot = source.sample()
        assert [a.gpu_index for a in snapshot.alerts] == [1]
        assert snapshot.samples[0].utilization_percent == 90
    after = sum(n for key, n in fake.calls.items() if isinstance(key, tuple) and key[1] == 1)
    assert after == before
    assert fake.calls[("nvmlDeviceGetUtilizationRates", 0)] == 6


def test_an_unknown_error_also_marks_the_gpu_lost_and_a_later_probe_can_recover_it():
    ticker = Ticker()
    fake = FakeNvml([gpu_spec(0), gpu_spec(1, temp=real.NVMLError_Unknown())])
    source = make_source(fake, ticker)
    snapshot = source.sample()
    assert snapshot.samples[1].lost and "Unknown Error" in snapshot.alerts[0].message

    fake.gpus[1]["temp"] = 60
    ticker.seconds = 10.0
    assert source.sample().samples[1].lost  # not probed again yet
    ticker.seconds = NvmlSource.LOST_RETRY_SECONDS + 1
    snapshot = source.sample()
    assert not snapshot.samples[1].lost and snapshot.samples[1].temperature_c == 60
    assert snapshot.alerts == ()
    assert any("answers again" in w for w in snapshot.warnings)


def test_a_gpu_lost_before_the_first_sample_is_named_by_index():
    fake = FakeNvml([gpu_spec(0), gpu_spec(1, handle=real.NVMLError_GpuIsLost())])
    snapshot = make_source(fake).sample()
    assert snapshot.samples[0].utilization_percent == 90
    assert snapshot.samples[1].lost
    assert snapshot.alerts[0].message.startswith("GPU 1 (unknown GPU) is lost")


def test_a_passing_error_leaves_a_gap_in_one_sample_and_warns_once():
    fake = FakeNvml([gpu_spec(0, temp=real.NVMLError_Timeout())])
    source = make_source(fake)
    source.sample()
    snapshot = source.sample()
    sample = snapshot.samples[0]
    assert sample.temperature_c is None and "temperature_c" not in sample.hidden and not sample.lost
    assert fake.calls[("nvmlDeviceGetTemperature", 0)] == 2  # asked again: it may answer next time
    assert len(snapshot.warnings) == 1 and "temperature" in snapshot.warnings[0]


def test_power_limit_is_a_slow_field():
    ticker = Ticker()
    fake = FakeNvml([gpu_spec(0)])
    source = make_source(fake, ticker)
    for second in range(10):
        ticker.seconds = float(second)
        assert source.sample().samples[0].power_limit_w == 700.0
    assert fake.calls[("nvmlDeviceGetEnforcedPowerLimit", 0)] == 1
    fake.gpus[0]["limit"] = 450_000
    ticker.seconds = NvmlSource.SLOW_FIELD_SECONDS + 1
    assert source.sample().samples[0].power_limit_w == 450.0


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (real.NVMLError_LibraryNotFound(), "NVML unavailable: libnvidia-ml.so not found"),
        (real.NVMLError_DriverNotLoaded(), "NVML unavailable: the NVIDIA driver is not loaded"),
        (real.NVMLError_NoPermission(), "NVML unavailable: no permission"),
        (real.NVMLError_LibRmVersionMismatch(), "NVML unavailable: the NVIDIA driver and libnvidia-ml.so versions differ"),
        (real.NVMLError_Uninitialized(), "NVML unavailable: Uninitialized"),
    ],
)
def test_no_library_or_driver_says_why_and_keeps_going(error, words):
    fake = FakeNvml([gpu_spec(0)], init_error=error)
    source = make_source(fake)
    for _ in range(3):
        snapshot = source.sample()
    assert not snapshot.available and snapshot.reason.startswith(words)
    assert snapshot.samples == () and source.available is False
    assert not snapshot.simulated and snapshot.reason  # status --json shows {"available": false, "reason": ...}
    assert fake.calls["nvmlInit"] == 1  # initialised once, not retried every second
    source.close()
    assert fake.calls["nvmlShutdown"] == 0  # never initialised, nothing to shut down


def test_cockpit_nvml_off_behaves_as_if_no_driver():
    fake = FakeNvml([gpu_spec(0)])
    source = NvmlSource(fake, environ={"COCKPIT_NVML": "off"})
    snapshot = source.sample()
    assert (snapshot.available, snapshot.reason) == (False, "NVML unavailable: turned off by COCKPIT_NVML=off")
    assert fake.calls == Counter()  # the library is not even touched
    source.close()


def test_cockpit_nvml_off_from_the_process_environment(monkeypatch):
    monkeypatch.setenv("COCKPIT_NVML", "off")
    snapshot = open_gpu_source().sample()
    assert snapshot.reason == "NVML unavailable: turned off by COCKPIT_NVML=off"


def test_the_real_binding_never_raises_on_this_machine():
    # With or without a GPU here, a sample is an answer, never a traceback.
    source = open_gpu_source(environ={})
    try:
        snapshot = source.sample()
    finally:
        source.close()
    assert isinstance(snapshot.available, bool)
    if not snapshot.available:
        assert snapshot.reason.startswith("NVML unavailable: ")


def test_shutdown_is_called_once():
    fake = FakeNvml([gpu_spec(0)])
    source = make_source(fake)
    source.sample()
    source.close()
    source.close()
    assert fake.calls["nvmlShutdown"] == 1
    after = source.sample()
    assert not after.available and "closed" in after.reason
    assert fake.calls["nvmlInit"] == 1


def test_throttle_reason_names_are_readable():
    assert throttle_reason_names(0) == ()
    assert throttle_reason_names(0x4 | 0x40) == ("SW power cap", "HW thermal slowdown")
    assert throttle_reason_names(0x1000) == ("reason 0x1000",)


# ---------------------------------------------------------------------------------------------
# The background sampler


def wait_until(condition, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


def test_sampler_publishes_snapshots_from_its_own_thread():
    threads: set[str] = set()

    class Recording(FakeGpus):
        def sample(self):
            threads.add(threading.current_thread().name)
            return super().sample()

    source = Recording(2)
    with GpuSampler(source, interval=0.01) as sampler:
        assert wait_until(lambda: sampler.latest().available)
        snapshot = sampler.latest()
        assert len(snapshot.samples) == 2 and snapshot.answering
        assert sampler.age_seconds() is not None and sampler.age_seconds() < 5
    assert threads == {"cockpit-gpu-sampler"}
    assert source.closed == 1


def test_before_the_first_sample_the_snapshot_says_it_is_waiting():
    sampler = GpuSampler(FakeGpus(1), interval=1.0)
    snapshot = sampler.latest()
    assert not snapshot.available and "waiting" in snapshot.reason
    assert sampler.age_seconds() is None


def test_a_hung_nvml_call_makes_the_sampler_say_it_is_not_answering_without_blocking_the_reader():
    release = threading.Event()
    hung = threading.Event()
    state = {"hang": False}

    def utilization():
        if state["hang"]:
            hung.set()
            release.wait(5.0)
        return SimpleNamespace(gpu=50, memory=10)

    fake = FakeNvml([gpu_spec(0, util=utilization), gpu_spec(1)])
    source = NvmlSource(fake, environ={})
    sampler = GpuSampler(source, interval=0.02, stall_factor=3).start()
    try:
        assert wait_until(lambda: sampler.latest().available)
        good = sampler.latest()
        assert good.answering and good.samples[0].utilization_percent == 50

        state["hang"] = True
        assert hung.wait(2.0)
        assert wait_until(lambda: not sampler.latest().answering)
        started = time.perf_counter()
        stalled = sampler.latest()
        assert time.perf_counter() - started < 0.05  # the UI-side read returns at once
        assert not stalled.answering
        assert stalled.alerts[-1].rule == "nvml-not-answering"
        assert "NVML is not answering" in stalled.alerts[-1].message
        assert stalled.samples  # the last figures are kept, and their age shows they are stale

        state["hang"] = False
        release.set()
        assert wait_until(lambda: sampler.latest().answering)
        assert all(a.rule != "nvml-not-answering" for a in sampler.latest().alerts)
    finally:
        release.set()
        sampler.close()
    assert fake.calls["nvmlShutdown"] == 1


def test_closing_while_a_call_is_hung_skips_shutdown_instead_of_freeing_nvml_under_it():
    release = threading.Event()
    hung = threading.Event()

    def utilization():
        hung.set()
        release.wait(5.0)
        return SimpleNamespace(gpu=1, memory=1)

    fake = FakeNvml([gpu_spec(0, util=utilization)])
    source = NvmlSource(fake, environ={})
    source.SHUTDOWN_WAIT_SECONDS = 0.05
    sampler = GpuSampler(source, interval=0.02).start()
    try:
        assert hung.wait(2.0)
        started = time.perf_counter()
        sampler.close(timeout=0.05)
        assert time.perf_counter() - started < 1.0
        assert fake.calls["nvmlShutdown"] == 0
    finally:
        release.set()


def test_a_source_that_raises_does_not_stop_sampling():
    class Broken:
        def __init__(self):
            self.calls = 0

        def sample(self):
            self.calls += 1
            raise RuntimeError("boom")

        def close(self):
            pass

    source = Broken()
    with GpuSampler(source, interval=0.01) as sampler:
        assert wait_until(lambda: source.calls >= 3)
        snapshot = sampler.latest()
        assert not snapshot.available and "boom" in snapshot.reason


def test_sampler_rejects_a_non_positive_interval():
    with pytest.raises(ValueError):
        GpuSampler(FakeGpus(1), interval=0)


# ---------------------------------------------------------------------------------------------
# Simulated GPUs


def test_fake_gpus_are_always_labelled_simulated_and_stay_plausible():
    fake = FakeGpus(8, seed=3, memory_total_bytes=141 * GIB, power_limit_w=700.0)
    utilizations = []
    for _ in range(600):
        snapshot = fake.sample()
        assert snapshot.simulated and snapshot.available
        for sample in snapshot.samples:
            assert sample.simulated
            assert 0 <= sample.utilization_percent <= 100
            assert 0 < sample.memory_used_bytes < sample.memory_total_bytes == 141 * GIB
            assert 25 <= sample.temperature_c <= 95
            assert 0 <= sample.power_draw_w <= sample.power_limit_w
            utilizations.append(sample.utilization_percent)
    assert len(set(utilizations)) > 10  # the numbers move


def test_fake_gpus_are_deterministic_per_seed_and_take_processes_and_losses():
    a, b = FakeGpus(2, seed=7), FakeGpus(2, seed=7)
    for _ in range(5):
        left, right = a.sample(), b.sample()
    assert [s.utilization_percent for s in left.samples] == [s.utilization_percent for s in right.samples]
    a.set_processes(0, [(4242, 3 * GIB)])
    a.lose(1)
    snapshot = a.sample()
    assert [(p.pid, p.used_memory_bytes) for p in snapshot.samples[0].processes] == [(4242, 3 * GIB)]
    assert snapshot.samples[1].lost and snapshot.samples[1].simulated
    assert snapshot.alerts[0].message.startswith("GPU 1 (NVIDIA H100 80GB HBM3) is lost")
    assert "simulated" in snapshot.alerts[0].message
