"""A chart in text cells: the lines of a `ChartData` (cockpit.live.chart_data) with their
thresholds, vertical markers and marks, axes and a legend. Each line has its own glyph, so the
chart reads the same without colour (the mono theme, NO_COLOR); it redraws only when its data
or its size changed, and never animates."""

from __future__ import annotations

import math
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from cockpit.common.text import escape_control
from cockpit.live.chart_data import ChartData
from cockpit.live.chart_data import nice_ticks, tick_text

Y_LABEL_WIDTH = 7
LINE_COLOURS = 6
_MARK_NAMES = {
    "nan": "NaN", "alert": "alert", "checkpoint": "checkpoint", "resume_verified": "resume verified",
    "truncated": "truncated", "stop": "stop", "finished": "finished",
}


class Chart(Widget):
    """Draws one ChartData, or several side by side, in whatever size it is given (at least 20×6
    each). Several charts in one widget, not one widget each: a screen with fewer widgets opens faster."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "chart--title", "chart--axis", "chart--threshold", "chart--marker", "chart--mark", "chart--nan",
        "chart--reference", "chart--empty", *(f"chart--line-{i}" for i in range(LINE_COLOURS)),
    }

    DEFAULT_CSS = """
    Chart { height: 1fr; min-height: 6; }
    Chart > .chart--title { text-style: bold; }
    Chart > .chart--axis { color: $text-muted; }
    Chart > .chart--threshold { color: $error; }
    Chart > .chart--marker { color: $warning; }
    Chart > .chart--mark { color: $warning; text-style: bold; }
    Chart > .chart--nan { color: $error; text-style: bold; }
    Chart > .chart--reference { color: $text-muted; }
    Chart > .chart--empty { color: $text-muted; }
    Chart > .chart--line-0 { color: $primary; text-style: bold; }
    Chart > .chart--line-1 { color: $success; }
    Chart > .chart--line-2 { color: $warning; }
    Chart > .chart--line-3 { color: $accent; }
    Chart > .chart--line-4 { color: $secondary; }
    Chart > .chart--line-5 { color: $error; }
    """

    def __init__(self, data: ChartData | None = None, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._charts: tuple[ChartData, ...] = (data,) if data is not None else ()
        # The text last drawn and what it was drawn from: a screen shown again, or a refresh with
        # nothing new (same charts, same size, same styles), draws nothing twice.
        self._drawn: tuple[tuple[ChartData, ...], int, int, Text] | None = None

    @property
    def data(self) -> ChartData | None:
        """The first (or only) chart."""
        return self._charts[0] if self._charts else None

    @property
    def charts(self) -> tuple[ChartData, ...]:
        return self._charts

    def show(self, *charts: ChartData) -> None:
        if charts != self._charts:
            self._charts = charts
            self.refresh()

    def notify_style_update(self) -> None:
        self._drawn = None  # a theme or class change: the styles the text was drawn with are gone
        super().notify_style_update()

    def render(self) -> Text:
        charts = self._charts
        width, height = self.size.width, self.size.height
        drawn = self._drawn
        if drawn is not None and drawn[0] is charts and drawn[1] == width and drawn[2] == height:
            return drawn[3]
        text = self._draw(charts, width, height)
        self._drawn = (charts, width, height, text)
        return text

    def _draw(self, charts: tuple[ChartData, ...], width: int, height: int) -> Text:
        if not charts or height < 4:
            return Text("")
        gap = 2
        each = (width - gap * (len(charts) - 1)) // len(charts)
        if each < 20:
            return Text("")
        columns = [render_lines(data, each, height, self._style) for data in charts]
        rows = []
        for parts in zip(*columns):
            row = Text("")
            for index, part in enumerate(parts):
                if index:
                    row.append(" " * gap)
                part = part.copy()
                part.truncate(each, pad=True)
                row.append_text(part)
            rows.append(row)
        return Text("\n").join(rows)

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"chart--{name}", partial=True)


def render_lines(data: ChartData, width: int, height: int, style=lambda name: Style()) -> list[Text]:
    """The chart as `height` lines of `width` cells (also used by tests and the benchmark)."""
    title = Text(escape_control(data.title)[:width], style=style("title"))
    legend = _legend(data, width, style)
    rows = max(2, height - 3 - len(legend))  # title, x axis, x labels, legend
    columns = max(4, width - Y_LABEL_WIDTH - 1)
    bounds = data.plot_bounds()
    if bounds is None:
        lines = [title, Text(escape_control(data.empty_text)[:width], style=style("empty"))]
        lines += [Text("") for _ in range(height - len(lines))]
        return lines[:height]
    x0, x1, y0, y1 = bounds
    chars = [[" "] * columns for _ in range(rows)]
    styles: list[list[str | None]] = [[None] * columns for _ in range(rows)]
    axis_chars = ["─"] * columns
    axis_styles: list[str | None] = ["axis"] * columns

    def col(x: float) -> int:
        return min(columns - 1, max(0, round((x - x0) / (x1 - x0) * (columns - 1))))

    def row(y: float) -> int:
        return min(rows - 1, max(0, round((y1 - y) / (y1 - y0) * (rows - 1))))

    def put(r: int, c: int, char: str, name: str) -> None:
        chars[r][c] = char
        styles[r][c] = name

    for threshold in data.thresholds:
        if threshold.x_from is not None and threshold.x_from > x1:
            continue  # applies from a step the run has not reached: named in the legend only
        r = row(threshold.y)
        start = col(threshold.x_from) if threshold.x_from is not None else 0
        for c in range(start, columns):
            if chars[r][c] == " ":
                put(r, c, "╌", "threshold")
    for marker in data.markers:
        c = col(marker.x)
        for r in range(rows):
            if chars[r][c] in (" ", "╌"):
                put(r, c, marker.glyph, "marker")
    for line in sorted(data.lines, key=lambda item: item.style != "reference"):  # the plan's line underneath
        name = "reference" if line.style == "reference" else f"line-{line.colour % LINE_COLOURS}"
        previous = None
        for x, y in line.points:
            here = (row(y), col(x))
            if previous is None:
                put(here[0], here[1], line.glyph, name)
            else:
                _segment(previous, here, lambda r, c: put(r, c, line.glyph, name))
            previous = here
    for mark in data.marks:
        c = col(mark.x)
        if mark.on_axis:
            axis_chars[c], axis_styles[c] = mark.glyph, "mark"
            continue
        r = 0 if mark.y is None or not math.isfinite(mark.y) else row(mark.y)
        put(r, c, mark.glyph, "nan" if mark.kind == "nan" else "mark")

    labels = _y_labels(y0, y1, rows, row)
    lines = [title]
    for r in range(rows):
        text = Text(labels.get(r, "").rjust(Y_LABEL_WIDTH)[:Y_LABEL_WIDTH] + "┤" if r in labels else " " * Y_LABEL_WIDTH + "│",
                    style=style("axis"))
        _append_cells(text, chars[r], styles[r], style)
        lines.append(text)
    axis = Text(" " * Y_LABEL_WIDTH + "└", style=style("axis"))
    _append_cells(axis, axis_chars, axis_styles, style)
    lines.append(axis)
    lines.append(Text(_x_labels(data, x0, x1, columns), style=style("axis")))
    lines += legend
    lines += [Text("") for _ in range(height - len(lines))]
    return lines[:height]


def _segment(start: tuple[int, int], end: tuple[int, int], put) -> None:
    (r0, c0), (r1, c1) = start, end
    steps = max(abs(r1 - r0), abs(c1 - c0))
    if steps == 0:
        put(r1, c1)
        return
    for i in range(1, steps + 1):
        put(round(r0 + (r1 - r0) * i / steps), round(c0 + (c1 - c0) * i / steps))


def _append_cells(text: Text, chars: list[str], names: list[str | None], style) -> None:
    run_name, run = None, []
    for char, name in zip(chars, names):
        if name != run_name and run:
            text.append("".join(run), style=style(run_name) if run_name else None)
            run = []
        run_name = name
        run.append(char)
    if run:
        text.append("".join(run), style=style(run_name) if run_name else None)


def _y_labels(y0: float, y1: float, rows: int, row) -> dict[int, str]:
    labels: dict[int, str] = {}
    for value in nice_ticks(y0, y1, max(2, min(5, rows // 2 + 1))):
        r = row(value)
        if r not in labels and r - 1 not in labels and r + 1 not in labels:
            labels[r] = tick_text(value)
    return labels


def _x_labels(data: ChartData, x0: float, x1: float, columns: int) -> str:
    cells = [" "] * (Y_LABEL_WIDTH + 1 + columns)
    unit = " h" if data.x_is_hours else ""
    ticks = nice_ticks(x0, x1, max(3, min(8, columns // 9)))
    taken = -1
    for value in ticks:
        label = tick_text(value) + (unit if value == ticks[-1] else "")
        position = Y_LABEL_WIDTH + 1 + round((value - x0) / (x1 - x0) * (columns - 1)) - len(label) // 2
        position = max(Y_LABEL_WIDTH, min(len(cells) - len(label), position))
        if position <= taken + 1:
            continue
        cells[position:position + len(label)] = list(label)
        taken = position + len(label)
    text = "".join(cells)
    label = data.x_label
    if len(text.rstrip()) + len(label) + 2 <= len(text):  # the axis's name where the ticks leave room
        text = text[: len(text) - len(label)] + label
    return text


def _legend(data: ChartData, width: int, style) -> list[Text]:
    items: list[Text] = []
    for line in data.lines:
        name = "reference" if line.style == "reference" else f"line-{line.colour % LINE_COLOURS}"
        items.append(Text.assemble((line.glyph, style(name)), " " + escape_control(line.name)))
    for threshold in data.thresholds:
        items.append(Text.assemble(("╌", style("threshold")), " " + escape_control(threshold.label)))
    for marker in data.markers:
        items.append(Text.assemble((marker.glyph, style("marker")), " " + escape_control(marker.label)))
    seen = set()
    for mark in data.marks:
        if mark.kind in seen:
            continue
        seen.add(mark.kind)
        items.append(Text.assemble((mark.glyph, style("nan" if mark.kind == "nan" else "mark")), " " + _MARK_NAMES.get(mark.kind, mark.kind)))
    lines: list[Text] = []
    current = Text("")
    for item in items:
        if current.cell_len and current.cell_len + 2 + item.cell_len > width:
            lines.append(current)
            current = Text("")
        if current.cell_len:
            current.append("  ")
        current.append_text(item)
    if current.cell_len:
        lines.append(current)
    if len(lines) > 3:  # keep the plot: a long legend is cut, the rest said in one word
        lines = lines[:2] + [Text("… more in the list below")]
    for line in lines:
        line.truncate(width)
    return lines
