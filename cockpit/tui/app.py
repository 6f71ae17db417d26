"""The cockpit's Textual app: a thin view over the engine's frozen snapshots, and the keys that
record decisions in the run log.

Nothing here decides anything about the campaign. A thread worker asks the snapshot source for
one tick at a time (the next one is scheduled only after the last one arrived, and not while a
dialog is open); every decision goes through `cockpit.record.decisions` in a thread worker and is
confirmed on screen only once it is on disk.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from functools import partial
from time import perf_counter
from typing import Any

from textual import work
from textual.app import App, ComposeResult
from textual.containers import Horizontal
from textual.filter import Monochrome, NoColor
from textual.reactive import var
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Footer
from textual.worker import get_current_worker

from cockpit.common.text import escape_control
from cockpit.common.times import utc_now
from cockpit.errors import Finding, UsageError
from cockpit.live.snapshot import AlertView, RunView, Snapshot, SnapshotSource
from cockpit.plan.campaign import Campaign
from cockpit.record import decisions
from cockpit.record.runlog import RunLog, RunLogError
from cockpit.tui import format as fmt
from cockpit.tui import terminal, toast
from cockpit.tui.charts import ChartKeys
from cockpit.tui.keys import APP_BINDINGS, OTHER_LOTS_BINDING, key_help
from cockpit.tui.messages import Recorded, RecordFailed, SnapshotReady, SourceFailed, VoidRequested
from cockpit.tui.screens import (
    ConfirmScreen,
    DecisionRequest,
    DecisionScreen,
    HelpScreen,
    LogScreen,
    NoteRequest,
    NoteScreen,
)
from cockpit.tui.stop_flow import StopFlow
from cockpit.tui.themes import DEFAULT_THEME, MONOCHROME_THEME, ThemeCatalog, default_theme_name, discover_themes
from cockpit.tui.lots import LotsLine, open_lots
from cockpit.tui.widgets import AlertsList, ClockPanel, GpuPanel, LotHeader, RunsTable
from cockpit.tui.widgets.alerts_list import AlertKey, alert_ident, alert_key

SOURCE = "key"
WINDOW_RULE = "lot-window"  # the lot's window alerts: pinned in the header
MAX_ALERT_TOASTS = 3  # more new alerts at once are summed up in one toast
TOAST_SECONDS = 4.0  # a toast is one line above the footer, gone after a few seconds
TOAST_SECONDS_ERROR = 10.0  # "NOT recorded" stays a little longer; the alerts list keeps what matters

SignalRun = Callable[[str], dict[str, Any]]
Clock = Callable[[], datetime]

# The app's own CSS variables, for themes that do not define them (e.g. Textual's built-ins).
THEME_VARIABLE_DEFAULTS = {
    "cockpit-elapsed": "#5f87af",
    "cockpit-committed": "#87af87",
    "cockpit-window": "#6c6c6c",
    "cockpit-bar-empty": "#3a3a3a",
    "cockpit-alert": "#d7875f",
    "cockpit-simulated": "#d7af00",
}


class CockpitApp(ChartKeys, App[None]):  # charts (issue 20): Enter, c, b
    """The cockpit on one campaign, fed by a `SnapshotSource` (the engine, or a fake in tests)."""

    CSS_PATH = "cockpit.tcss"
    TITLE = "cockpit"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]

    BINDINGS = APP_BINDINGS  # every key in one place: cockpit.tui.keys

    # What the screen shows: setting either redraws what depends on it, and only when it changed.
    snapshot: var[Snapshot | None] = var(None, always_update=False, init=False)
    engine_error: var[str | None] = var(None, always_update=False, init=False)  # the last tick's failure

    def __init__(
        self,
        campaign: Campaign,
        source: SnapshotSource,
        log: RunLog,
        *,
        theme: str | None = None,
        bell: bool = True,
        refresh_seconds: float = 1.0,
        signal_run: SignalRun | None = None,
        clock: Clock | None = None,
        themes: ThemeCatalog | None = None,
        lots: Any = None,
    ) -> None:
        super().__init__()
        self.other_lots = lots  # the other lots' watchers (cockpit.lots.watcher.OtherLots), or None
        if lots:
            self.bind(OTHER_LOTS_BINDING.key, OTHER_LOTS_BINDING.action, description=OTHER_LOTS_BINDING.description)
        self.campaign = campaign
        self.source = source
        self.run_log = log
        self.ring_bell = bell
        self.refresh_seconds = refresh_seconds if refresh_seconds > 0 and math.isfinite(refresh_seconds) else 1.0
        self.signal_run = signal_run
        self.clock: Clock = clock or utc_now
        self.first_frame_seconds: float | None = None  # from construction to the first snapshot on screen
        self._constructed = perf_counter()
        self.tick_lock = threading.Lock()  # held during a tick: take it before closing the source
        self._poll_timer: Timer | None = None
        self._tick_requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._tick_thread: threading.Thread | None = None
        self._frozen = False  # gc.freeze() after the first frame
        self._previous_alerts: dict[str, int | None] | None = None
        # Acknowledgements on disk that the engine's snapshots do not show yet (a tick under way
        # while it was written): set on the alerts of each snapshot until the engine says so too.
        self._acknowledging: set[AlertKey] = set()
        self._startup_notices: list[tuple[str, str]] = []
        self._terminal: str | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self.left = threading.Event()  # set by whoever runs the app once it is over: the watchdog stands down

        # Themes are registered here, before the first CSS pass, so the first frame is already right.
        self.theme_catalog = themes if themes is not None else discover_themes()
        for registered in self.theme_catalog.themes.values():
            self.register_theme(registered)
        wanted = theme or default_theme_name()
        for problem in self.theme_catalog.problems:
            if problem.name != wanted:  # the wanted one is reported below, once
                self._startup_notices.append((f"theme file skipped: {problem.message}", "warning"))
        if wanted not in self.theme_catalog.themes:
            fallback = DEFAULT_THEME if DEFAULT_THEME in self.theme_catalog.themes else "textual-dark"
            problem = self.theme_catalog.problem(wanted)
            why = f"theme '{wanted}' is invalid ({problem.message})" if problem else f"no theme '{wanted}'"
            self._startup_notices.append((f"{why}; using '{fallback}'", "error"))
            wanted = fallback
        self.theme = wanted
        # NO_COLOR: Textual's own answer is a grey filter over the theme, which turns the dark theme
        # black on black. The cockpit instead removes every colour (the terminal's own foreground
        # and background only) and marks emphasis with bold, reverse and underline: see the
        # `-monochrome` rules in cockpit.tcss. The mono theme does the same without NO_COLOR.
        self._filters = [f for f in self._filters if not isinstance(f, Monochrome)]
        self._no_color_filter = NoColor()
        self._apply_colour_policy()

    # ------------------------------------------------------------------ layout

    def notify(self, message: str, *, title: str = "", severity: str = "information", timeout: float | None = None, markup: bool = True) -> None:  # type: ignore[override]
        """Every toast lasts a few seconds at most (at 80×24 a long one hides the runs), with its
        control characters escaped: alerts, refusals and engine errors quote rules, runs, files and
        people (the title is plain text; `markup=False` keeps the message plain too)."""
        limit = TOAST_SECONDS_ERROR if severity == "error" else TOAST_SECONDS
        timeout = limit if timeout is None else min(timeout, limit)
        super().notify(  # type: ignore[arg-type]
            escape_control(message, keep_newlines=True), title=escape_control(title), severity=severity, timeout=timeout, markup=markup
        )

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(THEME_VARIABLE_DEFAULTS)

    def compose(self) -> ComposeResult:
        closing = self.campaign.model.closing
        quality_label = closing.metric.rsplit("/", 1)[-1] if closing else "quality"
        yield LotHeader(self.campaign.id, self.campaign.model.question, id="lot")
        with Horizontal(id="top"):
            yield ClockPanel(id="clock")
            yield GpuPanel(id="gpus")
        yield RunsTable(quality_label, id="runs")
        yield AlertsList(id="alerts")
        if self.other_lots:
            yield LotsLine(self.other_lots, id="lots-line")
        yield Footer()

    def on_mount(self) -> None:
        # The panels live on the main screen; a dialog on top must not hide them from the updates.
        self._header = self.query_one(LotHeader)
        self._clock_panel = self.query_one(ClockPanel)
        self._gpu_panel = self.query_one(GpuPanel)
        self._runs = self.query_one(RunsTable)
        self._alerts = self.query_one(AlertsList)
        self.query_one("#clock").border_title = "clock"
        self.query_one("#gpus").border_title = "GPU"
        self.query_one("#runs").border_title = "runs"
        self.query_one("#alerts").border_title = "alerts"
        self._runs.focus()
        for message, severity in self._startup_notices:
            self.notify(message, severity=severity, timeout=15, markup=False)  # type: ignore[arg-type]
        self._event_loop = asyncio.get_running_loop()
        self._terminal = terminal.terminal_path() if not self.is_headless else None
        if self._terminal is not None:
            terminal.start_watchdog(self._check_terminal, self.left)
        self.set_interval(5, self._check_freshness, name="freshness")
        self._poll()

    # ------------------------------------------------------------------ polling

    def _modal_open(self) -> bool:
        return bool(self.screen_stack) and isinstance(self.screen_stack[-1], ModalScreen)

    def _shutting_down(self) -> bool:
        """The app is shutting down: late timers and messages have nothing left to draw on."""
        return self._exit or not self.screen_stack or not self._header.is_attached

    def _schedule_poll(self, delay: float | None = None) -> None:
        if self._poll_timer is None:
            self._poll_timer = self.set_timer(self.refresh_seconds if delay is None else delay, self._poll, name="poll")

    def _poll(self) -> None:
        self._poll_timer = None
        if self._shutting_down():
            return
        if self._modal_open():  # the person is deciding: keep what they are looking at still
            self._header.show_status("updates paused while a dialog is open")
            self._schedule_poll()
            return
        self._tick()

    def _tick(self) -> None:
        """Ask the tick thread for one tick. The next one is asked for only once this one's
        message arrived, so there is never a second under way."""
        if self._tick_thread is None:
            self._tick_thread = threading.Thread(target=self._tick_loop, name="cockpit-tick", daemon=True)
            self._tick_thread.start()
        self._tick_requests.put(True)

    def _tick_loop(self) -> None:
        """In one long-lived thread: each request, one blocking tick of the source, posted back as
        a message (a Textual worker per tick cost a thread hand-off and three state messages a
        second); False ends it."""
        while self._tick_requests.get():
            try:
                with self.tick_lock:
                    snapshot = self.source.tick()
            except Exception as error:  # the engine's failure is shown, and the next tick retried
                message: SnapshotReady | SourceFailed = SourceFailed(error)
            else:
                message = SnapshotReady(snapshot)
            if not self._exit:
                self.post_message(message)

    def on_unmount(self) -> None:
        self._tick_requests.put(False)
        if self._frozen:
            self._frozen = False
            gc.unfreeze()

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        if self._shutting_down():
            return
        self.engine_error = None
        self.apply_snapshot(message.snapshot)
        self._schedule_poll()

    def on_source_failed(self, message: SourceFailed) -> None:
        if self._shutting_down():
            return
        text = f"{type(message.error).__name__}: {message.error}"
        self.engine_error = text  # told once per distinct failure, not once a second
        self._header.show_status(f"engine failed: {text}", "error")
        self._schedule_poll(min(30.0, self.refresh_seconds * 5))  # back off, then retry

    def watch_engine_error(self, before: str | None, error: str | None) -> None:
        if error is not None:
            self.notify(error, title="the engine failed; retrying", severity="error", timeout=15, markup=False)
        elif before is not None:
            self.notify("The engine is answering again.", title="engine", timeout=5)

    def _check_terminal(self) -> bool:
        """When the SSH session's terminal is gone (and SIGHUP was ignored, e.g. under nohup), ask the
        app to leave instead of drawing into nothing for the rest of the lot; True when it is gone.
        Safe from any thread: the exit is handed to the event loop."""
        if self._terminal is None or os.path.exists(self._terminal):
            return False
        message = f"cockpit: the terminal {self._terminal} is gone; leaving"
        loop = self._event_loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(partial(self.exit, return_code=1, message=message))
        return True

    def _check_freshness(self) -> None:
        snapshot = self.snapshot
        if snapshot is None or self.engine_error is not None or self._shutting_down() or self._modal_open():
            return
        silence = (self.clock() - snapshot.taken_at).total_seconds()
        if silence > max(10.0, 5 * self.refresh_seconds):
            self._header.show_status(f"no new sample for {fmt.age(silence)}", "warning")

    # ------------------------------------------------------------------ rendering

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """A new snapshot on screen: each panel redraws only what changed; the same snapshot
        again changes nothing."""
        self.snapshot = self._with_acknowledgements(snapshot)

    def _with_acknowledgements(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with the acknowledgements written here marked on its alerts
        (`AlertView.acknowledged`: the one thing the panels read)."""
        if not self._acknowledging:
            return snapshot
        unacknowledged = {alert_key(a) for a in snapshot.alerts if not a.acknowledged}
        self._acknowledging &= unacknowledged  # the engine has caught up with those that left
        if not self._acknowledging:
            return snapshot
        alerts = tuple(replace(a, acknowledged=True) if alert_key(a) in self._acknowledging else a for a in snapshot.alerts)
        return replace(snapshot, alerts=alerts)

    def watch_snapshot(self, before: Snapshot | None, snapshot: Snapshot | None) -> None:
        if snapshot is None:
            return
        now = snapshot.clock.now
        with self.batch_update():
            self._header.show_lot(snapshot.lot, now, snapshot.pilot_due_at)
            self._pin_window_alert(snapshot.alerts)
            self._header.show_status(f"sampled {fmt.clock_time(snapshot.taken_at)}")
            self._clock_panel.show(snapshot.clock, snapshot.lot)
            self._gpu_panel.show(snapshot.nvml, snapshot.gpus, snapshot.host)
            self._runs.show(snapshot.runs, now)
            self._alerts.show(snapshot.alerts, snapshot.notices, now)
        self.show_on_chart_screen(snapshot)  # charts (issue 20)
        self._announce_new_alerts(snapshot.alerts)
        if before is None:
            self.call_after_refresh(self._first_frame_painted)

    def _pin_window_alert(self, alerts: tuple[AlertView, ...]) -> None:
        """The most urgent lot-window alert goes to the header, where older alerts cannot push it
        out of view: the critical ones first, then the nearest threshold."""
        window = [a for a in alerts if a.rule == WINDOW_RULE]
        if not window:
            self._header.show_window_alert(None)
            return
        urgent = min(window, key=lambda a: (a.severity != "critical", _window_threshold(a)))
        self._header.show_window_alert(urgent.message, urgent.severity, len(window) - 1)

    def _first_frame_painted(self) -> None:
        self.first_frame_seconds = perf_counter() - self._constructed
        # What exists now (modules, widgets, styles) lives as long as the app: kept out of the
        # garbage collector's full passes, which otherwise walk all of it every half minute or
        # so for 70-110 ms (undone when the app leaves, so that all of it can be freed)
        gc.freeze()
        self._frozen = True

    def _announce_new_alerts(self, alerts: tuple[AlertView, ...]) -> None:
        """A toast and the bell for each alert that was not in the previous snapshot."""
        previous = self._previous_alerts or {}
        new = [
            a for a in alerts
            if not a.acknowledged
            and (alert_ident(a) not in previous or (a.seq is not None and previous[alert_ident(a)] not in (None, a.seq)))
        ]
        self._previous_alerts = {alert_ident(a): a.seq for a in alerts}
        if not new:
            return
        for alert in new[:MAX_ALERT_TOASTS]:
            where = f" on {alert.run}" if alert.run else ""
            self.notify(
                alert.message,
                title=f"alert: {alert.rule}{where}",
                severity="error" if alert.severity == "critical" else "warning",
                timeout=10,
                markup=False,
            )
        if len(new) > MAX_ALERT_TOASTS:
            self.notify(f"{len(new) - MAX_ALERT_TOASTS} more new alerts: see the alerts list", severity="warning", timeout=10)
        if self.ring_bell:
            self.bell()

    # ------------------------------------------------------------------ recording

    def record(
        self,
        kind: str,
        what: str,
        write: Callable[[], dict[str, Any]],
        describe: Callable[[dict[str, Any]], str],
        after: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """Write a decision in a thread; the UI says "recorded" only when `write` has returned."""

        def work() -> None:
            try:
                event = write()
            except (Finding, UsageError, RunLogError) as error:
                self.post_message(RecordFailed(what, str(error)))
            except Exception as error:  # a bug must not pass for a recorded decision either
                self.post_message(RecordFailed(what, f"internal error: {type(error).__name__}: {error}"))
            else:
                self.post_message(Recorded(event, describe(event), kind, after))

        self.run_worker(work, name=f"record {kind}", group="record", thread=True, exit_on_error=False)

    def on_recorded(self, message: Recorded) -> None:
        self.notify(message.summary, title="recorded in the run log", timeout=8, markup=False)
        if message.after is not None:
            message.after(message.event)

    def on_record_failed(self, message: RecordFailed) -> None:
        self.notify(message.reason, title=f"NOT recorded: {message.what}", severity="error", timeout=30, markup=False)

    # ------------------------------------------------------------------ keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # `q` has priority so no widget swallows it, but in a dialog it must reach the text field.
        if action == "quit" and self._modal_open():
            return False
        return True

    def _selected_run(self) -> tuple[str | None, RunView | None]:
        run_id = self.run_on_screen()  # on a run detail screen, the run it shows
        run = self.snapshot.run(run_id) if self.snapshot is not None and run_id is not None else None
        return run_id, run

    def action_stop(self) -> None:
        if self.chart_screen_refuses("stop"):
            return
        run_id, run = self._selected_run()
        if run_id is None:
            self.notify("No run selected: the runs table is empty.", severity="warning")
            return
        StopFlow(self, run_id, run).start()

    def action_decide(self) -> None:
        self.push_screen(DecisionScreen(self._pilot_facts()), self._decision_chosen)

    def _pilot_facts(self) -> str:
        pilot = self.campaign.model.pilot
        if pilot is None:
            return "The campaign declares no [pilot]: the decision is recorded without a pilot run."
        text = f"Pilot run {pilot.run}: decide after {pilot.decide_after_hours:g} h."
        run = self.snapshot.run(pilot.run) if self.snapshot is not None else None
        if run is not None:
            text += f"\nNow: {run.state}, step {fmt.step(run.step, run.total_steps)}, loss {fmt.metric(run.loss)}, quality {fmt.metric(run.quality)}"
        if self.snapshot is not None and self.snapshot.clock.elapsed_hours is not None:
            text += f"; lot hour {self.snapshot.clock.elapsed_hours:.1f}."
        return text

    def _decision_chosen(self, request: DecisionRequest | None) -> None:
        if request is None:
            self.notify("Pilot decision cancelled: nothing recorded.", timeout=4)
            return
        campaign, log = self.campaign, self.run_log
        self.record(
            "pilot_decision",
            f"pilot decision {request.decision}",
            lambda: decisions.record_decision(campaign, log, request.decision, note=request.note, source=SOURCE),
            lambda event: f"pilot decision {request.decision}, seq {event['seq']}",
        )

    def action_acknowledge(self) -> None:
        if self.chart_screen_refuses("acknowledge"):
            return
        alerts = self._alerts
        alert = alerts.selected_alert
        if alert is None:
            self.notify("No alert selected.", severity="warning")
            return
        if alerts.is_acknowledged(alert):
            self.notify(f"The {alert.rule} alert is already acknowledged.", markup=False)
            return
        where = f" on {alert.run}" if alert.run else ""
        raised = f" (raised {fmt.local_time(alert.ts, self.snapshot.clock.now if self.snapshot else None)})" if alert.ts else ""
        message = f"{alert.rule}{where}: {alert.message}{raised}"

        def answered(answer: bool | None) -> None:
            if answer:
                self._acknowledge(alert)

        self.push_screen(
            ConfirmScreen("Acknowledge this alert?", message, yes="Acknowledge [y]", no=None, cancel="Cancel [Esc]", default="yes", id="ack-confirm"),
            answered,
        )

    def _acknowledge(self, alert: AlertView) -> None:
        key = alert_key(alert)
        campaign, log = self.campaign, self.run_log
        where = f" on {alert.run}" if alert.run else ""

        def acknowledged(_event: dict[str, Any]) -> None:
            self._acknowledging.add(key)
            if self.snapshot is not None:
                self.snapshot = self._with_acknowledgements(self.snapshot)

        self.record(
            "ack",
            f"acknowledgement of {alert.rule}{where}",
            lambda: decisions.acknowledge(campaign, log, alert.rule, alert.run, source=SOURCE, key=alert.key or None),
            lambda event: f"alert {alert.rule}{where} acknowledged, seq {event['seq']}",
            after=acknowledged,
        )

    def action_note(self) -> None:
        run_id, _ = self._selected_run()
        self.push_screen(NoteScreen(run_id, on_run=self.showing_run_detail()), self._note_written)

    def _note_written(self, request: NoteRequest | None) -> None:
        if request is None:
            self.notify("Note cancelled: nothing recorded.", timeout=4)
            return
        campaign, log = self.campaign, self.run_log
        where = f" on run {request.run}" if request.run else ""
        self.record(
            "note",
            f"note{where}",
            lambda: decisions.record_note(campaign, log, request.text, run_id=request.run, source=SOURCE),
            lambda event: f"note{where}, seq {event['seq']}",
        )

    @property
    def monochrome(self) -> bool:
        """No colour at all on screen: NO_COLOR is set, or the mono theme is in use."""
        return self.no_color or self.theme == MONOCHROME_THEME

    def _apply_colour_policy(self) -> None:
        filtered = self._no_color_filter in self._filters
        if self.monochrome and not filtered:
            self._filters.append(self._no_color_filter)
        elif not self.monochrome and filtered:
            self._filters.remove(self._no_color_filter)
        self.set_class(self.monochrome, "-monochrome")

    def action_log(self) -> None:
        self._read_log(self._log_read)

    @work(thread=True, exclusive=True, group="read-log", exit_on_error=False, name="read log")
    def _read_log(self, then: Callable[[list[dict[str, Any]], dict[int, str]], None]) -> None:
        """In a thread: read the run log; `then` gets its events and their one-line summaries."""
        from cockpit.record.describe import event_summary

        try:
            events = self.run_log.read().events
        except RunLogError as error:
            self.call_from_thread(self.notify, str(error), title="cannot read the run log", severity="error", markup=False)
            return
        summaries = {e["seq"]: event_summary(e) for e in events}
        if not get_current_worker().is_cancelled:
            self.call_from_thread(then, events, summaries)

    def _log_read(self, events: list[dict[str, Any]], summaries: dict[int, str]) -> None:
        if not self._modal_open():
            self.push_screen(LogScreen(events, summaries, self.run_log.path.name))

    def on_void_requested(self, message: VoidRequested) -> None:
        campaign, log = self.campaign, self.run_log
        seq, reason = message.seq, message.reason

        def refresh_log_screen(_event: dict[str, Any]) -> None:
            def shown(events: list[dict[str, Any]], summaries: dict[int, str]) -> None:
                screen = self.screen
                if isinstance(screen, LogScreen):
                    screen.show_events(events, summaries)

            self._read_log(shown)

        self.record(
            "void",
            f"void of seq {seq}",
            lambda: decisions.record_void(campaign, log, seq, reason=reason, source=SOURCE),
            lambda event: f"seq {seq} voided ({decisions.VOIDABLE_NAMES.get(event.get('voided_type'), 'event')}), seq {event['seq']}",
            after=refresh_log_screen,
        )

    def action_cycle_theme(self) -> None:
        names = self.theme_catalog.names or [self.theme]
        following = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.theme = following
        self._apply_colour_policy()
        self.refresh(layout=True)
        description = self.theme_catalog.descriptions.get(following)
        self.notify(f"theme {following}" + (f": {description}" if description else ""), timeout=3, markup=False)

    def action_other_lots(self) -> None:
        open_lots(self)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(key_help(lots=bool(self.other_lots))))

    async def action_quit(self) -> None:
        # A decision being written is finished first: quitting must not lose what was confirmed.
        pending = [w for w in self.workers if w.group == "record" and not w.is_finished]
        if pending:
            self.notify("Finishing the run log write…", timeout=3)
            await self.workers.wait_for_complete(pending)
        self.exit()


def _window_threshold(alert: AlertView) -> float:
    """The hours before the lot's end a window alert warns at ("lot-window:6h" → 6); 0 otherwise."""
    suffix = alert.key.rpartition(":")[2]
    try:
        return float(suffix[:-1]) if suffix.endswith("h") else 0.0
    except ValueError:
        return 0.0


toast.install()  # one-line toasts, everywhere in this process
