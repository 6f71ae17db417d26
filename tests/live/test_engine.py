"""The live engine on crafted campaigns: exactly the alerts the rules call for, each logged once,
auto-stops that signal only the run's own process, the lot clock's window alerts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

from cockpit.common.times import iso
from cockpit.live.engine import Engine
from cockpit.live.fake_gpus import FakeGpus
from cockpit.live.gpu import GpuSnapshot
from cockpit.live.snapshot import to_json
from cockpit.plan.load import load_campaign
from cockpit.record import decisions
from cockpit.record.runlog import RunLog, RunLogError
from tests.conftest import run_cli

LOT_START = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)


class NoGpus:
    def latest(self) -> GpuSnapshot:
        return GpuSnapshot(available=False, reason="NVML unavailable: turned off by COCKPIT_NVML=off")

    def close(self) -> None:
        pass


class Clock:
    def __init__(self, moment: datetime):
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment


def write_stream(directory, run_id, lines):
    path = directory / "runs" / run_id / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        for line in lines:
            handle.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def seed_streams(directory, t0: float, pid: int | None = None):
    """ctrl-r1 healthy; v-r16 drops below the F1 floor after the warm-up; v-r64 NaN then an essential truncation."""
    started = lambda sha: {"ts": t0, "event": "started", "pid": pid or 4_000_000, "config_sha256": sha * 64}
    write_stream(directory, "ctrl-r1", [started("a")] + [{"ts": t0 + i, "step": i * 10, "loss": 2.0 - i / 1000, "eval/macro_f1": 0.6} for i in range(1, 200)])
    # the floor rule waits for step 2000: a low F1 at step 1000 is a warm-up, not a trigger
    write_stream(directory, "v-r16", [started("b"), {"ts": t0 + 1, "step": 1000, "eval/macro_f1": 0.40, "loss": 1.9},
                                      {"ts": t0 + 2, "step": 2500, "eval/macro_f1": 0.70, "loss": 1.8},
                                      {"ts": t0 + 3, "step": 3000, "eval/macro_f1": 0.50, "loss": 1.7}])
    write_stream(directory, "v-r64", [started("c"), {"ts": t0 + 1, "step": 1, "loss": 2.0}, '{"ts": %f, "step": 2, "loss": NaN}' % (t0 + 2),
                                      {"ts": t0 + 3, "step": 3, "loss": 1.9},
                                      {"ts": t0 + 4, "event": "truncated", "input": "doc-7", "essential": False},
                                      {"ts": t0 + 5, "event": "truncated", "input": "doc-991", "essential": True}])


def alert_events(directory):
    return [e for e in RunLog(directory).read().events if e["type"] == "alert"]


def make_engine(directory, now, **kwargs):
    return Engine(load_campaign(directory), clock=Clock(now), gpus=kwargs.pop("gpus", NoGpus()), **kwargs)


def test_exactly_the_triggered_alerts_logged_once(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    seed_streams(seed_campaign, (now - timedelta(minutes=5)).timestamp())
    for _ in range(3):
        engine = make_engine(seed_campaign, now)  # a fresh engine each time: a restart
        snapshot = engine.tick()
        snapshot = engine.tick()
    keys = sorted((a.rule, a.run) for a in snapshot.alerts)
    assert keys == [("f1-floor", "v-r16"), ("nan-loss", "v-r64"), ("truncated-input", "v-r64")]
    logged = alert_events(seed_campaign)
    assert sorted((e["rule"], e["run"]) for e in logged) == keys
    nan = next(e for e in logged if e["rule"] == "nan-loss")
    assert nan["step"] == 2 and "loss is NaN" in nan["message"]
    floor = next(e for e in logged if e["rule"] == "f1-floor")
    assert floor["step"] == 3000 and floor["value"] == 0.5
    assert "doc-991" in next(e for e in logged if e["rule"] == "truncated-input")["message"]


def test_status_json_through_the_command_line(seed_campaign):
    seed_streams(seed_campaign, time.time() - 300)
    for _ in range(2):
        result = run_cli("status", str(seed_campaign), "--json")
        assert result.returncode == 1, result.stderr  # alerts are active
    body = json.loads(result.stdout)
    for field in ("elapsed_hours", "remaining_hours", "projected_finish", "nvml", "gpus", "runs", "alerts"):
        assert field in body
    assert body["nvml"] == {"available": False, "reason": "NVML unavailable: turned off by COCKPIT_NVML=off", "simulated": False}
    assert sorted(a["rule"] for a in body["alerts"]) == ["f1-floor", "nan-loss", "truncated-input"]
    runs = {r["id"]: r for r in body["runs"]}
    assert runs["v-r64"]["last"]["loss"] == 1.9 and runs["ctrl-r1"]["step"] == 1990
    assert set(runs["v-r16"]) >= {"id", "state", "step", "last"}
    assert len(alert_events(seed_campaign)) == 3
    text = run_cli("status", str(seed_campaign))
    assert "NVML unavailable" in text.stdout and "3 active alerts" in text.stdout


def test_acknowledged_alert_rearms_the_rule_for_new_lines(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=5)).timestamp()
    seed_streams(seed_campaign, t0)
    engine = make_engine(seed_campaign, now)
    engine.tick()
    campaign = load_campaign(seed_campaign)
    decisions.acknowledge(campaign, engine.log, "nan-loss", "v-r64", source="key")
    assert ("nan-loss", "v-r64") not in {(a.rule, a.run) for a in engine.tick().alerts}
    write_stream(seed_campaign, "v-r64", ['{"ts": %f, "step": 9, "loss": Infinity}' % (t0 + 9)])
    snapshot = engine.tick()
    assert ("nan-loss", "v-r64") in {(a.rule, a.run) for a in snapshot.alerts}
    assert [e["step"] for e in alert_events(seed_campaign) if e["rule"] == "nan-loss"] == [2, 9]


def test_lost_state_does_not_log_the_same_line_twice(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    seed_streams(seed_campaign, (now - timedelta(minutes=5)).timestamp())
    engine = make_engine(seed_campaign, now)
    engine.tick()
    for alert in engine.tick().alerts:
        decisions.acknowledge(load_campaign(seed_campaign), engine.log, alert.rule, alert.run, source="cli", key=alert.key)
    (seed_campaign / ".cockpit" / "metrics-state.json").unlink()
    assert make_engine(seed_campaign, now).tick().alerts == ()
    assert len(alert_events(seed_campaign)) == 3


def test_window_alerts_at_the_seed_thresholds(seed_campaign):
    clock = Clock(LOT_START)
    engine = Engine(load_campaign(seed_campaign), clock=clock, gpus=NoGpus())
    seen = []
    for hour in range(0, 73):
        clock.moment = LOT_START + timedelta(hours=hour)
        snapshot = engine.tick()
        seen += [(hour, a.key) for a in snapshot.alerts if a.rule == "lot-window" and (hour, a.key) not in seen]
    first = {}
    for hour, key in seen:
        first.setdefault(key, hour)
    assert first["lot-window:6h"] == 66 and first["lot-window:1h"] == 71 and first["lot-window:ended"] == 72
    assert all(a.run is None for a in snapshot.alerts if a.rule == "lot-window")
    logged = [e["key"] for e in alert_events(seed_campaign)]
    assert logged.count("lot-window:6h") == 1 and logged.count("lot-window:1h") == 1


def test_auto_stop_signals_only_the_runs_own_process(b200_campaign):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        t0 = time.time()
        write_stream(b200_campaign, "full-ft", [{"ts": t0, "event": "started", "pid": child.pid, "config_sha256": "d" * 64},
                                                '{"ts": %f, "step": 5, "loss": NaN}' % (t0 + 1)])
        engine = Engine(load_campaign(b200_campaign), gpus=NoGpus())
        snapshot = engine.tick()
        assert child.wait(10) == -signal.SIGTERM
        assert bystander.poll() is None
        stop = RunLog(b200_campaign).replay().stop_of("full-ft")
        assert stop["source"] == "auto" and stop["rule"] == "nan-loss"
        assert stop["signal"]["sent"] is True and stop["signal"]["pid"] == child.pid
        assert snapshot.run("full-ft").state == "stopped"
        engine.tick()
        assert len(RunLog(b200_campaign).replay().stops) == 1
    finally:
        for process in (child, bystander):
            process.kill()
            process.wait()


def test_auto_stop_with_a_reused_pid_records_the_stop_but_signals_nothing(b200_campaign):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        t0 = time.time() - 3600  # the run started an hour before this process existed: the pid was reused
        write_stream(b200_campaign, "full-ft", [{"ts": t0, "event": "started", "pid": bystander.pid, "config_sha256": "d" * 64},
                                                '{"ts": %f, "step": 5, "loss": NaN}' % (t0 + 1)])
        Engine(load_campaign(b200_campaign), gpus=NoGpus()).tick()
        stop = RunLog(b200_campaign).replay().stop_of("full-ft")
        assert stop["signal"]["sent"] is False and "reused" in stop["signal"]["detail"]
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_simulated_gpus_are_labelled_and_histories_bounded(seed_campaign):
    engine = make_engine(seed_campaign, LOT_START + timedelta(hours=1), gpus=FakeGpus(2))
    for _ in range(200):
        snapshot = engine.tick()
    assert snapshot.nvml.simulated and all(g.simulated for g in snapshot.gpus)
    assert len(snapshot.gpus[0].utilization_history) == 120
    assert to_json(snapshot)["nvml"]["simulated"] is True


def test_config_change_under_one_run_id_alerts(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=5)).timestamp()
    write_stream(seed_campaign, "ctrl-r1", [{"ts": t0, "event": "started", "pid": 4_000_000, "config_sha256": "a" * 64},
                                            {"ts": t0 + 9, "event": "started", "pid": 4_000_001, "config_sha256": "e" * 64}])
    assert ("config-changed", "ctrl-r1") in {(a.rule, a.run) for a in make_engine(seed_campaign, now).tick().alerts}


def test_watch_headless_logs_alerts_and_stops_on_sigterm(seed_campaign):
    seed_streams(seed_campaign, time.time() - 300)
    env = {**os.environ, "COCKPIT_NVML": "off", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "cockpit", "watch", str(seed_campaign), "--headless", "--interval", "0.2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 30
    while time.time() < deadline and len(alert_events(seed_campaign)) < 3:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert out.count("ALERT") == 3 and "watch stopped" in out
    assert len(alert_events(seed_campaign)) == 3


def test_watch_needs_headless(seed_campaign):
    result = run_cli("watch", str(seed_campaign))
    assert result.returncode == 2 and "--headless" in result.stderr


def test_status_gives_save_advice_for_a_running_run(seed_campaign):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        t0 = time.time()
        write_stream(seed_campaign, "ctrl-r1", [{"ts": t0, "event": "started", "pid": child.pid, "config_sha256": "a" * 64},
                                                {"ts": t0 + 1, "step": 10, "loss": 2.0},
                                                {"ts": t0 + 2, "event": "checkpoint", "path": "runs/ctrl-r1/checkpoints/s10.pt", "seconds": 300, "bytes": 1024}])
        snapshot = Engine(load_campaign(seed_campaign), gpus=NoGpus()).tick()
        run = snapshot.run("ctrl-r1")
        assert run.state == "running" and run.alive is True
        assert round(run.save_advice["interval_minutes"]) == 117  # Daly: δ = 5 min, M = 24 h
        assert run.save_advice["latest_final_save"] == "2026-12-03T06:55:00.000Z"  # lot end − 1 h retrieval − 5 min save
    finally:
        child.kill()
        child.wait()


def test_an_alert_the_disk_refuses_is_still_shown_marked_unrecorded(seed_campaign, monkeypatch):
    now = LOT_START + timedelta(hours=1)
    engine = make_engine(seed_campaign, now)  # started (plan frozen) while the disk had room
    seed_streams(seed_campaign, (now - timedelta(minutes=5)).timestamp())

    def full(*args, **kwargs):
        raise RunLogError("cannot write to runlog.jsonl: the disk is full; nothing was recorded")

    monkeypatch.setattr(RunLog, "append", full)
    monkeypatch.setattr("cockpit.record.runlog.Transaction.append", full)
    snapshot = engine.tick()
    assert sorted(a.rule for a in snapshot.alerts) == ["f1-floor", "nan-loss", "truncated-input"]
    assert all(a.seq is None and "NOT RECORDED" in a.message for a in snapshot.alerts)
    assert any("the disk is full" in n for n in snapshot.notices)
    assert alert_events(seed_campaign) == []


def test_the_demo_simulates_gpus_only_where_nvml_is_unavailable_and_says_so(monkeypatch):
    from cockpit.live.gpu_source import live_gpus

    monkeypatch.setenv("COCKPIT_NVML", "off")
    sampler = live_gpus(interval=0.05, simulate=1, name="RTX 4090", memory_total_bytes=24 * 2**30, power_limit_w=450.0)
    try:
        deadline = time.time() + 5
        snapshot = sampler.latest()
        while not snapshot.samples and time.time() < deadline:
            time.sleep(0.05)
            snapshot = sampler.latest()
    finally:
        sampler.close()
    assert snapshot.available is False and snapshot.simulated is True
    assert snapshot.reason.startswith("NVML unavailable: turned off by COCKPIT_NVML=off") and "SIMULATED" in snapshot.reason
    (gpu,) = snapshot.samples
    assert gpu.simulated and gpu.name == "RTX 4090 (simulated)" and gpu.memory_total_bytes == 24 * 2**30


def test_each_reported_start_is_logged_once_as_run_started(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=5)).timestamp()
    seed_streams(seed_campaign, t0)
    for _ in range(2):
        engine = make_engine(seed_campaign, now)
        engine.tick()
        engine.tick()
    starts = [e for e in RunLog(seed_campaign).read().events if e["type"] == "run_started"]
    assert sorted(e["run"] for e in starts) == ["ctrl-r1", "v-r16", "v-r64"]
    assert all(e["pid"] == 4_000_000 and e["config_sha256"] for e in starts)
    write_stream(seed_campaign, "ctrl-r1", [{"ts": t0 + 60, "event": "started", "pid": 4_000_001, "config_sha256": "a" * 64}])
    engine.tick()
    restarts = [e for e in RunLog(seed_campaign).read().events if e["type"] == "run_started" and e["run"] == "ctrl-r1"]
    assert [e["pid"] for e in restarts] == [4_000_000, 4_000_001]


def test_an_alert_the_disk_refused_stays_shown_and_is_written_once_there_is_room(seed_campaign):
    import errno

    from cockpit.record import runlog as runlog_module

    now = LOT_START + timedelta(hours=1)
    write_stream(seed_campaign, "ctrl-r1", ['{"ts": %f, "step": 2, "loss": NaN}' % (now.timestamp() - 300)])
    engine = make_engine(seed_campaign, now, signal_runs=False)
    real = runlog_module.os.fsync
    runlog_module.os.fsync = lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
    try:
        for _ in range(2):
            assert [a.rule for a in engine.tick().alerts] == ["nan-loss"]
    finally:
        runlog_module.os.fsync = real
    snapshot = engine.tick()
    assert [(a.rule, a.seq is not None) for a in snapshot.alerts] == [("nan-loss", True)]
    engine.tick()
    assert [e["rule"] for e in alert_events(seed_campaign)] == ["nan-loss"]


def test_a_line_read_again_does_not_silence_the_rule_for_later_lines(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = now.timestamp() - 300
    write_stream(seed_campaign, "ctrl-r1", ['{"ts": %f, "step": 2, "loss": NaN}' % t0])
    engine = make_engine(seed_campaign, now, signal_runs=False)
    engine.tick()
    engine.close()
    decisions.acknowledge(load_campaign(seed_campaign), RunLog(seed_campaign), "nan-loss", "ctrl-r1", source="key")
    (seed_campaign / ".cockpit" / "metrics-state.json").unlink()
    engine = make_engine(seed_campaign, now, signal_runs=False)
    engine.tick()  # line 1 read again: not logged twice
    write_stream(seed_campaign, "ctrl-r1", ['{"ts": %f, "step": 3, "loss": NaN}' % (t0 + 1)])
    engine.tick()
    assert [e["line"] for e in alert_events(seed_campaign) if e["rule"] == "nan-loss"] == [1, 2]


def test_standing_window_alerts_do_not_lock_and_read_the_run_log_every_tick(seed_campaign, monkeypatch):
    clock = Clock(LOT_START + timedelta(hours=70))
    engine = Engine(load_campaign(seed_campaign), clock=clock, gpus=NoGpus())
    engine.tick()
    engine.tick()
    taken = []
    real = RunLog.transaction
    monkeypatch.setattr(RunLog, "transaction", lambda self: taken.append(1) or real(self))
    for second in range(20):
        clock.moment += timedelta(seconds=1)
        engine.tick()
    assert taken == []


def test_status_with_a_file_named_cockpit_answers_plainly(seed_campaign):
    (seed_campaign / ".cockpit").write_text("not a folder")
    result = run_cli("status", str(seed_campaign))
    assert result.returncode in (0, 1) and "internal error" not in result.stderr and "Traceback" not in result.stderr


def test_looking_before_the_lot_starts_freezes_nothing(seed_campaign):
    clock = Clock(LOT_START - timedelta(hours=2))
    engine = Engine(load_campaign(seed_campaign), clock=clock, gpus=NoGpus())
    snapshot = engine.tick()
    assert not snapshot.clock.started
    assert not (seed_campaign / ".cockpit" / "plan.toml").exists() and RunLog(seed_campaign).read().events == []
    clock.moment = LOT_START + timedelta(minutes=1)
    engine.tick()
    assert (seed_campaign / ".cockpit" / "plan.toml").exists()
    assert [e["type"] for e in RunLog(seed_campaign).read().events] == ["campaign_started"]


# ---------------------------------------------------------------- built-in alerts (issue 13)

from cockpit.feed.reporter import process_identity  # noqa: E402
from cockpit.live.host import HostProcesses  # noqa: E402
from tests.live.test_procs import FakePsutil  # noqa: E402

HERE = {"host": "gpu-box", "pid_ns": "pid:[4026531836]"}  # the cockpit's own host and pid namespace


def fake_host(processes):
    """Fake host processes (pid → spec), seen from HERE."""
    fake = FakePsutil(processes)
    return fake, HostProcesses(fake, uid=1000, clock=lambda: LOT_START, use_pidfd=False, identity=HERE)


def started_line(t0, pid, *, where=HERE, sha="a"):
    return {"ts": t0, "event": "started", "pid": pid, **(where or {}), "config_sha256": sha * 64}


def keys_of(snapshot):
    """The alerts about runs (the lot's window, measured against the sample plan, aside)."""
    return [(a.rule, a.run) for a in snapshot.alerts if a.rule != "lot-window"]


def test_a_run_whose_process_dies_without_finished_raises_run_died_once(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=30)).timestamp()
    fake, host = fake_host({4242: {"created": t0 - 5}})
    write_stream(seed_campaign, "ctrl-r1", [started_line(t0, 4242)] + [{"ts": t0 + 60 * i, "step": 10 * i, "loss": 2.0} for i in range(1, 19)])
    clock = Clock(now)
    engine = Engine(load_campaign(seed_campaign), clock=clock, gpus=NoGpus(), host=host)
    snapshot = engine.tick()
    assert keys_of(snapshot) == [] and snapshot.run("ctrl-r1").state == "running"

    del fake.processes[4242]  # kill -9, the OOM killer, a segfault: no `finished` line
    snapshot = engine.tick()
    assert keys_of(snapshot) == [("run-died", "ctrl-r1")]
    (alert,) = snapshot.alerts
    assert "pid 4242" in alert.message and "last step 180" in alert.message and "12 min ago" in alert.message
    assert alert.severity == "critical" and snapshot.run("ctrl-r1").state == "ended"
    assert to_json(snapshot)["alerts"][0]["rule"] == "run-died"
    for _ in range(3):
        engine.tick()
    assert [e["rule"] for e in alert_events(seed_campaign)] == ["run-died"]

    decisions.acknowledge(load_campaign(seed_campaign), engine.log, "run-died", "ctrl-r1", source="key")
    assert keys_of(engine.tick()) == []  # the same death is not said again
    engine.close()
    restarted = Engine(load_campaign(seed_campaign), clock=clock, gpus=NoGpus(), host=host)
    assert keys_of(restarted.tick()) == []

    # relaunched under the same id, then killed again: a new death, a new alert
    fake.processes[4343] = {"created": t0 + 1200}
    write_stream(seed_campaign, "ctrl-r1", [started_line(t0 + 1201, 4343), {"ts": t0 + 1260, "step": 190, "loss": 2.0}])
    assert keys_of(restarted.tick()) == []
    del fake.processes[4343]
    assert keys_of(restarted.tick()) == [("run-died", "ctrl-r1")]
    assert [e["pid"] for e in alert_events(seed_campaign)] == [4242, 4343]


