"""The garbage collector paused for a command's start and resumed after it (cockpit.common.startup).

Each check runs in its own interpreter: freezing the test process's objects would keep its garbage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_campaigns" / "sentiment-lora"


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_entry_point_pauses_collection_until_the_campaign_is_loaded():
    out = run_python(f"""
import gc
from cockpit.common import startup
startup.pause_collection()
print(gc.isenabled(), gc.get_freeze_count() == 0)
from cockpit.plan.load import load_campaign
load_campaign({str(SAMPLE)!r})
print(gc.isenabled(), gc.get_freeze_count() > 1000)
load_campaign({str(SAMPLE)!r})  # a second load (the TUI re-reading its campaign) changes nothing
print(gc.isenabled())
""")
    assert out.splitlines() == ["False True", "True True", "True"]


def test_a_command_that_loads_no_campaign_resumes_collection_when_it_returns():
    out = run_python("""
import contextlib, gc, io, sys
from cockpit import cli
sys.argv = ["cockpit", "--version"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        cli.entry()
    except SystemExit:
        pass
print(gc.isenabled(), gc.get_freeze_count())
""")
    assert out == "True 0"


def test_in_process_code_keeps_its_collector_as_it_was():
    out = run_python(f"""
import gc
from cockpit.plan.load import load_campaign
load_campaign({str(SAMPLE)!r})
print(gc.isenabled(), gc.get_freeze_count())
gc.disable()
load_campaign({str(SAMPLE)!r})
print(gc.isenabled(), gc.get_freeze_count())
""")
    assert out.splitlines() == ["True 0", "False 0"]


def test_cockpit_status_runs_its_tick_with_collection_resumed(tmp_path):
    """Through the command a user types: `python -m cockpit status` ends with the collector on."""
    out = run_python(f"""
import gc, io, os, sys, contextlib, runpy
os.environ["COCKPIT_NVML"] = "off"
import cockpit.live.engine as engine
seen = []
tick = engine.Engine.tick
def watched(self):
    seen.append(gc.isenabled())
    return tick(self)
engine.Engine.tick = watched
import shutil
shutil.copytree({str(SAMPLE)!r}, {str(tmp_path / "c")!r})
sys.argv = ["cockpit", "status", {str(tmp_path / "c")!r}, "--json"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_module("cockpit", run_name="__main__")
    except SystemExit:
        pass
print(seen, gc.isenabled(), gc.get_freeze_count() > 1000)
""")
    assert out == "[True] True True"
