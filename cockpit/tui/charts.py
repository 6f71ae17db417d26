"""The chart screens: a run's detail (Enter on a run; `[`/`]` the previous/next run), the
comparison of every run's closing metric with the threshold (`c`), and the lot's burn-down (`b`).
Each draws from the engine's downsampled series in the snapshot; Esc goes back. They are full
screens, not dialogs: the updates go on while one is open, and each redraws only what changed."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static

from cockpit.common.text import escape_control
from cockpit.live.chart_data import burndown_chart, compare_chart, run_chart
from cockpit.live.series import Mark
from cockpit.live.snapshot import RunView, Snapshot
from cockpit.plan.schedule import schedule
from cockpit.tui import format as fmt
from cockpit.tui.widgets.chart import Chart

EVENT_LINES_SHOWN = 40  # the newest marks listed under the run's charts (the screen shows what fits)

_BACK = Binding("escape", "back", "Back", id="charts.back", tooltip="back to the runs")

CSS = """
ChartScreen { layout: vertical; }
ChartScreen > #chart-title { height: 1; padding: 0 1; text-style: bold; }
ChartScreen > #run-charts { height: 1fr; min-height: 8; }
ChartScreen > #run-text { height: 7; padding: 0 1; overflow-y: hidden; text-wrap: nowrap; text-overflow: ellipsis; }
ChartScreen.-tall > #run-text { height: 13; }
ChartScreen > Chart { height: 1fr; }
ChartScreen > #chart-notes { height: auto; max-height: 3; padding: 0 1; color: $text-muted; }
ChartScreen > #chart-keys { height: 1; padding: 0 1; background: $panel; color: $text; }
.-monochrome ChartScreen > #chart-keys { text-style: reverse; }
"""


class ChartScreen(Screen[None]):
    """What the three screens share: Esc back, and a new snapshot shown where it changed."""

    DEFAULT_CSS = CSS
    BINDINGS = [_BACK]

    def __init__(self, app_campaign: Any, snapshot: Snapshot | None) -> None:
        super().__init__()
        self.campaign = app_campaign
        self.snapshot = snapshot

    # The keys that act on a run or an alert act on what this screen shows (`s`, `n` on the run
    # detail's run), or say why not: never on the runs table's selection, out of view.
    KEYS_HINT = "Esc back · n note · c compare · b burn-down · q quit"

    def on_mount(self) -> None:
        if self.snapshot is not None:
            self.show(self.snapshot)

    def _keys(self) -> Static:
        # One line of keys, not a Footer: a Footer is a widget per key, and this screen must open fast
        return Static(self.KEYS_HINT, id="chart-keys", markup=False)

    def show(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def action_back(self) -> None:
        self.app.pop_screen()


class RunDetailScreen(ChartScreen):
    """One run: loss and the closing metric against step, its stop rules' thresholds, marks for
    alerts, checkpoints, the verified resume and the stop; below, its figures and its events."""

    BINDINGS = [
        _BACK,
        Binding("left_square_bracket", "previous", "Prev run", id="charts.previous", key_display="[", tooltip="the previous run"),
        Binding("right_square_bracket", "next", "Next run", id="charts.next", key_display="]", tooltip="the next run"),
    ]

    KEYS_HINT = "Esc back · [ ] other run · s stop · n note · c compare · b burn-down · q quit"

    def __init__(self, campaign: Any, snapshot: Snapshot | None, run_id: str) -> None:
        super().__init__(campaign, snapshot)
        self.run_ids = [run.id for run in campaign.runs]
        self.run_id = run_id if run_id in self.run_ids else self.run_ids[0]
        closing = campaign.model.closing
        self.metrics = ["loss"] + ([closing.metric] if closing and closing.metric != "loss" else [])

    def compose(self) -> ComposeResult:
        yield Static(id="chart-title", markup=False)
        yield Chart(id="run-charts")
        yield Static(id="run-text", markup=False)
        yield self._keys()

    def show(self, snapshot: Snapshot) -> None:
        super().show(snapshot)
        run = snapshot.run(self.run_id)
        series = snapshot.series.run(self.run_id) if snapshot.series is not None else None
        self.query_one("#run-charts", Chart).show(*(run_chart(self.campaign, self.run_id, series, metric) for metric in self.metrics))
        position = f"{self.run_ids.index(self.run_id) + 1}/{len(self.run_ids)}"
        title = f"{self.run_id}"
        if run is not None:
            title += f"  {run.role} · {run.tier} · {run.state}  step {fmt.step(run.step, run.total_steps)}"
            if run.stop_reason:
                title += f"  stopped: {run.stop_reason}"
        self.query_one("#chart-title", Static).update(_one_line(f"{title}  (run {position})"))
        self.query_one("#run-text", Static).update(Text("\n").join([_one_line(_figures(run, series, snapshot.clock.now)), _events(series)]))

    def _move(self, by: int) -> None:
        index = (self.run_ids.index(self.run_id) + by) % len(self.run_ids)
        self.run_id = self.run_ids[index]
        if self.snapshot is not None:
            self.show(self.snapshot)

    def action_previous(self) -> None:
        self._move(-1)

    def action_next(self) -> None:
        self._move(1)


class CompareScreen(ChartScreen):
    """The closing metric of the control and every variant, with the campaign's threshold."""

    def compose(self) -> ComposeResult:
        yield Static(id="chart-title", markup=False)
        yield Chart(id="compare-chart")
        yield Static(id="chart-notes", markup=False)
        yield self._keys()

    def show(self, snapshot: Snapshot) -> None:
        super().show(snapshot)
        data = compare_chart(self.campaign, snapshot.series)
        self.query_one(Chart).show(data)
        closing = self.campaign.model.closing
        self.query_one("#chart-title", Static).update(Text(escape_control(self.campaign.model.question or data.title)))
        self.query_one("#chart-notes", Static).update(Text(_compare_notes(snapshot, closing)))


