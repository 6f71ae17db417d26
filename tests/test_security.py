"""Security (issue #9 item 4): what the cockpit writes is never world-accessible, it never runs a
shell string, and the only signal it sends reaches the run's own process — same campaign, same
user, same start time — never a reused pid."""

from __future__ import annotations

import ast
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from cockpit.runlog import RunLog
from tests.conftest import ROOT

COCKPIT = ROOT / "cockpit"
ENV = {**os.environ, "COCKPIT_NVML": "off", "NO_COLOR": "1"}


def cockpit(*args: str, umask: int | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cockpit", *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=timeout, umask=-1 if umask is None else umask)


def write_stream(directory: Path, run_id: str, records) -> Path:
    path = directory / "runs" / run_id / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return path


# ---------------------------------------------------------------------------------------------
# Permissions


def test_nothing_the_cockpit_writes_is_world_accessible_even_under_umask_0(seed_campaign):
    write_stream(seed_campaign, "ctrl-r1", [{"ts": time.time(), "step": i, "loss": 1.0} for i in range(5)])
    assert cockpit("note", str(seed_campaign), "umask 0 on this box", umask=0).returncode == 0
    assert cockpit("status", str(seed_campaign), "--json", umask=0).returncode in (0, 1)
    assert cockpit("stop", str(seed_campaign), "ctrl-r1", "--reason", "test", umask=0).returncode == 0
    state = seed_campaign / ".cockpit"
    written = [seed_campaign / "runlog.jsonl", state, *state.rglob("*")]
    assert len(written) >= 4  # the run log, .cockpit/, the frozen plan, the reading positions
    assert {p.name for p in written} >= {"runlog.jsonl", ".cockpit", "plan.toml", "metrics-state.json"}
    for path in written:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode & 0o007 == 0, f"{path} is {oct(mode)}: world bits set"
        assert mode & 0o020 == 0, f"{path} is {oct(mode)}: group-writable"


@pytest.mark.parametrize("umask", [0, 0o002])
def test_a_first_status_creates_nothing_the_group_or_world_can_write(seed_campaign, umask):
    """`status` may be the first command on a campaign: .cockpit/ and all it writes there keep the
    same modes as when a recording created them first."""
    write_stream(seed_campaign, "ctrl-r1", [{"ts": time.time(), "step": 1, "loss": 1.0}])
    assert cockpit("status", str(seed_campaign), "--json", umask=umask).returncode in (0, 1)
    state = seed_campaign / ".cockpit"
    written = [state, *state.rglob("*")]
    assert {p.name for p in written} >= {".cockpit", "validated", "metrics-state.json"}
    for path in written:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode & 0o022 == 0 and mode & 0o007 == 0, f"{path} is {oct(mode)}"


# ---------------------------------------------------------------------------------------------
# No shell, ever

SHELL_CALLS = {
    ("os", "system"), ("os", "popen"), ("os", "spawnl"), ("os", "spawnlp"), ("os", "spawnv"), ("os", "spawnvp"),
    ("subprocess", "getoutput"), ("subprocess", "getstatusoutput"), ("asyncio", "create_subprocess_shell"),
    ("pty", "spawn"),
}
PROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}


def python_sources() -> list[Path]:
    files = sorted(COCKPIT.rglob("*.py"))
    assert len(files) > 10
    return files


def dotted(node: ast.AST) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def test_no_shell_string_is_ever_run_anywhere_in_the_package():
    problems = []
    for path in python_sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        imported = {alias.asname or alias.name: f"{node.module}.{alias.name}"
                    for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
                    for alias in node.names}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = dotted(node.func)
            if len(name) == 1 and name[0] in imported:  # from os import system; system(...)
                name = tuple(imported[name[0]].split("."))
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if name[-2:] in SHELL_CALLS:
                problems.append(f"{where}: {'.'.join(name)}() runs a shell")
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant) and keyword.value.value is False):
                    problems.append(f"{where}: shell={ast.unparse(keyword.value)}")
            if name[-1:] and name[-1] in PROCESS_CALLS and name[0] in ("subprocess", "asyncio") and node.args:
                first = node.args[0]
                if isinstance(first, (ast.Constant, ast.JoinedStr, ast.BinOp)) and not isinstance(getattr(first, "value", None), bytes):
                    problems.append(f"{where}: {'.'.join(name)}() given a command string, not an argument list")
    assert problems == []


