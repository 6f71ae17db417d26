"""Decisions recorded from any source go through the same checks."""

from __future__ import annotations

import pytest

from cockpit.errors import Finding, UsageError
from cockpit.plan.load import load_campaign
from cockpit.record import decisions
from cockpit.record.runlog import RecordedState, RunLog


def test_acknowledge_closes_only_an_open_alert(seed_campaign):
    campaign, log = load_campaign(seed_campaign), RunLog(seed_campaign)
    log.append("alert", rule="nan-loss", run="v-r64", message="loss is NaN at step 40")
    event = decisions.acknowledge(campaign, log, "nan-loss", "v-r64", source="key")
    assert event["alert_seq"] == 1 and event["source"] == "key"
    with pytest.raises(Finding, match="no open alert of rule 'nan-loss'"):
        decisions.acknowledge(campaign, log, "nan-loss", "v-r64", source="key")
    assert log.replay().active_alerts == []


def test_a_stop_signal_runs_only_after_validation(seed_campaign):
    campaign, log = load_campaign(seed_campaign), RunLog(seed_campaign)
    calls = []

    def signal():
        calls.append(1)
        return {"sent": True, "detail": "pid 42"}

    with pytest.raises(UsageError):
        decisions.record_stop(campaign, log, "v-r99", rule="nan-loss", source="key", signal=signal)
    with pytest.raises(UsageError):
        decisions.record_stop(campaign, log, "v-r16", source="key", signal=signal)
    event = decisions.record_stop(campaign, log, "v-r16", reason="diverging", source="key", signal=signal)
    assert calls == [1] and event["signal"] == {"requested": True, "sent": True, "detail": "pid 42"}
    with pytest.raises(Finding, match="already stopped"):
        decisions.record_stop(campaign, log, "v-r16", reason="again", source="key", signal=signal)
    assert calls == [1]


def test_pilot_decision_carries_the_pilot_run(seed_campaign):
    campaign, log = load_campaign(seed_campaign), RunLog(seed_campaign)
    event = decisions.record_decision(campaign, log, "revise", note="the question is too broad", source="key")
    assert event["run"] == "ctrl-r1" and event["decision"] == "revise"
    with pytest.raises(UsageError):
        decisions.record_decision(campaign, log, "maybe", source="key")