def test_a_reused_pid_is_not_the_run_so_the_run_died(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=10)).timestamp()
    _, host = fake_host({4242: {"created": t0 + 300}})  # a process born after the run's start holds its pid
    write_stream(seed_campaign, "ctrl-r1", [started_line(t0, 4242), {"ts": t0 + 60, "step": 5, "loss": 2.0}])
    snapshot = Engine(load_campaign(seed_campaign), clock=Clock(now), gpus=NoGpus(), host=host).tick()
    assert keys_of(snapshot) == [("run-died", "ctrl-r1")] and "another process" in snapshot.alerts[0].message


def test_a_finished_or_stopped_run_never_raises_run_died(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=10)).timestamp()
    _, host = fake_host({})
    write_stream(seed_campaign, "ctrl-r1", [started_line(t0, 4242), {"ts": t0 + 60, "event": "finished", "status": "ok"}])
    write_stream(seed_campaign, "v-r16", [started_line(t0, 4243), {"ts": t0 + 60, "step": 5, "loss": 2.0}])
    engine = Engine(load_campaign(seed_campaign), clock=Clock(now), gpus=NoGpus(), host=host)
    decisions.record_stop(load_campaign(seed_campaign), engine.log, "v-r16", reason="plateau", source="cli")
    snapshot = engine.tick()
    assert keys_of(snapshot) == [] and snapshot.run("ctrl-r1").state == "finished" and snapshot.run("v-r16").state == "stopped"


