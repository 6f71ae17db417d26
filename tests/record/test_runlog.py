"""The run log: one complete line an event, locked and fsynced; torn tails, concurrency, replay."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import stat
from datetime import datetime, timezone

import pytest

from cockpit.common.layout import frozen_plan_path
from cockpit.plan.load import load_campaign
from cockpit.record import runlog as runlog_module
from cockpit.record.runlog import RecordedState, RunLog, RunLogError
from cockpit.record.start import ensure_started, plan_drift


def test_append_numbers_events_and_stamps_them(tmp_path):
    moment = datetime(2026, 11, 30, 9, 30, tzinfo=timezone.utc)
    log = RunLog(tmp_path, clock=lambda: moment, source_user="ana@box")
    first = log.append("note", text="warm-up slower than planned", source="cli")
    second = log.append("stop", run="v-r16", rule="f1-floor", reason=None, source="key")
    assert (first["seq"], second["seq"]) == (1, 2)
    assert first["ts"] == "2026-11-30T09:30:00.000Z" and first["who"] == "ana@box"
    lines = (tmp_path / "runlog.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["note", "stop"]


def test_torn_last_line_does_not_damage_the_next_event(tmp_path):
    log = RunLog(tmp_path)
    log.append("note", text="one")
    with open(log.path, "ab") as handle:  # a writer killed mid-line
        handle.write(b'{"seq": 2, "ts": "2026-11-30T09:00:00Z", "type": "no')
    event = log.append("note", text="after the crash")
    read = log.read()
    assert [e["text"] for e in read.events] == ["one", "after the crash"]
    assert read.bad_lines == 1 and read.bad_line_numbers == [2]
    assert event["seq"] == 2  # numbered after the last well-formed event


def test_readers_skip_and_count_bad_lines(tmp_path):
    path = tmp_path / "runlog.jsonl"
    path.write_bytes(
        b'{"seq": 1, "ts": "t", "type": "note", "text": "ok"}\n'
        b"not json\n[1, 2]\n"
        b'{"seq": "x", "type": "note"}\n'
        b"\xff\xfe\n"
        b'{"seq": 2, "ts": "t", "type": "note", "text": "still ok"}\n'
    )
    read = RunLog(tmp_path).read()
    assert [e["seq"] for e in read.events] == [1, 2] and read.bad_lines == 4


def test_disk_full_leaves_what_was_written_intact(tmp_path, monkeypatch):
    log = RunLog(tmp_path)
    log.append("note", text="before")
    before = log.path.read_bytes()
    real_write = os.write

    def full_disk(fd, data):
        real_write(fd, bytes(data[:7]))  # a partial write, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runlog_module.os, "write", full_disk)
    with pytest.raises(RunLogError, match="the disk is full; nothing was recorded"):
        log.append("note", text="lost")
    monkeypatch.undo()
    assert log.path.read_bytes() == before
    assert log.append("note", text="after")["seq"] == 2


def test_files_are_not_world_readable_or_writable(tmp_path, seed_campaign):
    old = os.umask(0)
    try:
        log = RunLog(seed_campaign)
        ensure_started(load_campaign(seed_campaign), log)
    finally:
        os.umask(old)
    for path in (log.path, seed_campaign / ".cockpit", frozen_plan_path(seed_campaign)):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o007 == 0, (path, oct(mode))


def _append_many(directory: str, worker: int, count: int) -> None:
    log = RunLog(directory)
    for index in range(count):
        log.append("note", text=f"w{worker}-{index}", pad="x" * 3000)  # lines longer than a pipe buffer


def test_eight_processes_appending_at_once_lose_nothing(tmp_path):
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_append_many, args=(str(tmp_path), w, 25)) for w in range(8)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
        assert process.exitcode == 0
    read = RunLog(tmp_path).read()
    assert read.bad_lines == 0
    assert sorted(e["text"] for e in read.events) == sorted(f"w{w}-{i}" for w in range(8) for i in range(25))
    assert [e["seq"] for e in read.events] == list(range(1, 201))


def test_replay_gives_the_recorded_state(tmp_path):
    log = RunLog(tmp_path)
    log.append("campaign_started", plan_sha256="abc")
    log.append("alert", rule="nan-loss", run="v-r64", message="loss is NaN")
    log.append("alert", rule="lot-window", run=None, message="6 h left")
    log.append("ack", rule="nan-loss", run="v-r64")
    log.append("stop", run="v-r64", rule="nan-loss", reason=None, source="key")
    log.append("pilot_decision", decision="drop-optional", note="v-r64 adds nothing")
    log.append("accepted", deliverable="ctrl-r1/predictions")
    log.append("note", text="data check took 3 h, not 2", run=None)
    state = log.replay()
    assert state.started["plan_sha256"] == "abc"
    assert [(a.key, a.acknowledged is not None) for a in state.alerts] == [("nan-loss|v-r64", True), ("lot-window|", False)]
    assert [a.key for a in state.active_alerts] == ["lot-window|"]
    assert state.stop_of("v-r64")["rule"] == "nan-loss" and state.stop_of("ctrl-r1") is None
    assert state.pilot_decision["decision"] == "drop-optional"
    assert [a["deliverable"] for a in state.accepted] == ["ctrl-r1/predictions"]
    assert state.notes[0]["text"].startswith("data check")


def test_following_the_log_in_pieces_gives_the_state_of_one_replay(tmp_path):
    """The engine folds each tick's new events into its state: any split gives the same state."""
    log = RunLog(tmp_path)
    log.append("campaign_started", plan_sha256="abc")
    log.append("alert", rule="nan-loss", run="v-r64", message="loss is NaN")
    stop = log.append("stop", run="v-r64", rule="nan-loss", reason=None, source="auto")
    log.append("alert", rule="stalled", run="ctrl-r1", message="no line for 20 min")
    log.append("signal", run="v-r64", stop_seq=stop["seq"], signal="SIGTERM", sent=True)
    log.append("ack", rule="nan-loss", run="v-r64")
    log.append("alert", rule="nan-loss", run="v-r64", message="loss is NaN again")
    log.append("ack", rule="stalled", run="ctrl-r1")
    log.append("note", text="restarted ctrl-r1", run="ctrl-r1")

    def summary(state):
        return (state.started, [(a.key, a.event["seq"], a.acknowledged and a.acknowledged["seq"]) for a in state.alerts],
                state.stops, state.notes, [a.key for a in state.active_alerts])

    whole = summary(RecordedState.from_events(log.read().events))
    assert whole[4] == ["nan-loss|v-r64"] and whole[2][0]["signal"]["sent"] is True
    for split in range(10):
        events = log.read().events  # a fresh copy: a `signal` is merged into its stop's dict
        state = RecordedState().apply(events[:split]).apply(events[split:])
        assert summary(state) == whole, split


def test_plan_is_frozen_once_and_changes_are_noticed(seed_campaign):
    campaign = load_campaign(seed_campaign)
    log = RunLog(seed_campaign)
    started = ensure_started(campaign, log)
    assert started["type"] == "campaign_started" and started["plan_sha256"] == campaign.sha256
    assert started["plan"] == campaign.text
    assert ensure_started(campaign, log) is None
    assert plan_drift(campaign) is None
    toml = seed_campaign / "campaign.toml"
    toml.write_text(toml.read_text().replace("hours = 12 ", "hours = 14 ", 1))
    changed = load_campaign(seed_campaign)
    assert "has changed since the campaign started" in plan_drift(changed)
    assert frozen_plan_path(seed_campaign).read_text() == campaign.text
    assert [e["type"] for e in log.read().events] == ["campaign_started"]


def test_non_finite_values_are_written_as_strict_json(tmp_path):
    log = RunLog(tmp_path)
    log.append("stop", run="r", last={"loss": float("nan"), "grad": float("inf")})
    line = log.path.read_text()
    assert "NaN" in line and json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c}"))