def test_no_signal_leaves_for_a_stop_the_disk_refused(seed_campaign, monkeypatch):
    import errno

    from cockpit.record import runlog as runlog_module
    from cockpit.record.runlog import RunLogError

    campaign, log = load_campaign(seed_campaign), RunLog(seed_campaign)
    decisions.start(campaign, log)
    sent = []
    monkeypatch.setattr(runlog_module.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(RunLogError, match="nothing was recorded"):
        decisions.record_stop(campaign, log, "ctrl-r1", reason="x", source="cli", signal=lambda: sent.append(1) or {"sent": True})
    monkeypatch.undo()
    assert sent == [] and log.replay().stops == []


def test_a_start_the_disk_refused_is_logged_by_the_next_one(seed_campaign, monkeypatch):
    import errno
    import os
    import stat

    from cockpit.record import runlog as runlog_module
    from cockpit.record.runlog import RunLogError
    from cockpit.record.start import ensure_started

    campaign, log = load_campaign(seed_campaign), RunLog(seed_campaign)
    real, calls = os.fsync, []

    def second_fails(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):  # write_atomic's fsync of .cockpit/ after the rename
            return real(fd)
        calls.append(fd)
        if len(calls) == 2:  # the plan froze, the run log's append did not
            raise OSError(errno.ENOSPC, "full")
        real(fd)

    monkeypatch.setattr(runlog_module.os, "fsync", second_fails)
    with pytest.raises(RunLogError):
        ensure_started(campaign, log)
    monkeypatch.undo()
    event = ensure_started(campaign, log)
    assert event is not None and event["type"] == "campaign_started" and event["plan"] == campaign.text
    assert ensure_started(campaign, log) is None


def test_a_void_makes_each_kind_of_decision_absent(seed_campaign):
    from cockpit.record.runlog import live_events

    campaign, log = load_campaign(seed_campaign), RunLog(seed_campaign)
    decision = decisions.record_decision(campaign, log, "revise", source="key")
    note = decisions.record_note(campaign, log, "slip", source="key")
    stop = decisions.record_stop(campaign, log, "v-r16", reason="slip", source="key")
    kept = decisions.record_note(campaign, log, "a real note", source="key")
    for event in (decision, note, stop):
        decisions.record_void(campaign, log, event["seq"], reason="a wrong key", source="key")
    events = log.read().events
    state = RecordedState.from_events(events)
    assert state.decisions == [] and state.stops == [] and state.notes == [kept]
    assert [taken["seq"] for _, taken in state.voided] == [decision["seq"], note["seq"], stop["seq"]]
    assert all(void["reason"] == "a wrong key" and void["source"] == "key" for void, _ in state.voided)
    live = live_events(events)
    assert {e["seq"] for e in live}.isdisjoint({decision["seq"], note["seq"], stop["seq"]}) and kept in live
    following = RecordedState()  # a follower that applies the log a line at a time agrees
    for event in events:
        following.apply([event])
    assert following.stops == [] and following.notes == [kept] and len(following.voided) == 3
    assert decisions.record_stop(campaign, log, "v-r16", reason="the real stop", source="key")["reason"] == "the real stop"


def test_a_forced_stop_carries_its_flags(seed_campaign):
    campaign, log = load_campaign(seed_campaign), RunLog(seed_campaign)
    with pytest.raises(UsageError, match="--force"):
        decisions.record_stop(campaign, log, "ctrl-r1", rule="nan-loss", source="key", finished=True, force=False)
    assert RunLog(seed_campaign).replay().stops == []
    stop = decisions.record_stop(campaign, log, "ctrl-r1", rule="nan-loss", source="key", finished=True, force=True)
    assert stop["after_finish"] is True and stop["rule_triggered"] is False
# ---------------------------------------------------------------- the start comes first, nothing after the close


def test_each_recording_starts_the_campaign_in_its_own_write_and_says_so_once(seed_campaign):
    campaign, log = load_campaign(seed_campaign), RunLog(seed_campaign)
    decisions.record_note(campaign, log, "first", source="cli")
    assert log.start_written is not None and log.start_written["seq"] == 1
    again = RunLog(seed_campaign)
    decisions.record_note(campaign, again, "second", source="cli")
    assert again.start_written is None
    assert [e["type"] for e in log.read().events] == ["campaign_started", "note", "note"]


@pytest.mark.parametrize("record", [
    lambda c, log: decisions.record_note(c, log, "late", source="cli"),
    lambda c, log: decisions.record_stop(c, log, "v-r16", reason="late", source="cli"),
    lambda c, log: decisions.record_decision(c, log, "continue", source="cli"),
])
def test_nothing_is_recorded_after_the_campaign_closed(seed_campaign, record):
    campaign, log = load_campaign(seed_campaign), RunLog(seed_campaign)
    decisions.start(campaign, log)
    log.append("alert", rule="nan-loss", run="v-r64", message="loss is NaN at step 40")
    closed = log.append("closed", accepted=0)
    with pytest.raises(Finding, match=r"the campaign is closed \(closed at .*seq 3\); nothing was recorded"):
        record(campaign, log)
    assert log.read().events[-1] == closed


def test_an_acknowledgement_or_a_void_after_the_close_corrects_it(seed_campaign):
    """Reviews of what was recorded stay possible after `closed`: a closing rejected for an open
    alert or a mistaken stop is corrected (ack, void) and run again."""
    campaign, log = load_campaign(seed_campaign), RunLog(seed_campaign)
    stop = decisions.record_stop(campaign, log, "v-r16", reason="slip", source="cli")
    log.append("alert", rule="nan-loss", run="v-r64", message="loss is NaN at step 40")
    log.append("closed", accepted=0)
    ack = decisions.acknowledge(campaign, log, "nan-loss", "v-r64", source="cli")
    void = decisions.record_void(campaign, log, stop["seq"], reason="wrong run", source="cli")
    assert [e["type"] for e in log.read().events][-2:] == ["ack", "void"] and ack["alert_seq"] and void["voided_seq"] == stop["seq"]
    assert log.replay().active_alerts == [] and log.replay().stops == []


def test_require_open_names_the_closing(seed_campaign):
    log = RunLog(seed_campaign)
    decisions.require_open(log.replay())  # open: nothing to say
    log.append("closed", accepted=0)
    with pytest.raises(Finding, match="closed at"):
        decisions.require_open(log.replay())


def test_a_campaign_closed_before_it_started_is_never_started_afterwards(seed_campaign):
    from cockpit.record.start import ensure_started

    campaign, log = load_campaign(seed_campaign), RunLog(seed_campaign)
    log.append("closed", accepted=0)
    assert ensure_started(campaign, log) is None
    assert [e["type"] for e in log.read().events] == ["closed"]