def test_a_pid_from_another_namespace_or_host_is_never_judged_and_stalled_goes_on_silence(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=30)).timestamp()
    _, host = fake_host({})  # none of these pids exists here: they are the container's or another box's
    write_stream(seed_campaign, "ctrl-r1", [started_line(t0, 17, where={"host": "gpu-box", "pid_ns": "pid:[4026532999]"}),
                                            {"ts": t0 + 60, "step": 5, "loss": 2.0}])
    write_stream(seed_campaign, "v-r16", [started_line(t0, 18, where={"host": "trainer-7f3c", "pid_ns": HERE["pid_ns"]}),
                                          {"ts": t0 + 60, "step": 5, "loss": 2.0}])
    write_stream(seed_campaign, "v-r64", [{"ts": t0 + 60, "step": 5, "loss": 2.0}])  # no pid reported at all
    snapshot = Engine(load_campaign(seed_campaign), clock=Clock(now), gpus=NoGpus(), host=host).tick()
    assert sorted(keys_of(snapshot)) == [("stalled", "ctrl-r1"), ("stalled", "v-r16"), ("stalled", "v-r64")]
    assert all("cannot be seen" in a.message for a in snapshot.alerts if a.rule == "stalled")
    assert all(r.state == "running" and r.alive is None for r in snapshot.runs)


