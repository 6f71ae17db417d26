"""Sparklines of percentages on a fixed 0–100 scale, newest sample at the right edge.

Textual's own Sparkline scales each series to its own minimum and maximum, which turns a GPU
sitting between 96 % and 98 % into a wall of full and empty bars; a fixed scale keeps a busy GPU
looking busy and an idle one idle. Drawn as text, so a GPU row is one widget, not five."""

from __future__ import annotations

import math

from rich.style import Style
from rich.text import Text

BARS = " ▁▂▃▄▅▆▇█"


def sparkline(data: tuple[float, ...], width: int, low: Style, high: Style) -> Text:
    """The last `width` samples as bars, padded on the left; runs of one style share a span."""
    return Text.assemble(*sparkline_runs(data, width, low, high, Style()), no_wrap=True, end="")


def sparkline_runs(data: tuple[float, ...], width: int, low: Style, high: Style, under: Style) -> list[tuple[str, Style]]:
    """The same bars as runs of (text, style), each style over `under`: the padding in `under`."""
    samples = data[-width:] if width > 0 else ()
    runs: list[tuple[str, Style]] = []
    if width > len(samples):
        runs.append((" " * (width - len(samples)), under))
    low, high = under + low, under + high
    chars: list[str] = []
    run_high: bool | None = None
    for value in samples:  # once a second for every GPU's two lines: kept to plain arithmetic
        if value is None or value != value or value in _INFINITE:
            char, is_high = "·", False
        else:
            level = int(round(value / 100 * 8))
            # a GPU doing anything at all shows at least the lowest bar
            level = 8 if level > 8 else 1 if level <= 0 and value > 0 else 0 if level < 0 else level
            char, is_high = BARS[level], value >= 50
        if is_high is not run_high and chars:
            runs.append(("".join(chars), high if run_high else low))
            chars = []
        run_high = is_high
        chars.append(char)
    if chars:
        runs.append(("".join(chars), high if run_high else low))
    return runs


_INFINITE = (math.inf, -math.inf)
