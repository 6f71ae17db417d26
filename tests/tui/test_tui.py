"""The cockpit TUI, driven by keys as a person does at 80×24: every decision flow ends with a look
at the run log, because the UI may only say "recorded" once the event is on disk.

The engine is replaced by a fake source returning hand-built snapshots; the time zone is UTC and
every time shown comes from the snapshot or an injected clock."""

from __future__ import annotations

import html
import time
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from textual.geometry import Size

from cockpit.live.snapshot import AlertView, NvmlView
from cockpit.plan.load import load_campaign
from cockpit.record.runlog import RunLog, RunLogError, Transaction
from cockpit.tui import format as fmt
from cockpit.tui.app import CockpitApp
from cockpit.tui.screens import ConfirmScreen, DecisionScreen, HelpScreen, LogScreen, NoteScreen, StopScreen, VoidScreen
from cockpit.tui.themes import discover_themes, load_theme_file, ThemeFileError

from cockpit.tui.widgets import AlertsList, GpuLines, GpuPanel, HostLine, LotHeader, RunsTable
from cockpit.tui.widgets.gpu_row import VALUE_WIDTH
from cockpit.tui.widgets.sparkline import sparkline
from tests.conftest import (
    LOT_START,
    NOW,
    FakeSource,
    events,
    make_app,
    make_gpu,
    make_run,
    make_snapshot,
    new_events,
    seed_runs,
    stalled_alert,
    window_and_older_alerts,
)

pytestmark = pytest.mark.usefixtures("utc_local_time", "no_user_themes")  # UTC on screen, no user themes


