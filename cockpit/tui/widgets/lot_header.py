"""The cockpit's top two lines: which campaign, on which lot (GPU model × count, duration, the lot's
price, order reference, its end in local time), and how fresh the data on screen is. While a
lot-window alert is active it takes the second line, in the alert colour: the lot's end cannot
scroll away below older alerts."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from rich.text import Text

from cockpit.common.text import escape_control
from cockpit.live.snapshot import LotView
from cockpit.tui import format as fmt
from cockpit.tui.widgets.text_lines import TextLines


class LotHeader(TextLines):
    """Campaign and lot; the right side says when the last sample was taken, or why there is none."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "lot-header--campaign",
        "lot-header--muted",
        "lot-header--warning",
        "lot-header--error",
        "lot-header--alert",
        "lot-header--critical",
    }

    DEFAULT_CSS = """
    LotHeader {
        height: 2;
        padding: 0 1;
        background: $panel;
        color: $foreground;
    }
    LotHeader > .lot-header--campaign { text-style: bold; color: $accent; }
    LotHeader > .lot-header--muted { color: $text-muted; }
    LotHeader > .lot-header--warning { color: $warning; text-style: bold; }
    LotHeader > .lot-header--error { color: $error; text-style: bold; }
    LotHeader > .lot-header--alert { color: $cockpit-alert; text-style: bold; }
    LotHeader > .lot-header--critical { color: $error; text-style: bold; }
    """

    def __init__(self, campaign_id: str, question: str | None = None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._campaign_id = campaign_id
        self._question = question
        self._lot: LotView | None = None
        self._now: datetime | None = None
        self._status: tuple[str, str] = ("waiting for the first sample…", "muted")
        self._pilot_due: datetime | None = None
        self._window_alert: tuple[str, str, int] | None = None  # (message, severity, how many more)
        self._second: tuple[tuple[object, ...], Text] | None = None  # the second line and what it shows

    def notify_style_update(self) -> None:
        self._second = None  # a new theme: its colours
        super().notify_style_update()

    def show_window_alert(self, message: str | None, severity: str = "warning", more: int = 0) -> None:
        """Pin the most urgent lot-window alert on the second line (None: the lot's facts again)."""
        pinned = None if message is None else (message, severity, more)
        if pinned != self._window_alert:
            self._window_alert = pinned
            self.update_lines()

    def show_lot(self, lot: LotView, now: datetime, pilot_due: datetime | None = None) -> None:
        """`pilot_due`: when the pilot decision fell due, while none is recorded."""
        if lot == self._lot and pilot_due == self._pilot_due and (self._now is not None and self._now.date() == now.date()):
            return
        self._lot, self._now, self._pilot_due = lot, now, pilot_due
        self.update_lines()

    def show_status(self, text: str, level: str = "muted") -> None:
        """`level`: muted (all is well), warning (stale), error (the engine failed)."""
        if (text, level) != self._status:
            self._status = (text, level)
            self.update_lines()

    def build_lines(self, width: int) -> list[Text]:
        campaign = self.component_style("lot-header--campaign")
        muted = self.component_style("lot-header--muted")
        status_text, level = self._status
        status_text = escape_control(status_text)  # an engine error may quote a file
        if len(status_text) > 46:
            status_text = status_text[:45] + "…"
        status_style = self.component_style(f"lot-header--{level}")

        first = Text(no_wrap=True, overflow="ellipsis", end="")
        first.append(escape_control(self._campaign_id), campaign)
        question = self._lot.question if self._lot else self._question
        if question:
            first.append("  " + escape_control(question), muted)

        status = Text(" " + status_text, status_style, no_wrap=True, end="")
        room = max(0, width - status.cell_len)
        if first.cell_len > room:
            first.truncate(room, overflow="ellipsis")
        first.append(" " * (room - first.cell_len))
        return [first + status, self._second_line()]

    def _second_line(self) -> Text:
        """The lot's facts or the pinned alert: the same Text while they stay the same (the status
        on the first line changes every second; this line, hardly ever)."""
        shown = (self._window_alert, self._lot, self._pilot_due)
        if self._second is not None and self._second[0] == shown:
            return self._second[1]
        muted = self.component_style("lot-header--muted")
        second = Text(no_wrap=True, overflow="ellipsis", end="")
        lot = self._lot
        if self._window_alert is not None:
            message, severity, more = self._window_alert
            style = self.component_style("lot-header--critical" if severity == "critical" else "lot-header--alert")
            second.append("▲ " + escape_control(message) + (f" (+{more} more window alert{'s' if more > 1 else ''})" if more else ""), style)
        elif lot is not None:
            parts = [
                f"{lot.gpu_model} ×{lot.gpus}",
                f"{lot.days} days",
                fmt.money(lot.price_usd),
            ]
            if lot.order_ref:
                parts.append(f"order {lot.order_ref}")  # the provider's reference, to quote in a ticket
            second.append(escape_control(" · ".join(parts)))  # the model and order as written in campaign.toml
            if lot.end is not None:
                second.append(" · ends ", muted)
                second.append(fmt.local_time(lot.end, None, zone=True))
            else:
                second.append(" · no start date: the lot's end is unknown", muted)
            if self._pilot_due is not None:
                second.append(" · PILOT DECISION DUE (d)", self.component_style("lot-header--warning"))
        self._second = (shown, second)
        return second