class BurndownScreen(ChartScreen):
    """Over the lot's hours: the committed hours remaining, as re-estimated, against the time left."""

    def __init__(self, campaign: Any, snapshot: Snapshot | None) -> None:
        super().__init__(campaign, snapshot)
        self.planned = schedule(campaign.items, campaign.lot.gpu_count, campaign.model.calendar.retrieval_hours)

    def compose(self) -> ComposeResult:
        yield Static(id="chart-title", markup=False)
        yield Chart(id="burndown-chart")
        yield Static(id="chart-notes", markup=False)
        yield self._keys()

    def show(self, snapshot: Snapshot) -> None:
        super().show(snapshot)
        data = burndown_chart(self.campaign, self.planned, snapshot.series, pilot_due_at=snapshot.pilot_due_at)
        self.query_one(Chart).show(data)
        clock = snapshot.clock
        left, committed = clock.remaining_hours, clock.committed_remaining_hours
        if left is not None and committed is not None:
            verdict = "the plan fits" if committed <= left else f"the plan no longer fits: {fmt.hours(committed - left)} over"
            title = f"committed {fmt.hours(committed)} remaining, {fmt.hours(left)} left in the lot: {verdict}"
        else:
            title = clock.message or data.title
        self.query_one("#chart-title", Static).update(Text(escape_control(title)))
        notes = list(data.notes)
        notes.append("where the committed line runs above the time left, the plan no longer fits the lot")
        self.query_one("#chart-notes", Static).update(Text(escape_control("; ".join(notes))))


# ---------------------------------------------------------------- text under the charts


def _figures(run: RunView | None, series, now: datetime) -> str:
    if run is None:
        return "not in the snapshot yet"
    rate = series.steps_per_hour if series is not None else None
    parts = [
        f"rate {rate:,.0f} steps/h" if rate else "rate —",
        f"ETA {fmt.local_time(run.eta, now)}" if run.eta else "ETA —",
        f"checkpoint {fmt.age((now - run.last_checkpoint_at).total_seconds())} ago" if run.last_checkpoint_at else "no checkpoint yet",
        f"resume verified {fmt.local_time(run.resume_verified_at, now)}" if run.resume_verified and run.resume_verified_at
        else ("resume verified" if run.resume_verified else "resume not verified"),
    ]
    advice = run.save_advice
    if advice and advice.get("interval_minutes") is not None:
        parts.append(f"save every {advice['interval_minutes']:g} min" + (" (too late for the lot's end)" if advice.get("too_late") else ""))
    if run.bad_lines:
        parts.append(f"{run.bad_lines} unreadable lines")
    return escape_control(" · ".join(parts))


def _mark_line(mark: Mark) -> str:
    when = fmt.local(datetime.fromtimestamp(mark.ts, timezone.utc)).strftime("%d %b %H:%M:%S") if mark.ts is not None else "—"
    step = f"step {mark.step}" if mark.step is not None else ""
    kind = mark.kind.replace("_", " ")
    return f"{when}  {kind:<16} {step:<12} {mark.text}".rstrip()


def _one_line(text: str) -> Text:
    return Text(escape_control(text), no_wrap=True, overflow="ellipsis")


def _events(series) -> Text:
    if series is None or not series.marks:
        return Text("no events yet", style="dim")
    marks = list(series.marks)[-EVENT_LINES_SHOWN:]
    counts = series.mark_counts
    summary = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in sorted(counts.items()))
    lines = [_one_line(f"events, newest first ({summary}):"), *(_one_line(_mark_line(mark)) for mark in reversed(marks))]
    return Text("\n", no_wrap=True).join(lines)


