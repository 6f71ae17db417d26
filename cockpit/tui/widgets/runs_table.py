"""The campaign's runs, one row per run id: state, progress, last loss and quality, ETA, last
checkpoint age, whether a resume was verified. Updated in place, a cell only when its text or
style changed, so the cursor and the scroll position survive every refresh."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.widgets import DataTable

from cockpit.common.text import escape_control
from cockpit.live.snapshot import RunView
from cockpit.tui import format as fmt

Cell = tuple[str, str]  # (text, style name: "" for plain)
OPTIONAL_COLUMNS = ("role", "tier")  # the plan's words, shown when there is room
MIN_RUN_WIDTH, MAX_RUN_WIDTH = 8, 24

STATE_STYLES = {
    "running": "running",
    "finished": "muted",
    "planned": "muted",
    "failed": "bad",
    "stopped": "warning",
    "ended": "warning",  # the process is gone without a `finished` line
    "unreadable": "bad",  # its metrics path holds no readable file
}


class RunsTable(DataTable):
    COMPONENT_CLASSES: ClassVar[set[str]] = DataTable.COMPONENT_CLASSES | {
        "runs-table--running",
        "runs-table--muted",
        "runs-table--warning",
        "runs-table--bad",
        "runs-table--good",
    }

    DEFAULT_CSS = """
    RunsTable > .runs-table--running { color: $success; text-style: bold; }
    RunsTable > .runs-table--muted { color: $text-muted; }
    RunsTable > .runs-table--warning { color: $warning; }
    RunsTable > .runs-table--bad { color: $error; text-style: bold; }
    RunsTable > .runs-table--good { color: $success; }
    """

    def __init__(self, quality_label: str = "quality", *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False, cell_padding=1)
        self._quality_label = quality_label
        self._cells: dict[str, tuple[Cell, ...]] = {}  # every column's cell, shown or not
        self._columns: list[tuple[str, str, int]] = []  # (key, label, ideal width) in display order
        self._layout: tuple[int, bool] | None = None  # (run column width, role and tier shown)
        # (row key, column key, index, style, width, highlight) → (the cell's value, its rendering)
        self._cell_lines: LRUCache[tuple, tuple[object, object]] = LRUCache(4096)
        self._foregrounds: dict[str, Style] = {}
        self._fixed_cells: dict[str, tuple[RunView, tuple[Cell, ...]]] = {}
        self._rows_to_repaint: set[str] | None = None  # collected during show(), repainted once each

    def on_mount(self) -> None:
        # Cell styles are resolved when a cell is written: a new theme rewrites every cell once.
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._restyle())

    def on_resize(self) -> None:
        self._fit_columns()

    @property
    def selected_run_id(self) -> str | None:
        if self.row_count == 0:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return row_key.value

    def show(self, runs: tuple[RunView, ...], now: datetime) -> None:
        if not self._columns:
            self._define_columns(runs)
        wanted = {run.id: _cells(run, now, self._fixed_cells) for run in runs}
        for gone in [key for key in self._cells if key not in wanted]:
            self.remove_row(gone)
            del self._cells[gone]
            self._fixed_cells.pop(gone, None)
        if any(run.id not in self._cells for run in runs):  # a new run: its id may need a wider column
            ideal = self._run_width_for(runs)
            if ideal != self._columns[0][2]:
                self._columns[0] = ("run", "run", ideal)
                self._layout = None
                self._fit_columns()
        state_width = max([8] + [len(run.state) for run in runs])  # "unreadable" is the longest state
        if state_width > self._columns[1][2]:
            self._columns[1] = ("state", "state", state_width)
            self._layout = None
            self._fit_columns()
        shown = self._shown_positions()
        self._rows_to_repaint = set()
        try:
            for run_id, cells in wanted.items():
                before = self._cells.get(run_id)
                if before is None:
                    self.add_row(*(self._text(cells[index]) for _, index in shown), key=run_id)
                else:
                    for key, index in shown:
                        if cells[index] != before[index]:
                            self.update_cell(run_id, key, self._text(cells[index]))
                self._cells[run_id] = cells
        finally:
            rows, self._rows_to_repaint = self._rows_to_repaint, None
        for run_id in rows:
            self.refresh_row(self.get_row_index(run_id))

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
        self._fit_columns()

    @staticmethod
    def _run_width_for(runs) -> int:
        return min(MAX_RUN_WIDTH, max([3] + [len(escape_control(run.id)) for run in runs]))

    def _layout_for(self, width: int) -> tuple[int, bool]:
        """(width of the run column, whether role and tier are shown) for a table `width` wide:
        the progress columns first; long run ids are cut (with …) before they push those off."""
        pad = 2 * self.cell_padding
        ideal_run = self._columns[0][2]
        core = sum(w + pad for key, _, w in self._columns[1:] if key not in OPTIONAL_COLUMNS)
        optional = sum(w + pad for key, _, w in self._columns if key in OPTIONAL_COLUMNS)
        room = width - 2  # leave room for a vertical scrollbar
        if width <= 0:
            return ideal_run, False
        show_optional = core + ideal_run + pad + optional <= room
        run_width = min(ideal_run, room - core - pad - (optional if show_optional else 0))
        return max(min(ideal_run, MIN_RUN_WIDTH), run_width), show_optional

    def _fit_columns(self) -> None:
        """Lay the columns out for the table's width. A change of layout (a resize across a
        threshold) removes and re-adds the columns and refills their cells: the rows, their keys
        and the cursor's row stay; the live updates never do this."""
        if not self._columns:
            return
        layout = self._layout_for(self.size.width)
        if layout == self._layout:
            return
        self._layout = layout
        run_width, show_optional = layout
        selected = self.selected_run_id
        for column_key in list(self.columns):
            self.remove_column(column_key)
        for key, label, width in self._columns:
            if key in OPTIONAL_COLUMNS and not show_optional:
                continue
            self.add_column(label, key=key, width=run_width if key == "run" else width, default=Text(""))
        shown = self._shown_positions()
        self._rows_to_repaint = set()
        try:
            for run_id, cells in self._cells.items():
                for key, index in shown:
                    self.update_cell(run_id, key, self._text(cells[index]))
        finally:
            self._rows_to_repaint = None
        self.refresh()
        if selected is not None and selected in self._cells:
            self.move_cursor(row=self.get_row_index(selected))

    def _shown_positions(self) -> list[tuple[str, int]]:
        """(column key, index in the full cell tuple) for the columns on screen, in order."""
        positions = {key: index for index, (key, _, _) in enumerate(self._columns)}
        return [(column.key.value, positions[column.key.value]) for column in self.columns.values()]

    def _text(self, cell: Cell) -> Text:
        text, style = cell
        if not style:
            return Text(text, no_wrap=True, overflow="ellipsis", end="")
        foreground = self._foregrounds.get(style)
        if foreground is None:
            # The full style blends "muted" colours against the table's background; only its
            # foreground is kept, so the cursor row keeps its own background.
            full = self.get_component_rich_style(f"runs-table--{style}")
            foreground = Style(color=full.color, bold=full.bold, italic=full.italic, underline=full.underline)
            self._foregrounds[style] = foreground
        return Text(text, foreground, no_wrap=True, overflow="ellipsis", end="")

    def _render_cell(self, row_index: int, column_index: int, base_style, width: int, cursor: bool = False, hover: bool = False):
        """DataTable keys its render caches on one update counter, so any `update_cell` renders every
        visible cell again. Here a cell's rendering is reused while its value is the very same object
        (a changed cell gets a new Text) and its place, style, width and highlight are unchanged:
        a tick that changes 30 cells renders 30 cells, not the whole screenful."""
        if row_index < 0 or column_index < 0:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        value = self._data[row_key].get(column_key)
        key = (row_key, column_key, row_index, column_index, base_style, width, cursor, hover,
               self._show_hover_cursor, self.show_cursor, self._pseudo_class_state)
        cached = self._cell_lines.get(key)
        if cached is not None:
            if cached[0] is value:  # identity: the cache holds the value, so its id stays its own
                return cached[1]
            self._cell_lines.discard(key)  # Textual's LRUCache.set keeps an existing key's old value
        if isinstance(value, Text) and not value.spans and "\n" not in value.plain and self.cell_padding >= 0:
            lines = self._render_plain_cell(value, row_index, column_index, base_style, width, cursor, hover)
        else:
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        self._cell_lines[key] = (value, lines)
        return lines

    def _render_plain_cell(self, value: Text, row_index: int, column_index: int, base_style, width: int, cursor: bool, hover: bool):
        """What DataTable's `_render_cell` draws for a one-line, one-style Text (padding, text cut
        with an ellipsis, fill), without Rich's general layout machinery: the same segments."""
        fixed = row_index < self.fixed_rows or column_index < self.fixed_columns
        component_style, post_style = self._get_styles_to_render_cell(
            False, False, fixed, hover, cursor, self.show_cursor, self._show_hover_cursor,
            self.cursor_foreground_priority == "css", self.cursor_background_priority == "css",
        )
        pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
        padding = " " * self.cell_padding
        inner = max(0, width - 2 * self.cell_padding)
        text = value
        if text.cell_len > inner:
            text = value.copy()
            text.truncate(inner, overflow="ellipsis")
        segments = [
            Segment(padding),
            Segment(text.plain, text.style if isinstance(text.style, Style) else self.app.console.get_style(text.style)),
            Segment(" " * (inner - text.cell_len) + padding),
        ]
        return [list(Segment.apply_style([s for s in segments if s.text], pre_style, post_style))]

    def notify_style_update(self) -> None:
        self._cell_lines.clear()
        self._foregrounds.clear()
        super().notify_style_update()

    def update_cell(self, row_key, column_key, value, *, update_width: bool = False) -> None:
        """DataTable's update_cell, repainting only the row it changed (DataTable repaints the whole
        table, scrollbars included, for one cell)."""
        self._row_repaint = True
        try:
            super().update_cell(row_key, column_key, value, update_width=update_width)
        finally:
            self._row_repaint = False
        if self._rows_to_repaint is not None:
            self._rows_to_repaint.add(getattr(row_key, "value", row_key))
        else:
            self.refresh_row(self.get_row_index(row_key))

    def refresh(self, *regions, repaint: bool = True, layout: bool = False, recompose: bool = False):
        if getattr(self, "_row_repaint", False) and not regions and not layout and not recompose:
            return self  # update_cell's whole-table repaint, replaced by refresh_row above
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _restyle(self) -> None:
        for run_id, cells in self._cells.items():
            for key, index in self._shown_positions():
                if cells[index][1]:
                    self.update_cell(run_id, key, self._text(cells[index]))


def _cells(run: RunView, now: datetime, memo: dict[str, tuple[RunView, tuple[Cell, ...]]]) -> tuple[Cell, ...]:
    """The row's cells; what depends only on the run is reused while the run's view is unchanged
    (most of fifty runs are waiting), what depends on the time is computed each tick."""
    remembered = memo.get(run.id)
    if remembered is not None and remembered[0] == run:
        fixed = remembered[1]
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
        memo[run.id] = (run, fixed)
    checkpoint_age = None if run.last_checkpoint_at is None else (now - run.last_checkpoint_at).total_seconds()
    timed = (
        (fmt.local_time(run.eta, now), "muted" if run.eta is None else ""),
        (fmt.age(checkpoint_age), "muted" if checkpoint_age is None else ""),
    )
    return fixed[:5] + timed + fixed[5:]