def test_the_scan_would_catch_a_shell(tmp_path):
    # the scanner itself can fail: a file with each forbidden form is reported
    bad = 'import os, subprocess\nos.system("ls")\nsubprocess.run("ls -l", shell=True)\nsubprocess.Popen(f"rm {x}")\n'
    tree = ast.parse(bad)
    calls = [dotted(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert ("os", "system") in calls
    assert any(k.arg == "shell" for n in ast.walk(tree) if isinstance(n, ast.Call) for k in n.keywords)
    assert any(isinstance(n.args[0], ast.JoinedStr) for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args)


def test_a_deliverable_reload_command_runs_without_a_shell_and_with_a_timeout(tmp_path):
    from cockpit.closing import run_reload_command

    marker = tmp_path / "shell-ran"
    ok, detail = run_reload_command(f"echo $HOME > {marker} ; touch {marker}", tmp_path, timeout=30)
    assert ok  # echo ran, with '$HOME', '>', the path, ';', 'touch' as plain arguments
    assert not marker.exists()

    started = time.monotonic()
    ok, detail = run_reload_command(f"{sys.executable} -c 'import time; time.sleep(30)'", tmp_path, timeout=0.5)
    assert not ok and "did not finish within 0.5 s" in detail
    assert time.monotonic() - started < 10


# ---------------------------------------------------------------------------------------------
# `stop --signal`: the run's own process, nobody else's


def sleeper(**kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs)


def stop_event(directory: Path, run_id: str) -> dict:
    return RunLog(directory).replay().stop_of(run_id)


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_stop_signal_reaches_the_runs_own_process(seed_campaign, processes):
    run = sleeper()
    processes.append(run)
    created = psutil.Process(run.pid).create_time()
    write_stream(seed_campaign, "ctrl-r1", [{"ts": created + 1, "event": "started", "pid": run.pid, "config_sha256": "a" * 64}])
    result = cockpit("stop", str(seed_campaign), "ctrl-r1", "--reason", "loss plateaued", "--signal")
    assert result.returncode == 0, result.stderr
    assert "SIGTERM sent" in result.stdout
    assert run.wait(10) == -15
    signal_outcome = stop_event(seed_campaign, "ctrl-r1")["signal"]
    assert signal_outcome["sent"] is True and signal_outcome["pid"] == run.pid


def test_stop_signal_never_reaches_a_reused_pid(seed_campaign, processes):
    bystander = sleeper()  # took the pid after the run (which started an hour ago) had ended
    processes.append(bystander)
    write_stream(seed_campaign, "ctrl-r1", [{"ts": time.time() - 3600, "event": "started", "pid": bystander.pid, "config_sha256": "a" * 64}])
    result = cockpit("stop", str(seed_campaign), "ctrl-r1", "--reason", "diverged", "--signal")
    assert result.returncode == 1
    assert "no signal sent" in result.stdout and "reused" in result.stdout
    assert "Traceback" not in result.stderr
    time.sleep(0.2)
    assert bystander.poll() is None
    stop = stop_event(seed_campaign, "ctrl-r1")
    assert stop["reason"] == "diverged" and stop["source"] == "cli"  # the decision is recorded all the same
    assert stop["signal"]["requested"] is True and stop["signal"]["sent"] is False
    assert stop["signal"]["outcome"] == "reused" and stop["signal"]["pid"] == bystander.pid


def test_stop_signal_never_reaches_another_users_process(seed_campaign, processes):
    if os.geteuid() != 0:
        pytest.skip("starting a process as another user needs root")
    try:
        nobody = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user 'nobody' on this machine")
    sleep = shutil.which("sleep")
    if sleep is None:
        pytest.skip("no sleep program")
    foreign = subprocess.Popen([sleep, "60"], user=nobody)  # a program 'nobody' may execute
    processes.append(foreign)
    created = psutil.Process(foreign.pid).create_time()
    write_stream(seed_campaign, "ctrl-r1", [{"ts": created + 1, "event": "started", "pid": foreign.pid, "config_sha256": "a" * 64}])
    result = cockpit("stop", str(seed_campaign), "ctrl-r1", "--reason", "not mine", "--signal")
    assert result.returncode == 1 and "another user" in result.stdout
    time.sleep(0.2)
    assert foreign.poll() is None
    assert stop_event(seed_campaign, "ctrl-r1")["signal"]["outcome"] == "foreign-user"


def test_stop_signal_needs_the_runs_reported_pid(seed_campaign, processes):
    # a run that never wrote `started`: no pid is guessed (not from NVML, not from a process name)
    result = cockpit("stop", str(seed_campaign), "v-r16", "--reason", "never started", "--signal")
    assert result.returncode == 1 and "no pid" in result.stdout
    assert stop_event(seed_campaign, "v-r16")["signal"]["sent"] is False


@pytest.mark.parametrize("pid", [0, 1, -1, 2**40])
def test_stop_signal_refuses_init_process_groups_and_impossible_pids(seed_campaign, pid, capsys):
    from cockpit.cli import main  # in-process: the same entry point, without an interpreter start each

    write_stream(seed_campaign, "ctrl-r1", [{"ts": time.time(), "event": "started", "pid": pid, "config_sha256": "a" * 64}])
    assert main(["stop", str(seed_campaign), "ctrl-r1", "--reason", "x", "--signal"]) == 1
    assert "no signal sent" in capsys.readouterr().out
    assert stop_event(seed_campaign, "ctrl-r1")["signal"]["sent"] is False


def test_stop_of_a_run_not_in_the_campaign_records_and_signals_nothing(seed_campaign, processes):
    bystander = sleeper()
    processes.append(bystander)
    write_stream(seed_campaign, "intruder", [{"ts": time.time(), "event": "started", "pid": bystander.pid, "config_sha256": "a" * 64}])
    result = cockpit("stop", str(seed_campaign), "intruder", "--reason", "x", "--signal")
    assert result.returncode == 2 and "no run 'intruder'" in result.stderr
    assert bystander.poll() is None
    assert RunLog(seed_campaign).read().events == []
