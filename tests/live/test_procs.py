"""Host processes: runs found on the GPUs, the container case, host figures, and a SIGTERM that can
reach nothing but the run's own process (psutil fakes, then one real process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter, namedtuple
from datetime import datetime, timedelta, timezone
from typing import Any

import psutil
import pytest

from cockpit.live.gpu import GpuProcess, GpuSample
from cockpit.live.host import HostProcesses, RUN_ID_VARIABLE, is_alive, terminate_run

ME = 1000
T0 = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)
START = T0.timestamp()
GIB = 1024**3

Uids = namedtuple("Uids", "real effective saved")
Memory = namedtuple("Memory", "total available percent used")
Disk = namedtuple("Disk", "total used free percent")


class FakeProcess:
    def __init__(self, fake: FakePsutil, pid: int, spec: dict[str, Any]):
        self._fake = fake
        self.pid = pid
        self._spec = spec

    def _value(self, key: str, default: Any = None) -> Any:
        self._fake.calls[(key, self.pid)] += 1
        value = self._spec.get(key, default)
        if isinstance(value, BaseException):
            raise value
        return value

    def status(self) -> str:
        return self._value("status", "running")

    def uids(self) -> Uids:
        uid = self._value("uid", ME)
        return Uids(uid, uid, uid)

    def create_time(self) -> float:
        return self._value("created", START - 5)

    def environ(self) -> dict[str, str]:
        return self._value("environ", {})

    def parents(self) -> list[FakeProcess]:
        return [FakeProcess(self._fake, p, {}) for p in self._value("parents", [])]

    def name(self) -> str:
        return self._value("name", "python")

    def username(self) -> str:
        return self._value("user", "me")

    def send_signal(self, sig: int) -> None:
        self._fake.signals.append((self.pid, sig))
        error = self._spec.get("on_signal")
        if error is not None:
            raise error


class FakePsutil:
    """Stands in for the psutil module; only pids in `processes` exist."""

    NoSuchProcess = psutil.NoSuchProcess
    AccessDenied = psutil.AccessDenied
    ZombieProcess = psutil.ZombieProcess
    STATUS_ZOMBIE = psutil.STATUS_ZOMBIE

    def __init__(self, processes: dict[int, dict[str, Any]] | None = None):
        self.processes = processes or {}
        self.calls: Counter[Any] = Counter()
        self.signals: list[tuple[int, int]] = []
        self.opened: list[int] = []
        self.cpu = [0.0, 37.5, 41.0]
        self.disk_paths: list[str] = []
        self.disk_error: OSError | None = None

    def Process(self, pid: int) -> FakeProcess:
        self.opened.append(pid)
        if pid not in self.processes:
            raise psutil.NoSuchProcess(pid)
        return FakeProcess(self, pid, self.processes[pid])

    def pid_exists(self, pid: int) -> bool:
        return pid in self.processes

    def cpu_percent(self, interval: Any = None) -> float:
        assert interval is None  # never block to measure
        return self.cpu.pop(0)

    def cpu_count(self) -> int:
        return 16

    def getloadavg(self) -> tuple[float, float, float]:
        return (3.5, 2.0, 1.0)

    def virtual_memory(self) -> Memory:
        return Memory(total=128 * GIB, available=96 * GIB, percent=25.0, used=30 * GIB)

    def disk_usage(self, path: str) -> Disk:
        self.disk_paths.append(path)
        if self.disk_error is not None:
            raise self.disk_error
        return Disk(total=1000 * GIB, used=400 * GIB, free=600 * GIB, percent=40.0)


@pytest.fixture
def no_real_signals(monkeypatch):
    """With fakes, nothing may reach the real kill, killpg or pidfd calls."""

    def forbidden(*args: Any) -> None:
        raise AssertionError(f"a real signal call was attempted: {args}")

    monkeypatch.setattr(os, "kill", forbidden)
    monkeypatch.setattr(os, "killpg", forbidden)
    monkeypatch.setattr(signal, "pidfd_send_signal", forbidden, raising=False)


def gpu(index: int, *processes: tuple[int, int | None]) -> GpuSample:
    return GpuSample(index=index, name="NVIDIA H200", uuid=None, taken_at=T0,
                     processes=tuple(GpuProcess(pid, used) for pid, used in processes))


def host(fake: FakePsutil) -> HostProcesses:
    return HostProcesses(fake, uid=ME, clock=lambda: T0, use_pidfd=False)


# ---------------------------------------------------------------------------------------------
# terminate_run with fakes


def test_a_live_run_process_of_this_user_started_with_the_run_is_signalled(no_real_signals):
    fake = FakePsutil({4242: {"created": START - 8}, 5000: {"created": START - 8}})
    result = host(fake).terminate_run(4242, T0)
    assert result.sent and result.outcome == "sent" and result.signal == "SIGTERM"
    assert "pid 4242" in result.message
    assert fake.signals == [(4242, signal.SIGTERM)]


def test_a_vanished_pid_is_reported_and_nothing_is_signalled(no_real_signals):
    fake = FakePsutil({5000: {}})
    result = host(fake).terminate_run(4242, T0)
    assert not result.sent and result.outcome == "ended"
    assert result.message == "process 4242 has ended"
    assert fake.signals == []


def test_a_zombie_counts_as_ended(no_real_signals):
    fake = FakePsutil({4242: {"status": psutil.STATUS_ZOMBIE}})
    result = host(fake).terminate_run(4242, T0)
    assert not result.sent and result.outcome == "ended" and fake.signals == []


def test_a_pid_of_another_user_is_never_signalled(no_real_signals):
    fake = FakePsutil({4242: {"uid": 1001, "created": START - 1}})
    result = host(fake).terminate_run(4242, T0)
    assert not result.sent and result.outcome == "foreign-user"
    assert result.message.startswith("pid 4242 belongs to another user")
    assert fake.signals == []


def test_a_reused_pid_is_never_signalled(no_real_signals):
    # The run reported pid 4242 at 08:00; the process holding 4242 now began at 09:30.
    fake = FakePsutil({4242: {"created": START + 5400}})
    result = host(fake).terminate_run(4242, T0)
    assert not result.sent and result.outcome == "reused"
    assert result.message == (
        "pid 4242 was started at 2026-11-30T09:30:00.000Z, not at the run's start (2026-11-30T08:00:00.000Z): pid reused"
    )
    assert fake.signals == []


def test_a_process_much_older_than_the_run_is_not_the_run(no_real_signals):
    # e.g. the run reported a pid from another pid namespace, now naming a daemon started at boot.
    fake = FakePsutil({4242: {"created": START - 86400}})
    result = host(fake).terminate_run(4242, T0)
    assert not result.sent and result.outcome == "not-the-run" and "before the run reported" in result.message
    assert fake.signals == []


def test_the_start_tolerance_is_a_few_seconds_after_the_event_and_the_startup_before_it(no_real_signals):
    fake = FakePsutil({4242: {"created": START + 1.5}, 4243: {"created": START + 2.5}, 4244: {"created": START - 600}})
    procs = host(fake)
    assert procs.terminate_run(4242, T0).sent
    assert procs.terminate_run(4243, T0).outcome == "reused"
    assert procs.terminate_run(4244, T0).sent  # ten minutes of imports before the `started` event
    assert procs.terminate_run(4244, T0, startup_allowance_s=0).outcome == "not-the-run"
    assert [pid for pid, _ in fake.signals] == [4242, 4244]


def test_a_process_that_vanishes_between_the_check_and_the_signal_is_reported_not_retried(no_real_signals):
    fake = FakePsutil({4242: {"on_signal": psutil.NoSuchProcess(4242)}, 4243: {}})
    result = host(fake).terminate_run(4242, T0)
    assert not result.sent and result.outcome == "vanished"
    assert "no signal was sent to any other process" in result.message
    assert fake.signals == [(4242, signal.SIGTERM)]  # the one attempt, at that pid only
    assert set(fake.opened) == {4242}


def test_a_denied_signal_is_reported(no_real_signals):
    fake = FakePsutil({4242: {"on_signal": psutil.AccessDenied(4242)}})
    result = host(fake).terminate_run(4242, T0)
    assert not result.sent and result.outcome == "denied"


@pytest.mark.parametrize("pid", [0, 1, -1, -4242, True, "4242", None])
def test_init_process_groups_and_non_pids_are_refused_without_looking(pid, no_real_signals):
    fake = FakePsutil({1: {}, 4242: {}})
    result = host(fake).terminate_run(pid, T0)
    assert not result.sent and result.outcome == "refused"
    assert fake.opened == [] and fake.signals == []


def test_the_cockpit_never_signals_itself(no_real_signals):
    fake = FakePsutil({os.getpid(): {}})
    result = host(fake).terminate_run(os.getpid(), T0)
    assert result.outcome == "refused" and "the cockpit itself" in result.message


def test_without_the_runs_start_time_no_signal_is_sent(no_real_signals):
    fake = FakePsutil({4242: {}})
    result = host(fake).terminate_run(4242, None)
    assert not result.sent and result.outcome == "unknown-start" and fake.signals == []


def test_is_alive_checks_existence_and_the_start_time():
    fake = FakePsutil({4242: {"created": START - 3}, 4243: {"created": START + 3600}, 4244: {"status": psutil.STATUS_ZOMBIE}})
    procs = host(fake)
    assert procs.is_alive(4242, T0)
    assert procs.is_alive(4242, START)  # epoch seconds work too
    assert not procs.is_alive(4243, T0)  # reused
    assert procs.is_alive(4243)  # without a start time: it exists
    assert not procs.is_alive(4244)
    assert not procs.is_alive(9999, T0)
    assert not procs.is_alive(1)


# ---------------------------------------------------------------------------------------------
# GPU processes to runs


def test_gpu_processes_map_to_runs_by_reported_pid_child_and_environment():
    fake = FakePsutil(
        {
            100: {},  # ctrl-r1's reported pid
            101: {"parents": [100, 1], "environ": {RUN_ID_VARIABLE: "ctrl-r1"}},  # a torchrun worker of it
            102: {"parents": [50, 1], "environ": {RUN_ID_VARIABLE: "v-r16"}},  # v-r16, launched before it reported
            103: {"environ": psutil.AccessDenied(103), "user": "someone", "name": "python3"},
            104: {"environ": {"PATH": "/usr/bin"}, "name": "jupyter"},
            105: {"environ": {RUN_ID_VARIABLE: "other-campaign-run"}},
        }
    )
    procs = host(fake)
    samples = [gpu(0, (100, 20 * GIB), (103, 5 * GIB)), gpu(1, (101, 20 * GIB), (102, 30 * GIB), (104, GIB), (105, GIB))]
    mapped = procs.map_gpu_processes(samples, {"ctrl-r1": 100, "v-r64": 200}, run_ids=["ctrl-r1", "v-r16", "v-r64"])
    assert not mapped.container and mapped.messages == ()
    ctrl = mapped.run("ctrl-r1")
    assert ctrl.pids == (100, 101) and ctrl.gpus == (0, 1) and ctrl.gpu_memory_bytes == 40 * GIB
    assert ctrl.matched_by == "pid"
    variant = mapped.run("v-r16")
    assert variant.pids == (102,) and variant.gpus == (1,) and variant.matched_by == "env"
    assert mapped.run("v-r64") is None  # reported, but not on a GPU
    assert {(o.pid, o.name, o.user) for o in mapped.others} == {(103, "python3", "someone"), (104, "jupyter", "me"), (105, "python", "me")}

    # Environments are read once per process while NVML keeps listing it.
    for _ in range(3):
        procs.map_gpu_processes(samples, {"ctrl-r1": 100}, run_ids=["ctrl-r1", "v-r16"])
    assert fake.calls[("environ", 102)] == 1
    # A pid that leaves the GPU is forgotten: if it comes back it is read afresh.
    procs.map_gpu_processes([gpu(0, (100, GIB))], {"ctrl-r1": 100})
    fake.processes[102]["environ"] = {RUN_ID_VARIABLE: "v-r64"}
    again = procs.map_gpu_processes([gpu(1, (102, GIB))], {"ctrl-r1": 100})
    assert again.run("v-r64").pids == (102,)


def test_a_child_of_the_reported_pid_is_the_run_even_without_the_variable():
    fake = FakePsutil({100: {}, 101: {"parents": [100, 1]}})
    mapped = host(fake).map_gpu_processes([gpu(0, (101, 8 * GIB))], {"ctrl-r1": 100})
    assert mapped.run("ctrl-r1").matched_by == "parent" and mapped.run("ctrl-r1").pids == (101,)


def test_unknown_gpu_memory_stays_unknown():
    fake = FakePsutil({100: {}})
    mapped = host(fake).map_gpu_processes([gpu(0, (100, None))], {"ctrl-r1": 100})
    assert mapped.run("ctrl-r1").gpu_memory_bytes is None


def test_a_container_is_detected_once_and_runs_fall_back_to_their_own_pids():
    # NVML speaks in host pids; inside the container only the container's pids exist.
    fake = FakePsutil({57: {}, 58: {}})
    procs = host(fake)
    samples = [gpu(0, (881234, 20 * GIB)), gpu(1, (881300, 30 * GIB))]
    first = procs.map_gpu_processes(samples, {"ctrl-r1": 57, "v-r16": 58, "v-r64": 59})
    assert first.container and procs.container
    assert len(first.messages) == 1 and "container" in first.messages[0] and "881234" in first.messages[0]
    assert [(r.run, r.pids, r.gpus, r.matched_by) for r in first.runs] == [
        ("ctrl-r1", (57,), (), "own-pid"),
        ("v-r16", (58,), (), "own-pid"),
    ]
    assert first.others == ()
    second = procs.map_gpu_processes(samples, {"ctrl-r1": 57})
    assert second.container and second.messages == ()  # said once
    assert [r.run for r in second.runs] == ["ctrl-r1"]


def test_a_gpu_process_that_just_ended_is_not_a_container():
    fake = FakePsutil({100: {}})
    procs = host(fake)
    mapped = procs.map_gpu_processes([gpu(0, (100, GIB), (90001, GIB))], {"ctrl-r1": 100})
    assert not mapped.container and mapped.messages == ()
    assert [o.pid for o in mapped.others] == [90001]


def test_absent_pids_with_no_memory_in_use_are_not_a_container():
    fake = FakePsutil({100: {}})
    mapped = host(fake).map_gpu_processes([gpu(0, (90001, 0))], {"ctrl-r1": 100})
    assert not mapped.container


# ---------------------------------------------------------------------------------------------
# Host figures


def test_host_cpu_memory_and_the_campaign_disk(tmp_path):
    fake = FakePsutil()
    procs = host(fake)
    first = procs.host(tmp_path)
    assert first.cpu_percent is None  # the first reading compares with nothing
    assert first.load_average_1m == 3.5 and first.cpu_count == 16
    assert first.memory_total_bytes == 128 * GIB and first.memory_used_bytes == 32 * GIB
    assert first.disk_path == str(tmp_path) and fake.disk_paths == [str(tmp_path)]
    assert first.disk_used_bytes == 400 * GIB and first.disk_free_bytes == 600 * GIB and first.disk_percent == 40.0
    second = procs.host(tmp_path)
    assert second.cpu_percent == 37.5
    assert second.to_json()["taken_at"] == "2026-11-30T08:00:00.000Z"


def test_a_missing_campaign_folder_degrades_the_disk_figures_only(tmp_path):
    fake = FakePsutil()
    fake.disk_error = FileNotFoundError(2, "No such file or directory")
    sample = host(fake).host(tmp_path / "gone")
    assert sample.disk_used_bytes is None and "No such file or directory" in sample.disk_error
    assert sample.memory_total_bytes == 128 * GIB


def test_host_with_the_real_psutil(tmp_path):
    procs = HostProcesses()
    procs.host(tmp_path)
    sample = procs.host(tmp_path)
    assert sample.memory_total_bytes > 0 and sample.disk_total_bytes > 0 and sample.cpu_percent is not None


# ---------------------------------------------------------------------------------------------
# A real process


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])


def test_terminate_run_stops_a_real_run_process_and_nothing_else():
    run = sleeper()
    bystander = sleeper()
    try:
        reported = datetime.now(timezone.utc)  # what the run's `started` event would say
        assert is_alive(run.pid, reported)

        # The bystander is live and ours, but its start is not the run's: it is left alone.
        wrong = terminate_run(bystander.pid, reported + timedelta(hours=2))
        assert not wrong.sent and wrong.outcome == "not-the-run"
        later = terminate_run(bystander.pid, reported - timedelta(seconds=30))
        assert not later.sent and later.outcome == "reused"

        result = terminate_run(run.pid, reported)
        assert result.sent and result.outcome == "sent", result.message
        assert run.wait(timeout=10) == -signal.SIGTERM

        # Once it has ended (and been reaped), a second attempt says so and signals nobody.
        again = terminate_run(run.pid, reported)
        assert not again.sent and again.outcome in {"ended", "reused"}
        assert not is_alive(run.pid, reported)

        time.sleep(0.05)
        assert bystander.poll() is None  # never signalled
    finally:
        for process in (run, bystander):
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


def test_the_real_psutil_path_without_pidfd_also_works():
    run = sleeper()
    try:
        reported = datetime.now(timezone.utc)
        result = HostProcesses(use_pidfd=False).terminate_run(run.pid, reported)
        assert result.sent, result.message
        assert run.wait(timeout=10) == -signal.SIGTERM
    finally:
        if run.poll() is None:
            run.kill()
        run.wait(timeout=10)


def test_a_pid_is_judged_only_in_the_host_and_pid_namespace_it_came_from():
    here = {"host": "gpu-box", "pid_ns": "pid:[4026531836]"}
    procs = HostProcesses(FakePsutil(), uid=ME, clock=lambda: T0, use_pidfd=False, identity=here)
    assert procs.sees({"pid": 7, **here}) is True
    assert procs.sees({"pid": 7, "host": "gpu-box", "pid_ns": "pid:[4026532111]"}) is False  # a training container
    assert procs.sees({"pid": 7, "host": "other-box", "pid_ns": here["pid_ns"]}) is False
    assert procs.sees({"pid": 7, "host": "gpu-box", "pid_ns": None}) is False  # the writer had no /proc: not comparable
    assert procs.sees({"pid": 7}) is None  # an older writer: judged as before
    from cockpit.feed.reporter import process_identity

    assert HostProcesses(FakePsutil()).identity == process_identity()


# ---------------------------------------------------------------------------------------------
# Watching a run's process every tick, cheaply (issue 15: the engine tick's target)


def test_a_run_process_found_gone_is_not_looked_up_again():
    """Ended, reused and not-the-run are final for a (pid, start): the run's process never comes
    back, so the tick does not ask the process table again, and a newcomer on the pid is not it."""
    fake = FakePsutil({})
    procs = host(fake)
    first = procs.check(4242, START)
    assert first.outcome == "ended" and not first.ok
    fake.processes[4242] = {"created": START + 600}  # the pid now names a later process
    for _ in range(5):
        again = procs.check(4242, START)
        assert again == first
    assert fake.opened == [4242]

    fake.processes[5000] = {"created": START + 600}
    reused = procs.check(5000, START)
    assert reused.outcome == "reused"
    del fake.processes[5000]
    assert procs.check(5000, START).outcome == "reused"
    assert fake.opened.count(5000) == 1


def test_a_live_run_process_is_still_inspected_each_tick_without_a_pidfd():
    fake = FakePsutil({4242: {"created": START - 5}})
    procs = host(fake)
    assert procs.check(4242, START).ok
    assert procs.check(4242, START).ok
    fake.processes[4242] = {"status": psutil.STATUS_ZOMBIE, "created": START - 5}
    assert procs.check(4242, START).outcome == "ended"
    assert fake.opened == [4242, 4242, 4242]


@pytest.fixture
def watched_sleeper():
    """A real process and the real host side, with pidfds; both cleaned up after."""
    if not hasattr(os, "pidfd_open"):
        pytest.skip("this system has no pidfd_open")
    process = sleeper()
    procs = HostProcesses()
    try:
        yield process, procs
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        procs.close()


def test_a_real_run_process_is_watched_through_a_pidfd_and_its_end_seen_at_once(monkeypatch, watched_sleeper):
    run, procs = watched_sleeper
    reported = datetime.now(timezone.utc)
    assert procs.check(run.pid, reported).ok
    looked_up: list[int] = []
    real = psutil.Process
    monkeypatch.setattr(psutil, "Process", lambda pid: looked_up.append(pid) or real(pid))
    for _ in range(5):
        assert procs.check(run.pid, reported).ok
    assert looked_up == []  # the pidfd answers: no process table read a tick

    run.kill()  # a zombie until reaped: ended already
    deadline = time.monotonic() + 10
    while procs.check(run.pid, reported).ok:
        assert time.monotonic() < deadline, "the pidfd never said the process ended"
        time.sleep(0.01)
    gone = procs.check(run.pid, reported)
    assert gone.outcome == "ended" and "has ended" in gone.message
    run.wait(timeout=10)
    assert procs.check(run.pid, reported).outcome == "ended"
    # Another start for the same pid is judged afresh, not from the first one's answer.
    assert procs.check(run.pid, reported + timedelta(hours=1)).outcome == "ended"
    procs.close()
    assert procs.watched() == 0


def test_a_pidfd_is_never_kept_for_a_process_that_is_not_the_run(watched_sleeper):
    bystander, procs = watched_sleeper
    reported = datetime.now(timezone.utc)
    assert procs.check(bystander.pid, reported + timedelta(hours=2)).outcome == "not-the-run"
    assert procs.check(bystander.pid, reported - timedelta(seconds=30)).outcome == "reused"
    assert procs.watched() == 0


def test_one_look_polls_every_watched_run_process_at_once(monkeypatch):
    """A tick looks at all its runs' pidfds in one poll, and still sees one of them end."""
    if not hasattr(os, "pidfd_open"):
        pytest.skip("this system has no pidfd_open")
    from cockpit.live import process_watch

    runs = [sleeper() for _ in range(4)]
    procs = HostProcesses()
    try:
        reported = datetime.now(timezone.utc)
        assert all(procs.check(run.pid, reported).ok for run in runs) and procs.watched() == 4
        single = []
        monkeypatch.setattr(process_watch, "has_ended", lambda fd: single.append(fd) or False)
        with procs.one_look():
            assert all(procs.check(run.pid, reported).ok for run in runs)
        assert single == []  # no poll of its own for any of them
        monkeypatch.undo()

        runs[2].kill()
        runs[2].wait(timeout=10)
        with procs.one_look():
            outcomes = [procs.check(run.pid, reported).outcome for run in runs]
        assert outcomes[2] == "ended" and outcomes.count("ended") == 1
        assert procs.watched() == 3
        assert procs.check(runs[0].pid, reported).ok  # outside a look: its own poll, as before
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
            run.wait(timeout=10)
        procs.close()


def test_a_descriptor_number_reused_within_one_look_is_not_taken_for_ended():
    """A watch dropped within a look frees its number; a new watch given that number in the same
    look is judged by its own process, not by the poll taken before it existed."""
    from cockpit.live.process_watch import ProcessWatch

    watch: ProcessWatch[str] = ProcessWatch()
    ended_r, ended_w = os.pipe()  # a readable fd stands for a pidfd whose process ended
    os.write(ended_w, b"x")
    watch.watch("first", ended_r, "it ran")
    with watch.one_look():
        assert watch.still_running("first") == (False, "it ran")
        fresh_r, fresh_w = os.pipe()
        assert fresh_r == ended_r  # the lowest free number: the one just released
        watch.watch("second", fresh_r, "it runs")
        assert watch.still_running("second") == (True, "it runs")
    watch.close()
    os.close(ended_w)
    os.close(fresh_w)
