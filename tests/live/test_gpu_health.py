"""GPU health as evidence, without a GPU: a fake pynvml with every health field (ECC, remapped rows,
retired pages, PCIe replays, violation time, energy, serial, driver version, MIG, the event API)
drives the sampler, the built-in alerts gpu-xid / gpu-ecc / gpu-throttled / gpu-idle, the
`gpu_health` run-log event (once per incident, across cockpits and restarts) and the closing's
hardware incidents and energy."""

from __future__ import annotations

import json
import queue
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pynvml as real
import pytest

from cockpit.close.closing import close_campaign, evaluate
from cockpit.live.engine import Engine
from cockpit.live.fake_gpus import FakeGpus, parse_fault
from cockpit.live.gpu_health import HealthMonitor, health_lines
from cockpit.live.snapshot import to_json
from cockpit.live.xid import APPLICATION, HARDWARE, UNKNOWN, xid_info
from cockpit.plan.load import load_campaign
from cockpit.record import decisions
from cockpit.record.runlog import RunLog
from tests.conftest import run_cli
from tests.live.test_gpu import GIB, FakeNvml, Ticker, gpu_spec

LOT_START = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)


def health_spec(index: int, **overrides: Any) -> dict[str, Any]:
    spec = gpu_spec(
        index,
        serial=f"1650923{index:06d}",
        ecc={0: 3, 1: 0},  # corrected, uncorrected (volatile)
        remap=(2, 0, False, False),  # correctable rows, uncorrectable rows, pending, failure
        retired={0: [], 1: []},
        replay=5,
        violation={0: 1_000_000_000, 1: 0},  # ns in power / thermal slowdown
        energy_mj=10_000_000,
        mig_mode=[0, 0],
        mig=[],
    )
    spec.update(overrides)
    return spec


class HealthNvml(FakeNvml):
    """FakeNvml with the health fields and the event API. `events` is what nvmlEventSetWait_v2
    delivers; a spec value that is an exception is raised, as in FakeNvml."""

    def __init__(self, gpus, *, events_supported: bool = True, **kwargs):
        super().__init__(gpus, **kwargs)
        self.events: queue.Queue = queue.Queue()
        self.events_supported = events_supported
        self.registered: list[tuple[int, int]] = []
        self.freed = 0
        self.waits = 0

    def _value(self, function: str, handle: int, key: str, *select: Any) -> Any:
        value = self._get(function, handle, key)
        for part in select:
            value = value[part]
            if isinstance(value, BaseException):
                raise value
        return value

    def nvmlSystemGetDriverVersion(self) -> str:
        return "560.35.03"

    def nvmlDeviceGetSerial(self, handle: int) -> str:
        return self._value("nvmlDeviceGetSerial", handle, "serial")

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
        assert counter == real.NVML_VOLATILE_ECC
        return self._value("nvmlDeviceGetTotalEccErrors", handle, "ecc", kind)

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple:
        return self._value("nvmlDeviceGetRemappedRows", handle, "remap")

    def nvmlDeviceGetRetiredPages(self, handle: int, cause: int) -> list:
        return self._value("nvmlDeviceGetRetiredPages", handle, "retired", cause)

    def nvmlDeviceGetPcieReplayCounter(self, handle: int) -> int:
        return self._value("nvmlDeviceGetPcieReplayCounter", handle, "replay")

    def nvmlDeviceGetViolationStatus(self, handle: int, policy: int) -> Any:
        return SimpleNamespace(referenceTime=0, violationTime=self._value("nvmlDeviceGetViolationStatus", handle, "violation", policy))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return self._value("nvmlDeviceGetTotalEnergyConsumption", handle, "energy_mj")

    def nvmlDeviceGetMigMode(self, handle: int) -> list:
        return self._value("nvmlDeviceGetMigMode", handle, "mig_mode")

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int) -> int:
        return 7 if self.gpus[handle]["mig"] else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, slot: int) -> Any:
        instances = self.gpus[handle]["mig"]
        if slot >= len(instances):
            raise real.NVMLError_NotFound()
        return ("mig", handle, slot)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        if isinstance(handle, tuple):
            return self.gpus[handle[1]]["mig"][handle[2]]
        return super().nvmlDeviceGetMemoryInfo(handle)

    def nvmlDeviceGetUUID(self, handle: Any) -> bytes:
        if isinstance(handle, tuple):
            return f"MIG-{handle[1]}-{handle[2]}".encode()
        return super().nvmlDeviceGetUUID(handle)

    # -- the event API

    def nvmlEventSetCreate(self) -> object:
        if not self.events_supported:
            raise real.NVMLError_NotSupported()
        return object()

    def nvmlDeviceGetSupportedEventTypes(self, handle: int) -> int:
        return real.nvmlEventTypeXidCriticalError | real.nvmlEventTypeDoubleBitEccError | real.nvmlEventTypeSingleBitEccError

    def nvmlDeviceRegisterEvents(self, handle: int, types: int, event_set: object) -> None:
        self.registered.append((handle, types))

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> Any:
        self.waits += 1
        try:
            return self.events.get(timeout=min(timeout_ms, 50) / 1000.0)
        except queue.Empty:
            raise real.NVMLError_Timeout() from None

    def nvmlEventSetFree(self, event_set: object) -> None:
        self.freed += 1

    def deliver(self, handle: int, kind: int, data: int = 0) -> None:
        self.events.put(SimpleNamespace(device=handle, eventType=kind, eventData=data, gpuInstanceId=0xFFFFFFFF))