def test_a_start_without_host_and_pid_ns_is_judged_as_before_without_run_died(seed_campaign):
    """Streams older than these fields: the pid is looked up on this host as before (its state
    says "ended"), but `run-died` is raised only for a pid whose namespace is known to be ours."""
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=5)).timestamp()
    _, host = fake_host({})
    write_stream(seed_campaign, "ctrl-r1", [started_line(t0, 4242, where=None), {"ts": t0 + 60, "step": 5, "loss": 2.0}])
    snapshot = Engine(load_campaign(seed_campaign), clock=Clock(now), gpus=NoGpus(), host=host).tick()
    assert keys_of(snapshot) == [] and snapshot.run("ctrl-r1").state == "ended"


def test_a_real_child_killed_with_sigkill_raises_run_died(seed_campaign):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        t0 = time.time()
        write_stream(seed_campaign, "ctrl-r1", [started_line(t0, child.pid, where=process_identity()), {"ts": t0, "step": 3, "loss": 2.0}])
        engine = Engine(load_campaign(seed_campaign), gpus=NoGpus())
        assert engine.tick().run("ctrl-r1").state == "running"
        child.kill()
        child.wait()
        snapshot = engine.tick()
        assert keys_of(snapshot) == [("run-died", "ctrl-r1")] and f"pid {child.pid}" in snapshot.alerts[0].message
    finally:
        child.kill()
        child.wait()


