"""When the output cannot be written: a full disk says so and exits 1; a reader that went away
(`cockpit plan DIR | head -1`) ends the command quietly with 0, as common command-line tools do.
Real processes, real file descriptors: the errors surface where Python writes and flushes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, SAMPLES

SEED = str(SAMPLES / "sentiment-lora")
COMMANDS = [
    ("plan", SEED),
    ("plan", SEED, "--json"),
    ("plan", SEED, "--extra-hours", "30"),  # a plan that does not fit: exit 1 when the output is read
    ("check", SEED),
    ("log", SEED),
    ("log", SEED, "--json"),
]


def cockpit(args, stdout) -> subprocess.CompletedProcess:
    env = {**os.environ, "COCKPIT_NVML": "off", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "cockpit", *args], cwd=ROOT, env=env, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=60)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_full_output_says_so_and_exits_1(args):
    with open("/dev/full", "w") as full:
        result = cockpit(args, full)
    assert result.returncode == 1, result.stderr
    assert result.stderr == "cockpit: cannot write the output: No space left on device\n"


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_reader_that_went_away_ends_the_command_quietly_with_0(args):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte: every write meets a closed pipe
    try:
        result = cockpit(args, write_end)
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize("args", [("plan", SEED), ("plan", SEED, "--json"), ("log", SEED, "--json")], ids=" ".join)
def test_head_reads_one_line_and_the_command_still_exits_0(args):
    env = {**os.environ, "COCKPIT_NVML": "off", "NO_COLOR": "1"}
    quoted = " ".join(f"'{a}'" for a in args)
    result = subprocess.run(
        ["bash", "-c", f"'{sys.executable}' -m cockpit {quoted} | head -1 >/dev/null; echo \"${{PIPESTATUS[0]}}\""],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.stdout.strip() == "0" and "Traceback" not in result.stderr and "Exception" not in result.stderr, result


def test_a_command_started_with_stdout_closed_is_no_internal_error():
    env = {**os.environ, "COCKPIT_NVML": "off", "NO_COLOR": "1"}
    for args in (f"plan '{SEED}'", f"plan '{SEED}' --json"):
        result = subprocess.run(["bash", "-c", f"'{sys.executable}' -m cockpit {args} >&-"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and "internal error" not in result.stderr, result
