"""A widget drawn as lines of Rich text that repaints only the lines that changed.

The cockpit refreshes every second for weeks; a panel whose clock line moved by one second should
not redraw its four other lines. Subclasses describe their content as a list of `Text` lines for
a width (`build_lines`); this base class keeps the last strips, compares line by line, and marks
only the changed lines dirty (Textual's line API)."""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget


# A line may also be given as its runs of text and their styles, already cut into cells: what
# changes every second (a GPU's sparkline) skips building a Rich Text and rendering it again.
Runs = tuple[tuple[str, Style], ...]


def _same(a: Text | Runs, b: Text | Runs) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return a == b
    return a.plain == b.plain and a.style == b.style and a.spans == b.spans


def as_text(line: Text | Runs) -> Text:
    """A line as Rich text (runs become spans)."""
    return line if isinstance(line, Text) else Text.assemble(*line, no_wrap=True, end="")


class TextLines(Widget):
    auto_links = False  # nothing here is a link; skipping the link pass saves a style lookup per segment

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._lines: list[Text | Runs] = []
        self._strips: dict[int, Strip] = {}
        self._built_width = -1
        self._styles: dict[str, Style] = {}
        self._base: Style | None = None  # the widget's style during one frame's render_lines

    # -- for subclasses

    def component_style(self, name: str) -> Style:
        """A component class's full style, looked up once per theme (they are read every second)."""
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self.get_component_rich_style(name)
        return style

    def build_lines(self, width: int) -> list[Text | Runs]:
        """The content as lines for `width` cells (each line is cropped to it)."""
        raise NotImplementedError

    def update_lines(self) -> None:
        """Rebuild the lines from the subclass's state and repaint the ones that differ. A change
        of height is laid out."""
        width = self.size.width
        if width <= 0:  # not laid out yet: the first render builds them
            self._built_width = -1
            self.refresh()
            return
        lines = self.build_lines(width)
        before = self._lines
        self._lines = lines
        self._built_width = width
        if len(lines) != len(before):
            self._strips.clear()
            self.refresh(layout=self.styles.height is not None and self.styles.height.is_auto)
            return
        changed = [y for y, (new, old) in enumerate(zip(lines, before)) if not _same(new, old)]
        for y in changed:
            self._strips.pop(y, None)
        if changed:  # one refresh for all of them: each call costs a region walk
            self.refresh(*(Region(0, y, width, 1) for y in changed))

    # -- Textual

    def get_content_height(self, container, viewport, width: int) -> int:
        if width != self._built_width:
            self._lines = self.build_lines(width)
            self._built_width = width
            self._strips.clear()
        return len(self._lines)

    def on_resize(self) -> None:
        self._built_width = -1
        self._strips.clear()
        self.refresh()

    def notify_style_update(self) -> None:
        self._strips.clear()  # a new theme: the component styles changed
        self._styles.clear()
        self._built_width = -1
        super().notify_style_update()

    def render_lines(self, crop: Region) -> list[Strip]:
        # Textual asks every panel for all its lines each frame and answers most from its cache;
        # the widget's style (a walk up its ancestors) is looked up once a frame, and only when a
        # line is really drawn
        try:
            return super().render_lines(crop)
        finally:
            self._base = None

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if width != self._built_width:
            self._lines = self.build_lines(width)
            self._built_width = width
            self._strips.clear()
        strip = self._strips.get(y)
        if strip is None:
            base = self._base
            if base is None:
                base = self._base = self.rich_style
            if y < len(self._lines):
                line = self._lines[y]
                if isinstance(line, tuple) and sum(cell_len(text) for text, _ in line) <= width:
                    segments = [Segment(text, base + style if style else base) for text, style in line if text]
                else:
                    line = as_text(line)
                    if line.cell_len > width:
                        line = line.copy()
                        line.truncate(width, overflow="ellipsis")
                    segments = [Segment(s.text, base + s.style if s.style else base) for s in line.render(self.app.console) if s.text != "\n"]
                strip = Strip(segments).crop_extend(0, width, base)
            else:
                strip = Strip.blank(width, base)
            self._strips[y] = strip
        return strip
