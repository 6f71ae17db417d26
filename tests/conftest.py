"""Shared fixtures: a fresh copy of a sample campaign and a way to run the CLI as a user does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# The suite never notifies the person running it: their own channels (COCKPIT_NOTIFY or
# ~/.config/cockpit/notify.toml) are off here; the notification tests set their own.
os.environ["COCKPIT_NOTIFY"] = ""
os.environ.pop("COCKPIT_HEARTBEAT_URL", None)

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_campaigns"
# what a cockpit run on the sample folder itself may have left there: never copied into a test
LIVE_STATE = shutil.ignore_patterns("runlog.jsonl", ".cockpit", "runs", "closing")


@pytest.fixture
def seed_campaign(tmp_path: Path) -> Path:
    """A writable copy of the seed's campaign (RTX 4090, 3 days, 48 h committed)."""
    target = tmp_path / "sentiment-lora"
    shutil.copytree(SAMPLES / "sentiment-lora", target, ignore=LIVE_STATE)
    return target


@pytest.fixture
def b200_campaign(tmp_path: Path) -> Path:
    target = tmp_path / "b200-week"
    shutil.copytree(SAMPLES / "b200-week", target, ignore=LIVE_STATE)
    return target


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """`cockpit ARGS` in a subprocess, as a user types it."""
    environment = {**os.environ, "COCKPIT_NVML": "off", "NO_COLOR": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "cockpit", *args],
        cwd=cwd or ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli
