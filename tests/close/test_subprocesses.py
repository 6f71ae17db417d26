"""A deliverable's `reload` command run by `close`: its timeout ends everything it started (a
`setsid` daemon included), and however much it prints, the cockpit keeps a bounded part of it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from cockpit.close.reloaders import run_command, run_reload_command
from tests.conftest import ROOT

SHELL_SETSID = "/usr/bin/setsid"
pytestmark = pytest.mark.skipif(not Path(SHELL_SETSID).exists() or not sys.platform.startswith("linux"), reason="needs Linux and setsid")


def sleepers(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if cmdline[:1] == ["sleep"] and marker in cmdline:
            found.append(proc)
    return found


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "reload_check.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_timeout_ends_the_whole_tree_even_a_setsid_daemon_and_returns_on_time(tmp_path):
    marker = "47.31"
    check = script(tmp_path, f"""
        import subprocess, sys
        subprocess.Popen(["setsid", "sleep", "{marker}"])          # a new session, still our child
        subprocess.Popen(["setsid", "-f", "sleep", "{marker}"])    # forks away: re-parented at once
        chunk = b"x" * 65536
        while True:
            sys.stdout.buffer.write(chunk)
    """)
    started = time.monotonic()
    ok, detail = run_reload_command(f"{sys.executable} {check}", tmp_path, timeout=3)
    elapsed = time.monotonic() - started
    assert not ok and detail.startswith("reload command did not finish within 3 s")
    assert elapsed < 3 + 2, elapsed
    time.sleep(0.2)
    assert sleepers(marker) == []


def test_a_command_that_exits_but_leaves_a_daemon_holding_its_output_does_not_hold_close(tmp_path):
    marker = "48.29"
    check = script(tmp_path, f"""
        import subprocess
        subprocess.Popen(["setsid", "-f", "sleep", "{marker}"])  # inherits stdout and stderr
        print("reloaded", flush=True)
    """)
    started = time.monotonic()
    outcome = run_command([sys.executable, str(check)], cwd=tmp_path, timeout=30)
    assert outcome.status == "ok" and outcome.stdout == "reloaded\n"
    assert time.monotonic() - started < 5
    time.sleep(0.2)
    assert sleepers(marker) == []


def test_output_is_kept_bounded_however_much_the_command_prints(tmp_path):
    """512 MiB printed (1 GiB in the report that found it): the cockpit's memory stays small, the
    first part of stdout is there for a caller that parses it, the cause keeps the end of stderr."""
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent(f"""
        import json, sys
        from pathlib import Path

        def peak_rss_kib():  # VmHWM: this process image's own peak (ru_maxrss keeps the forking parent's across exec)
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        sys.path.insert(0, {str(ROOT)!r})
        from cockpit.close.reloaders import run_command
        printer = "import sys\\nchunk = b'y' * (1 << 20)\\nfor _ in range(512):\\n    sys.stdout.buffer.write(chunk)\\nsys.stderr.write('e' * 100000 + 'the end')\\nsys.exit(3)\\n"
        outcome = run_command([sys.executable, "-c", printer], cwd=Path("."), timeout=120)
        print(json.dumps({{"status": outcome.status, "code": outcome.returncode, "tail": outcome.tail[-7:],
                          "stdout": len(outcome.stdout), "max_rss_kib": peak_rss_kib()}}))
    """))
    result = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["status"] == "failed" and out["code"] == 3 and out["tail"] == "the end"
    assert out["stdout"] == 1 << 20  # the first MiB of stdout, as before
    assert out["max_rss_kib"] < 120 * 1024, out