def test_a_stopped_run_that_goes_on_writing_raises_stopped_still_running_once(seed_campaign):
    stopped_at = LOT_START + timedelta(hours=1)
    t0 = (stopped_at - timedelta(minutes=30)).timestamp()
    _, host = fake_host({4242: {"created": t0 - 5}})
    write_stream(seed_campaign, "ctrl-r1", [started_line(t0, 4242), {"ts": t0 + 1740, "step": 5, "loss": 2.0}])
    clock = Clock(stopped_at)
    engine = Engine(load_campaign(seed_campaign), clock=clock, gpus=NoGpus(), host=host)
    engine.tick()
    decisions.record_stop(load_campaign(seed_campaign), engine.log, "ctrl-r1", reason="plateau", source="cli")  # no --signal
    write_stream(seed_campaign, "ctrl-r1", [{"ts": stopped_at.timestamp() + 30, "step": 6, "loss": 2.0}])  # a line in flight
    clock.moment = stopped_at + timedelta(minutes=1)
    assert keys_of(engine.tick()) == []
    write_stream(seed_campaign, "ctrl-r1", [{"ts": stopped_at.timestamp() + 600, "step": 60, "loss": 1.9}])
    clock.moment = stopped_at + timedelta(minutes=11)
    snapshot = engine.tick()
    assert keys_of(snapshot) == [("stopped-still-running", "ctrl-r1")]
    message = snapshot.alerts[0].message
    assert "still paying" in message and "kill -TERM 4242" in message and "no signal was sent" in message
    for minute in range(12, 20):
        write_stream(seed_campaign, "ctrl-r1", [{"ts": stopped_at.timestamp() + 60 * minute, "step": minute * 10, "loss": 1.9}])
        clock.moment = stopped_at + timedelta(minutes=minute)
        engine.tick()
    decisions.acknowledge(load_campaign(seed_campaign), engine.log, "stopped-still-running", "ctrl-r1", source="key")
    assert keys_of(engine.tick()) == []
    assert [e["rule"] for e in alert_events(seed_campaign) if e["rule"] != "lot-window"] == ["stopped-still-running"]