def source(fake, ticker):
    from cockpit.live.gpu import NvmlSource

    return NvmlSource(fake, environ={}, clock=ticker.clock, monotonic=ticker.monotonic)


def wait_for(predicate, seconds: float = 5.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return predicate()


def running(campaign_dir, run_id: str, t0: float, step: int = 1) -> None:
    """A run that reported from another host's process: followed by its lines, judged running."""
    path = campaign_dir / "runs" / run_id / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        if step == 1:
            handle.write(json.dumps({"ts": t0, "event": "started", "pid": 4242, "host": "training-box", "pid_ns": "x"}) + "\n")
        handle.write(json.dumps({"ts": t0 + step, "step": step, "loss": 2.0}) + "\n")


def health_events(directory):
    return [e for e in RunLog(directory).read().events if e["type"] == "gpu_health"]


# ---------------------------------------------------------------- the Xid table


@pytest.mark.parametrize("code", [79, 48, 63, 64, 74, 92, 94, 95, 119, 120])
def test_hardware_and_driver_xids_are_the_providers(code):
    info = xid_info(code)
    assert info.cls == HARDWARE and info.hardware and info.meaning
    assert "provider" in info.describe()


@pytest.mark.parametrize("code", [13, 31, 43])
def test_application_xids_are_the_programs_own_fault(code):
    info = xid_info(code)
    assert info.cls == APPLICATION and not info.hardware
    assert "application's own fault" in info.describe()


def test_an_unknown_xid_is_said_to_be_unknown():
    info = xid_info(9999)
    assert info.cls == UNKNOWN and "NVIDIA's Xid catalogue" in info.describe()


# ---------------------------------------------------------------- sampling every field


def test_every_health_field_is_sampled_with_serial_and_driver():
    fake = HealthNvml([health_spec(0)])
    ticker = Ticker()
    src = source(fake, ticker)
    try:
        snapshot = src.sample()
        sample = snapshot.samples[0]
        assert sample.serial == "1650923000000" and snapshot.driver_version == "560.35.03"
        c = sample.counters
        assert (c.ecc_corrected, c.ecc_uncorrected) == (3, 0)
        assert (c.remapped_correctable, c.remapped_uncorrectable, c.remap_pending, c.remap_failed) == (2, 0, False, False)
        assert c.retired_pages_single is None  # a GPU with remapped rows retires no pages
        assert c.pcie_replays == 5 and c.power_slowdown_s == 1.0 and c.thermal_slowdown_s == 0.0
        assert c.energy_j == 10_000.0
        assert sample.mig_instances is None and sample.utilization_percent == 90
        assert snapshot.events_watched is True and snapshot.events_note is None
        assert fake.registered == [(0, real.nvmlEventTypeXidCriticalError | real.nvmlEventTypeDoubleBitEccError
                                    | real.nvmlEventTypeSingleBitEccError)]
    finally:
        src.close()
    assert fake.freed == 1 and fake.calls["nvmlShutdown"] == 1  # the event set freed before the shutdown


def test_an_older_gpu_reports_retired_pages_instead_of_remapped_rows():
    fake = HealthNvml([health_spec(0, remap=real.NVMLError_NotSupported(), retired={0: [0x1000, 0x2000], 1: [0x3000]})])
    src = source(fake, Ticker())
    try:
        c = src.sample().samples[0].counters
        assert c.remapped_correctable is None and c.remap_failed is None
        assert (c.retired_pages_single, c.retired_pages_double) == (2, 1)
    finally:
        src.close()


def test_every_unsupported_health_field_is_hidden_never_a_crash_and_never_asked_again():
    unsupported = real.NVMLError_NotSupported()
    spec = health_spec(0, serial=unsupported, ecc={0: unsupported, 1: unsupported}, remap=unsupported,
                       retired={0: unsupported, 1: unsupported}, replay=unsupported, violation={0: unsupported, 1: unsupported},
                       energy_mj=unsupported, mig_mode=unsupported)
    fake = HealthNvml([spec], events_supported=False)
    ticker = Ticker()
    src = source(fake, ticker)
    try:
        first = src.sample()
        sample = first.samples[0]
        assert sample.serial is None and sample.counters is None and sample.mig_instances is None
        assert sample.utilization_percent == 90 and first.warnings == ()  # nothing else degraded, nothing to warn
        assert first.events_watched is False and "not delivered here" in first.events_note and "polled instead" in first.events_note
        asked = sum(n for key, n in fake.calls.items() if isinstance(key, tuple) and key[0] == "nvmlDeviceGetPcieReplayCounter")
        for second in range(1, 30, 6):
            ticker.seconds = float(second)
            src.sample()
        assert sum(n for key, n in fake.calls.items() if isinstance(key, tuple) and key[0] == "nvmlDeviceGetPcieReplayCounter") == asked
    finally:
        src.close()


def test_an_old_binding_without_the_health_functions_degrades_silently():
    fake = FakeNvml([gpu_spec(0)])  # none of the health functions, no event API
    src = source(fake, Ticker())
    try:
        snapshot = src.sample()
        assert snapshot.samples[0].counters is None and snapshot.warnings == ()
        assert snapshot.events_watched is False and "no event API" in snapshot.events_note
    finally:
        src.close()


def test_a_gpu_lost_while_its_counters_are_read_is_a_lost_gpu():
    fake = HealthNvml([health_spec(0, replay=real.NVMLError_GpuIsLost())])
    src = source(fake, Ticker())
    try:
        snapshot = src.sample()
        assert snapshot.samples[0].lost and snapshot.alerts[0].rule == "gpu-lost"
    finally:
        src.close()


def test_a_mig_gpu_shows_each_instances_memory_and_no_utilization():
    instances = [SimpleNamespace(used=5 * GIB, total=20 * GIB), SimpleNamespace(used=1 * GIB, total=40 * GIB)]
    fake = HealthNvml([health_spec(0, mig_mode=[1, 1], mig=instances)])
    src = source(fake, Ticker())
    try:
        sample = src.sample().samples[0]
        assert sample.mig and sample.utilization_percent is None  # never 0 %
        assert fake.calls[("nvmlDeviceGetUtilizationRates", 0)] == 0
        assert [(m.index, m.uuid, m.memory_used_bytes, m.memory_total_bytes) for m in sample.mig_instances] == [
            (0, "MIG-0-0", 5 * GIB, 20 * GIB), (1, "MIG-0-1", 1 * GIB, 40 * GIB)]
    finally:
        src.close()


def test_counters_are_read_every_few_seconds_not_every_sweep():
    fake = HealthNvml([health_spec(0)])
    ticker = Ticker()
    src = source(fake, ticker)
    try:
        for step in range(10):
            ticker.seconds = step * 1.0
            src.sample()
        assert fake.calls[("nvmlDeviceGetPcieReplayCounter", 0)] == 2  # at 0 s and 5 s
    finally:
        src.close()


def test_xid_and_ecc_events_arrive_through_the_waiting_thread_which_stops_at_close():
    fake = HealthNvml([health_spec(0), health_spec(1)])
    src = source(fake, Ticker())
    src.sample()
    fake.deliver(1, real.nvmlEventTypeXidCriticalError, 79)
    fake.deliver(0, real.nvmlEventTypeDoubleBitEccError)
    events = wait_for(lambda: len(src.sample().events) == 2 and src.sample().events)
    assert [(e.number, e.index, e.uuid, e.kind, e.xid) for e in events] == [(1, 1, "GPU-0000-1", "xid", 79), (2, 0, "GPU-0000-0", "ecc", None)]
    assert events[1].detail == "double-bit"
    thread = src._events._thread
    src.close()
    assert not thread.is_alive() and fake.freed == 1


# ---------------------------------------------------------------- the alerts and the run log, through the engine


def engine_on(campaign_dir, gpus, clock, **kwargs):
    return Engine(load_campaign(campaign_dir), clock=clock, gpus=gpus, signal_runs=False, **kwargs)


class Clock:
    def __init__(self, moment):
        self.moment = moment

    def __call__(self):
        return self.moment


def test_an_xid_79_raises_gpu_xid_naming_gpu_0_and_is_recorded_once_with_its_evidence(seed_campaign):
    clock = Clock(LOT_START + timedelta(hours=1))
    running(seed_campaign, "ctrl-r1", clock.moment.timestamp() - 60)
    fake = FakeGpus(1, clock=clock)
    engine = engine_on(seed_campaign, fake, clock)
    other = engine_on(seed_campaign, fake, clock)  # a second cockpit on the same campaign
    engine.tick()
    fake.inject("xid79", 0)
    clock.moment += timedelta(seconds=1)
    snapshot = engine.tick()
    other.tick()
    engine.tick()
    xid = [a for a in snapshot.alerts if a.rule == "gpu-xid"]
    assert len(xid) == 1 and xid[0].message.startswith("GPU 0 (") and "Xid 79" in xid[0].message
    assert "fallen off the bus" in xid[0].message and "ctrl-r1" in xid[0].message and xid[0].severity == "critical"
    [event] = health_events(seed_campaign)
    assert (event["gpu"], event["uuid"], event["serial"], event["kind"], event["xid"]) == (0, "GPU-simulated-0000", "SIM0000000000", "xid", 79)
    assert event["driver_version"] == "simulated" and event["name"] and event["runs"] == ["ctrl-r1"]
    assert event["xid_class"] == "hardware" and event["simulated"] is True
    assert event["counters_before"]["ecc_uncorrected"] == 0 and "counters_after" in event and event["ts"]
    alert = next(e for e in RunLog(seed_campaign).read().events if e["type"] == "alert" and e["rule"] == "gpu-xid")
    assert alert["health_seq"] == event["seq"] and alert["gpu"] == 0 and alert["run"] is None
    status = to_json(snapshot)
    assert any(a["rule"] == "gpu-xid" for a in status["alerts"])
    engine.close()
    # a restart does not record it again
    again = engine_on(seed_campaign, FakeGpus(1, clock=clock), clock)
    again.tick()
    assert len(health_events(seed_campaign)) == 1


def test_an_acknowledged_xid_alert_leaves_the_next_incident_its_own_record(seed_campaign):
    clock = Clock(LOT_START + timedelta(hours=1))
    fake = FakeGpus(1, clock=clock)
    engine = engine_on(seed_campaign, fake, clock)
    fake.inject("xid48", 0)
    engine.tick()
    decisions.acknowledge(load_campaign(seed_campaign), RunLog(seed_campaign), "gpu-xid", None, source="cli")
    clock.moment += timedelta(minutes=5)
    fake.inject("xid48", 0)
    snapshot = engine.tick()
    assert len([e for e in health_events(seed_campaign) if e["kind"] == "xid"]) == 2
    assert [a.rule for a in snapshot.alerts].count("gpu-xid") == 1


def test_an_application_xid_is_a_notice_not_a_hardware_alert(seed_campaign):
    clock = Clock(LOT_START + timedelta(hours=1))
    fake = FakeGpus(1, clock=clock)
    engine = engine_on(seed_campaign, fake, clock)
    fake._event(0, "xid", 13, clock.moment)
    snapshot = engine.tick()
    assert not any(a.rule == "gpu-xid" for a in snapshot.alerts) and health_events(seed_campaign) == []
    assert any("Xid 13" in n and "application's own fault" in n for n in snapshot.notices)


def test_uncorrected_ecc_errors_raise_gpu_ecc_once(seed_campaign):
    clock = Clock(LOT_START + timedelta(hours=1))
    fake = FakeGpus(1, clock=clock)
    engine = engine_on(seed_campaign, fake, clock)
    assert not any(a.rule == "gpu-ecc" for a in engine.tick().alerts)  # the baseline: nothing since the start
    fake.inject("ecc", 0)
    for _ in range(3):
        clock.moment += timedelta(seconds=1)
        snapshot = engine.tick()
    [alert] = [a for a in snapshot.alerts if a.rule == "gpu-ecc"]
    assert "2 uncorrected ECC errors since the lot's first sample" in alert.message and "row remap failed" in alert.message
    [event] = health_events(seed_campaign)
    assert event["kind"] == "ecc" and event["counters_after"]["ecc_uncorrected"] == 2 and event["counters_after"]["remap_failed"] is True
    gpu = to_json(snapshot)["gpus"][0]
    assert gpu["health"]["since_start"]["ecc_uncorrected"] == 2 and gpu["serial"] == "SIM0000000000"
    assert any("uncorrected ECC errors +2" in line for line in health_lines(snapshot.gpus[0]))


def test_ecc_from_the_fake_nvml_counters_through_the_real_source(seed_campaign):
    spec = health_spec(0)
    fake = HealthNvml([spec])
    ticker = Ticker()
    ticker.seconds = 0.0
    clock = lambda: LOT_START + timedelta(hours=1, seconds=ticker.seconds)  # noqa: E731
    src_ = source(fake, ticker)
    src_._clock = clock
    engine = engine_on(seed_campaign, src_, clock)
    try:
        engine.tick()
        spec["ecc"] = {0: 3, 1: 1}
        spec["remap"] = (2, 1, True, False)
        ticker.seconds = 6.0
        snapshot = engine.tick()
        assert any(a.rule == "gpu-ecc" and "1 uncorrected ECC error since" in a.message for a in snapshot.alerts)
        [event] = health_events(seed_campaign)
        assert event["serial"] == "1650923000000" and event["driver_version"] == "560.35.03" and event["uuid"] == "GPU-0000-0"
        assert event["counters_before"]["ecc_uncorrected"] == 0 and event["counters_after"]["ecc_uncorrected"] == 1
    finally:
        engine.close()


def test_an_xid_from_the_fake_nvml_event_api_raises_gpu_xid(seed_campaign):
    fake = HealthNvml([health_spec(0)])
    ticker = Ticker()
    clock = lambda: LOT_START + timedelta(hours=1, seconds=ticker.seconds)  # noqa: E731
    src_ = source(fake, ticker)
    src_._clock = clock
    engine = engine_on(seed_campaign, src_, clock)
    try:
        engine.tick()
        fake.deliver(0, real.nvmlEventTypeXidCriticalError, 119)
        wait_for(lambda: src_.sample().events)
        snapshot = engine.tick()
        [alert] = [a for a in snapshot.alerts if a.rule == "gpu-xid"]
        assert "Xid 119" in alert.message and "GSP" in alert.message
        assert health_events(seed_campaign)[0]["xid"] == 119
    finally:
        engine.close()


def write_health(campaign_dir, text: str) -> None:
    path = campaign_dir / "campaign.toml"
    path.write_text(path.read_text() + "\n[health]\n" + text)


def test_throttled_over_a_fifth_of_the_window_while_a_run_uses_the_gpu(seed_campaign):
    write_health(seed_campaign, "throttle_minutes = 2\n")
    clock = Clock(LOT_START + timedelta(hours=1))
    t0 = clock.moment.timestamp()
    fake = FakeGpus(1, clock=clock)
    engine = engine_on(seed_campaign, fake, clock)
    fake.inject("throttle", 0)
    rules = []
    for second in range(0, 150, 5):
        clock.moment = LOT_START + timedelta(hours=1, seconds=second)
        running(seed_campaign, "ctrl-r1", t0 - 10, step=second + 1)
        rules = [a.rule for a in engine.tick().alerts]
        if second < 115:
            assert "gpu-throttled" not in rules  # not before a whole window is seen
    assert "gpu-throttled" in rules
    [event] = health_events(seed_campaign)
    assert event["kind"] == "throttle" and event["runs"] == ["ctrl-r1"] and event["slowdown_percent"] > 90


def test_no_throttle_alert_without_a_run_on_the_gpu(seed_campaign):
    write_health(seed_campaign, "throttle_minutes = 1\n")
    clock = Clock(LOT_START + timedelta(hours=1))
    fake = FakeGpus(1, clock=clock)
    engine = engine_on(seed_campaign, fake, clock)
    fake.inject("throttle", 0)
    for second in range(0, 90, 5):
        clock.moment = LOT_START + timedelta(hours=1, seconds=second)
        assert "gpu-throttled" not in [a.rule for a in engine.tick().alerts]


def test_throttle_from_the_clock_reasons_where_no_violation_counter_exists():
    """The default thresholds (20 % of 10 minutes), judged from the sampled reasons alone."""
    from cockpit.live.gpu import GpuSample, GpuSnapshot

    monitor = HealthMonitor(None)
    start = LOT_START
    due = []
    for second in range(0, 700, 10):
        slowed = ("SW thermal slowdown",) if second % 40 == 0 else ()  # a quarter of the samples
        sample = GpuSample(index=0, name="H200", uuid="GPU-x", taken_at=start, throttle_reasons=slowed, utilization_percent=90)
        due = monitor.observe(start + timedelta(seconds=second), GpuSnapshot(available=True, samples=(sample,)), {"r1": [0]})
        if second < 590:
            assert not due
    assert [key for key, _ in due] == ["gpu-throttled:0"] and "25 %" in due[0][1]["message"]


def test_idle_gpu_while_a_run_runs_raises_gpu_idle_after_ten_minutes(seed_campaign):
    clock = Clock(LOT_START + timedelta(hours=1))
    t0 = clock.moment.timestamp()
    fake = FakeGpus(1, clock=clock)
    engine = engine_on(seed_campaign, fake, clock)
    fake.inject("idle", 0)
    seen = []
    for second in range(0, 660, 30):
        clock.moment = LOT_START + timedelta(hours=1, seconds=second)
        running(seed_campaign, "ctrl-r1", t0 - 10, step=second + 1)
        seen.append((second, "gpu-idle" in [a.rule for a in engine.tick().alerts]))
    assert all(not flag for second, flag in seen if second < 600) and seen[-1][1]
    alert = next(e for e in RunLog(seed_campaign).read().events if e["type"] == "alert" and e["rule"] == "gpu-idle")
    assert "under 5 %" in alert["message"] and "ctrl-r1" in alert["message"] and "starved data loader" in alert["message"]


def test_a_mig_gpu_never_raises_gpu_idle_and_says_utilization_is_not_reported(seed_campaign):
    write_health(seed_campaign, "idle_minutes = 1\n")
    clock = Clock(LOT_START + timedelta(hours=1))
    t0 = clock.moment.timestamp()
    fake = FakeGpus(1, clock=clock, mig=True)
    engine = engine_on(seed_campaign, fake, clock)
    fake.inject("idle", 0)
    for second in range(0, 120, 10):
        clock.moment = LOT_START + timedelta(hours=1, seconds=second)
        running(seed_campaign, "ctrl-r1", t0 - 10, step=second + 1)
        snapshot = engine.tick()
        assert "gpu-idle" not in [a.rule for a in snapshot.alerts]
    gpu = to_json(snapshot)["gpus"][0]
    assert gpu["mig"] is True and gpu["utilization_percent"] is None and len(gpu["mig_instances"]) == 2
    assert health_lines(snapshot.gpus[0])[0].startswith("MIG on, utilization not reported; 2 instances")


def test_status_text_says_mig_utilization_is_not_reported(seed_campaign):
    from cockpit.commands.live import render_text

    clock = Clock(LOT_START + timedelta(hours=1))
    text = render_text(engine_on(seed_campaign, FakeGpus(1, clock=clock, mig=True), clock).tick())
    assert "util not reported (MIG)" in text and "MIG on, utilization not reported; 2 instances" in text
    assert "0 %" not in text.split("GPU 0", 1)[1].split("\n")[0]


def test_gpu_processes_whose_pids_are_invisible_are_labelled_container(seed_campaign):
    clock = Clock(LOT_START + timedelta(hours=1))
    fake = FakeGpus(1, clock=clock)
    fake.set_processes(0, [(3_999_999, 10 * GIB)])  # no such pid here: the run lives in a container
    engine = engine_on(seed_campaign, fake, clock)
    gpu = to_json(engine.tick())["gpus"][0]
    assert gpu["processes"] == [{"pid": 3_999_999, "used_memory_bytes": 10 * GIB, "run": None, "container": True}]


def test_thresholds_are_checked_in_campaign_toml(seed_campaign, cli):
    write_health(seed_campaign, "idle_percent = 120\n")
    result = cli("check", str(seed_campaign))
    assert result.returncode == 1 and "[health] → idle_percent: must be at most 100 (got 120)" in result.stderr


# ---------------------------------------------------------------- energy and the closing


def test_energy_is_attributed_to_the_runs_on_the_gpu_and_the_incident_is_in_the_closing(seed_campaign):
    clock = Clock(LOT_START + timedelta(hours=1))
    t0 = clock.moment.timestamp()
    fake = FakeGpus(1, clock=clock)
    engine = engine_on(seed_campaign, fake, clock)
    for second in range(0, 60, 5):
        clock.moment = LOT_START + timedelta(hours=1, seconds=second)
        running(seed_campaign, "ctrl-r1", t0 - 10, step=second + 1)
        engine.tick()
    fake.inject("xid79", 0)
    clock.moment += timedelta(seconds=1)
    engine.tick()
    running(seed_campaign, "ctrl-r1", t0 - 10, step=1800)  # the run's last line, half an hour after the start
    engine.close()
    closing = evaluate(seed_campaign, now=clock.moment + timedelta(hours=1))
    [incident] = closing.summary["hardware_incidents"]
    assert incident["kind"] == "xid" and incident["xid"] == 79 and incident["serial"] == "SIM0000000000"
    assert incident["uuid"] == "GPU-simulated-0000" and incident["alert_seq"] and incident["seq"]
    [run] = incident["runs"]
    end = datetime.fromtimestamp(t0 - 10 + 1800, tz=timezone.utc)
    at = datetime.fromisoformat(incident["ts"].replace("Z", "+00:00"))
    assert run["run"] == "ctrl-r1" and run["ended_by"] == "end"
    assert run["hours_lost"] == pytest.approx((end - at).total_seconds() / 3600, abs=0.001)
    assert incident["run_hours_lost"] == run["hours_lost"]
    power = closing.summary["energy"]
    assert power["measured"] and power["simulated"] and power["total_kwh"] > 0
    assert power["per_run_kwh"]["ctrl-r1"] > 0 and power["per_accepted_deliverable_kwh"] is None  # nothing accepted
    report = closing.report_markdown
    assert "## Hardware incidents" in report and "serial SIM0000000000" in report and f"gpu_health seq {incident['seq']}" in report
    assert "## Energy" in report and "no electricity price is assumed" in report


def test_a_restart_ends_the_hours_lost(seed_campaign):
    clock = Clock(LOT_START + timedelta(hours=1))
    t0 = clock.moment.timestamp()
    fake = FakeGpus(1, clock=clock)
    engine = engine_on(seed_campaign, fake, clock)
    running(seed_campaign, "ctrl-r1", t0 - 10)
    engine.tick()
    fake.inject("xid48", 0)
    clock.moment += timedelta(seconds=1)
    engine.tick()
    path = seed_campaign / "runs" / "ctrl-r1" / "metrics.jsonl"
    with open(path, "a") as handle:  # restarted 0.5 h after the incident, then ran on
        handle.write(json.dumps({"ts": t0 + 1800, "event": "started", "pid": 4343, "host": "training-box", "pid_ns": "x"}) + "\n")
        handle.write(json.dumps({"ts": t0 + 7200, "step": 9000, "loss": 1.0}) + "\n")
    clock.moment = LOT_START + timedelta(hours=3)
    engine.tick()
    engine.close()
    incident = next(i for i in evaluate(seed_campaign, now=clock.moment).summary["hardware_incidents"] if i["kind"] == "xid")
    [run] = incident["runs"]
    assert run["ended_by"] == "restart" and run["hours_lost"] == pytest.approx(0.5, abs=0.01)


def test_no_incident_no_energy_is_said_plainly(seed_campaign):
    closing = close_campaign(seed_campaign, now=LOT_START + timedelta(hours=2))
    assert closing.summary["hardware_incidents"] == [] and closing.summary["energy"]["measured"] is False
    assert "No hardware incident was recorded." in closing.report_markdown and "Not measured" in closing.report_markdown


# ---------------------------------------------------------------- the demo, as a user types it


def test_gpu_fault_kinds_parse_and_a_bad_one_is_a_usage_error(tmp_path):
    assert parse_fault("xid79@20").kind == "xid79" and parse_fault("idle@1.5:1").gpu == 1
    with pytest.raises(ValueError, match="the kinds are xid79, xid48, ecc, throttle, idle"):
        parse_fault("xid80@3")
    result = run_cli("demo", str(tmp_path / "demo"), "--no-tui", "--gpu-fault", "xid79")
    assert result.returncode == 2 and "KIND@SECONDS" in result.stderr and not (tmp_path / "demo").exists()


def test_demo_gpu_fault_xid79_raises_gpu_xid_logs_one_gpu_health_and_close_lists_it(tmp_path):
    target = tmp_path / "demo"
    started = time.monotonic()
    result = run_cli("demo", str(target), "--no-tui", "--gpu-fault", "xid79@2", timeout=120)
    pids = [int(p) for p in result.stdout.split("(pids ")[1].split(")")[0].split(", ")]
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert time.monotonic() - started < 60
        assert "ALERT [gpu-xid] GPU 0 (" in result.stdout and "Xid 79" in result.stdout
        events = RunLog(target).read().events
        health = [e for e in events if e["type"] == "gpu_health"]
        assert len(health) == 1 and health[0]["gpu"] == 0 and health[0]["xid"] == 79 and health[0]["simulated"] is True
        status = json.loads(run_cli("status", str(target), "--json").stdout)
        assert any(a["rule"] == "gpu-xid" for a in status["alerts"])
        text = run_cli("status", str(target)).stdout
        assert "gpu-xid" in text
        closed = run_cli("close", str(target), "--json", timeout=120)
        body = json.loads(closed.stdout)
        [incident] = body["hardware_incidents"]
        assert incident["xid"] == 79 and incident["gpu"] == 0 and incident["seq"] == health[0]["seq"]
        assert {r["run"] for r in incident["runs"]} == {"ctrl-r1", "v-hot-lr", "v-short-context"}
        assert isinstance(incident["run_hours_lost"], float)
        shown = run_cli("close", str(target), timeout=120).stdout
        assert "hardware incidents: 1" in shown and "Xid 79" in shown and "run hours lost" in shown
    finally:
        import os
        import signal

        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def test_the_prepared_real_gpu_check_runs_against_the_fake_nvml():
    """bench/gpu_check.py is meant for a GPU box; this keeps it working until one is lent."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fake = HealthNvml([health_spec(0), health_spec(1, replay=real.NVMLError_NotSupported())])
    fake.deliver(1, real.nvmlEventTypeXidCriticalError, 79)
    result = module.check(0.3, nvml=fake)
    assert result["available"] and result["driver_version"] == "560.35.03" and result["events_watched"]
    assert result["events_seen"] == [{"gpu": 1, "kind": "xid", "xid": 79, "detail": None}]
    zero, one = result["gpus"]
    assert "pcie_replays" in zero["counters_supported"] and "pcie_replays" in one["counters_not_reported"]
    assert zero["serial"] == "1650923000000" and "utilization_percent" in zero["supported"]
    assert result["sweep_ms_median"] >= 0 and fake.freed == 1