async def until(pilot, condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the cockpit")
        await pilot.pause(0.02)


async def started(app: CockpitApp, pilot) -> None:
    await until(pilot, lambda: app.snapshot is not None)
    await pilot.pause()


def notifications(app: CockpitApp) -> list:
    return list(app._notifications)


async def on_screen(app: CockpitApp, pilot, screen_id: str, *keys: str) -> None:
    """Wait for the dialog `screen_id` (the stop flow's steps come after a run-log read), then press."""
    await until(pilot, lambda: app.screen.id == screen_id)
    await pilot.press(*keys)


async def confirm_stop(app: CockpitApp, pilot, *, doubt: bool = False) -> None:
    """The last steps of a stop: "stop anyway" where it is doubtful, then the confirm line."""
    if doubt:
        await on_screen(app, pilot, "stop-doubt", "y")
    await on_screen(app, pilot, "stop-confirm", "enter")


# ---------------------------------------------------------------- stop


async def test_stop_with_a_rule_is_in_the_run_log(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s")
        assert isinstance(app.screen, StopScreen)
        await pilot.press("down", "enter")  # the first rule written for ctrl-r1: nan-loss
        await confirm_stop(app, pilot, doubt=True)  # nan-loss never triggered for ctrl-r1
        await until(pilot, lambda: events(seed_campaign, "stop"))
        await until(pilot, lambda: any("recorded" in n.title for n in notifications(app)))
    (stop,) = events(seed_campaign, "stop")
    assert stop["run"] == "ctrl-r1"
    assert stop["rule"] == "nan-loss" and stop["reason"] is None
    assert stop["source"] == "key"
    assert stop["last"] == {"step": 12000, "loss": 0.4123, "eval/macro_f1": 0.712}
    assert stop["signal"] == {"requested": False, "sent": False}
    assert events(seed_campaign, "campaign_started"), "the first decision freezes the plan"


async def test_stop_with_free_text(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s", "enter")  # "no rule" → the reason field
        await pilot.press(*"plateau")
        await pilot.press("enter")
        await confirm_stop(app, pilot)
        await until(pilot, lambda: events(seed_campaign, "stop"))
    (stop,) = events(seed_campaign, "stop")
    assert stop["rule"] is None and stop["reason"] == "plateau" and stop["source"] == "key"


async def test_stop_of_the_selected_run(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("down")  # v-r16
        await pilot.press("s")
        rules = [r.id for r in app.screen.rules]
        assert rules[0] == "nan-loss" and rules.index("f1-floor") < len(rules)  # f1-floor is written for v-r16
        await pilot.press("down", "enter")
        await confirm_stop(app, pilot, doubt=True)
        await until(pilot, lambda: events(seed_campaign, "stop"))
    (stop,) = events(seed_campaign, "stop")
    assert stop["run"] == "v-r16" and stop["last"] == {}


async def test_stop_needs_a_rule_or_a_reason(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s", "enter", "enter")  # no rule, empty reason
        assert isinstance(app.screen, StopScreen)
        assert "Pick a rule or write a reason" in str(app.screen.query_one(".dialog--error").render())
        await pilot.press("escape")
        await pilot.pause()
    assert events(seed_campaign, "stop") == []


async def test_cancelled_stop_records_nothing(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s", "down")
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, StopScreen)
        await app.workers.wait_for_complete()
    assert new_events(seed_campaign) == []


async def test_stop_with_sigterm_confirmed(seed_campaign):
    sent: list[str] = []

    def signal_run(run_id: str) -> dict:
        sent.append(run_id)
        return {"sent": True, "detail": "SIGTERM to pid 4242"}

    app = make_app(seed_campaign, signal_run=signal_run)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s", "down", "enter")
        await on_screen(app, pilot, "stop-doubt", "y")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.id == "stop-signal")
        assert sent == [], "nothing is signalled before the second confirmation"
        await pilot.press("y")
        await confirm_stop(app, pilot)
        await until(pilot, lambda: events(seed_campaign, "stop"))
        await until(pilot, lambda: any("SIGTERM sent" in str(n.message) for n in notifications(app)))
    (stop,) = events(seed_campaign, "stop")
    (outcome,) = events(seed_campaign, "signal")
    assert sent == ["ctrl-r1"]
    assert stop["signal"] == {"requested": True, "sent": False}  # on disk before the signal left
    assert (outcome["stop_seq"], outcome["sent"]) == (stop["seq"], True)
    assert RunLog(seed_campaign).replay().stop_of("ctrl-r1")["signal"] == {"requested": True, "sent": True, "detail": "SIGTERM to pid 4242"}


async def test_stop_without_sigterm_when_declined(seed_campaign):
    sent: list[str] = []
    app = make_app(seed_campaign, signal_run=lambda run_id: sent.append(run_id) or {"sent": True})
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s", "down", "enter")
        await on_screen(app, pilot, "stop-doubt", "y")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.id == "stop-signal")
        await pilot.press("enter")  # the default button is "Record only"
        await confirm_stop(app, pilot)
        await until(pilot, lambda: events(seed_campaign, "stop"))
    assert sent == []
    assert events(seed_campaign, "stop")[0]["signal"] == {"requested": False, "sent": False}


async def test_no_sigterm_offered_without_a_pid(seed_campaign):
    runs = (replace(seed_runs()[0], pid=None),) + seed_runs()[1:]
    app = make_app(seed_campaign, make_snapshot(runs=runs), signal_run=lambda run_id: {"sent": True})
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s", "down", "enter")
        await on_screen(app, pilot, "stop-doubt", "y")
        await until(pilot, lambda: app.screen.id in ("stop-signal", "stop-confirm"))
        assert app.screen.id == "stop-confirm", "no SIGTERM question without a pid"
        await pilot.press("enter")
        await until(pilot, lambda: events(seed_campaign, "stop"))


async def test_a_second_stop_of_a_run_is_refused_and_shown(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        for _ in range(2):
            await pilot.press("s", "down", "enter")
            await confirm_stop(app, pilot, doubt=True)
            await app.workers.wait_for_complete()
            await pilot.pause()
        await until(pilot, lambda: any(n.severity == "error" for n in notifications(app)))
        error = next(n for n in notifications(app) if n.severity == "error")
        assert "already stopped" in error.message and "NOT recorded" in error.title
    assert len(events(seed_campaign, "stop")) == 1


async def test_failed_stop_write_is_shown_as_an_error(seed_campaign, monkeypatch):
    def full_disk(self, type, **fields):
        if type == "stop":
            raise RunLogError("cannot write to runlog.jsonl: the disk is full; nothing was recorded")
        return original(self, type, **fields)

    original = Transaction.append
    monkeypatch.setattr(Transaction, "append", full_disk)
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s", "down", "enter")
        await confirm_stop(app, pilot, doubt=True)
        await until(pilot, lambda: any(n.severity == "error" for n in notifications(app)))
        shown = notifications(app)
    assert any("the disk is full" in n.message and "NOT recorded" in n.title for n in shown)
    assert not any("recorded in the run log" == n.title for n in shown)
    assert events(seed_campaign, "stop") == []


@pytest.mark.parametrize("step", ["stop", "stop-doubt", "stop-signal", "stop-confirm"])
async def test_escape_at_any_step_of_a_stop_records_nothing(seed_campaign, step):
    sent: list[str] = []
    app = make_app(seed_campaign, signal_run=lambda run_id: sent.append(run_id) or {"sent": True})
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s")
        if step == "stop":
            await pilot.press("down")
            assert isinstance(app.screen, StopScreen)
        else:
            await pilot.press("down", "enter")  # nan-loss on ctrl-r1: it never triggered, so all four steps come
            for answer_id in ("stop-doubt", "stop-signal"):
                if step == answer_id:
                    break
                await on_screen(app, pilot, answer_id, "y")
            await until(pilot, lambda: app.screen.id == step)
        if step == "stop-signal":
            assert app.screen.query_one("#cancel").label.plain == "Cancel [Esc]", "the SIGTERM prompt has an explicit Cancel"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, (StopScreen, ConfirmScreen)))
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert any("nothing recorded" in str(n.message) for n in notifications(app))
    assert new_events(seed_campaign) == [] and sent == []


async def test_the_cancel_button_of_the_sigterm_prompt_records_nothing(seed_campaign):
    app = make_app(seed_campaign, signal_run=lambda run_id: {"sent": True})
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s", "enter", *"plateau", "enter")
        await until(pilot, lambda: app.screen.id == "stop-signal")
        await pilot.click("#cancel")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        await app.workers.wait_for_complete()
    assert new_events(seed_campaign) == []


async def test_the_confirm_line_says_what_will_be_written(seed_campaign):
    RunLog(seed_campaign).append("alert", rule="f1-floor", run="ctrl-r1", value=0.51, step=2400, message="F1 0.51")
    app = make_app(seed_campaign, signal_run=lambda run_id: {"sent": True, "detail": "SIGTERM to pid 4242"})
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s")
        rules = [r.id for r in app.screen.rules]
        await pilot.press(*["down"] * (rules.index("f1-floor") + 1), "enter")
        await on_screen(app, pilot, "stop-signal", "y")  # f1-floor triggered for ctrl-r1: no doubt asked
        await until(pilot, lambda: app.screen.id == "stop-confirm")
        line = str(app.screen.query_one("#message").render())
        assert line == "stop of run ctrl-r1 · rule f1-floor (eval/macro_f1 last 0.712) · then SIGTERM to pid 4242"
        await pilot.press("enter")
        await until(pilot, lambda: events(seed_campaign, "signal"))
    (stop,) = events(seed_campaign, "stop")
    assert stop["rule"] == "f1-floor" and "rule_triggered" not in stop and "after_finish" not in stop


async def test_a_stop_of_a_finished_run_asks_twice_and_carries_its_flag(seed_campaign):
    runs = (replace(seed_runs()[0], state="finished", alive=False),) + seed_runs()[1:]
    app = make_app(seed_campaign, make_snapshot(runs=runs))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s", "enter", *"slip", "enter")
        await until(pilot, lambda: app.screen.id == "stop-doubt")
        why = str(app.screen.query_one("#message").render())
        assert "finished cleanly" in why and "close would reject its deliverables" in why
        assert app.screen.focused.id == "cancel", "Enter on a doubtful stop cancels it"
        await pilot.press("y")
        await until(pilot, lambda: app.screen.id == "stop-confirm")
        assert "marked after_finish" in str(app.screen.query_one("#message").render())
        await pilot.press("enter")
        await until(pilot, lambda: events(seed_campaign, "stop"))
    (stop,) = events(seed_campaign, "stop")
    assert stop["after_finish"] is True and stop["reason"] == "slip" and "rule_triggered" not in stop


async def test_a_stop_under_a_rule_that_never_triggered_carries_its_flag(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s", "down", "enter")
        await until(pilot, lambda: app.screen.id == "stop-doubt")
        assert "rule 'nan-loss' never triggered for run 'ctrl-r1'" in str(app.screen.query_one("#message").render())
        await pilot.press("y")
        await confirm_stop(app, pilot)
        await until(pilot, lambda: events(seed_campaign, "stop"))
    assert events(seed_campaign, "stop")[0]["rule_triggered"] is False


# ---------------------------------------------------------------- pilot decision, note, acknowledgement


async def test_pilot_decision_with_a_note(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("d")
        assert isinstance(app.screen, DecisionScreen)
        await pilot.press("down", "tab")  # drop-optional, then the note
        await pilot.press(*"v-r64 weak")
        await pilot.press("enter")
        await until(pilot, lambda: events(seed_campaign, "pilot_decision"))
    (decision,) = events(seed_campaign, "pilot_decision")
    assert decision["decision"] == "drop-optional" and decision["note"] == "v-r64 weak"
    assert decision["source"] == "key" and decision["run"] == "ctrl-r1"


async def test_pilot_decision_continue_by_enter(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("d", "enter")
        await until(pilot, lambda: events(seed_campaign, "pilot_decision"))
    assert events(seed_campaign, "pilot_decision")[0]["decision"] == "continue"


async def test_note_on_the_campaign(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("n")
        assert isinstance(app.screen, NoteScreen)
        await pilot.press(*"setup 6h")
        await pilot.press("enter")
        await until(pilot, lambda: events(seed_campaign, "note"))
    (note,) = events(seed_campaign, "note")
    assert note["text"] == "setup 6h" and note["run"] is None and note["source"] == "key"


async def test_note_on_the_selected_run(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("n", "tab", "space", "shift+tab")  # tick "about run ctrl-r1", back to the text
        await pilot.press(*"relaunch")
        await pilot.press("enter")
        await until(pilot, lambda: events(seed_campaign, "note"))
    assert events(seed_campaign, "note")[0]["run"] == "ctrl-r1"


async def test_the_note_checkbox_shows_its_state(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("n", *"relaunch", "tab")
        box = app.screen.query_one("#on-run")
        unticked = str(box.render())
        await pilot.press("space")
        await pilot.pause()
        ticked = str(box.render())
        assert unticked.startswith("[ ]") and ticked.startswith("[x]") and "X" not in unticked
        await pilot.press("shift+tab", "enter")
        await until(pilot, lambda: events(seed_campaign, "note"))
    assert events(seed_campaign, "note")[0]["run"] == "ctrl-r1"


async def test_no_blinking_cursor_when_animations_are_off(seed_campaign):
    app = make_app(seed_campaign)
    app.animation_level = "none"  # what TEXTUAL_ANIMATIONS=none sets
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("n")
        assert app.screen.query_one("#text").cursor_blink is False


async def test_q_types_in_a_dialog_instead_of_quitting(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("n", *"quiq")
        assert app.is_running and isinstance(app.screen, NoteScreen)
        await pilot.press("enter")
        await until(pilot, lambda: events(seed_campaign, "note"))
    assert events(seed_campaign, "note")[0]["text"] == "quiq"


async def test_failed_note_write_is_shown_and_nothing_is_pretended(seed_campaign, monkeypatch):
    def refuse(self, fd, type, fields):
        raise RunLogError(f"cannot write to {self.path}: Permission denied; nothing was recorded")

    monkeypatch.setattr(RunLog, "_append_locked", refuse)  # every write, in or out of a transaction
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("n", *"late")
        await pilot.press("enter")
        await until(pilot, lambda: any(n.severity == "error" for n in notifications(app)))
        shown = notifications(app)
    error = next(n for n in shown if n.severity == "error")
    assert "Permission denied" in error.message and error.title == "NOT recorded: note"
    assert not any(n.title == "recorded in the run log" for n in shown)
    assert events(seed_campaign, "note") == []


async def test_acknowledge_the_selected_alert(seed_campaign):
    alert_event = RunLog(seed_campaign).append("alert", rule="stalled", run="ctrl-r1", message="no metric line for 20 min")
    snapshot = make_snapshot(alerts=(stalled_alert(alert_event["seq"]),))
    app = make_app(seed_campaign, snapshot, bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        alerts = app.query_one(AlertsList)
        assert alerts.selected_alert is not None and not alerts.is_acknowledged(alerts.selected_alert)
        assert "1 unacknowledged" in str(alerts.border_title)
        await pilot.press("a")
        await until(pilot, lambda: app.screen.id == "ack-confirm")
        assert "stalled on ctrl-r1: no metric line for 20 min" in str(app.screen.query_one("#message").render())
        await pilot.press("y")
        await until(pilot, lambda: events(seed_campaign, "ack"))
        await until(pilot, lambda: alerts.is_acknowledged(alerts.selected_alert))
        assert "unacknowledged" not in str(alerts.border_title)
        await pilot.press("a")  # again: nothing more is written
        await pilot.pause()
    (ack,) = events(seed_campaign, "ack")
    assert ack["rule"] == "stalled" and ack["run"] == "ctrl-r1" and ack["alert_seq"] == alert_event["seq"]
    assert ack["source"] == "key"


async def test_acknowledge_an_alert_the_log_does_not_hold_is_refused(seed_campaign):
    app = make_app(seed_campaign, make_snapshot(alerts=(stalled_alert(99),)), bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("a")
        await on_screen(app, pilot, "ack-confirm", "y")
        await until(pilot, lambda: any(n.severity == "error" for n in notifications(app)))
        assert not app.query_one(AlertsList).is_acknowledged(stalled_alert(99))
    assert events(seed_campaign, "ack") == []


async def test_a_new_alert_takes_the_selection_and_a_acknowledges_it(seed_campaign):
    log = RunLog(seed_campaign)
    old = log.append("alert", rule="stalled", run="ctrl-r1", message="no metric line for 20 min")
    new = log.append("alert", rule="nan-loss", run="v-r16", message="loss is NaN")
    older = stalled_alert(old["seq"])
    newer = AlertView("nan-loss", "v-r16", "loss is NaN", NOW, new["seq"])
    source = FakeSource(make_snapshot(alerts=(older,)))
    app = make_app(seed_campaign, source=source, refresh_seconds=0.05, bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        alerts = app.query_one(AlertsList)
        source.snapshot = make_snapshot(alerts=(newer, older))
        await until(pilot, lambda: alerts.option_count >= 2)
        assert alerts.selected_alert.rule == "nan-loss", "the new alert on top is the selected one"
        await pilot.press("a")
        await until(pilot, lambda: app.screen.id == "ack-confirm")
        assert "nan-loss on v-r16: loss is NaN" in str(app.screen.query_one("#message").render())
        await pilot.press("escape")
        await until(pilot, lambda: app.screen.id != "ack-confirm")
    assert events(seed_campaign, "ack") == [], "Esc on the acknowledge confirm records nothing"


async def test_a_new_alert_leaves_a_selection_the_person_just_moved(seed_campaign):
    first = AlertView("nan-loss", "v-r16", "loss is NaN", NOW, 2)
    source = FakeSource(make_snapshot(alerts=(first, stalled_alert(1))))
    app = make_app(seed_campaign, source=source, refresh_seconds=0.05, bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        alerts = app.query_one(AlertsList)
        alerts.focus()
        await pilot.press("down")  # the person picks the stalled alert
        assert alerts.selected_alert.rule == "stalled"
        third = AlertView("truncated-input", "v-r64", "doc-991 truncated", NOW, 3)
        source.snapshot = make_snapshot(alerts=(third, first, stalled_alert(1)))
        await until(pilot, lambda: alerts.option_count >= 3)
        assert alerts.selected_alert.rule == "stalled"


async def test_unacknowledged_alerts_come_first(seed_campaign):
    done = replace(stalled_alert(1), acknowledged=True)
    fresh = AlertView("nan-loss", "v-r16", "loss is NaN", NOW - timedelta(hours=1), 2)
    app = make_app(seed_campaign, make_snapshot(alerts=(done, fresh)), bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        alerts = app.query_one(AlertsList)
        assert [alerts._alerts[alerts.get_option_at_index(i).id].rule for i in range(2)] == ["nan-loss", "stalled"]


# ---------------------------------------------------------------- the log screen and void


def log_options(app: CockpitApp) -> list[str]:
    listing = app.screen.query_one("#events")
    return [str(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)]


async def test_the_log_screen_lists_the_run_log_newest_first(seed_campaign):
    campaign = load_campaign(seed_campaign)
    from cockpit.record import decisions

    log = RunLog(seed_campaign)
    decisions.record_note(campaign, log, "setup took 6 h", source="cli")
    decisions.record_stop(campaign, log, "v-r16", reason="wrong key", source="cli")
    app = make_app(seed_campaign, bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LogScreen))
        shown = log_options(app)
        assert [line.split()[0] for line in shown] == ["3", "2", "1"]
        assert "stop" in shown[0] and "reason: wrong key" in shown[0] and "None" not in " ".join(shown)
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, LogScreen))
    assert new_events(seed_campaign) == []


async def test_void_from_the_log_screen_takes_a_stop_back(seed_campaign):
    from cockpit.record import decisions

    campaign = load_campaign(seed_campaign)
    stop = decisions.record_stop(campaign, RunLog(seed_campaign), "v-r16", reason="wrong key", source="key")
    app = make_app(seed_campaign, bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LogScreen))
        assert app.screen.selected_event["seq"] == stop["seq"]  # newest first: the stop is on top
        await pilot.press("v")
        await until(pilot, lambda: isinstance(app.screen, VoidScreen))
        await pilot.press("enter")  # no reason yet: refused
        assert isinstance(app.screen, VoidScreen)
        await pilot.press(*"s on the wrong run", "enter")
        await until(pilot, lambda: events(seed_campaign, "void"))
        await until(pilot, lambda: isinstance(app.screen, LogScreen) and "VOIDED" in " ".join(log_options(app)))
        assert log_options(app)[0].split()[0] == str(stop["seq"] + 1), "the void is on top now"
        await pilot.press("down", "v")  # the stop again: already voided
        await pilot.pause(0.1)
        assert not isinstance(app.screen, VoidScreen)
    (void,) = events(seed_campaign, "void")
    assert void["voided_seq"] == stop["seq"] and void["reason"] == "s on the wrong run" and void["source"] == "key"
    assert RunLog(seed_campaign).replay().stop_of("v-r16") is None
    assert len(events(seed_campaign, "stop")) == 1, "the stop itself is still in the run log"


async def test_a_stop_of_the_finished_control_voided_from_the_log_lets_close_accept_it(tmp_path, monkeypatch):
    from cockpit.close.closing import evaluate
    from tests.close.test_closing import IDS, deliverable, make_campaign, metrics, predictions, write

    monkeypatch.setenv("COCKPIT_TEMP_ROOTS", str(tmp_path / "volatile"))
    camp = make_campaign(tmp_path, deliverable("ctrl/predictions", "out/ctrl.jsonl", run="ctrl-r1"))
    write(camp, "out/ctrl.jsonl", predictions(IDS, "pos"))
    metrics(camp, "ctrl-r1", 2, 13, 0.81)
    runs = (replace(seed_runs()[0], state="finished", alive=False),)
    app = make_app(camp, make_snapshot(runs=runs), bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("s", "enter", *"slip", "enter")
        await on_screen(app, pilot, "stop-doubt", "y")
        await on_screen(app, pilot, "stop-confirm", "enter")
        await until(pilot, lambda: events(camp, "stop"))
        assert events(camp, "stop")[0]["after_finish"] is True
        assert evaluate(camp).summary["accepted"] == 0, "a stopped run's deliverable is rejected"
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LogScreen))
        await pilot.press("v", *"the control had finished", "enter")
        await until(pilot, lambda: events(camp, "void"))
    summary = evaluate(camp).summary
    assert summary["accepted"] == 1 and summary["rejections"] == [] and summary["cost_per_accepted_usd"] == "47.14"
    assert [v["reason"] for v in summary["voided"]] == ["the control had finished"]


async def test_only_decisions_can_be_voided_from_the_log_screen(seed_campaign):
    from cockpit.record import decisions

    decisions.record_note(load_campaign(seed_campaign), RunLog(seed_campaign), "a note", source="key")
    app = make_app(seed_campaign, bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LogScreen))
        await pilot.press("down", "v")  # campaign_started
        await until(pilot, lambda: any("not a decision" in str(n.message) for n in notifications(app)))
        assert isinstance(app.screen, LogScreen)
        await pilot.press("up", "v")
        await until(pilot, lambda: isinstance(app.screen, VoidScreen))
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, LogScreen))
        await pilot.press("escape")
        await app.workers.wait_for_complete()
    assert new_events(seed_campaign) == []


# ---------------------------------------------------------------- alerts, bell, polling


async def test_a_new_alert_rings_the_bell_once(seed_campaign):
    source = FakeSource(make_snapshot())
    app = make_app(seed_campaign, source=source, refresh_seconds=0.05)
    rings: list[int] = []
    app.bell = lambda: rings.append(1)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        assert rings == []
        source.snapshot = make_snapshot(alerts=(stalled_alert(),))
        await until(pilot, lambda: rings)
        ticks = source.ticks
        await until(pilot, lambda: source.ticks >= ticks + 3)  # the same alert again: no new ring
        assert rings == [1]
        toast = next(n for n in notifications(app) if n.title.startswith("alert"))
        assert toast.title == "alert: stalled on ctrl-r1" and toast.severity == "warning"
    assert new_events(seed_campaign) == []  # the view never writes alerts itself


async def test_no_bell_when_turned_off(seed_campaign):
    app = make_app(seed_campaign, make_snapshot(alerts=(stalled_alert(),)), bell=False)
    rings: list[int] = []
    app.bell = lambda: rings.append(1)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        assert any(n.title.startswith("alert") for n in notifications(app))
    assert rings == []


async def test_polls_never_overlap(seed_campaign):
    source = FakeSource(make_snapshot(), delay=0.1)
    app = make_app(seed_campaign, source=source, refresh_seconds=0.01)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: source.ticks >= 4)
    assert source.max_running == 1


async def test_polls_pause_while_a_dialog_is_open(seed_campaign):
    source = FakeSource(make_snapshot())
    app = make_app(seed_campaign, source=source, refresh_seconds=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("n")
        await pilot.pause(0.1)
        ticks = source.ticks
        await pilot.pause(0.3)
        assert source.ticks <= ticks + 1  # at most the one already under way
        assert app.query_one(LotHeader)._status[0] == "updates paused while a dialog is open"
        await pilot.press("escape")
        await until(pilot, lambda: source.ticks >= ticks + 3)


async def test_an_engine_failure_is_shown_and_retried(seed_campaign):
    source = FakeSource(make_snapshot(), error=OSError("metrics folder vanished"))
    app = make_app(seed_campaign, source=source, refresh_seconds=0.01)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: any(n.severity == "error" for n in notifications(app)))
        assert app.is_running
        assert "engine failed" in app.query_one(LotHeader)._status[0]
        source.error = None
        await until(pilot, lambda: app.snapshot is not None, timeout=10)
        await until(pilot, lambda: app.query_one(LotHeader)._status[0].startswith("sampled"))


async def test_a_stale_snapshot_is_called_stale(seed_campaign):
    clock = [NOW]
    app = make_app(seed_campaign, clock=lambda: clock[0])
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        clock[0] = NOW + timedelta(minutes=2)
        app._check_freshness()
        assert app.query_one(LotHeader)._status == ("no new sample for 2m", "warning")


async def test_the_cockpit_leaves_when_its_terminal_is_gone(seed_campaign, tmp_path):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        app._check_terminal()
        assert app.is_running  # headless: nothing to watch
        app._terminal = str(tmp_path / "pts-7")  # as if /dev/pts/7 vanished with the SSH session
        app._check_terminal()
        await until(pilot, lambda: not app.is_running)
    assert app.return_code == 1


# ---------------------------------------------------------------- in-place updates


async def test_runs_table_repaints_only_the_rows_that_changed(seed_campaign, monkeypatch):
    source = FakeSource(make_snapshot())
    app = make_app(seed_campaign, source=source)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        table = app.query_one(RunsTable)
        await pilot.press("down")  # the cursor on v-r16 must stay there
        repainted: list[int] = []
        original = RunsTable.refresh_row
        monkeypatch.setattr(RunsTable, "refresh_row", lambda self, *rows: (repainted.extend(rows), original(self, *rows)))
        first = seed_runs()[0]
        moved = replace(first, step=12500, loss=0.4011, last={"step": 12500, "loss": 0.4011, "eval/macro_f1": 0.712})
        source.snapshot = make_snapshot(runs=(moved,) + seed_runs()[1:])  # the polls say the same
        app.apply_snapshot(source.snapshot)
        await pilot.pause()
        assert repainted == [0]  # ctrl-r1's line only
        assert table.get_cell("ctrl-r1", "step").plain == "12.5k/20k"
        assert table.get_cell("ctrl-r1", "loss").plain == "0.4011"
        assert table.selected_run_id == "v-r16"
        repainted.clear()
        app.apply_snapshot(source.snapshot)
        assert repainted == []  # the same snapshot again touches nothing
        source.snapshot = make_snapshot(runs=(moved, seed_runs()[1]))
        app.apply_snapshot(source.snapshot)  # v-r64 left the plan
        await pilot.pause()
        assert table.row_count == 2 and table.selected_run_id == "v-r16"


async def test_a_tick_draws_only_the_lines_whose_row_changed(seed_campaign, monkeypatch):
    """The line cache is keyed by what the row says: a row that changed once is not drawn again
    on later repaints (the regression DataTable's caches had: Textual's LRUCache.set keeps an
    existing key's old value)."""
    source = FakeSource(make_snapshot())
    app = make_app(seed_campaign, source=source)
    async with app.run_test(size=(120, 30)) as pilot:
        await started(app, pilot)
        table = app.query_one(RunsTable)
        drawn: list[int] = []
        asked: list[int] = []
        original_row, original_line = RunsTable._render_row, RunsTable.render_line
        monkeypatch.setattr(RunsTable, "_render_row", lambda self, row, *a: (drawn.append(row), original_row(self, row, *a))[1])
        monkeypatch.setattr(RunsTable, "render_line", lambda self, y: (asked.append(y), original_line(self, y))[1])
        first = replace(seed_runs()[0], loss=0.3999)  # the loss cell changes once, then stays
        source.snapshot = make_snapshot(runs=(first,) + seed_runs()[1:])  # the polls say the same
        app.apply_snapshot(source.snapshot)
        await pilot.pause()
        assert drawn == [0] and asked == [1]  # the header is line 0; ctrl-r1 is line 1
        for step in (12100, 12200, 12300):
            drawn.clear(), asked.clear()
            moved = replace(first, step=step, last={**first.last, "step": step})
            source.snapshot = make_snapshot(runs=(moved,) + seed_runs()[1:])
            app.apply_snapshot(source.snapshot)
            await pilot.pause()
            assert drawn == [0] and asked == [1], (step, drawn, asked)  # v-r16, v-r64 and the header stay as drawn
        drawn.clear()
        app.apply_snapshot(source.snapshot)
        await pilot.pause()
        assert drawn == []


async def test_runs_table_cuts_long_ids_and_marks_a_bad_loss(seed_campaign):
    long_id = make_run("a-run-with-a-very-long-identifier", state="failed", loss=float("nan"))
    app = make_app(seed_campaign, make_snapshot(runs=seed_runs() + (long_id,)))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        table = app.query_one(RunsTable)
        header = table.render_line(0).text
        assert header.split() == ["run", "state", "step", "loss", "macro_f1", "ETA", "ckpt", "resume"]
        line = table.render_line(4)
        run_width = table.column_width("run")
        assert line.text.startswith(" a-run-with-a-very-long-identifier"[: run_width] + "… ")
        assert len(line.text) == table.size.width
        bad = table.get_component_rich_style("runs-table--bad")
        nan = next(segment for segment in line if segment.text == "NaN")
        assert nan.style.color == bad.color and nan.style.bold
        cursor = table.get_component_rich_style("runs-table--cursor")
        assert all(segment.style.bgcolor == cursor.bgcolor for segment in table.render_line(1))  # the whole line


async def test_role_and_tier_join_when_the_terminal_grows(seed_campaign, monkeypatch):
    runs = seed_runs() + (make_run("v-short-context-lr3e4", state="running", step=120),)
    app = make_app(seed_campaign, make_snapshot(runs=runs))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        table = app.query_one(RunsTable)
        keys = lambda: table.shown_columns  # noqa: E731
        run_width = lambda: table.column_width("run")  # noqa: E731
        # 80 columns: the progress columns all fit, without a sideways scroll; a long id is cut
        assert "role" not in keys() and "resume" in keys()
        assert table.virtual_size.width <= table.size.width and run_width() < len("v-short-context-lr3e4")
        await pilot.press("down")
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert keys()[-2:] == ["role", "tier"] and run_width() == len("v-short-context-lr3e4")
        assert table.get_cell("v-r64", "tier").plain == "exploratory"
        assert table.selected_run_id == "v-r16"
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert "tier" not in keys() and table.selected_run_id == "v-r16"
        app.apply_snapshot(make_snapshot(runs=runs))  # and the live updates go on as before
        assert table.get_cell("ctrl-r1", "step").plain == "12k/20k"


async def test_clock_says_when_the_plan_passes_the_window(seed_campaign):
    over = replace(make_snapshot().clock, committed_hours=78.0, uncommitted_hours=-6.0, fits=False)
    app = make_app(seed_campaign, replace(make_snapshot(), clock=over))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        panel = app.query_one("#clock")
        lines = [panel.render_line(y).text for y in range(panel.size.height)]
    assert lines[0].startswith("elapsed") and lines[0].rstrip().endswith("26.5 h")
    assert "78.0 h" in lines[1] and "over by 6.0 h" in lines[3] and "PAST LOT END" in lines[4]


async def test_clock_before_the_lot_starts(seed_campaign):
    early = LOT_START - timedelta(hours=30)
    waiting = replace(
        make_snapshot().clock, now=early, started=False, elapsed_hours=None, remaining_hours=None,
        projected_finish=LOT_START + timedelta(hours=48), message="the lot has not started",
    )
    app = make_app(seed_campaign, replace(make_snapshot(taken_at=early), clock=waiting))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        panel = app.query_one("#clock")
        lines = [panel.render_line(y).text for y in range(panel.size.height)]
    assert "starts in 30h00m · uncommitted 24.0 h" in lines[3]
    assert "finish Wed 08:00 · fits" in lines[4]


class GpuShown:
    """One GPU's lines in the GPU panel's one widget (GpuLines), read as the GPU's own rows."""

    def __init__(self, app: CockpitApp, index: int) -> None:
        self.widget = app.query_one(GpuLines)
        self.index = index

    @property
    def gpu(self):
        return next(gpu for gpu in self.widget.gpus if gpu.index == self.index)

    @property
    def size(self) -> Size:
        span = self.widget.span_of(self.index)
        return Size(self.widget.size.width, span[1] if span else 0)

    def render_line(self, y: int):
        start, count = self.widget.span_of(self.index)
        assert 0 <= y < count
        return self.widget.render_line(start + y)

    def component_style(self, name: str):
        return self.widget.component_style(name)


async def test_sparklines_follow_each_new_sample(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        row = GpuShown(app, 0)
        newest = lambda: row.render_line(0).text[row.size.width - VALUE_WIDTH - 1]  # noqa: E731
        assert newest() == "▅"  # 64 %
        history = make_gpu(0).utilization_history
        app.source.snapshot = replace(make_snapshot(), gpus=(replace(make_gpu(0), utilization_history=history[1:] + (100.0,)),))
        app.apply_snapshot(app.source.snapshot)  # the polls say the same from now on
        await pilot.pause()
        assert row.gpu.utilization_history[-1] == 100.0 and newest() == "█"


def test_sparkline_scale_is_fixed():
    from rich.style import Style

    low, high = Style(dim=True), Style(bold=True)
    assert sparkline((96.0, 97.0, 98.0), 5, low, high).plain == "  ███"  # busy stays busy
    assert sparkline((0.0, 1.0, 50.0, 100.0), 4, low, high).plain == " ▁▄█"
    assert sparkline(tuple(float(v) for v in range(100)), 3, low, high).plain == "███"  # newest samples only


async def test_nvml_unavailable_says_why_and_the_rest_works(seed_campaign):
    app = make_app(seed_campaign, make_snapshot(nvml=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        panel = app.query_one(GpuPanel)
        assert "NVML unavailable: libnvidia-ml.so not found" in str(panel.query_one("#nvml-status").render())
        assert not panel.query_one(GpuLines).gpus and panel.query_one(GpuLines).size.height == 0
        assert app.query_one(RunsTable).row_count == 3


async def test_simulated_gpus_are_labelled(seed_campaign):
    app = make_app(seed_campaign, make_snapshot(gpus=2, simulated=True))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        assert "SIMULATED" in str(app.query_one(GpuPanel).border_title)


async def test_simulated_gpus_where_nvml_is_unavailable_show_both(seed_campaign):
    nvml = NvmlView(False, "turned off by COCKPIT_NVML=off — the demo shows SIMULATED GPUs, not measurements", simulated=True)
    snapshot = replace(make_snapshot(), nvml=nvml, gpus=(make_gpu(0, simulated=True),))
    app = make_app(seed_campaign, snapshot)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        panel = app.query_one(GpuPanel)
        assert "SIMULATED" in str(panel.border_title)
        assert "NVML unavailable: turned off by COCKPIT_NVML=off" in str(panel.query_one("#nvml-status").render())
        assert len(panel.query_one(GpuLines).gpus) == 1


async def test_lost_gpu_and_throttling_are_named(seed_campaign):
    gpus = (make_gpu(0, throttle=("SW power cap",)), make_gpu(1, lost=True))
    app = make_app(seed_campaign, replace(make_snapshot(), gpus=gpus))
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        shown = lambda row: [row.render_line(y).text for y in range(row.size.height)]  # noqa: E731
        assert "slowed: SW power cap" in shown(GpuShown(app, 0))[2]
        lost = shown(GpuShown(app, 1))
        assert "lost" in lost[0] and "GPU 1 lost: its runs are not computing" in lost[1]


async def test_eight_gpus_fit_one_line_each_at_80x24(seed_campaign):
    app = make_app(seed_campaign, make_snapshot(gpus=8))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.pause()
        lines = app.query_one(GpuLines)
        assert len(lines.gpus) == 8 and lines.compact and all(GpuShown(app, i).size.height == 1 for i in range(8))
    app = make_app(seed_campaign, make_snapshot(gpus=2))
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        await pilot.pause()
        assert not app.query_one(GpuLines).compact


async def test_a_gpu_scrolled_out_of_view_is_drawn_fresh_when_it_comes_back(seed_campaign):
    """The GPUs' lines are one widget: a new sample repaints only the lines that changed (no
    layout of the screen, whatever is in view); scrolled back into view, a GPU that was out of
    view shows the latest sample, not a stale one."""
    app = make_app(seed_campaign, make_snapshot(gpus=8))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.pause()
        panel = app.query_one(GpuPanel)
        lines = panel.gpu_lines
        start, _ = lines.span_of(7)
        assert start >= panel.scroll_offset.y + panel.scrollable_content_region.height, "at 80×24 the last of 8 GPUs is out of view"
        repaints: list[tuple[tuple, dict]] = []
        original = GpuLines.refresh
        GpuLines.refresh = lambda self, *a, **kw: (repaints.append((a, kw)), original(self, *a, **kw))[1]
        try:
            gpus = tuple(replace(make_gpu(i), utilization_percent=100.0 if i == 7 else 87.0,
                                 temperature_c=99.0 if i == 7 else 60.0) for i in range(8))
            app.source.snapshot = replace(make_snapshot(gpus=8), gpus=gpus)  # the polls say the same
            app.apply_snapshot(app.source.snapshot)
            await pilot.pause()
            assert repaints and all(regions and not kw.get("layout") for regions, kw in repaints)  # lines, not a layout
            assert any(region.y == start for regions, _ in repaints for region in regions)  # the hidden GPU's line too
            panel.scroll_end(animate=False)
            await pilot.pause()
            await pilot.pause()
        finally:
            GpuLines.refresh = original
        assert "\xa0100%" in html.unescape(app.export_screenshot())  # the newest sample (the others show 87 %)


async def test_a_toast_is_one_line_above_the_footer_and_goes_quickly(seed_campaign):
    app = make_app(seed_campaign, bell=False)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await started(app, pilot)
        await pilot.press("n", *"setup took 6 h", "enter")
        await until(pilot, lambda: events(seed_campaign, "note"))
        await until(pilot, lambda: app.screen.query("Toast"))
        await pilot.pause(0.1)
        toasts = [t for t in app.screen.query("Toast") if t.region.height]
        assert [t.region.height for t in toasts] == [1] and toasts[0].region.y == 22
        shown = next(n for n in notifications(app) if n.title == "recorded in the run log")
        assert shown.timeout <= 5
        assert "recorded in the run log: note, seq" in str(toasts[0].render())


# ---------------------------------------------------------------- themes, help, quit


async def test_theme_cycle(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        assert app.theme == "dark"
        seen = []
        for _ in range(3):
            await pilot.press("t")
            seen.append(app.theme)
    assert seen == ["light", "mono", "dark"]
    assert new_events(seed_campaign) == []


async def test_no_color_picks_the_monochrome_theme(seed_campaign, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(seed_campaign)
    assert app.theme == "mono"


def screen_colours(app: CockpitApp) -> set[str]:
    """Every colour the screen shows, foreground and background (the SVG's fills)."""
    import re

    return set(re.findall(r"fill: (#[0-9a-f]{6})", app.export_screenshot()))


@pytest.mark.parametrize("how", ["NO_COLOR", "--theme mono"])
async def test_no_colour_at_all_under_no_color_and_the_mono_theme(seed_campaign, monkeypatch, how):
    if how == "NO_COLOR":
        monkeypatch.setenv("NO_COLOR", "1")
        app = make_app(seed_campaign, make_snapshot(alerts=(stalled_alert(),)), bell=False)
    else:
        app = make_app(seed_campaign, make_snapshot(alerts=(stalled_alert(),)), bell=False, theme="mono")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.pause(0.1)
        assert len(screen_colours(app)) == 2, "the terminal's own foreground and background only"
        cursor = app.query_one(RunsTable).get_component_styles("runs-table--cursor")
        assert "reverse" in str(cursor.text_style), "the selected run is told apart by reverse video"


async def test_other_themes_keep_their_colours(seed_campaign):
    app = make_app(seed_campaign, make_snapshot(alerts=(stalled_alert(),)), bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        assert len(screen_colours(app)) > 2
        await pilot.press("t", "t")  # light, then mono: no colour
        await pilot.pause(0.1)
        assert app.theme == "mono" and len(screen_colours(app)) == 2
        await pilot.press("t")  # dark again: colours back
        await pilot.pause(0.1)
        assert len(screen_colours(app)) > 2


async def test_an_invalid_user_theme_falls_back_with_a_notification(seed_campaign, tmp_path):
    folder = tmp_path / "config" / "cockpit" / "themes"
    folder.mkdir(parents=True)
    (folder / "neon.toml").write_text('name = "neon"\nprimary = "glowing"\n')
    (folder / "paper.toml").write_text('name = "paper"\nprimary = "#333333"\ndark = false\nbackground = "#ffffff"\n')
    app = make_app(seed_campaign, theme="neon")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        assert app.theme == "dark"
        errors = [n for n in notifications(app) if n.severity == "error"]
        assert len(errors) == 1 and "theme 'neon' is invalid" in errors[0].message and "glowing" in errors[0].message
        assert "paper" in app.theme_catalog.names  # a valid user theme joins the cycle
        await pilot.press("t", "t", "t")
        assert app.theme == "paper"


def test_theme_files_are_checked():
    shipped = discover_themes()
    assert shipped.names[:3] == ["dark", "light", "mono"] and not shipped.problems
    assert shipped.themes["mono"].ansi and not shipped.themes["light"].dark


@pytest.mark.parametrize(
    "text, complaint",
    [
        ('primary = "#fff"\nsparkle = 1\n', "unknown key sparkle"),
        ('name = "x"\n', "primary is required"),
        ('primary = "#fff"\n[variables]\ncockpit-alert = "loud"\n', "variables.cockpit-alert"),
        ('primary = [1]\n', "must be a colour string"),
        ('primary = "#fff"\ndark = "yes"\n', "dark must be true or false"),
        ("primary = \n", "not valid TOML"),
    ],
)
def test_bad_theme_files_say_what_is_wrong(tmp_path, text, complaint):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ThemeFileError) as error:
        load_theme_file(path)
    assert complaint in str(error.value) and str(path) in str(error.value)


async def test_help_lists_every_key(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        listed = {key.key for key in app.screen.keys}
        assert listed == {"s", "d", "a", "n", "l", "t", "?", "q", "Enter", "c", "b"}  # Enter, c, b: the charts (issue 20)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
    bindings = [b for b in CockpitApp.BINDINGS]
    assert all(b.id and b.description for b in bindings)
    assert next(b for b in bindings if b.key == "q").priority


async def test_quit(seed_campaign):
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running
    assert app.return_code == 0
    assert new_events(seed_campaign) == []


async def test_quit_waits_for_a_write_under_way(seed_campaign, monkeypatch):
    original = RunLog.append

    def slow(self, type, **fields):
        time.sleep(0.3)
        return original(self, type, **fields)

    monkeypatch.setattr(RunLog, "append", slow)
    app = make_app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.press("n", *"late", "enter")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)
    assert [e["text"] for e in events(seed_campaign, "note")] == ["late"]


# ---------------------------------------------------------------- formatting and the command


def test_formats_fit_the_columns():
    assert fmt.step(12000, 20000) == "12k/20k" and fmt.step(950, None) == "950"
    assert fmt.metric(float("nan")) == "NaN" and fmt.metric(0.41234) == "0.4123"
    assert fmt.duration(45.5) == "45h30m" and fmt.duration(0.5) == "30m" and fmt.duration(300) == "12d 12h"
    assert fmt.age(42) == "42s" and fmt.age(3 * 3600 + 300) == "3h05m"
    assert fmt.money(Decimal("47.14")) == "47.14 USD"
    assert fmt.local_time(NOW + timedelta(hours=2), NOW) == "12:30"
    assert fmt.local_time(NOW + timedelta(days=2), NOW) == "Thu 10:30"
    assert fmt.local_time(LOT_START + timedelta(days=3), None, zone=True) == "Thu 03 Dec 08:00 UTC"


def test_unknown_theme_is_a_usage_error_listing_the_themes(cli, seed_campaign):
    result = cli(str(seed_campaign), "--theme", "neon")
    assert result.returncode == 2
    assert "no theme 'neon'" in result.stderr and "dark, light, mono" in result.stderr


def test_without_a_terminal_the_cockpit_points_to_status(cli, seed_campaign):
    result = cli(str(seed_campaign))
    assert result.returncode == 2
    assert "needs a terminal" in result.stderr and "cockpit status" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_campaign_is_a_finding(cli, tmp_path):
    result = cli(str(tmp_path / "nowhere"))
    assert result.returncode == 1 and "Traceback" not in result.stderr


# ---------------------------------------------------------------- alerts of one rule without a run


async def test_two_window_alerts_ring_the_bell_once(seed_campaign):
    six = AlertView("lot-window", None, "the lot ends in 5 h", NOW, 10, key="lot-window:6h")
    one = AlertView("lot-window", None, "the lot ends in 59 min", NOW, 20, key="lot-window:1h")
    source = FakeSource(make_snapshot(alerts=(one, six)))
    app = make_app(seed_campaign, source=source, refresh_seconds=0.05)
    rings = []
    app.bell = lambda: rings.append(1)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        ticks = source.ticks
        await until(pilot, lambda: source.ticks >= ticks + 5)
    assert len(rings) == 1


async def test_a_window_alert_is_pinned_in_the_header(seed_campaign):
    app = make_app(seed_campaign, make_snapshot(alerts=window_and_older_alerts()), bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        header = app.query_one(LotHeader)
        second = header.build_lines(header.size.width)[1]
        assert second.plain.startswith("▲ the lot ends at Thu 08:00 in 4h59m")
        assert header.region.y == 0 and header.region.height == 2, "the header never scrolls"
        app._pin_window_alert(())
        assert "RTX 4090" in header.build_lines(header.size.width)[1].plain, "without one, the lot's facts"


async def test_two_unrecorded_window_alerts_are_both_listed(seed_campaign):
    six = AlertView("lot-window", None, "ends in 5 h (NOT RECORDED)", NOW, None, severity="critical", key="lot-window:6h")
    one = AlertView("lot-window", None, "ends in 59 min (NOT RECORDED)", NOW, None, severity="critical", key="lot-window:1h")
    source = FakeSource(make_snapshot(alerts=(one, six)))
    app = make_app(seed_campaign, source=source, refresh_seconds=0.05, bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.pause(0.2)
        assert app.return_code is None and app.query_one(AlertsList).option_count >= 2


async def test_two_power_capped_gpus_keep_the_host_line_in_view_at_80x24(seed_campaign):
    snapshot = replace(make_snapshot(gpus=2), gpus=(make_gpu(0, throttle=("SW power cap",)), make_gpu(1, throttle=("SW power cap",))))
    app = make_app(seed_campaign, snapshot, bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.pause(0.2)
        panel = app.query_one(GpuPanel)
        assert panel.content_region.contains_region(app.query_one(HostLine).region)


async def test_an_unreadable_run_and_a_due_pilot_decision_are_shown(seed_campaign):
    from dataclasses import replace as replaced

    from cockpit.tui.widgets.lot_header import LotHeader

    runs = (replaced(seed_runs()[0], state="unreadable"),) + seed_runs()[1:]
    snapshot = replaced(make_snapshot(runs=runs), pilot_due_at=NOW - timedelta(minutes=5))
    app = make_app(seed_campaign, snapshot)
    async with app.run_test(size=(100, 30)) as pilot:
        await started(app, pilot)
        assert app.query_one(RunsTable).get_cell("ctrl-r1", "state").plain == "unreadable"
        header = app.query_one(LotHeader)
        assert "PILOT DECISION DUE" in header.build_lines(100)[1].plain
        app.source.snapshot = make_snapshot()  # decided: the header says no more (the polls too)
        app.apply_snapshot(app.source.snapshot)
        await pilot.pause()
        assert "PILOT DECISION DUE" not in header.build_lines(100)[1].plain


# ---------------------------------------------------------------- GPU health, MIG, containers (issue 18)


def gpu_lines(row: GpuShown) -> list[str]:
    return [row.render_line(y).text.rstrip() for y in range(row.size.height)]


HEALTHY = {
    "serial": "1650921000123",
    "counters": {"ecc_corrected": 14, "ecc_uncorrected": 0, "remap_pending": False, "remap_failed": False,
                 "pcie_replays": 9, "power_slowdown_s": 130.0, "thermal_slowdown_s": 4.0, "energy_j": 9.0e7},
    "since_start": {"ecc_corrected": 2, "ecc_uncorrected": 0, "remap_pending": False, "remap_failed": False,
                    "pcie_replays": 3, "power_slowdown_s": 75.0, "thermal_slowdown_s": 0.0, "energy_j": 4.5e6},
    "energy_kwh_since_start": 1.25,
}


async def test_health_counters_show_their_deltas_since_the_lot_start(seed_campaign):
    gpus = (replace(make_gpu(0), health=HEALTHY), make_gpu(1))
    app = make_app(seed_campaign, replace(make_snapshot(), gpus=gpus))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.pause()
        shown = " ".join(" ".join(gpu_lines(row)) for row in [GpuShown(app, 0)])
        for words in ("since start: ECC +2 corr +0 unc", "remap 0 pend 0 fail", "PCIe +3",
                      "slow pwr 1m th 0s", "1.25 kWh"):
            assert words in shown, (words, shown)
        assert "!" not in shown  # nothing alarming: no mark
        assert not any("since start" in line for line in gpu_lines(GpuShown(app, 1)))  # none reported: no line
        assert "…" not in shown and len(gpu_lines(GpuShown(app, 0))) <= 4  # nothing cut at 80×24


async def test_only_the_counters_a_gpu_reports_are_shown_and_an_uncorrected_error_is_marked(seed_campaign):
    old = {"since_start": {"retired_pages_single": 1, "retired_pages_double": 2, "ecc_uncorrected": 5}}
    app = make_app(seed_campaign, replace(make_snapshot(), gpus=(replace(make_gpu(0), health=old),)))
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        row = GpuShown(app, 0)
        line = next(line for line in gpu_lines(row) if "since start" in line)
        assert line.strip() == "! since start: ECC +5 unc · retired pages +1 sbe +2 dbe"  # only what it reports
        y = gpu_lines(row).index(line.rstrip())
        warning = row.component_style("gpu-row--problem")
        assert any(segment.style and segment.style.color == warning.color for segment in row.render_line(y))
    failed = {"since_start": {"remap_pending": False, "remap_failed": True}}
    app = make_app(seed_campaign, replace(make_snapshot(), gpus=(replace(make_gpu(0), health=failed),)))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        assert "! since start: remap 0 pend FAILED" in " ".join(gpu_lines(GpuShown(app, 0)))


async def test_a_mig_gpu_shows_its_instances_memory_and_no_utilization_figure(seed_campaign):
    from cockpit.live.gpu_fields import MigInstance

    instances = (MigInstance(0, "MIG-a", 3 * 2**30, 20 * 2**30), MigInstance(1, "MIG-b", None, None))
    mig = replace(make_gpu(0), utilization_percent=None, utilization_history=(), mig_instances=instances)
    app = make_app(seed_campaign, replace(make_snapshot(), gpus=(mig,)))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        lines = gpu_lines(GpuShown(app, 0))
        assert lines[0].startswith("0 util not reported (MIG)") and "%" not in lines[0] and "71°C" in lines[0]
        assert not set(lines[0]) & set("▁▂▃▄▅▆▇█")  # no utilization bar either
        assert "  MIG 0: 3.0/20.0G · 1: mem n/a" in lines, lines


async def test_processes_in_a_container_are_labelled(seed_campaign):
    from cockpit.live.snapshot import GpuProcessView

    processes = (GpuProcessView(1234, 8 * 2**30, None, container=True), GpuProcessView(77, None, "ctrl-r1", container=True))
    app = make_app(seed_campaign, replace(make_snapshot(), gpus=(replace(make_gpu(0), processes=processes),)))
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        shown = " ".join(gpu_lines(GpuShown(app, 0)))
        assert "procs pid 1234 (container) 8.0G · pid 77 (container) ctrl-r1" in shown, shown
    visible = (GpuProcessView(1234, 8 * 2**30, "ctrl-r1"),)
    app = make_app(seed_campaign, replace(make_snapshot(), gpus=(replace(make_gpu(0), processes=visible),)))
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        assert "container" not in " ".join(gpu_lines(GpuShown(app, 0)))


async def test_nvml_strings_in_the_health_lines_are_escaped(seed_campaign):
    from cockpit.live.snapshot import GpuProcessView

    processes = (GpuProcessView(5, None, "run\x1b[2Jx", container=True),)
    app = make_app(seed_campaign, replace(make_snapshot(), gpus=(replace(make_gpu(0), processes=processes),)))
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        shown = " ".join(gpu_lines(GpuShown(app, 0)))
        assert "\x1b" not in shown and "pid 5 (container)" in shown


async def test_the_clock_panel_builds_nothing_while_what_it_shows_stays_the_same(seed_campaign, monkeypatch):
    """Idle CPU: a second later the clock's hours moved, but nothing it draws did; two minutes
    later "left" changed, and only that line is repainted."""
    from cockpit.tui.widgets.clock_panel import ClockPanel

    snapshot = make_snapshot()
    app = make_app(seed_campaign, source=FakeSource(snapshot))
    async with app.run_test(size=(120, 30)) as pilot:
        await started(app, pilot)
        panel = app.query_one(ClockPanel)
        built: list[int] = []
        original = ClockPanel.build_lines
        monkeypatch.setattr(ClockPanel, "build_lines", lambda self, width: (built.append(width), original(self, width))[1])
        before = [line.plain for line in panel._lines]

        def later(seconds: float):
            clock = snapshot.clock
            return replace(
                snapshot,
                taken_at=snapshot.taken_at + timedelta(seconds=seconds),
                clock=replace(
                    clock,
                    now=clock.now + timedelta(seconds=seconds),
                    elapsed_hours=clock.elapsed_hours + seconds / 3600,
                    remaining_hours=clock.remaining_hours - seconds / 3600,
                ),
            )

        app.apply_snapshot(later(1))
        await pilot.pause()
        assert built == [] and [line.plain for line in panel._lines] == before
        app.apply_snapshot(later(120))
        await pilot.pause()
        after = [line.plain for line in panel._lines]
        assert len(built) == 1 and after != before
        assert [y for y, (a, b) in enumerate(zip(after, before)) if a != b] == [3]  # "left 45h28m"
        assert "left 45h28m" in after[3]
