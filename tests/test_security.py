"""Security (issue #9 item 4): what the cockpit writes is never world-accessible, it never runs a
shell string, and the only signal it sends reaches the run's own process — same campaign, same
user, same start time — never a reused pid."""

from __future__ import annotations

import ast
import io
import json
import os
import pickle
import pwd
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import psutil
import pytest

from cockpit.record.runlog import RunLog
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
    assert {p.name for p in written} >= {".cockpit", "metrics-state.json"}  # no validated-campaign cache any more
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
    from cockpit.close.reloaders import run_reload_command

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


# ---------------------------------------------------------------------------------------------
# A checkpoint never runs code: `verify-resume` and the closing's reload vet the pickle's globals
# (pickletools, no unpickling) and unpickle only an allowlist, and only with --trust-checkpoint


# A stand-in for torch in the reload's fresh interpreter, faithful to what matters here: with
# weights_only=True it refuses any global beyond tensors; with weights_only=False it unpickles with
# the given pickle module (through a find_class wrapper, as torch does), else with plain pickle,
# which runs whatever the file names. The old reload retried like that and ran the payload.
FAKE_TORCH = '''
import io, pickle, zipfile
__version__ = "0.0+fake"

class Tensor:
    pass

def is_tensor(x):
    return isinstance(x, Tensor)

def load(path, map_location=None, weights_only=True, mmap=False, pickle_module=None):
    if weights_only and pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    with zipfile.ZipFile(path) as archive:
        data = archive.read(min((n for n in archive.namelist() if n.endswith("data.pkl")), key=len))
    if weights_only:
        class Weights(pickle.Unpickler):
            def find_class(self, module, name):
                if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                    return super().find_class(module, name)
                raise pickle.UnpicklingError(
                    "Weights only load failed. Unsupported global: GLOBAL %s.%s was not an allowed global by default" % (module, name))
        return Weights(io.BytesIO(data)).load()
    base = (pickle_module or pickle).Unpickler

    class Wrapper(base):
        def find_class(self, module, name):
            return super().find_class(module, name)
    return Wrapper(io.BytesIO(data), encoding="utf-8").load()
'''


