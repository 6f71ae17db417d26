"""Every GPU of the lot as lines of one widget, in the manner of the runs view.

A widget per GPU cost the screen a widget's worth of work per GPU every second (its own render
pass, its own repaint messages, its own place among the cuts of each line) for what is, on a busy
8-GPU box, one or two changing lines each: one widget whose lines are the GPUs' lines repaints
only the lines that changed. A GPU's lines are made again only when its sample changed
(`gpu_row` makes them); scrolled, the panel around it draws the lines in view."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual.css.scalar import Scalar

from cockpit.live.snapshot import GpuView
from cockpit.tui.widgets import gpu_row
from cockpit.tui.widgets.text_lines import Runs, TextLines


class GpuLines(TextLines):
    COMPONENT_CLASSES: ClassVar[set[str]] = set(gpu_row.COMPONENT_CLASSES)

    DEFAULT_CSS = """
    GpuLines {
        height: auto;
    }
    GpuLines > .gpu-row--label { color: $text-muted; }
    GpuLines > .gpu-row--low { color: $primary 60%; }
    GpuLines > .gpu-row--high { color: $primary; }
    GpuLines > .gpu-row--problem { color: $warning; }
    GpuLines > .gpu-row--lost { color: $error; text-style: bold; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.gpus: tuple[GpuView, ...] = ()
        self.compact = False
        self._extra: list[gpu_row.Extra] = []
        # per GPU, in order: (its view, compact, width, its lines), reused while all three stay
        self._made: list[tuple[GpuView, bool, int, list[Text | Runs]]] = []
        self._spans: list[tuple[int, int]] = []  # per GPU: (first line, how many)

    def show(self, gpus: tuple[GpuView, ...], fits: Callable[[int], bool]) -> None:
        """A new sample: the histories are new tuples, so an unchanged GPU compares equal and its
        lines are reused; the lines that differ are repainted, nothing else. `fits` says whether
        that many lines fit the panel (see `fit`), decided before the lines are made."""
        if gpus != self.gpus:
            self.gpus = gpus
            self._extra = [gpu_row.extra_lines(gpu) for gpu in gpus]
            self.compact = not fits(self.lines_wanted(False))
            self.update_lines()
        else:
            self.fit(fits)

    def fit(self, fits: Callable[[int], bool]) -> None:
        """Two lines a GPU when `fits` says they all fit, else one (8 GPUs at 80×24)."""
        compact = not fits(self.lines_wanted(False))
        if compact != self.compact:
            self.compact = compact
            self.update_lines()

    def update_lines(self) -> None:
        super().update_lines()
        if self._built_width > 0 and self.styles.height != Scalar.from_number(len(self._lines)):
            # The height is set, not left to `auto`: Textual keeps a widget's box by a layout
            # counter that a second layout request does not move while the first is pending, and
            # the panel kept the old height (a scrollbar for a line that was gone)
            self.styles.height = len(self._lines)

    def lines_wanted(self, compact: bool) -> int:
        """The GPUs' lines in `compact` mode at the widget's width."""
        width = self.size.width
        return sum(gpu_row.row_height(gpu, compact, width, extra) for gpu, extra in zip(self.gpus, self._extra))

    def build_lines(self, width: int) -> list[Text | Runs]:
        lines: list[Text | Runs] = []
        made, spans = [], []
        previous = self._made
        for k, (gpu, extra) in enumerate(zip(self.gpus, self._extra)):
            old = previous[k] if k < len(previous) else None
            if old is not None and old[1] == self.compact and old[2] == width and old[0] == gpu:
                own = old[3]
            else:
                own = gpu_row.row_lines(gpu, self.compact, width, extra, self.component_style)
            made.append((gpu, self.compact, width, own))
            spans.append((len(lines), len(own)))
            lines.extend(own)
        self._made, self._spans = made, spans
        return lines

    def notify_style_update(self) -> None:
        self._made = []  # a new theme: the component styles changed
        super().notify_style_update()

    def span_of(self, index: int) -> tuple[int, int] | None:
        """(first line, how many) of the GPU with NVML index `index`, as last drawn; None if absent."""
        for gpu, span in zip(self.gpus, self._spans):
            if gpu.index == index:
                return span
        return None
