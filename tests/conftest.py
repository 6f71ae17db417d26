"""Shared fixtures and fakes: a fresh copy of a sample campaign, a way to run the CLI as a user
does, and for the TUI's tests hand-built snapshots, a fake snapshot source and the app on them
(import them: `from tests.conftest import make_app, make_snapshot, …`; the TUI's test modules
turn on the `utc_local_time` and `no_user_themes` fixtures)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cockpit.live.snapshot import AlertView, ClockView, GpuView, HostView, LotView, NvmlView, RunView, Snapshot
from cockpit.plan.load import load_campaign
from cockpit.record.runlog import RunLog

if TYPE_CHECKING:
    from cockpit.tui.app import CockpitApp

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


# ---------------------------------------------------------------- the TUI's fakes: hand-built snapshots


NOW = datetime(2026, 12, 1, 10, 30, tzinfo=timezone.utc)
LOT_START = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)
GIB = 2**30


# ---------------------------------------------------------------- hand-built snapshots


def make_gpu(index: int, *, utilization: float = 87.0, simulated: bool = False, lost: bool = False,
             throttle: tuple[str, ...] = (), samples: int = 60) -> GpuView:
    history = tuple(float((utilization + 3 * k) % 100) for k in range(samples))
    return GpuView(
        index=index, name="NVIDIA GeForce RTX 4090", utilization_percent=utilization,
        memory_used_bytes=int(14.7 * GIB), memory_total_bytes=24 * GIB, temperature_c=71.0,
        power_watts=320.0, power_limit_watts=450.0, throttle_reasons=throttle, lost=lost,
        simulated=simulated, utilization_history=history, memory_history=tuple(61.0 for _ in range(samples)),
    )


def make_run(run_id: str, role: str = "variant", tier: str = "useful", state: str = "planned", **fields) -> RunView:
    values = dict(
        id=run_id, role=role, tier=tier, state=state, step=None, total_steps=20000, loss=None, quality=None,
        last={}, eta=None, last_checkpoint_at=None, resume_verified=False, resume_verified_at=None,
        pid=None, alive=None,
    )
    values.update(fields)
    return RunView(**values)


def seed_runs() -> tuple[RunView, ...]:
    return (
        make_run(
            "ctrl-r1", "control", "indispensable", "running", step=12000, loss=0.4123, quality=0.712,
            last={"step": 12000, "loss": 0.4123, "eval/macro_f1": 0.712}, pid=4242, alive=True,
            eta=NOW + timedelta(hours=5), last_checkpoint_at=NOW - timedelta(minutes=12), resume_verified=True,
        ),
        make_run("v-r16"),
        make_run("v-r64", tier="exploratory"),
    )


def make_snapshot(*, gpus: int = 1, nvml: bool = True, simulated: bool = False,
                  runs: tuple[RunView, ...] | None = None, alerts: tuple[AlertView, ...] = (),
                  notices: tuple[str, ...] = (), taken_at: datetime = NOW) -> Snapshot:
    lot = LotView(
        "sentiment-lora-2026-11", "Does a LoRA variant beat the control by 2 points macro-F1 on corpus v3?",
        "RTX 4090", 1, 3, Decimal("47.14"), "IG-48113", LOT_START, LOT_START + timedelta(days=3),
    )
    clock = ClockView(
        now=taken_at, started=True, elapsed_hours=26.5, remaining_hours=45.5, window_hours=72.0,
        committed_hours=48.0, committed_remaining_hours=24.0, uncommitted_hours=24.0,
        projected_finish=NOW + timedelta(hours=24), retrieval_hours=1.0, fits=True,
    )
    if nvml:
        nvml_view = NvmlView(True, None, simulated=simulated)
        gpu_views = tuple(make_gpu(i, simulated=simulated) for i in range(gpus))
    else:
        nvml_view = NvmlView(False, "libnvidia-ml.so not found (no NVIDIA driver installed on this machine)")
        gpu_views = ()
    host = HostView(12.0, 31 * GIB, 64 * GIB, 100 * GIB, 500 * GIB, 210 * GIB)
    return Snapshot(taken_at, lot, clock, nvml_view, gpu_views, host, seed_runs() if runs is None else runs, alerts, notices)


def stalled_alert(seq: int = 1) -> AlertView:
    return AlertView("stalled", "ctrl-r1", "no metric line for 20 min while the run is alive", NOW - timedelta(minutes=3), seq)


class FakeSource:
    """A SnapshotSource: returns `snapshot` (swap it to simulate the engine moving on)."""

    def __init__(self, snapshot: Snapshot, *, delay: float = 0.0, error: Exception | None = None):
        self.snapshot = snapshot
        self.delay = delay
        self.error = error
        self.ticks = 0
        self.running = 0
        self.max_running = 0
        self._lock = threading.Lock()

    def tick(self) -> Snapshot:
        with self._lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            if self.delay:
                time.sleep(self.delay)
            self.ticks += 1
            if self.error is not None:
                raise self.error
            return self.snapshot
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture
def utc_local_time(monkeypatch):
    """Local times on screen are read in UTC here, whatever the machine running the tests says."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def no_user_themes(monkeypatch, tmp_path):
    """No theme files of the machine's user, and no NO_COLOR from the environment."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("NO_COLOR", raising=False)


_LOG_BEFORE: dict[Path, int] = {}


def make_app(directory: Path, snapshot: Snapshot | None = None, source: FakeSource | None = None, **options) -> CockpitApp:
    """The cockpit on the campaign in `directory`, fed by a FakeSource, its clock at NOW."""
    from cockpit.tui.app import CockpitApp  # imported here: most tests never load Textual

    _LOG_BEFORE[directory] = len(events(directory))  # what the copy held before the cockpit ran
    campaign = load_campaign(directory)
    source = source or FakeSource(snapshot or make_snapshot())
    options.setdefault("clock", lambda: NOW)
    return CockpitApp(campaign, source, RunLog(directory), **options)



def window_and_older_alerts() -> tuple[AlertView, ...]:
    """An urgent window alert that arrived after three older alerts: at 80×24 the alerts box shows three."""
    older = (
        AlertView("nan-loss", "v-r16", "loss is NaN at step 2400", NOW - timedelta(hours=3), 3),
        AlertView("f1-floor", "v-r64", "F1 0.41 below 0.55 at step 2400", NOW - timedelta(hours=2), 4),
        stalled_alert(5),
    )
    window = AlertView("lot-window", None, "the lot ends at Thu 08:00 in 4h59m; retrieval takes 1h00m", NOW, 6, key="lot-window:6h")
    return (*older, window)  # listed last: the older alerts would push it out of the box



def events(directory: Path, kind: str | None = None) -> list[dict]:
    found = RunLog(directory).read().events
    return [e for e in found if kind is None or e["type"] == kind]


def new_events(directory: Path) -> list[dict]:
    """The events written since the app was made."""
    return events(directory)[_LOG_BEFORE.get(directory, 0):]