def test_an_unreadable_metrics_path_raises_stream_unreadable_and_never_blocks_a_tick(seed_campaign):
    import threading

    fifo = seed_campaign / "runs" / "ctrl-r1" / "metrics.jsonl"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    (seed_campaign / "runs" / "v-r16" / "metrics.jsonl").mkdir(parents=True)
    engine = make_engine(seed_campaign, LOT_START + timedelta(hours=1))
    snapshots = []
    worker = threading.Thread(target=lambda: snapshots.extend([engine.tick(), engine.tick()]), daemon=True)
    worker.start()
    worker.join(10)
    assert len(snapshots) == 2, "a FIFO at the metrics path must never block a tick"
    snapshot = snapshots[-1]
    assert sorted(keys_of(snapshot)) == [("stream-unreadable", "ctrl-r1"), ("stream-unreadable", "v-r16")]
    assert {r.id: r.state for r in snapshot.runs} == {"ctrl-r1": "unreadable", "v-r16": "unreadable", "v-r64": "planned"}
    assert "FIFO" in next(a.message for a in snapshot.alerts if a.run == "ctrl-r1")
    assert "a folder" in next(a.message for a in snapshot.alerts if a.run == "v-r16")
    assert len(alert_events(seed_campaign)) == 2
    result = run_cli("status", str(seed_campaign), "--json", timeout=30)
    assert result.returncode == 1
    body = json.loads(result.stdout)
    assert {r["id"]: r["state"] for r in body["runs"]}["ctrl-r1"] == "unreadable"
    # the CLI reads the real clock: as the sample lot's days pass, its plan stops fitting (lot-window)
    assert sorted(a["rule"] for a in body["alerts"] if a["rule"] != "lot-window") == ["stream-unreadable", "stream-unreadable"]


