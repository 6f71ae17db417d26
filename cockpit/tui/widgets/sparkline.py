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
    samples = data[-width:] if width > 0 else ()
    text = Text(" " * (width - len(samples)) if width > len(samples) else "", no_wrap=True, end="")
    run, run_style = "", None
    for value in samples:
        char, style = _bar(value, low, high)
        if style is run_style:
            run += char
        else:
            if run:
                text.append(run, run_style)
            run, run_style = char, style
    if run:
        text.append(run, run_style)
    return text


def _bar(value: float, low: Style, high: Style) -> tuple[str, Style]:
    if value is None or not math.isfinite(value):
        return "·", low
    level = min(8, max(0, int(round(value / 100 * 8))))
    if level == 0 and value > 0:
        level = 1  # a GPU doing anything at all shows at least the lowest bar
    return BARS[level], high if value >= 50 else low
