"""The three charts as plain data, drawn alike on the screen (cockpit.tui.widgets.chart) and in
the closing folder (cockpit.close.charts): a run's curve with its stop rules and marks, the
closing metric of every run against the campaign's threshold, and the lot's burn-down."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from cockpit.live.series import Point, RunSeriesView, SeriesView

# The glyphs each line is drawn with: told apart without colour (the mono theme, NO_COLOR).
LINE_GLYPHS = ("•", "+", "x", "o", "*", "#", "%", "@")
MARK_GLYPHS = {
    "nan": "×",  # a non-finite value: drawn on the top edge, it has no height
    "alert": "!",
    "checkpoint": "c",
    "resume_verified": "R",
    "truncated": "T",
    "stop": "S",
    "finished": "F",
}


@dataclass(frozen=True)
class Line:
    name: str
    points: tuple[tuple[float, float], ...]  # finite (x, y) only
    glyph: str = "•"
    style: str = "line"  # line | reference (drawn fainter: the plan's own line)
    colour: int = 0  # which of the theme's colours


@dataclass(frozen=True)
class Threshold:
    """A horizontal line from `x_from` (None: the whole width) at `y`."""

    y: float
    label: str
    x_from: float | None = None


@dataclass(frozen=True)
class Marker:
    """A vertical line at `x` (a stop, the pilot decision point, a warning time)."""

    x: float
    label: str
    glyph: str = "│"


@dataclass(frozen=True)
class PointMark:
    """A glyph at (x, y); y None puts it on the top edge (a NaN), y "bottom" on the x axis."""

    x: float
    y: float | None
    kind: str
    glyph: str
    on_axis: bool = False


@dataclass(frozen=True)
class ChartData:
    title: str
    x_label: str
    y_label: str
    lines: tuple[Line, ...] = ()
    thresholds: tuple[Threshold, ...] = ()
    markers: tuple[Marker, ...] = ()
    marks: tuple[PointMark, ...] = ()
    x_is_hours: bool = False  # the burn-down: x is hours since the lot's start
    empty_text: str = "nothing reported yet"
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def empty(self) -> bool:
        return not any(line.points for line in self.lines) and not self.marks

    def x_range(self) -> tuple[float, float] | None:
        # a threshold's after_step does not widen the range: a run stopped early keeps its curve readable
        xs = [x for line in self.lines for x, _ in line.points] + [m.x for m in self.marks] + [m.x for m in self.markers]
        xs = [x for x in xs if math.isfinite(x)]
        return (min(xs), max(xs)) if xs else None

    def y_range(self) -> tuple[float, float] | None:
        ys = [y for line in self.lines for _, y in line.points] + [t.y for t in self.thresholds]
        ys += [m.y for m in self.marks if m.y is not None and not m.on_axis]
        ys = [y for y in ys if math.isfinite(y)]
        if not ys:
            return None
        low, high = min(ys), max(ys)
        if low == high:
            pad = abs(low) * 0.05 or 1.0
            return low - pad, high + pad
        return low, high

    def plot_bounds(self) -> tuple[float, float, float, float] | None:
        """(x0, x1, y0, y1) as drawn, on screen and in the SVGs: an x range of one point widened to
        one step, the y range padded by 4 % each side; None when there is nothing to draw."""
        x_range, y_range = self.x_range(), self.y_range()
        if self.empty or x_range is None:
            return None
        x0, x1 = x_range
        if x1 == x0:
            x1 = x0 + 1.0
        y0, y1 = y_range if y_range is not None else (0.0, 1.0)
        pad = (y1 - y0) * 0.04
        return x0, x1, y0 - pad, y1 + pad


def _finite(points: tuple[Point, ...]) -> tuple[tuple[float, float], ...]:
    return tuple((float(s), v) for s, v in points if math.isfinite(v))


def _value_at(points: tuple[Point, ...], step: int | None) -> float | None:
    """The kept value nearest to `step` (for an alert's glyph on the curve)."""
    if step is None:
        return None
    best = None
    for s, v in points:
        if math.isfinite(v) and (best is None or abs(s - step) < abs(best[0] - step)):
            best = (s, v)
    return best[1] if best else None


def run_chart(campaign, run_id: str, series: RunSeriesView | None, metric: str) -> ChartData:
    """One metric of one run against step: each stop rule on that metric that applies to the run
    as a threshold from its after_step, the closing threshold on the closing metric, NaN values on
    the top edge, alerts on the curve, checkpoints and the verified resume on the axis, the stop
    as a vertical line."""
    points = series.points.get(metric, ()) if series else ()
    lines = (Line(metric, _finite(points), LINE_GLYPHS[0]),)
    thresholds = []
    for rule in campaign.model.stop_rules:
        kind = getattr(rule.kind, "value", rule.kind)
        if kind in ("below", "above") and rule.metric == metric and rule.applies_to(run_id) and rule.threshold is not None:
            word = "≥" if kind == "below" else "≤"  # what the run must keep to
            thresholds.append(Threshold(rule.threshold, f"{rule.id} {word} {rule.threshold:g}",
                                        float(rule.after_step) if rule.after_step else None))
    closing = campaign.model.closing
    if closing and closing.metric == metric:
        thresholds.append(Threshold(closing.threshold, f"threshold {closing.threshold:g}"))
    marks: list[PointMark] = [PointMark(float(s), None, "nan", MARK_GLYPHS["nan"]) for s, v in points if not math.isfinite(v)]
    markers: list[Marker] = []
    for mark in series.marks if series else ():
        if mark.step is None:
            continue
        x = float(mark.step)
        if mark.kind == "stop":
            markers.append(Marker(x, f"stop {mark.text}".strip()))
        elif mark.kind == "alert":
            marks.append(PointMark(x, _value_at(points, mark.step), "alert", MARK_GLYPHS["alert"]))
        elif mark.kind in ("checkpoint", "resume_verified", "truncated", "finished"):
            marks.append(PointMark(x, None, mark.kind, MARK_GLYPHS[mark.kind], on_axis=True))
    count = series.counts.get(metric, 0) if series else 0
    return ChartData(
        title=f"{run_id}: {metric}",
        x_label="step",
        y_label=metric,
        lines=lines,
        thresholds=tuple(thresholds),
        markers=tuple(markers),
        marks=tuple(marks),
        empty_text=f"{run_id} has reported no {metric} yet",
        notes=(f"{count} values, {len(points)} kept",) if count else (),
    )


def compare_chart(campaign, series: SeriesView | None) -> ChartData:
    """The closing metric of the control and every variant, with the campaign's threshold: the
    decision the campaign exists to buy."""
    closing = campaign.model.closing
    metric = closing.metric if closing else "loss"
    runs = sorted(campaign.runs, key=lambda r: (getattr(r.role, "value", r.role) != "control"))
    lines = []
    marks = []
    for index, run in enumerate(runs):
        view = series.run(run.id) if series else None
        points = view.points.get(metric, ()) if view else ()
        role = getattr(run.role, "value", run.role)
        lines.append(Line(f"{run.id} ({role})", _finite(points), LINE_GLYPHS[index % len(LINE_GLYPHS)], colour=index))
        marks += [PointMark(float(s), None, "nan", MARK_GLYPHS["nan"]) for s, v in points if not math.isfinite(v)]
        for mark in view.marks if view else ():
            if mark.kind == "stop" and mark.step is not None:
                marks.append(PointMark(float(mark.step), _value_at(points, mark.step), "stop", MARK_GLYPHS["stop"]))
    thresholds = ()
    if closing:
        aim = "at least" if getattr(closing.direction, "value", closing.direction) == "max" else "at most"
        thresholds = (Threshold(closing.threshold, f"threshold {closing.threshold:g} ({aim})"),)
    return ChartData(
        title=f"{metric}: control and variants",
        x_label="step",
        y_label=metric,
        lines=tuple(lines),
        thresholds=thresholds,
        marks=tuple(marks),
        empty_text=f"no run has reported {metric} yet",
    )


def burndown_chart(campaign, planned, series: SeriesView | None, *, pilot_due_at: datetime | None = None) -> ChartData:
    """Over the lot's hours: the committed hours remaining (as re-estimated at each moment) and
    the time left to the lot's end; where the committed line runs above the time left, the plan
    no longer fits. The plan's own committed line for reference, the pilot decision point and
    the warning thresholds as vertical lines."""
    lot = campaign.lot
    window = lot.window_hours
    start = lot.start
    lines = []
    samples = series.clock if series else ()
    if start is not None and samples:
        origin = start.timestamp()
        committed = tuple(
            ((s.at - origin) / 3600.0, s.committed_remaining_hours) for s in samples
            if s.committed_remaining_hours is not None and math.isfinite(s.committed_remaining_hours)
        )
        lines.append(Line("committed hours remaining", committed, LINE_GLYPHS[0], colour=0))
    committed_plan = planned.committed_hours if planned is not None else None
    if committed_plan is not None:
        lines.append(Line("plan as frozen", ((0.0, committed_plan), (min(committed_plan, window), max(0.0, committed_plan - window))),
                          "·", style="reference", colour=2))
    lines.append(Line("time left in the lot", ((0.0, window), (window, 0.0)), "-", colour=1))
    markers = []
    pilot = campaign.model.pilot
    if pilot is not None and start is not None:
        if pilot_due_at is not None:
            due = (pilot_due_at.timestamp() - start.timestamp()) / 3600.0
        else:
            slot = planned.slot(pilot.run) if planned is not None else None
            due = slot.start_hours + pilot.decide_after_hours if slot is not None else None
        if due is not None and math.isfinite(due):
            markers.append(Marker(due, "pilot decision", "┆"))
    for hours in sorted(campaign.model.calendar.warn_before_end_hours, reverse=True):
        if hours < window:
            markers.append(Marker(window - hours, f"{hours:g} h left", "┊"))
    notes = []
    if start is None:
        notes.append("[lot] has no start: the burn-down needs one")
    elif not samples:
        notes.append("no clock history yet: the plan's line only")
    return ChartData(
        title="burn-down: committed hours remaining vs time left",
        x_label="hours since the lot's start",
        y_label="hours",
        lines=tuple(lines),
        markers=tuple(markers),
        x_is_hours=True,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------- axes


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 2.5 or 5 times a power of ten apart)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high < low:
        low, high = high, low
    if high == low:
        return [low]
    raw = (high - low) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def tick_text(value: float) -> str:
    """A tick label, short: 1200, 0.55, 2.5e-05, 1.2M."""
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:g}M"
    if magnitude >= 1e4:
        return f"{value / 1e3:g}k"
    if magnitude < 1e-3:
        return f"{value:.1e}"
    return f"{value:.4g}"