def test_folders_under_runs_for_undeclared_ids_are_said_once_as_a_notice(seed_campaign):
    write_stream(seed_campaign, "v_r16", [{"ts": LOT_START.timestamp(), "step": 1, "loss": 2.0}])  # a typo of v-r16
    write_stream(seed_campaign, "old-r0", [{"ts": LOT_START.timestamp(), "step": 1, "loss": 2.0}])
    write_stream(seed_campaign, "ctrl-r1", [{"ts": LOT_START.timestamp(), "step": 1, "loss": 2.0}])
    (seed_campaign / "runs" / "scratch").mkdir()  # no metrics in it: not a run's folder
    engine = make_engine(seed_campaign, LOT_START + timedelta(minutes=10))
    for _ in range(3):
        snapshot = engine.tick()
    said = [n for n in snapshot.notices if "does not declare" in n]
    assert len(said) == 1 and "old-r0, v_r16" in said[0] and "ctrl-r1" not in said[0] and "scratch" not in said[0]
    assert not any("declare" in a.message for a in snapshot.alerts) and alert_events(seed_campaign) == []
    result = run_cli("status", str(seed_campaign))
    assert result.stdout.count("does not declare") == 1 and "note: runs/ holds metrics of 2 ids" in result.stdout


def test_a_rewritten_stream_keeps_its_new_alert_at_the_same_line_after_an_ack(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=10)).timestamp()
    path = write_stream(seed_campaign, "ctrl-r1", [{"ts": t0, "event": "started", "pid": 4_000_000, "config_sha256": "a" * 64},
                                                   '{"ts": %f, "step": 2, "loss": NaN}' % (t0 + 2)])
    inode = path.stat().st_ino
    engine = make_engine(seed_campaign, now, signal_runs=False)
    engine.tick()
    decisions.acknowledge(load_campaign(seed_campaign), engine.log, "nan-loss", "ctrl-r1", source="cli")
    engine.tick()
    # the rerun rewrites its file: the same inode number, a NaN on line 2 again
    with open(path, "w") as handle:
        handle.write(json.dumps({"ts": t0 + 100, "event": "started", "pid": 4_000_000, "config_sha256": "a" * 64}) + "\n")
        handle.write('{"ts": %f, "step": 2, "loss": NaN}\n' % (t0 + 102))
    assert path.stat().st_ino == inode
    snapshot = engine.tick()
    assert ("nan-loss", "ctrl-r1") in keys_of(snapshot)
    logged = [e for e in alert_events(seed_campaign) if e["rule"] == "nan-loss"]
    assert [e["line"] for e in logged] == [2, 2] and logged[0]["stream_generation"] != logged[1]["stream_generation"]


def test_the_pilot_decision_falls_due_once_and_clears_when_decided(b200_campaign):
    campaign = load_campaign(b200_campaign)
    t0 = (campaign.lot.start + timedelta(hours=1)).timestamp()
    _, host = fake_host({4242: {"created": t0 - 5}})
    write_stream(b200_campaign, "full-ft", [started_line(t0, 4242, sha="d"), {"ts": t0 + 60, "step": 5, "loss": 2.0}])
    clock = Clock(campaign.lot.start + timedelta(hours=4, minutes=59))
    engine = Engine(campaign, clock=clock, gpus=NoGpus(), host=host)
    snapshot = engine.tick()
    assert "pilot-due" not in [a.rule for a in snapshot.alerts] and snapshot.pilot_due_at is None
    clock.moment = campaign.lot.start + timedelta(hours=5)
    for _ in range(3):
        snapshot = engine.tick()
        clock.moment += timedelta(minutes=1)
    (alert,) = [a for a in snapshot.alerts if a.rule == "pilot-due"]
    assert alert.run == "full-ft" and "4 h" in alert.message and "cockpit decide" in alert.message
    assert snapshot.pilot_due_at == campaign.lot.start + timedelta(hours=5)
    assert to_json(snapshot)["pilot_due_at"] == iso(campaign.lot.start + timedelta(hours=5))
    assert [e["rule"] for e in alert_events(b200_campaign)].count("pilot-due") == 1
    decisions.record_decision(campaign, engine.log, "continue", source="cli")
    snapshot = engine.tick()
    assert "pilot-due" not in [a.rule for a in snapshot.alerts] and snapshot.pilot_due_at is None
    assert [e["rule"] for e in RunLog(b200_campaign).read().events if e["type"] == "ack"] == ["pilot-due"]
    engine.tick()
    assert [e["rule"] for e in alert_events(b200_campaign)].count("pilot-due") == 1


