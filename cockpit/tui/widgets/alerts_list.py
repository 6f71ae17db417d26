"""Alerts, the unacknowledged ones first (newest first), marked until someone acknowledges them;
the snapshot's notices (plan drift, unreadable lines…) follow, dimmed, as things to know. A new
alert takes the selection (so `a` names it) unless the person moved the selection moments ago.
Whether an alert is acknowledged is what its `AlertView.acknowledged` says, nothing else."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from textual.content import Content
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from cockpit.common.text import escape_control
from cockpit.live.snapshot import AlertView
from cockpit.tui import format as fmt

AlertKey = tuple[str, int | None]  # (the engine's alert key, seq of the alert event)
USER_HOLD_SECONDS = 5.0  # a selection the person moved this recently is theirs: a new alert leaves it


def alert_ident(alert: AlertView) -> str:
    """What makes an alert itself: the engine's key ("lot-window:6h", "nan-loss|v-r16"), so two
    alerts of one rule without a run (two window thresholds, two lost GPUs) stay apart."""
    return alert.key or f"{alert.rule}|{alert.run or ''}"


def alert_key(alert: AlertView) -> AlertKey:
    return (alert_ident(alert), alert.seq)


def _option_id(key: AlertKey) -> str:
    ident, seq = key
    return f"alert:{ident}:{'' if seq is None else seq}"


class AlertsList(OptionList):
    DEFAULT_CSS = """
    AlertsList {
        height: 5;
        padding: 0;
    }
    """

    def __init__(self, *, id: str | None = None, monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__(id=id)
        self._shown: tuple | None = None
        self._alerts: dict[str, AlertView] = {}
        self._monotonic = monotonic
        self.moved_by_user_at: float | None = None  # when the person last moved the selection

    def _moved(self) -> None:
        self.moved_by_user_at = self._monotonic()

    def action_cursor_up(self) -> None:
        self._moved()
        super().action_cursor_up()

    def action_cursor_down(self) -> None:
        self._moved()
        super().action_cursor_down()

    def action_first(self) -> None:
        self._moved()
        super().action_first()

    def action_last(self) -> None:
        self._moved()
        super().action_last()

    def action_page_up(self) -> None:
        self._moved()
        super().action_page_up()

    def action_page_down(self) -> None:
        self._moved()
        super().action_page_down()

    def _user_holds_selection(self) -> bool:
        return self.moved_by_user_at is not None and self._monotonic() - self.moved_by_user_at < USER_HOLD_SECONDS

    def show(self, alerts: tuple[AlertView, ...], notices: tuple[str, ...], now: datetime) -> None:
        """Rebuild the options only when what they say changed; keep the highlighted alert."""
        state = (alerts, notices, fmt.local(now).date())  # the local day: times say "HH:MM" only for today
        if state == self._shown:
            return
        self._shown = state
        highlighted = self.highlighted_option.id if self.highlighted_option is not None else None
        before = set(self._alerts)
        alerts = tuple(sorted(alerts, key=self.is_acknowledged))  # stable: newest first within each
        self._alerts = {_option_id(alert_key(a)): a for a in alerts}
        arrived = [
            option_id for option_id, a in self._alerts.items()
            if option_id not in before and not a.acknowledged
        ]
        if arrived and before and not self._user_holds_selection():
            highlighted = arrived[0]  # the newest new alert: `a` acknowledges what just arrived
        options: list[Option] = []
        for alert in alerts:
            options.append(Option(self._prompt(alert, now), id=_option_id(alert_key(alert))))
        if not alerts:
            options.append(Option(Content.styled("no alerts", "$text-muted"), id="none", disabled=True))
        for number, notice in enumerate(notices):
            options.append(Option(Content.styled(f"i {escape_control(notice)}", "$text-muted"), id=f"notice:{number}", disabled=True))
        self.set_options(options)
        unacknowledged = sum(1 for a in alerts if not self.is_acknowledged(a))
        self.border_title = f"alerts · {unacknowledged} unacknowledged" if unacknowledged else "alerts"
        if highlighted is not None and highlighted in self._alerts:
            self.highlighted = self.get_option_index(highlighted)
        elif alerts:
            self.highlighted = 0

    @staticmethod
    def is_acknowledged(alert: AlertView) -> bool:
        return alert.acknowledged

    @property
    def selected_alert(self) -> AlertView | None:
        option = self.highlighted_option
        if option is None or option.id is None:
            return None
        return self._alerts.get(option.id)

    def _prompt(self, alert: AlertView, now: datetime) -> Content:
        when = fmt.local_time(alert.ts, now) if alert.ts else fmt.DASH
        where = escape_control(f"{alert.rule}" + (f" {alert.run}" if alert.run else ""))
        message = alert.message
        if alert.run and message.startswith(f"{alert.run}: "):  # the run is already named before it
            message = message[len(alert.run) + 2:]
        message = escape_control(message)  # names, ids and values from the runs; plain text, never markup
        if self.is_acknowledged(alert):
            return Content.assemble(("  ", ""), (f"{when} {where}: {message} (acknowledged)", "$text-muted"))
        mark_style = "$error bold" if alert.severity == "critical" else "$cockpit-alert bold"
        return Content.assemble(("● ", mark_style), (f"{when} ", "$text-muted"), (where, "bold"), (f": {message}", ""))
