"""The campaign's runs, one line per run id: state, progress, last loss and quality, ETA, last
checkpoint age, whether a resume was verified.

A line-based view in the manner of toolong's log view: a `ScrollView` that draws only the lines on
screen (`render_line`), each from a cache keyed by what the row says. A tick repaints exactly the
rows whose cells changed; the cursor and the scroll position survive every refresh, and the look
is DataTable's (a fixed header, cells padded by one, the cursor row in the block-cursor style)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.content import Content
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from cockpit.common.text import escape_control
from cockpit.live.snapshot import RunView
from cockpit.tui import format as fmt

Cell = tuple[str, str]  # (text, style name: "" for plain)
Column = tuple[str, str, int]  # (key, label, ideal width)
OPTIONAL_COLUMNS = ("role", "tier")  # the plan's words, shown when there is room
MIN_RUN_WIDTH, MAX_RUN_WIDTH = 8, 24
CELL_PADDING = 1
CELL_STYLES = ("running", "muted", "warning", "bad", "good")  # a cell's style name → runs-table--NAME

STATE_STYLES = {
    "running": "running",
    "finished": "muted",
    "planned": "muted",
    "failed": "bad",
    "stopped": "warning",
    "ended": "warning",  # the process is gone without a `finished` line
    "unreadable": "bad",  # its metrics path holds no readable file
}


class RunsTable(ScrollView, can_focus=True):
    """One line per run under a fixed header; `show` takes the snapshot's runs."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "first", "First run", show=False),
        Binding("end", "last", "Last run", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "runs-table--header",
        "runs-table--cursor",
        "runs-table--running",
        "runs-table--muted",
        "runs-table--warning",
        "runs-table--bad",
        "runs-table--good",
    }

    DEFAULT_CSS = """
    RunsTable {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .runs-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .runs-table--header { background-tint: $foreground 5%; }
        }
        & > .runs-table--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .runs-table--header { background: ansi_bright_blue; color: ansi_default; }
        & > .runs-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .runs-table--running { color: $success; text-style: bold; }
        & > .runs-table--muted { color: $text-muted; }
        & > .runs-table--warning { color: $warning; }
        & > .runs-table--bad { color: $error; text-style: bold; }
        & > .runs-table--good { color: $success; }
    }
    """

    cursor_row: reactive[int] = reactive(0, always_update=False, repaint=False)

    def __init__(self, quality_label: str = "quality", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._quality_label = quality_label
        self._order: list[str] = []  # run ids, top to bottom
        self._index: dict[str, int] = {}
        self._cells: dict[str, tuple[Cell, ...]] = {}  # every column's cell, shown or not
        self._fixed_cells: dict[str, tuple[RunView, tuple[Cell, ...], tuple[Cell, ...]]] = {}
        self._columns: list[Column] = []  # in display order, optional ones included
        self._layout: tuple[int, bool] | None = None  # (run column width, role and tier shown)
        self._shown: list[tuple[str, int, int]] = []  # (column key, index in the cells, width) on screen
        # (row content, row index, cursor?, layout, width, base style) → the row's line
        self._lines: LRUCache[tuple, Strip] = LRUCache(1024)
        self._frames: dict[tuple, tuple] = {}  # the styles of a row's cells, by its place (see _frame)
        self._labels: dict[str, str] = {}
        self._styles: dict[tuple[str, bool], Style] = {}
        self._foregrounds: dict[tuple[str, bool], Style] = {}
        self._base: Style | None = None

    # ------------------------------------------------------------------ what others read

    @property
    def row_count(self) -> int:
        return len(self._order)

    @property
    def selected_run_id(self) -> str | None:
        return self._order[self.cursor_row] if self._order else None

    @property
    def shown_columns(self) -> list[str]:
        """The keys of the columns on screen, in order."""
        return [key for key, _, _ in self._shown]

    def column_width(self, key: str) -> int | None:
        return next((width for shown, _, width in self._shown if shown == key), None)

    def get_cell(self, run_id: str, key: str) -> Content:
        """What the cell of run `run_id` in column `key` says."""
        index = next(i for i, (column, _, _) in enumerate(self._columns) if column == key)
        return Content(self._cells[run_id][index][0])

    # ------------------------------------------------------------------ updates

    def show(self, runs: tuple[RunView, ...], now: datetime) -> None:
        """The runs of a new snapshot: repaint the rows whose cells changed, nothing else."""
        if not self._columns:
            self._define_columns(runs)
        wanted = {run.id: _cells(run, now, self._fixed_cells) for run in runs}
        widen = any(run.id not in self._cells for run in runs)
        state_width = max([8] + [len(run.state) for run in runs])  # "unreadable" is the longest state
        if state_width > self._columns[1][2]:
            self._columns[1] = ("state", "state", state_width)
            widen = True
        if widen:  # a new run: its id may need a wider column
            self._columns[0] = ("run", "run", self._run_width_for(runs))
        order = list(wanted)
        if order != self._order:
            selected = self.selected_run_id
            self._order = order
            self._index = {run_id: index for index, run_id in enumerate(order)}
            self._cells = wanted
            for gone in [key for key in self._fixed_cells if key not in wanted]:
                del self._fixed_cells[gone]
            self._fit_columns(force=True)
            self.cursor_row = self._index.get(selected, min(self.cursor_row, max(0, len(order) - 1)))  # type: ignore[arg-type]
            self.refresh()
            return
        if widen and self._fit_columns():
            self._cells = wanted
            return
        changed = []
        for run_id, cells in wanted.items():
            if cells != self._cells[run_id]:
                self._cells[run_id] = cells
                changed.append(self._index[run_id])
        if changed:
            self.refresh_row(*changed)

    def refresh_row(self, *rows: int) -> None:
        """Repaint these runs' lines, those on screen (a scroll draws the others), in one refresh."""
        top, height, width = round(self.scroll_y), self.size.height, self.size.width
        regions = [Region(0, y, width, 1) for y in (row + 1 - top for row in rows) if 1 <= y < height]
        if regions:
            self.refresh(*regions)

    def _define_columns(self, runs: tuple[RunView, ...]) -> None:
        quality = self._quality_label
        self._columns = [
            ("run", "run", self._run_width_for(runs)),
            ("state", "state", 8),
            ("step", "step", 9),
            ("loss", "loss", 6),
            ("quality", quality, max(6, len(quality))),
            ("eta", "ETA", 9),
            ("checkpoint", "ckpt", 5),
            ("resume", "resume", 6),
            ("role", "role", 7),
            ("tier", "tier", 13),
        ]
        self._labels = {key: label for key, label, _ in self._columns}

    @staticmethod
    def _run_width_for(runs: tuple[RunView, ...]) -> int:
        return min(MAX_RUN_WIDTH, max([3] + [len(escape_control(run.id)) for run in runs]))

    def _layout_for(self, width: int) -> tuple[int, bool]:
        """(width of the run column, whether role and tier are shown) for a table `width` wide:
        the progress columns first; long run ids are cut (with …) before they push those off."""
        pad = 2 * CELL_PADDING
        ideal_run = self._columns[0][2]
        core = sum(w + pad for key, _, w in self._columns[1:] if key not in OPTIONAL_COLUMNS)
        optional = sum(w + pad for key, _, w in self._columns if key in OPTIONAL_COLUMNS)
        room = width - 2  # leave room for a vertical scrollbar
        if width <= 0:
            return ideal_run, False
        show_optional = core + ideal_run + pad + optional <= room
        run_width = min(ideal_run, room - core - pad - (optional if show_optional else 0))
        return max(min(ideal_run, MIN_RUN_WIDTH), run_width), show_optional

    def _fit_columns(self, *, force: bool = False) -> bool:
        """Lay the columns out for the widget's width; True when the layout changed (everything is
        repainted then). The virtual size is set only when it changes: no layout pass otherwise."""
        if not self._columns:
            return False
        layout = self._layout_for(self.size.width)
        if layout == self._layout and not force:
            return False
        self._layout = layout
        self._frames.clear()
        run_width, show_optional = layout
        self._shown = [
            (key, index, run_width if key == "run" else width)
            for index, (key, _, width) in enumerate(self._columns)
            if show_optional or key not in OPTIONAL_COLUMNS
        ]
        size = Size(sum(width + 2 * CELL_PADDING for _, _, width in self._shown), len(self._order) + 1)
        if size != self.virtual_size:
            self.virtual_size = size
        self.refresh()
        return True

    # ------------------------------------------------------------------ the cursor

    def validate_cursor_row(self, row: int) -> int:
        return max(0, min(row, len(self._order) - 1))

    def watch_cursor_row(self, before: int, after: int) -> None:
        self.refresh_row(before)
        self.refresh_row(after)
        self._scroll_cursor_into_view()

    def _scroll_cursor_into_view(self) -> None:
        rows_on_screen = max(1, self.size.height - 1)  # under the header
        top = round(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, force=True)
        elif self.cursor_row >= top + rows_on_screen:
            self.scroll_to(y=self.cursor_row - rows_on_screen + 1, animate=False, force=True)

    def action_cursor_up(self) -> None:
        self.cursor_row -= 1

    def action_cursor_down(self) -> None:
        self.cursor_row += 1

    def action_page_up(self) -> None:
        self.cursor_row -= max(1, self.size.height - 1)

    def action_page_down(self) -> None:
        self.cursor_row += max(1, self.size.height - 1)

    def action_first(self) -> None:
        self.cursor_row = 0

    def action_last(self) -> None:
        self.cursor_row = len(self._order) - 1

    def on_click(self, event: events.Click) -> None:
        row = event.style.meta.get("row")
        if isinstance(row, int) and row >= 0:
            self.cursor_row = row

    # ------------------------------------------------------------------ drawing

    def on_resize(self) -> None:
        self._fit_columns()
        self._scroll_cursor_into_view()

    def notify_style_update(self) -> None:
        self._lines.clear()  # a new theme, or the focus moved: component styles changed
        self._frames.clear()
        self._styles.clear()
        self._foregrounds.clear()
        super().notify_style_update()

    def _component(self, name: str) -> Style:
        key = (name, self.has_focus)
        style = self._styles.get(key)
        if style is None:
            style = self._styles[key] = self.get_component_rich_style(f"runs-table--{name}")
        return style

    def _foreground(self, name: str) -> Style:
        """Only a cell style's foreground: the cursor row keeps its own background."""
        key = (name, self.has_focus)
        style = self._foregrounds.get(key)
        if style is None:
            full = self._component(name)
            style = self._foregrounds[key] = Style(color=full.color, bold=full.bold, italic=full.italic, underline=full.underline)
        return style

    def render_lines(self, crop: Region) -> list[Strip]:
        # asked every frame for all its lines, it answers most from Textual's cache: its style (a
        # walk up its ancestors) is looked up once a frame, and only when a line is really drawn
        try:
            return super().render_lines(crop)
        finally:
            self._base = None

    def render_line(self, y: int) -> Strip:
        base = self._base
        if base is None:
            base = self._base = self.rich_style
        width = self.size.width
        if y == 0:
            return self._line(-1, None, base, width)
        row = y - 1 + round(self.scroll_y)
        if not self._shown or row >= len(self._order):
            return Strip.blank(width, base)
        return self._line(row, self._cells[self._order[row]], base, width)

    def _line(self, row: int, cells: tuple[Cell, ...] | None, base: Style, width: int) -> Strip:
        cursor = row == self.cursor_row and row >= 0
        key = (cells, row, cursor, self._layout, width, base, self.has_focus)
        strip = self._lines.get(key)
        if strip is None:
            strip = self._lines[key] = self._render_row(row, cells, base, width, cursor)
        return strip

    def _render_row(self, row: int, cells: tuple[Cell, ...] | None, base: Style, width: int, cursor: bool) -> Strip:
        """The row as DataTable draws it: each cell padded by one, its text cut with an ellipsis,
        the header's or the cursor's style over the row's; the rest of the width filled. Cells in
        the row's own style are joined into one segment (a repaint's cost goes by segments)."""
        pad_style, text_styles, extend_style, table_width = self._frame(row, base, cursor)
        padding = " " * CELL_PADDING
        segments: list[Segment] = []
        append = segments.append
        plain: list[str] = []  # text in the row's style, not yet a segment
        for key, index, cell_width in self._shown:
            if cells is None:
                text, name = self._labels[key], ""
            else:
                text, name = cells[index]
            length = cell_len(text)
            if length > cell_width:
                text = set_cell_size(text, max(0, cell_width - 1)) + "…"
                length = cell_width
            fill = " " * (cell_width - length) + padding
            if not name or not text:  # one style for the whole cell
                plain.append(padding + text + fill)
            else:
                plain.append(padding)
                append(Segment("".join(plain), pad_style))
                append(Segment(text, text_styles[name]))
                plain = [fill]
        if plain:
            append(Segment("".join(plain), pad_style))
        if width > table_width:
            append(Segment(" " * (width - table_width), extend_style))
        strip = Strip(segments).adjust_cell_length(width, base)
        scroll_x = round(self.scroll_x)
        return strip.crop(scroll_x, scroll_x + width) if scroll_x else strip

    def _frame(self, row: int, base: Style, cursor: bool) -> tuple:
        """The styles of one row, which depend on its place and the cursor, not on what it says:
        (the cells' style, their texts' styles by cell style name, the fill's style, the table's
        width). Kept per row until the styles or the columns change."""
        key = (row, base, cursor, self._layout, self.has_focus)
        frame = self._frames.get(key)
        if frame is not None:
            return frame
        row_style = self._component("header") if row < 0 else base
        component = self._component("cursor") if cursor else Style()
        post = Style.from_color(color=component.color) + Style.from_color(bgcolor=component.bgcolor) if cursor else Style()
        pre = row_style + Style.from_meta({"row": row}) + component  # a click names the row
        table_width = sum(w + 2 * CELL_PADDING for _, _, w in self._shown)
        extend = row_style + component + Style.from_meta({"row": row, "out_of_bounds": True})
        frame = (pre + post, {name: pre + self._foreground(name) + post for name in CELL_STYLES}, extend, table_width)
        self._frames[key] = frame
        return frame


def _cells(run: RunView, now: datetime, memo: dict[str, tuple[RunView, tuple[Cell, ...], tuple[Cell, ...]]]) -> tuple[Cell, ...]:
    """The row's cells; what depends only on the run is reused while the run's view is unchanged
    (most of fifty runs are waiting), what depends on the time is computed each tick (a run with
    neither an ETA nor a checkpoint has nothing that moves with it: its whole row is reused)."""
    remembered = memo.get(run.id)
    if remembered is not None and remembered[0] == run:
        fixed = remembered[1]
        if run.eta is None and run.last_checkpoint_at is None:  # nothing moves with the time
            return remembered[2]
    else:
        loss_style = "bad" if fmt.metric(run.loss) in ("NaN", "inf", "-inf") else ""
        fixed = (  # the plan's and the run's words, shown with their control characters escaped
            (escape_control(run.id), ""),
            (escape_control(run.state), STATE_STYLES.get(run.state, "")),
            (fmt.step(run.step, run.total_steps), ""),
            (fmt.metric(run.loss), loss_style),
            (fmt.metric(run.quality), ""),
            ("yes" if run.resume_verified else "no", "good" if run.resume_verified else "muted"),
            (escape_control(run.role), "muted"),
            (escape_control(run.tier), "muted"),
        )
        memo[run.id] = (run, fixed, fixed[:5] + ((fmt.local_time(None), "muted"), (fmt.age(None), "muted")) + fixed[5:])
    checkpoint_age = None if run.last_checkpoint_at is None else (now - run.last_checkpoint_at).total_seconds()
    timed = (
        (fmt.local_time(run.eta, now), "muted" if run.eta is None else ""),
        (fmt.age(checkpoint_age), "muted" if checkpoint_age is None else ""),
    )
    return fixed[:5] + timed + fixed[5:]
