"""Faults the cockpit must survive beside a paid training run (issue #9 item 2): a writer killed
mid-append, a full disk, a metrics file truncated, replaced or deleted under the reader, a GPU
lost in the middle of sampling, and a run process that vanishes before its signal.

Eight processes appending at once is `tests/record/test_runlog.py::test_eight_processes_appending_at_once_lose_nothing`;
an injected ENOSPC inside `RunLog.append` is `test_disk_full_leaves_what_was_written_intact` there.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import psutil
import pynvml as real_nvml
import pytest

from cockpit.live.engine import Engine
from cockpit.live.runs import terminate_run_of
from cockpit.live.gpu import NvmlSource
from cockpit.live.gpu_sampler import GpuSampler
from cockpit.live.host import HostProcesses
from cockpit.plan.load import load_campaign
from cockpit.record import decisions
from cockpit.record.runlog import RunLog
from tests.conftest import ROOT, run_cli
from tests.live.test_engine import Clock, NoGpus
from tests.live.test_gpu import FakeNvml, gpu_spec

LOT_START = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)
CHILD_ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COCKPIT_NVML": "off", "NO_COLOR": "1"}


def stream_lines(records) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def write_stream(directory: Path, run_id: str, records, mode: str = "a") -> Path:
    path = directory / "runs" / run_id / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as handle:
        handle.write(stream_lines(records))
    return path


def alert_events(directory: Path) -> list[dict]:
    return [e for e in RunLog(directory).read().events if e["type"] == "alert"]


def wait_until(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


# ---------------------------------------------------------------------------------------------
# A writer killed with SIGKILL in the middle of an append

HALF_LINE_WRITER = r"""
import os, sys, time
from cockpit.record import runlog
log = runlog.RunLog(sys.argv[1])
log.append("note", text="before the crash")
real_write = os.write
def half_then_hang(fd, data):
    data = bytes(data)
    written = real_write(fd, data[: len(data) // 2])
    sys.stdout.write("half written\n")
    sys.stdout.flush()
    time.sleep(120)  # killed here, holding the lock, half a line on disk
    return written
os.write = half_then_hang
log.append("note", text="in flight when killed")
"""


def test_writer_killed_mid_line_loses_only_that_line_and_the_next_writer_is_intact(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", HALF_LINE_WRITER, str(tmp_path)], stdout=subprocess.PIPE, env=CHILD_ENV)
    try:
        assert child.stdout.readline() == b"half written\n"
        on_disk = (tmp_path / "runlog.jsonl").read_bytes()
        assert not on_disk.endswith(b"\n") and on_disk.count(b"\n") == 1  # one whole event, then half of one

        finished = threading.Event()
        outcome: dict = {}

        def next_writer() -> None:
            outcome["event"] = RunLog(tmp_path).append("note", text="next writer")
            finished.set()

        thread = threading.Thread(target=next_writer)
        thread.start()
        assert not finished.wait(0.3)  # the stuck writer still holds the lock: nobody interleaves
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
        assert finished.wait(10)  # the kernel released the dead writer's lock
        thread.join(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    read = RunLog(tmp_path).read()
    assert [e["text"] for e in read.events] == ["before the crash", "next writer"]
    assert [e["seq"] for e in read.events] == [1, 2]
    assert read.bad_lines == 1 and read.bad_line_numbers == [2]  # the torn half line, skipped and counted
    assert outcome["event"]["seq"] == 2 and outcome["event"]["text"] == "next writer"
    # the next event starts on a line of its own, whole
    assert json.loads((tmp_path / "runlog.jsonl").read_bytes().splitlines()[-1])["text"] == "next writer"


TIGHT_LOOP_WRITER = r"""
import sys
from cockpit.record.runlog import RunLog
log = RunLog(sys.argv[1])
index = 0
while True:
    log.append("note", text=f"n{index}", pad="x" * 20000)  # long lines widen the window for a torn write
    index += 1
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_writer_killed_at_a_random_moment_loses_at_most_the_line_in_flight(tmp_path, seed):
    path = tmp_path / "runlog.jsonl"
    child = subprocess.Popen([sys.executable, "-c", TIGHT_LOOP_WRITER, str(tmp_path)], env=CHILD_ENV)
    try:
        assert wait_until(lambda: path.exists() and path.stat().st_size > 0, 20)
        time.sleep(random.Random(seed).uniform(0.02, 0.3))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    after = RunLog(tmp_path).append("note", text="after the kill")
    read = RunLog(tmp_path).read()
    texts = [e["text"] for e in read.events]
    written = texts[:-1]
    assert written == [f"n{i}" for i in range(len(written))]  # nothing before the kill lost, in order
    assert texts[-1] == "after the kill" and read.events[-1] == after
    assert [e["seq"] for e in read.events] == list(range(1, len(read.events) + 1))
    assert read.bad_lines <= 1  # at most the line in flight


# ---------------------------------------------------------------------------------------------
# The disk full

FULL_DISK_NOTE = r"""
import errno, os, sys
real_write = os.write
def full_disk(fd, data):
    real_write(fd, bytes(data)[:5])  # a partial write, then no space
    raise OSError(errno.ENOSPC, "No space left on device")
os.write = full_disk
from cockpit.cli import main
sys.exit(main(["note", sys.argv[1], "written on a full disk"]))
"""


def test_cli_note_on_a_full_disk_says_so_and_damages_nothing(seed_campaign):
    assert run_cli("note", str(seed_campaign), "before the disk filled").returncode == 0
    log_path = seed_campaign / "runlog.jsonl"
    before = log_path.read_bytes()
    result = subprocess.run([sys.executable, "-c", FULL_DISK_NOTE, str(seed_campaign)], capture_output=True, text=True,
                            env=CHILD_ENV, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "the disk is full; nothing was recorded" in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert "recorded: note" not in result.stdout
    assert log_path.read_bytes() == before
    assert run_cli("note", str(seed_campaign), "after").returncode == 0
    assert [e.get("text") for e in RunLog(seed_campaign).read().events][1:] == ["before the disk filled", "after"]


FULL_DISK_STATUS = r"""
import errno, os, sys
from cockpit.common import files
def full_disk(fd, data):
    raise OSError(errno.ENOSPC, "No space left on device")
files.os.write = full_disk  # saving the reading positions fails; the run log was written before
from cockpit.cli import main
sys.exit(main(["status", sys.argv[1], "--json"]))
"""


def test_cli_status_on_a_full_disk_still_answers(seed_campaign):
    assert run_cli("note", str(seed_campaign), "campaign started").returncode == 0
    before = (seed_campaign / "runlog.jsonl").read_bytes()
    result = subprocess.run([sys.executable, "-c", FULL_DISK_STATUS, str(seed_campaign)], capture_output=True, text=True,
                            env=CHILD_ENV, timeout=60)
    assert (seed_campaign / "runlog.jsonl").read_bytes() == before
    assert "Traceback" not in result.stderr
    assert result.returncode in (0, 1) and "internal error" not in result.stderr, result.stderr


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 512 KiB filesystem we can fill; skipped where mounting is not allowed (not root, no CAP_SYS_ADMIN)."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount_point)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode(errors='replace').strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def fill(folder: Path) -> None:
    """Write zeros until the filesystem refuses (unbuffered, so nothing is left to flush)."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as error:
        assert error.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_note_on_a_really_full_disk(small_tmpfs, seed_campaign):
    campaign = small_tmpfs / "campaign"
    shutil.copytree(seed_campaign, campaign)
    assert run_cli("note", str(campaign), "written while there was room").returncode == 0
    before = (campaign / "runlog.jsonl").read_bytes()
    fill(small_tmpfs)
    result = run_cli("note", str(campaign), "x" * 9000)  # needs a new page of the full filesystem
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "the disk is full; nothing was recorded" in result.stderr and "Traceback" not in result.stderr
    assert (campaign / "runlog.jsonl").read_bytes() == before
    (small_tmpfs / "filler").unlink()
    assert run_cli("note", str(campaign), "room again").returncode == 0
    assert [e.get("text") for e in RunLog(campaign).read().events][1:] == ["written while there was room", "room again"]


def test_status_on_a_really_full_disk(small_tmpfs, seed_campaign):
    campaign = small_tmpfs / "campaign"
    shutil.copytree(seed_campaign, campaign)
    write_stream(campaign, "ctrl-r1", [{"ts": time.time(), "step": i, "loss": 1.0} for i in range(50)])
    fill(small_tmpfs)
    result = run_cli("status", str(campaign), "--json")
    assert "Traceback" not in result.stderr
    assert result.returncode in (0, 1) and "internal error" not in result.stderr, result.stderr


# ---------------------------------------------------------------------------------------------
# The metrics file truncated, replaced or deleted under the engine


def make_engine(directory: Path, now: datetime, **kwargs) -> Engine:
    return Engine(load_campaign(directory), clock=Clock(now), gpus=kwargs.pop("gpus", NoGpus()), **kwargs)


def test_metrics_file_truncated_replaced_and_deleted_between_ticks(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=10)).timestamp()
    engine = make_engine(seed_campaign, now)
    path = write_stream(seed_campaign, "ctrl-r1", [{"ts": t0, "event": "started", "pid": 4_000_000, "config_sha256": "a" * 64}]
                        + [{"ts": t0 + i, "step": i * 10, "loss": 2.0} for i in range(1, 101)])
    assert engine.tick().run("ctrl-r1").step == 1000

    # truncated in place: the trainer reopened its file with "w" and wrote less than we had read
    write_stream(seed_campaign, "ctrl-r1", [{"ts": t0 + 200, "event": "started", "pid": 4_000_000, "config_sha256": "a" * 64},
                                            {"ts": t0 + 201, "step": 3, "loss": 1.5}], mode="w")
    run = engine.tick().run("ctrl-r1")
    assert run.step == 3 and run.last == {"loss": 1.5} and run.bad_lines == 0
    assert engine.streams["ctrl-r1"].track.last_reset == "truncated"

    # replaced: a new file renamed over the old one, with a NaN on its third line
    fresh = path.with_name("metrics.jsonl.new")
    fresh.write_text(stream_lines([{"ts": t0 + 300, "event": "started", "pid": 4_000_000, "config_sha256": "a" * 64},
                                   {"ts": t0 + 301, "step": 7, "loss": 1.2},
                                   '{"ts": %f, "step": 8, "loss": NaN}' % (t0 + 302)]))
    os.replace(fresh, path)
    snapshot = engine.tick()
    assert snapshot.run("ctrl-r1").step == 8
    assert engine.streams["ctrl-r1"].track.last_reset == "replaced"
    assert ("nan-loss", "ctrl-r1") in {(a.rule, a.run) for a in snapshot.alerts}

    # deleted: the run keeps what it said, nothing crashes, and a new file is read from its start
    path.unlink()
    for _ in range(3):
        run = engine.tick().run("ctrl-r1")
    assert run.step == 8 and engine.streams["ctrl-r1"].missing
    write_stream(seed_campaign, "ctrl-r1", [{"ts": t0 + 400, "event": "started", "pid": 4_000_000, "config_sha256": "a" * 64},
                                            {"ts": t0 + 401, "step": 2, "loss": 1.1}])
    run = engine.tick().run("ctrl-r1")
    assert run.step == 2 and run.last == {"loss": 1.1}
    engine.close()
    assert [(e["rule"], e["run"]) for e in alert_events(seed_campaign) if e.get("run") == "ctrl-r1"] == [("nan-loss", "ctrl-r1")]


def test_an_acknowledged_alert_fires_again_for_a_replaced_file_with_the_same_line_number(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=10)).timestamp()
    first = [{"ts": t0, "event": "started", "pid": 4_000_000, "config_sha256": "a" * 64}, {"ts": t0 + 1, "step": 1, "loss": 2.0},
             '{"ts": %f, "step": 2, "loss": NaN}' % (t0 + 2)]
    path = write_stream(seed_campaign, "ctrl-r1", first)
    engine = make_engine(seed_campaign, now)
    engine.tick()
    decisions.acknowledge(load_campaign(seed_campaign), engine.log, "nan-loss", "ctrl-r1", source="cli")
    engine.tick()
    # the run was relaunched (same config: a restart, not a new configuration) and its new file says NaN on line 3 again
    fresh = path.with_name("new.jsonl")
    fresh.write_text(stream_lines([{"ts": t0 + 100, "event": "started", "pid": 4_000_000, "config_sha256": "a" * 64},
                                   {"ts": t0 + 101, "step": 1, "loss": 2.1},
                                   '{"ts": %f, "step": 2, "loss": NaN}' % (t0 + 102)]))
    os.replace(fresh, path)
    snapshot = engine.tick()
    assert ("nan-loss", "ctrl-r1") in {(a.rule, a.run) for a in snapshot.alerts}
    assert len([e for e in alert_events(seed_campaign) if e["rule"] == "nan-loss"]) == 2


def test_engine_keeps_ticking_while_the_metrics_file_is_churned_under_it(seed_campaign):
    """A writer thread truncates, rewrites, replaces, deletes and appends as fast as it can while
    the engine ticks; nothing raises, and once the file settles the engine reads exactly it."""
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=10)).timestamp()
    path = write_stream(seed_campaign, "ctrl-r1", [{"ts": t0, "event": "started", "pid": 4_000_000, "config_sha256": "a" * 64}])
    engine = make_engine(seed_campaign, now)
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        rng = random.Random(5)
        step = 0
        try:
            while not stop.is_set():
                action = rng.choice(["append", "append", "append", "truncate", "replace", "delete", "torn"])
                step += 1
                line = {"ts": t0 + step, "step": step, "loss": 1.0 / step}
                if action == "append":
                    write_stream(seed_campaign, "ctrl-r1", [line] * rng.randint(1, 50))
                elif action == "truncate":
                    with open(path, "ab") as handle:  # "a" creates it when a delete came first
                        handle.truncate(rng.randint(0, handle.tell()))
                elif action == "replace":
                    fresh = path.with_name(f"tmp-{step}")
                    fresh.write_text(stream_lines([line] * rng.randint(1, 20)))
                    os.replace(fresh, path)
                elif action == "delete":
                    path.unlink(missing_ok=True)
                else:
                    with open(path, "a") as handle:
                        handle.write('{"ts": %f, "step": %d, "lo' % (t0 + step, step))
                time.sleep(rng.uniform(0, 0.003))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    writer = threading.Thread(target=churn)
    writer.start()
    ticks = 0
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            engine.tick()
            ticks += 1
    finally:
        stop.set()
        writer.join(10)
    assert not errors and ticks > 10

    final = path.with_name("final")
    final.write_text(stream_lines([{"ts": t0 + 10_000, "event": "started", "pid": 4_000_000, "config_sha256": "a" * 64},
                                   {"ts": t0 + 10_001, "step": 123_456, "loss": 0.25}]))
    os.replace(final, path)
    run = engine.tick().run("ctrl-r1")
    assert run.step == 123_456 and run.last == {"loss": 0.25} and run.bad_lines == 0
    engine.close()


# ---------------------------------------------------------------------------------------------
# NVML raising GPU-lost in the middle of the sampling loop


def test_gpu_lost_mid_sampling_keeps_the_engine_up_and_alerts_once_naming_the_gpu(b200_campaign):
    fake = FakeNvml([gpu_spec(0), gpu_spec(1)])
    # a long stall allowance: a loaded CI runner must not turn a slow thread into "NVML not answering"
    sampler = GpuSampler(NvmlSource(fake, environ={}), interval=0.01, stall_factor=1000).start()
    try:
        engine = Engine(load_campaign(b200_campaign), gpus=sampler)
        assert wait_until(lambda: sampler.latest().available)
        snapshot = engine.tick()
        assert [g.lost for g in snapshot.gpus] == [False, False] and not snapshot.alerts

        # GPU 0 answered this sweep; GPU 1 falls off the bus in the middle of it
        fake.gpus[1]["util"] = real_nvml.NVMLError_GpuIsLost()
        assert wait_until(lambda: any(s.lost for s in sampler.latest().samples))
        for _ in range(25):
            snapshot = engine.tick()
            time.sleep(0.005)
        assert sampler.latest().answering
        assert snapshot.gpus[0].utilization_percent == 90 and not snapshot.gpus[0].lost
        assert snapshot.gpus[1].lost
        assert [a.rule for a in snapshot.alerts] == ["gpu-lost"]
        engine.close()
        # a restarted cockpit does not log the same lost GPU again
        Engine(load_campaign(b200_campaign), gpus=sampler).tick()
    finally:
        sampler.close()
    lost = [e for e in alert_events(b200_campaign) if e["rule"] == "gpu-lost"]
    assert len(lost) == 1
    assert lost[0]["gpu"] == 1 and lost[0]["message"].startswith("GPU 1 (NVIDIA H200) is lost")
    assert lost[0]["run"] is None and lost[0]["severity"] == "critical"


# ---------------------------------------------------------------------------------------------
# A run process that vanishes between listing and signalling


class SignalRecorder:
    """Every signal the cockpit tries to send in this process, whatever the path (os.kill, killpg, pidfd)."""

    def __init__(self, monkeypatch):
        self.sent: list[tuple[str, object, int]] = []
        real_kill, real_killpg, real_pidfd = os.kill, os.killpg, getattr(signal, "pidfd_send_signal", None)

        def kill(pid, sig):
            self.sent.append(("kill", pid, sig))
            return real_kill(pid, sig)

        def killpg(group, sig):
            self.sent.append(("killpg", group, sig))
            return real_killpg(group, sig)

        def pidfd_send_signal(fd, sig, *args):
            self.sent.append(("pidfd", fd, sig))
            return real_pidfd(fd, sig, *args)

        monkeypatch.setattr(os, "kill", kill)
        monkeypatch.setattr(os, "killpg", killpg)
        if real_pidfd is not None:
            monkeypatch.setattr(signal, "pidfd_send_signal", pidfd_send_signal)


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_run_that_exited_before_the_stop_is_not_signalled_nor_is_anyone_else(b200_campaign, monkeypatch):
    bystander = sleeper()
    run = sleeper()
    try:
        t0 = time.time()
        write_stream(b200_campaign, "full-ft", [{"ts": t0, "event": "started", "pid": run.pid, "config_sha256": "d" * 64}])
        run.kill()
        run.wait()  # gone and reaped: its pid is free for anyone
        recorder = SignalRecorder(monkeypatch)
        outcome = terminate_run_of(load_campaign(b200_campaign), "full-ft")
        assert outcome["sent"] is False and outcome["outcome"] == "ended" and outcome["pid"] == run.pid
        assert recorder.sent == []
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_auto_stop_of_a_run_that_vanished_records_the_stop_and_signals_nothing(b200_campaign, monkeypatch):
    bystander = sleeper()
    run = sleeper()
    try:
        t0 = time.time()
        write_stream(b200_campaign, "full-ft", [{"ts": t0, "event": "started", "pid": run.pid, "config_sha256": "d" * 64},
                                                '{"ts": %f, "step": 5, "loss": NaN}' % (t0 + 1)])
        engine = Engine(load_campaign(b200_campaign), gpus=NoGpus())
        run.kill()
        run.wait()
        recorder = SignalRecorder(monkeypatch)
        snapshot = engine.tick()
        engine.close()
        stop = RunLog(b200_campaign).replay().stop_of("full-ft")
        assert stop["source"] == "auto" and stop["rule"] == "nan-loss"
        assert stop["signal"]["requested"] is True and stop["signal"]["sent"] is False
        assert snapshot.run("full-ft").state == "stopped"
        assert recorder.sent == []
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


class VanishingPsutil(SimpleNamespace):
    """psutil as it is, except that the run's process dies (and is reaped) while the cockpit is
    checking it: the moment between listing a pid and signalling it."""

    def __init__(self, victim: subprocess.Popen):
        real = psutil

        class Process(real.Process):
            def create_time(self_inner):
                created = super().create_time()
                if self_inner.pid == victim.pid and victim.poll() is None:
                    victim.kill()
                    victim.wait()
                return created

        super().__init__(Process=Process, NoSuchProcess=real.NoSuchProcess, AccessDenied=real.AccessDenied,
                         ZombieProcess=real.ZombieProcess, STATUS_ZOMBIE=real.STATUS_ZOMBIE, pid_exists=real.pid_exists)


@pytest.mark.parametrize("use_pidfd", [True, False])
def test_a_run_that_vanishes_between_the_check_and_the_signal_gets_nothing_and_nobody_else_does(use_pidfd, monkeypatch):
    if use_pidfd and not (hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")):
        pytest.skip("no pidfd on this platform")
    bystander = sleeper()
    run = sleeper()
    try:
        started_at = psutil.Process(run.pid).create_time()
        host = HostProcesses(VanishingPsutil(run), use_pidfd=use_pidfd)
        recorder = SignalRecorder(monkeypatch)
        result = host.terminate_run(run.pid, started_at)
        assert run.poll() is not None  # it really vanished in between
        assert result.sent is False and result.outcome in ("vanished", "ended"), result
        # whatever was attempted went to the run's own pid (or its pinned pidfd), never elsewhere
        assert all(pid == run.pid for kind, pid, _ in recorder.sent if kind == "kill")
        assert not any(kind == "killpg" for kind, _, _ in recorder.sent)
        assert bystander.poll() is None
    finally:
        for process in (bystander, run):
            if process.poll() is None:
                process.kill()
                process.wait()