@pytest.fixture
def fake_torch(tmp_path, monkeypatch):
    shadow = tmp_path / "fake-torch"
    (shadow / "torch").mkdir(parents=True)
    (shadow / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (shadow / "torch" / "_utils.py").write_text("def _rebuild_tensor_v2(*args):\n    from torch import Tensor\n    return Tensor()\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    return shadow


class _Rebuild:  # pickled under torch's name for its tensor rebuild function
    def __reduce__(self):
        return (os.getcwd, ())


class Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def torch_zip(path: Path, obj, protocol: int = 2) -> Path:
    """A torch.save-shaped zip: archive/data.pkl plus one stored tensor member."""
    data = pickle.dumps(obj, protocol=protocol)
    data = data.replace(b"posix\ngetcwd\n", b"torch._utils\n_rebuild_tensor_v2\n")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data)
        archive.writestr("archive/data/0", bytes(range(64)))
        archive.writestr("archive/version", "3\n")
    return path


def resume_point(**extra) -> dict:
    return {"model": {"w": _Rebuild()}, "optimizer": {"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]},
            "step": 7, **extra}


def test_the_globals_scan_walks_opcodes_and_runs_nothing(tmp_path):
    from cockpit.checkpoints import scan as resume_scan

    marker = tmp_path / "MARKER"
    for protocol in (0, 2, 4, 5):
        data = pickle.dumps({"a": Payload(marker), "b": [Payload(marker)], "c": argparse_namespace()}, protocol=protocol)
        found = resume_scan.pickle_globals(io.BytesIO(data))
        assert {f"{os.system.__module__}.system", "argparse.Namespace"} <= set(found), protocol
        assert f"{os.system.__module__}.system" in resume_scan.would_run_code(found)
        if protocol >= 2:  # protocol 0 builds objects through copy_reg, which is no allowlisted global
            assert set(found) == {f"{os.system.__module__}.system", "argparse.Namespace"}
            assert resume_scan.would_run_code(found) == [f"{os.system.__module__}.system"]
            assert resume_scan.needs_trust(found) == ["argparse.Namespace"]
    # protocol 4 names a global by two strings on the stack; the second one from the same module
    # comes from the memo
    assert resume_scan.pickle_globals(io.BytesIO(pickle.dumps([os.system, os.getcwd], protocol=4))) == [
        f"{os.system.__module__}.system", f"{os.getcwd.__module__}.getcwd"]
    path = torch_zip(tmp_path / "evil.pt", resume_point(evil=Payload(marker)))
    scan = resume_scan.scan_torch_file(path)
    assert scan.would_run_code == ["posix.system"] and not marker.exists()


def test_the_legacy_torch_format_is_vetted_pickle_by_pickle(tmp_path):
    """torch's pre-1.6 format: five pickles back to back (magic, protocol, system info, the object,
    the storage keys), then raw bytes; code hidden in the last one is found too."""
    from cockpit.resume import verify as resume
    from cockpit.checkpoints import scan as resume_scan

    marker = tmp_path / "MARKER"
    path = tmp_path / "old.pt"
    with open(path, "wb") as handle:
        for part in (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True},
                     {"optimizer": {"state": {}, "param_groups": []}, "step": 7}, ["0", Payload(marker)]):
            pickle.dump(part, handle, protocol=2)
        handle.write(b"\0" * 64)
    scan = resume_scan.scan_torch_file(path)
    assert scan.would_run_code == ["posix.system"]
    report = resume.verify_resume(path)
    assert report.would_run_code == ["posix.system"] and not report.ok and not marker.exists()


def argparse_namespace():
    import argparse

    return argparse.Namespace(lr=0.1, fp16=False)


@pytest.mark.parametrize("trust", [False, True])
def test_verify_resume_never_runs_the_code_in_a_checkpoint(tmp_path, fake_torch, trust):
    marker = tmp_path / "MARKER"
    path = torch_zip(tmp_path / "evil.pt", resume_point(evil=Payload(marker)))
    flag = ["--trust-checkpoint"] if trust else []
    env = {**ENV, "PYTHONPATH": str(fake_torch)}
    for args in ([], ["--json"]):
        done = subprocess.run([sys.executable, "-m", "cockpit", "verify-resume", str(path), *flag, *args],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, done.stdout + done.stderr
        assert not marker.exists(), "the checkpoint's payload ran"
        assert "--trust-checkpoint" in done.stdout and "posix.system" in done.stdout
        assert "Traceback" not in done.stderr
    payload = json.loads(done.stdout)
    assert payload["would_run_code"] == ["posix.system"] and payload["reload_ok"] is False
    assert payload["trust_checkpoint"] is trust
    assert payload["resume_point"] is True  # what it holds is fine; what it would run is not


def test_the_reload_child_admits_only_the_vetted_globals(tmp_path, fake_torch):
    """Even were the vetting wrong, the unpickler in the fresh process resolves no other global."""
    from cockpit.checkpoints import scan as resume_scan
    from cockpit.resume import reload as resume_reload

    marker = tmp_path / "MARKER"
    path = torch_zip(tmp_path / "evil.pt", resume_point(evil=Payload(marker)))
    forged = {str(path): resume_scan.Vetting(globals=["torch._utils._rebuild_tensor_v2", "collections.OrderedDict"])}
    reload = resume_reload.reload_in_new_process([(path, "torch")], trust=True, vetting=forged)
    assert not reload.ok and not marker.exists()
    assert "would run code: posix.system" in reload.error


def test_trust_checkpoint_loads_allowlisted_globals_and_only_with_the_flag(tmp_path, fake_torch):
    from cockpit.resume import verify as resume

    path = torch_zip(tmp_path / "args.pt", resume_point(args=argparse_namespace()))
    refused = resume.verify_resume(path)
    assert not refused.ok and refused.needs_trust == ["argparse.Namespace"]
    assert "--trust-checkpoint" in refused.reload.error and "argparse.Namespace" in refused.reload.error
    assert refused.reload.files[0].weights_only is None  # never retried with weights_only=False
    trusted = resume.verify_resume(path, trust=True)
    assert trusted.ok and trusted.reload.weights_only is False
    assert trusted.to_json()["needs_trust_checkpoint"] == [] and trusted.to_json()["trust_checkpoint"] is True
    assert any("--trust-checkpoint" in note for note in trusted.notes)
    plain = resume.verify_resume(torch_zip(tmp_path / "plain.pt", resume_point()))
    assert plain.ok and plain.reload.weights_only is True


def test_the_closing_reload_refuses_a_checkpoint_that_would_run_code_or_is_damaged(tmp_path):
    from cockpit.close import reloaders

    marker = tmp_path / "MARKER"
    evil = torch_zip(tmp_path / "evil.pt", resume_point(evil=Payload(marker)))
    ok, detail = reloaders.reload_file(evil)
    assert ok is False and "would run code: posix.system" in detail and not marker.exists()
    good = torch_zip(tmp_path / "good.pt", resume_point())
    data = bytearray(good.read_bytes())
    at = data.index(bytes(range(64)))
    data[at + 10] ^= 0xFF
    flipped = tmp_path / "flipped.pt"
    flipped.write_bytes(bytes(data))
    ok, detail = reloaders.reload_file(flipped)
    assert ok is False and "member archive/data/0 fails its CRC-32" in detail
    assert reloaders.torch_reload_many([evil, flipped], timeout=30) == {}  # neither goes to torch
