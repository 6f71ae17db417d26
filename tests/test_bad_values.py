"""Implausible values in a run's stream, through the command line as a user meets them (issue 13,
items 5 and 7): a checkpoint `seconds` in nanoseconds, a first `ts` of 1.0, a lone surrogate in a
path, a huge `total_steps`, a `started` line without `ts`. Each is a counted bad field of that run,
shown in `status` and `status --json`; none is an internal error, none hides the other runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli

NS_SECONDS = 12_400_000_000_000_000_000.0  # 12.4 s written in... something far too large


def write_lines(campaign: Path, run_id: str, *lines: object) -> Path:
    path = campaign / "runs" / run_id / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        for line in lines:
            handle.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def status(campaign: Path, *extra: str) -> subprocess.CompletedProcess:
    result = run_cli("status", str(campaign), *extra)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    return result


def status_json(campaign: Path) -> dict:
    return json.loads(status(campaign, "--json").stdout)


def run_of(document: dict, run_id: str) -> dict:
    return next(r for r in document["runs"] if r["id"] == run_id)


def healthy_other_run(campaign: Path) -> None:
    """v-r16 reports a NaN loss: its alert must come through whatever ctrl-r1 wrote."""
    now = time.time()
    write_lines(campaign, "v-r16", {"ts": now - 60, "step": 10, "loss": 2.0}, '{"ts": %f, "step": 20, "loss": NaN}' % now)


def assert_others_unaffected(document: dict) -> None:
    assert any(a["rule"] == "nan-loss" and a["run"] == "v-r16" for a in document["alerts"]), document["alerts"]
    assert document["elapsed_hours"] is not None or document["remaining_hours"] is not None or "clock" in document
    assert run_of(document, "v-r16")["step"] == 20


def test_checkpoint_seconds_in_nanoseconds_is_a_bad_field(seed_campaign):
    now = time.time()
    write_lines(seed_campaign, "ctrl-r1", {"ts": now - 5, "step": 100, "loss": 2.0},
                {"ts": now, "event": "checkpoint", "path": "runs/ctrl-r1/checkpoints/step-100.pt", "seconds": NS_SECONDS, "bytes": 5})
    healthy_other_run(seed_campaign)
    document = status_json(seed_campaign)
    ctrl = run_of(document, "ctrl-r1")
    assert ctrl["bad_fields"] == 1 and ctrl["step"] == 100
    assert ctrl["save_advice"] is None  # no advice from a save time nobody can believe
    assert_others_unaffected(document)
    text = status(seed_campaign).stdout
    assert "ctrl-r1" in text and "implausible" in text and "seconds" in text, text


def test_a_first_ts_of_one_second_after_1970_is_a_bad_field(seed_campaign):
    now = time.time()
    write_lines(seed_campaign, "ctrl-r1", {"ts": 1.0, "step": 1, "loss": 2.0}, {"ts": now, "step": 5, "loss": 2.0})
    healthy_other_run(seed_campaign)
    document = status_json(seed_campaign)
    ctrl = run_of(document, "ctrl-r1")
    assert ctrl["bad_fields"] == 1 and ctrl["step"] == 5
    assert_others_unaffected(document)
    text = status(seed_campaign).stdout
    assert "implausible" in text and "ts" in text and "2000" in text, text


@pytest.mark.parametrize("ts", [1e300, -5.0, 4_200_000_000.0, "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])
def test_any_ts_outside_2000_to_2100_is_a_bad_field(seed_campaign, ts):
    write_lines(seed_campaign, "ctrl-r1", {"ts": ts, "step": 1, "loss": 2.0}, {"ts": time.time(), "step": 5, "loss": 2.0})
    healthy_other_run(seed_campaign)
    document = status_json(seed_campaign)
    assert run_of(document, "ctrl-r1")["bad_fields"] == 1
    assert_others_unaffected(document)


def test_a_lone_surrogate_is_stored_safely_and_the_position_is_saved(seed_campaign):
    now = time.time()
    # what Python's json.dumps writes for a file name that is not UTF-8
    line = json.dumps({"ts": now, "event": "checkpoint", "path": "runs/ctrl-r1/\udcff.pt", "seconds": 1.0})
    assert "\\udcff" in line
    write_lines(seed_campaign, "ctrl-r1", {"ts": now - 5, "step": 100, "loss": 2.0}, line, {"ts": now, "\udcfe": 1.0, "step": 101})
    healthy_other_run(seed_campaign)
    first = status_json(seed_campaign)
    assert (seed_campaign / ".cockpit" / "metrics-state.json").exists()  # the reading position was saved
    second = status_json(seed_campaign)  # and the next status starts from it
    for document in (first, second):
        ctrl = run_of(document, "ctrl-r1")
        assert ctrl["bad_fields"] == 2 and ctrl["step"] == 101
        assert_others_unaffected(document)
    saved = json.loads((seed_campaign / ".cockpit" / "metrics-state.json").read_text(encoding="utf-8"))
    assert "\ufffd.pt" in saved["streams"]["ctrl-r1"]["track"]["checkpoint"]["path"]
    assert "not UTF-8" in status(seed_campaign).stdout or "surrogate" in status(seed_campaign).stdout


def test_check_bounds_total_steps_with_the_allowed_range(seed_campaign):
    text = (seed_campaign / "campaign.toml").read_text()
    (seed_campaign / "campaign.toml").write_text(text.replace("total_steps = 20000", "total_steps = 1000000000000000", 1))
    result = run_cli("check", str(seed_campaign))
    assert result.returncode == 1, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "total_steps" in output and "10^12" in output and "1000000000000" in output, output
    assert "Traceback" not in output


@pytest.mark.parametrize("key, line, shown", [
    ("hours = 12", "hours = 100000", "hours"),
    ("days = 3", "days = 100000", "days"),
    ("after_step = 2000", "after_step = 1000000000000000", "after_step"),
])
def test_check_bounds_hours_days_and_steps(seed_campaign, key, line, shown):
    text = (seed_campaign / "campaign.toml").read_text()
    assert key in text
    (seed_campaign / "campaign.toml").write_text(text.replace(key, line, 1))
    result = run_cli("check", str(seed_campaign))
    output = result.stdout + result.stderr
    assert result.returncode == 1 and shown in output and "at most" in output, output


def test_the_largest_total_steps_check_allows_never_breaks_status(seed_campaign):
    text = (seed_campaign / "campaign.toml").read_text()
    (seed_campaign / "campaign.toml").write_text(text.replace("total_steps = 20000", "total_steps = 1000000000000", 1))
    assert run_cli("check", str(seed_campaign)).returncode == 0
    now = time.time()
    # one step in a day and a half: the ETA is millions of years away, which no date can hold
    write_lines(seed_campaign, "ctrl-r1", {"ts": now - 129600, "step": 1, "loss": 2.0}, {"ts": now, "step": 2, "loss": 2.0})
    healthy_other_run(seed_campaign)
    document = status_json(seed_campaign)
    assert run_of(document, "ctrl-r1")["step"] == 2
    assert document["projected_finish"] is not None
    assert_others_unaffected(document)


# ---------------------------------------------------------------- `started` without ts (item 7)


@pytest.fixture
def sleeper():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield process
    process.kill()
    process.wait()


def test_a_started_line_without_ts_is_not_dated_by_the_file_mtime(seed_campaign, sleeper):
    path = write_lines(seed_campaign, "ctrl-r1", {"event": "started", "pid": sleeper.pid})
    later = time.time() + 3600  # the file was written to long after the process began
    os.utime(path, (later, later))
    document = status_json(seed_campaign)
    ctrl = run_of(document, "ctrl-r1")
    assert ctrl["state"] == "running" and ctrl["alive"] is True, ctrl
    text = status(seed_campaign).stdout
    assert "no ts" in text and "first read" in text, text
    result = run_cli("stop", str(seed_campaign), "ctrl-r1", "--reason", "testing", "--signal")
    assert result.returncode == 0, result.stdout + result.stderr
    assert sleeper.wait(timeout=10) != 0  # SIGTERM reached the run's own process


# ---------------------------------------------------------------- the engine: one run's failure stays that run's


def _engine_with_a_nan_run(campaign: Path):
    from datetime import datetime, timedelta, timezone

    from cockpit.plan.load import load_campaign
    from cockpit.live.engine import Engine
    from cockpit.live.fake_gpus import FakeGpus

    now = datetime(2026, 11, 30, 18, 0, tzinfo=timezone.utc)
    t0 = (now - timedelta(hours=1)).timestamp()
    write_lines(campaign, "v-r16", {"ts": t0, "step": 10, "loss": 2.0}, '{"ts": %f, "step": 20, "loss": NaN}' % (t0 + 60))
    write_lines(campaign, "ctrl-r1", {"ts": t0, "step": 5, "loss": 2.0})
    return Engine(load_campaign(campaign), clock=lambda: now, gpus=FakeGpus(1), signal_runs=False)


def test_a_run_whose_poll_fails_is_a_notice_and_hides_nothing_else(seed_campaign):
    engine = _engine_with_a_nan_run(seed_campaign)

    def broken(*args, **kwargs):
        raise OverflowError("Python int too large to convert to C int")

    engine.streams["ctrl-r1"].poll = broken
    snapshot = engine.tick()
    assert any(a.rule == "nan-loss" and a.run == "v-r16" for a in snapshot.alerts)
    assert snapshot.clock.elapsed_hours == pytest.approx(10.0) and len(snapshot.gpus) == 1
    assert any(n.startswith("run ctrl-r1: its metrics could not be read this tick (OverflowError") for n in snapshot.notices), snapshot.notices
    engine.close()


def test_a_clock_that_cannot_use_the_progress_still_reads(seed_campaign, monkeypatch):
    from cockpit.live import engine as engine_module

    engine = _engine_with_a_nan_run(seed_campaign)
    real = engine_module.lot_clock

    def fragile(plan, now, progress, planned):
        if progress:
            raise OverflowError("date value out of range")
        return real(plan, now, progress, planned)

    monkeypatch.setattr(engine_module, "lot_clock", fragile)
    snapshot = engine.tick()
    assert snapshot.clock.elapsed_hours == pytest.approx(10.0)
    assert any(a.rule == "nan-loss" and a.run == "v-r16" for a in snapshot.alerts)
    assert any("the runs' measured progress could not be used by the clock (OverflowError" in n for n in snapshot.notices)
    engine.close()


def test_the_clock_projects_at_most_a_century_ahead():
    from datetime import datetime, timedelta, timezone

    from cockpit.live.clock import HORIZON_HOURS, projected

    base = datetime(2026, 11, 30, tzinfo=timezone.utc)
    assert projected(base, 1e300) == base + timedelta(hours=HORIZON_HOURS) and 2126 <= projected(base, 1e300).year <= 2127
    assert projected(base, float("inf")) == projected(base, HORIZON_HOURS)
    assert projected(base, float("nan")) == base and projected(base, -5) == base
