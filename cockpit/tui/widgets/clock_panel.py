"""The lot's clock: elapsed, committed and window hours as bars on one scale, time left, the
uncommitted hours and the projected finish (local time), with whether the plan still fits."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from cockpit.common.text import escape_control
from cockpit.live.snapshot import ClockView, LotView
from cockpit.tui import format as fmt
from cockpit.tui.widgets.text_lines import TextLines

LABEL_WIDTH = 10  # "committed "
VALUE_WIDTH = 8  # " 720.0 h"


class ClockPanel(TextLines):
    """Three bars share one scale (the longest of window, plan and projection), so a plan longer
    than the window shows as a committed bar running past the window bar."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "clock-panel--elapsed",
        "clock-panel--committed",
        "clock-panel--window",
        "clock-panel--over",
        "clock-panel--empty",
        "clock-panel--label",
        "clock-panel--good",
        "clock-panel--bad",
        "clock-panel--muted",
    }

    DEFAULT_CSS = """
    ClockPanel {
        height: auto;
        padding: 0 0 0 1;
    }
    ClockPanel > .clock-panel--elapsed { color: $cockpit-elapsed; }
    ClockPanel > .clock-panel--committed { color: $cockpit-committed; }
    ClockPanel > .clock-panel--window { color: $cockpit-window; }
    ClockPanel > .clock-panel--over { color: $error; }
    ClockPanel > .clock-panel--empty { color: $cockpit-bar-empty; }
    ClockPanel > .clock-panel--label { color: $text-muted; }
    ClockPanel > .clock-panel--good { color: $success; }
    ClockPanel > .clock-panel--bad { color: $error; text-style: bold; }
    ClockPanel > .clock-panel--muted { color: $text-muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._clock: ClockView | None = None
        self._lot: LotView | None = None
        self._shown: tuple[object, ...] | None = None  # what the lines were last built from

    def show(self, clock: ClockView, lot: LotView) -> None:
        if (clock, lot) == (self._clock, self._lot):
            return
        self._clock, self._lot = clock, lot
        shown = self._shown_values(self.size.width)
        if shown is not None and shown == self._shown:
            return  # the clock moved, but nothing it shows did (most seconds): build nothing
        self._shown = shown
        self.update_lines()  # most ticks that get here change one line (time left)

    def _shown_values(self, width: int) -> tuple[object, ...] | None:
        """Every value `_text` draws, formatted as drawn (None: not laid out or no clock yet).
        Equal values give equal lines, so `show` can skip building them; it errs on the side of
        building (a value here that `_text` does not draw only costs a rebuild)."""
        clock, lot = self._clock, self._lot
        if clock is None or width <= 0:
            return None
        width = max(20, width)
        bar_width = max(4, width - LABEL_WIDTH - VALUE_WIDTH - 1)
        projected_total = None
        if clock.projected_finish is not None and lot is not None and lot.start is not None:
            projected_total = (clock.projected_finish - lot.start).total_seconds() / 3600
        scale = max(v for v in (clock.window_hours, clock.committed_hours, clock.elapsed_hours or 0, projected_total or 0, 1e-9))
        bars = []
        for value, limit in ((clock.elapsed_hours, clock.window_hours), (clock.committed_hours, clock.window_hours), (clock.window_hours, None)):
            filled = 0 if value is None else min(bar_width, int(round(max(0.0, value) / scale * bar_width)))
            within = filled
            if limit is not None and value is not None and value > limit:
                within = min(filled, int(round(limit / scale * bar_width)))
            bars.append((filled, within, fmt.hours(value)))
        starts_in = None
        if lot is not None and lot.start is not None and clock.now < lot.start:
            starts_in = fmt.duration((lot.start - clock.now).total_seconds() / 3600)
        tall = self.size.height >= 7
        span = None
        if tall and lot is not None and lot.start is not None:
            span = (fmt.local_time(lot.start, clock.now), fmt.local_time(lot.end, clock.now))
        return (
            width,
            tall,
            lot,
            tuple(bars),
            clock.started,
            fmt.duration(clock.remaining_hours) if clock.remaining_hours is not None else None,
            starts_in,
            clock.message,
            clock.uncommitted_hours >= 0,
            fmt.hours(abs(clock.uncommitted_hours)),
            fmt.local_time(clock.projected_finish, clock.now),
            clock.fits,
            span,
            fmt.hours(clock.committed_remaining_hours) if clock.committed_remaining_hours is not None else None,
        )

    def _style(self, name: str) -> Style:
        return self.component_style(f"clock-panel--{name}")

    def build_lines(self, width: int) -> list[Text]:
        self._shown = self._shown_values(width)
        return list(self._text(width).split("\n"))

    def _text(self, width: int) -> Text:
        clock = self._clock
        if clock is None:
            return Text("waiting for the first sample…", self._style("muted"))
        width = max(20, width)
        bar_width = max(4, width - LABEL_WIDTH - VALUE_WIDTH - 1)  # and a blank column before the border
        projected_total = None
        if clock.projected_finish is not None and self._lot is not None and self._lot.start is not None:
            projected_total = (clock.projected_finish - self._lot.start).total_seconds() / 3600
        scale = max(v for v in (clock.window_hours, clock.committed_hours, clock.elapsed_hours or 0, projected_total or 0, 1e-9))

        text = Text(no_wrap=True, overflow="ellipsis", end="")
        self._bar(text, "elapsed", clock.elapsed_hours, scale, bar_width, clock.window_hours, "elapsed")
        self._bar(text, "committed", clock.committed_hours, scale, bar_width, clock.window_hours, "committed")
        self._bar(text, "window", clock.window_hours, scale, bar_width, None, "window")

        label, muted = self._style("label"), self._style("muted")
        lot = self._lot
        if clock.started and clock.remaining_hours is not None:
            text.append("left ", label)
            text.append(fmt.duration(clock.remaining_hours))
        elif lot is not None and lot.start is not None and clock.now < lot.start:
            text.append("starts in ", label)  # relative: the date would crowd out the uncommitted hours
            text.append(fmt.duration((lot.start - clock.now).total_seconds() / 3600))
        elif clock.message:
            text.append(escape_control(clock.message), muted)
        else:
            text.append("not started", muted)
        if clock.uncommitted_hours >= 0:
            text.append(" · uncommitted ", label)
            text.append(fmt.hours(clock.uncommitted_hours))
        else:
            text.append(" · over by ", self._style("bad"))
            text.append(fmt.hours(-clock.uncommitted_hours), self._style("bad"))
        text.append("\n")

        text.append("finish ", label)  # the projection includes retrieval (the engine's clock)
        text.append(fmt.local_time(clock.projected_finish, clock.now))
        if clock.fits is True:
            text.append(" · fits", self._style("good"))
        elif clock.fits is False:
            text.append(" · PAST LOT END", self._style("bad"))

        if self.size.height >= 7:  # room to spare (-tall): the lot's span and the re-estimate
            if lot is not None and lot.start is not None:
                text.append("\nlot ", label)
                text.append(f"{fmt.local_time(lot.start, clock.now)} → {fmt.local_time(lot.end, clock.now)}")
            if clock.committed_remaining_hours is not None:
                text.append("\nplan left ", label)
                text.append(fmt.hours(clock.committed_remaining_hours))
                text.append(" (re-estimated)", muted)
        return text

    def _bar(
        self, text: Text, label: str, value: float | None, scale: float, width: int, limit: float | None, style: str
    ) -> None:
        text.append(f"{label:<{LABEL_WIDTH}}", self._style("label"))
        filled = 0 if value is None else min(width, int(round(max(0.0, value) / scale * width)))
        within = filled
        if limit is not None and value is not None and value > limit:
            within = min(filled, int(round(limit / scale * width)))
        text.append("█" * within, self._style(style))
        text.append("█" * (filled - within), self._style("over"))
        text.append("░" * (width - filled), self._style("empty"))
        text.append(f"{fmt.hours(value):>{VALUE_WIDTH}}\n")