def _compare_notes(snapshot: Snapshot, closing) -> str:
    if closing is None:
        return "the campaign has no [closing] metric: the runs' loss is compared"
    parts = []
    better = (lambda v: v >= closing.threshold) if getattr(closing.direction, "value", closing.direction) == "max" else (lambda v: v <= closing.threshold)
    for run in snapshot.runs:
        value = run.quality
        if isinstance(value, (int, float)) and value == value:
            mark = "reaches" if better(value) else "short of"
            parts.append(f"{run.id} {fmt.metric(value)} ({mark})")
        else:
            parts.append(f"{run.id} —")
    return escape_control(f"last {closing.metric} vs threshold {closing.threshold:g}: " + ", ".join(parts))


# ---------------------------------------------------------------- the app's side


CHART_BINDINGS = [
    # Not in the main footer (it is full at 80 columns); `?` lists them.
    Binding("enter", "run_detail", "Run detail", id="run_detail", show=False, key_display="Enter",
            tooltip="the selected run's loss and closing metric against step, its events and figures ([ ] other runs, Esc back)"),
    Binding("c", "compare", "Compare", id="compare", show=False,
            tooltip="the closing metric of the control and every variant against the campaign's threshold"),
    Binding("b", "burndown", "Burn-down", id="burndown", show=False,
            tooltip="committed hours remaining against the time left in the lot, the pilot decision point, the warnings"),
]


class ChartKeys:
    """The keys that open the chart screens, mixed into the cockpit's app."""

    def _open_chart(self, name: str, make, run_id: str | None = None) -> None:
        """Each chart screen is made once and kept (installed): opening it again only shows it."""
        if isinstance(self.screen, ChartScreen):  # type: ignore[attr-defined]
            self.pop_screen()  # type: ignore[attr-defined]
        if not self.is_screen_installed(name):  # type: ignore[attr-defined]
            self.install_screen(make(), name)  # type: ignore[attr-defined]
        screen = self.get_screen(name)  # type: ignore[attr-defined]
        if run_id is not None:
            screen.run_id = run_id
        if screen.is_mounted and self.snapshot is not None:  # type: ignore[attr-defined]
            screen.show(self.snapshot)  # type: ignore[attr-defined]
        self.push_screen(name)  # type: ignore[attr-defined]

    def run_on_screen(self) -> str | None:
        """The run `s` and `n` act on: the one a run detail screen shows; none on the compare and
        burn-down screens (a note there is on the campaign); else the runs table's selection."""
        screen = self.screen  # type: ignore[attr-defined]
        if isinstance(screen, RunDetailScreen):
            return screen.run_id
        if isinstance(screen, ChartScreen):
            return None
        return self._runs.selected_run_id  # type: ignore[attr-defined]

    def showing_run_detail(self) -> bool:
        return isinstance(self.screen, RunDetailScreen)  # type: ignore[attr-defined]

    def chart_screen_refuses(self, action: str) -> bool:
        """On a chart screen, `a` (no alert is selected there) and, where no run is shown, `s` say
        why and act on nothing, rather than on a selection out of view."""
        screen = self.screen  # type: ignore[attr-defined]
        if not isinstance(screen, ChartScreen):
            return False
        if action == "acknowledge":
            why = "No alert is selected here: Esc back to the runs, select the alert there, then a."
        elif action == "stop" and not isinstance(screen, RunDetailScreen):
            why = "No run is shown here: Enter on a run opens its detail, where s stops it (Esc back to the runs)."
        else:
            return False
        self.notify(why, title="not on this screen", severity="warning", timeout=6, markup=False)  # type: ignore[attr-defined]
        return True

    def action_run_detail(self) -> None:
        if self._modal_open():  # type: ignore[attr-defined]
            return
        run_id = self._runs.selected_run_id  # type: ignore[attr-defined]
        if run_id is None and self.campaign.runs:  # type: ignore[attr-defined]
            run_id = self.campaign.runs[0].id  # type: ignore[attr-defined]
        if run_id is not None:
            self._open_chart("run-detail", lambda: RunDetailScreen(self.campaign, self.snapshot, run_id), run_id)  # type: ignore[attr-defined]

    def on_data_table_row_selected(self, message: Any) -> None:
        """Enter on the runs table (the table takes the key itself) opens the run's detail."""
        if getattr(message, "data_table", None) is getattr(self, "_runs", None):
            self.action_run_detail()

    def action_compare(self) -> None:
        if not self._modal_open():  # type: ignore[attr-defined]
            self._open_chart("compare", lambda: CompareScreen(self.campaign, self.snapshot))  # type: ignore[attr-defined]

    def action_burndown(self) -> None:
        if not self._modal_open():  # type: ignore[attr-defined]
            self._open_chart("burndown", lambda: BurndownScreen(self.campaign, self.snapshot))  # type: ignore[attr-defined]

    def show_on_chart_screen(self, snapshot: Snapshot) -> None:
        """A new snapshot reaches an open chart screen too (each chart redraws only if it changed)."""
        screen = self.screen  # type: ignore[attr-defined]
        if isinstance(screen, ChartScreen) and screen.is_mounted:  # a kept screen out of view is brought up to date when shown
            screen.show(snapshot)
