"""The live lot clock with an injected `now`: a 72-hour lot runs here in milliseconds."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from cockpit.live.clock import ItemProgress, lot_clock
from cockpit.plan.load import load_campaign, read_campaign_text
from cockpit.plan.schedule import schedule

ROOT = Path(__file__).resolve().parents[2]
SEED = load_campaign(ROOT / "sample_campaigns" / "sentiment-lora")
B200 = load_campaign(ROOT / "sample_campaigns" / "b200-week")
START = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)
END = START + timedelta(hours=72)


def at(hours: float) -> datetime:
    return START + timedelta(hours=hours)


def on_plan(campaign, hours: float) -> dict[str, ItemProgress]:
    """What the runs would report at `hours` into the lot if everything went exactly as planned."""
    plan = schedule(campaign.items, campaign.lot.gpu_count, campaign.model.calendar.retrieval_hours)
    progress = {}
    for run in campaign.runs:
        slot = plan.slot(run.id)
        if hours >= slot.end_hours:
            progress[run.id] = ItemProgress("finished", started_at=at(slot.start_hours), ended_at=at(slot.end_hours))
        elif hours > slot.start_hours:
            done = (hours - slot.start_hours) / slot.hours
            progress[run.id] = ItemProgress(
                "running",
                started_at=at(slot.start_hours),
                step=int(run.total_steps * done),
                step_at=at(hours),
                steps_per_hour=run.total_steps / slot.hours,
            )
    return progress


def test_a_72_hour_lot_on_plan_alerts_at_6_h_and_1_h_before_the_end():
    logged: dict[str, float] = {}  # key → when first seen, as the engine logs each once
    minutes = 0
    while minutes <= 73 * 60:
        hours = minutes / 60
        reading = lot_clock(SEED, at(hours), on_plan(SEED, hours))
        for alert in reading.alerts:
            assert alert.rule == "lot-window" and alert.run is None
            logged.setdefault(alert.key, hours)
        if hours < 47:  # while the plan is under way it keeps its 48 h
            # steps are whole numbers: a step of 12 h / 20000 is the precision
            assert reading.committed_remaining_hours == pytest.approx(48 - hours, abs=1e-3)
            assert abs(reading.projected_finish - at(47)) < timedelta(seconds=3)
            assert reading.projected_overrun_hours == 0
        minutes += 15
    assert logged["lot-window:6h"] == 66
    assert logged["lot-window:1h"] == 71
    # everything finished, but retrieval's hour no longer fits after 71 h
    assert logged["lot-window:overrun"] == 71.25
    assert logged["lot-window:ended"] == 72
    assert list(logged) == ["lot-window:6h", "lot-window:1h", "lot-window:overrun", "lot-window:ended"]


def test_threshold_message_says_when_the_lot_ends():
    reading = lot_clock(SEED, END - timedelta(hours=6), on_plan(SEED, 66))
    (alert,) = reading.alerts
    assert alert.key == "lot-window:6h" and alert.threshold_hours == 6
    assert "2026-12-03 08:00 UTC" in alert.message and "in 6 h" in alert.message
    just_before = lot_clock(SEED, END - timedelta(hours=6, seconds=1), on_plan(SEED, 66))
    assert just_before.alerts == ()


def test_b200_thresholds_come_from_its_own_calendar():
    end = B200.lot.end
    keys = [a.key for a in lot_clock(B200, end - timedelta(hours=2), {}).alerts]
    assert "lot-window:12h" in keys and "lot-window:2h" in keys


def test_before_the_start_nothing_has_elapsed():
    reading = lot_clock(SEED, at(-5))
    assert reading.phase == "not_started"
    assert reading.elapsed_hours == 0 and reading.remaining_hours == 72
    assert "not started" in reading.message and "in 5 h" in reading.message
    assert reading.committed_remaining_hours == 48
    assert reading.projected_finish == at(47)
    assert reading.alerts == ()


def test_after_the_end_the_clock_says_so():
    reading = lot_clock(SEED, at(80), on_plan(SEED, 80))
    assert reading.phase == "ended"
    assert reading.elapsed_hours == 72 and reading.remaining_hours == 0
    assert [a.key for a in reading.alerts] == ["lot-window:ended"]
    unfinished = lot_clock(SEED, at(80), {})
    assert "unfinished" in unfinished.alerts[0].message and "ctrl-r1" in unfinished.alerts[0].message


def test_a_lot_without_a_start_needs_one():
    text = SEED.text.replace("start = 2026-11-30T08:00:00Z\n", "")
    campaign = read_campaign_text(text, SEED.directory)
    reading = lot_clock(campaign, at(10))
    assert reading.phase == "no_start"
    assert "[lot].start" in reading.message
    assert reading.elapsed_hours is None and reading.projected_finish is None
    assert reading.committed_remaining_hours == 48
    assert reading.alerts == ()


def test_a_running_run_is_estimated_from_its_step_rate():
    # ctrl-r1 started at 6 h; 3 h later it is at step 5000 of 20000: 9 more hours, not 9 planned.
    progress = {"ctrl-r1": ItemProgress("running", started_at=at(6), step=5000, step_at=at(9))}
    reading = lot_clock(SEED, at(9), progress)
    assert reading.remaining_by_item["ctrl-r1"] == pytest.approx(9)
    assert reading.remaining_by_item["setup"] == 0 and reading.remaining_by_item["data-check"] == 0
    # 9 + resume-test 1 + two variants 24 + error analysis 4 + retrieval 1
    assert reading.committed_remaining_hours == pytest.approx(39)
    assert reading.projected_finish == at(9 + 38)
    assert reading.projected_overrun_hours == 0


def test_a_slow_run_raises_the_overrun_alert():
    progress = {"ctrl-r1": ItemProgress("running", started_at=at(6), step=1000, step_at=at(9))}  # 45 h left
    reading = lot_clock(SEED, at(9), progress)
    assert reading.remaining_by_item["ctrl-r1"] == pytest.approx(57)
    assert reading.projected_overrun_hours == pytest.approx(9 + 57 + 1 + 24 + 4 + 1 - 72)
    (alert,) = reading.alerts
    assert alert.key == "lot-window:overrun" and alert.level == "critical"
    assert "after the lot ends" in alert.message


def test_a_run_without_steps_counts_its_planned_hours_down_never_below_zero():
    reading = lot_clock(SEED, at(10), {"ctrl-r1": ItemProgress("running", started_at=at(6))})
    assert reading.remaining_by_item["ctrl-r1"] == pytest.approx(8)
    late = lot_clock(SEED, at(30), {"ctrl-r1": ItemProgress("running", started_at=at(6))})
    assert late.remaining_by_item["ctrl-r1"] == 0


def test_finished_and_stopped_runs_take_no_more_time():
    progress = {
        "ctrl-r1": ItemProgress("finished", started_at=at(6), ended_at=at(18)),
        "v-r16": ItemProgress("stopped", started_at=at(19), ended_at=at(20)),
    }
    reading = lot_clock(SEED, at(20), progress)
    assert reading.remaining_by_item["v-r16"] == 0
    assert reading.remaining_by_item["resume-test"] == 0  # v-r16 came after it and started
    assert reading.remaining_by_item["v-r64"] == 12
    assert reading.committed_remaining_hours == pytest.approx(12 + 4 + 1)


def test_a_task_nobody_reports_on_waits_for_its_inputs():
    # ctrl-r1 is late: resume-test (planned 18–19 h) cannot be done at 20 h.
    progress = {"ctrl-r1": ItemProgress("running", started_at=at(8))}
    reading = lot_clock(SEED, at(20), progress)
    assert reading.remaining_by_item["resume-test"] == 1
    # a task whose inputs are done follows its planned slot: setup is half done at 2 h
    early = lot_clock(SEED, at(2))
    assert early.remaining_by_item["setup"] == pytest.approx(2)
    assert early.committed_remaining_hours == pytest.approx(46)


def test_the_re_plan_still_shares_gpus():
    # full-ft runs on GPU 1 and lora-r64 on GPU 0; the long run needs both and waits for both.
    progress = {
        "lora-r64": ItemProgress("running", started_at=at(9), step=30000, step_at=at(24)),  # 15 h left
        "full-ft": ItemProgress("running", started_at=at(9), step=10000, step_at=at(24)),  # 45 h left
    }
    reading = lot_clock(B200, at(24), progress)
    plan = reading.plan
    assert plan.slot("lora-r64").start_hours == 0 and plan.slot("full-ft").start_hours == 0
    assert plan.slot("resume-test").start_hours == pytest.approx(15)
    assert plan.slot("full-ft-long").start_hours == pytest.approx(45)
    assert reading.committed_remaining_hours == pytest.approx(45 + 60 + 3)


def test_a_running_item_keeps_its_gpu_against_an_earlier_unstarted_one():
    text = SEED.text.replace('[[run]]\nid = "ctrl-r1"', '[[run]]\nid = "warm-up"\nrole = "variant"\nhours = 3\n\n[[run]]\nid = "ctrl-r1"', 1)
    campaign = read_campaign_text(text, SEED.directory)
    progress = {"ctrl-r1": ItemProgress("running", started_at=at(6))}
    plan = lot_clock(campaign, at(7), progress).plan
    assert plan.slot("ctrl-r1").start_hours == 0
    assert plan.slot("ctrl-r1").end_hours == pytest.approx(11)
    assert plan.slot("warm-up").start_hours == pytest.approx(11)


def test_a_naive_now_is_read_as_utc():
    aware = lot_clock(SEED, at(10))
    naive = lot_clock(SEED, at(10).replace(tzinfo=None))
    assert naive.elapsed_hours == aware.elapsed_hours == 10


def test_the_reading_keeps_the_whole_plan_beside_the_remaining_one():
    reading = lot_clock(SEED, at(9), {"ctrl-r1": ItemProgress("running", started_at=at(6), step=5000, step_at=at(9))})
    assert reading.started and reading.fits
    assert reading.committed_hours == 48 and reading.uncommitted_hours == 24
    assert reading.projected_retrieval_end == reading.projected_finish + timedelta(hours=1)
    assert not lot_clock(SEED, at(-1)).started