def test_watch_prints_a_built_in_alert_once_and_is_not_held_by_a_fifo(seed_campaign):
    fifo = seed_campaign / "runs" / "ctrl-r1" / "metrics.jsonl"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    env = {**os.environ, "COCKPIT_NVML": "off", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "cockpit", "watch", str(seed_campaign), "--headless", "--interval", "0.2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 30
    while time.time() < deadline and not any(e["rule"] == "stream-unreadable" for e in alert_events(seed_campaign)):
        time.sleep(0.2)
    time.sleep(1.0)  # a few more ticks: still said once
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert out.count("ALERT [stream-unreadable]") == 1 and "FIFO" in out


def test_a_run_that_writes_finished_and_exits_between_read_and_check_did_not_die(seed_campaign):
    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=10)).timestamp()
    fake, host = fake_host({4242: {"created": t0 - 5}})
    write_stream(seed_campaign, "ctrl-r1", [started_line(t0, 4242), {"ts": t0 + 60, "step": 5, "loss": 2.0}])
    engine = Engine(load_campaign(seed_campaign), clock=Clock(now), gpus=NoGpus(), host=host)
    engine.tick()
    real_process = fake.Process

    def finishes_then_exits(pid):
        if pid == 4242 and pid in fake.processes:
            write_stream(seed_campaign, "ctrl-r1", [{"ts": t0 + 120, "event": "finished", "status": "ok"}])
            del fake.processes[pid]
        return real_process(pid)

    fake.Process = finishes_then_exits
    snapshot = engine.tick()
    assert keys_of(snapshot) == [] and snapshot.run("ctrl-r1").state == "finished"


def test_an_acknowledged_unreadable_stream_fixed_while_no_cockpit_watched_is_said_again(seed_campaign):
    folder = seed_campaign / "runs" / "ctrl-r1" / "metrics.jsonl"
    folder.mkdir(parents=True)
    engine = make_engine(seed_campaign, LOT_START + timedelta(hours=1))
    assert keys_of(engine.tick()) == [("stream-unreadable", "ctrl-r1")]
    decisions.acknowledge(load_campaign(seed_campaign), engine.log, "stream-unreadable", "ctrl-r1", source="key")
    assert keys_of(engine.tick()) == []  # still a folder, acknowledged: not said again
    engine.close()
    folder.rmdir()
    write_stream(seed_campaign, "ctrl-r1", [{"ts": LOT_START.timestamp() + 3500, "step": 1, "loss": 2.0}])
    engine = make_engine(seed_campaign, LOT_START + timedelta(hours=1))
    assert keys_of(engine.tick()) == []
    engine.close()
    (seed_campaign / "runs" / "ctrl-r1" / "metrics.jsonl").unlink()
    (seed_campaign / "runs" / "ctrl-r1" / "metrics.jsonl").mkdir()
    engine = make_engine(seed_campaign, LOT_START + timedelta(hours=1))
    assert keys_of(engine.tick()) == [("stream-unreadable", "ctrl-r1")]


def test_alerts_before_the_lot_starts_wait_for_campaign_started(seed_campaign):
    toml = seed_campaign / "campaign.toml"
    toml.write_text(toml.read_text().replace("hours = 12                     # end", "hours = 60 # end", 1))  # the plan overruns
    clock = Clock(LOT_START - timedelta(hours=2))
    engine = Engine(load_campaign(seed_campaign), clock=clock, gpus=NoGpus())
    snapshot = engine.tick()
    overrun = [a for a in snapshot.alerts if a.key == "lot-window:overrun"]
    assert overrun and overrun[0].seq is None and "the lot has not started" in overrun[0].message
    assert RunLog(seed_campaign).read().events == [] and not (seed_campaign / ".cockpit" / "plan.toml").exists()
    clock.moment = LOT_START + timedelta(minutes=1)
    engine.tick()
    types = [e["type"] for e in RunLog(seed_campaign).read().events]
    assert types[0] == "campaign_started" and "alert" in types


def test_a_one_shot_status_saves_its_reading_position_once(seed_campaign, monkeypatch):
    """The tick that read new lines saves; closing right after has nothing more to save (each
    save is a whole state file written and fsynced: a status paid it twice)."""
    from cockpit.live import engine as engine_module

    now = LOT_START + timedelta(hours=1)
    t0 = (now - timedelta(minutes=5)).timestamp()
    seed_streams(seed_campaign, t0)
    saves = []
    real_save = engine_module.save_state
    monkeypatch.setattr(engine_module, "save_state", lambda *a, **k: saves.append(1) or real_save(*a, **k))
    engine = make_engine(seed_campaign, now)
    engine.tick()
    engine.close()
    assert len(saves) == 1
    write_stream(seed_campaign, "v-r64", ['{"ts": %f, "step": 9, "loss": 0.5}' % (t0 + 9)])
    engine = make_engine(seed_campaign, now)
    engine.tick()
    engine.close()
    assert len(saves) == 2
    quiet = make_engine(seed_campaign, now)  # nothing new: the position is saved once, at close
    quiet.tick()
    quiet.close()
    assert len(saves) == 3
    state = json.loads((seed_campaign / ".cockpit" / "metrics-state.json").read_text())
    assert state["streams"]["v-r64"]["position"]["lines"] == engine.streams["v-r64"].position.lines
