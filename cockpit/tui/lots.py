"""The other lots in the TUI: a summary line across lots on the main screen, and (key `o`) a
screen with a tab per other lot: its clock, GPUs, runs and alerts, read-only. The readings come
from the lots' watcher threads; these widgets only read the latest one, once a second."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static, TabbedContent, TabPane

from cockpit.common.times import utc_now
from cockpit.lots.summary import reading_lines, summarize
from cockpit.lots.watcher import OtherLots

REFRESH_SECONDS = 1.0


def _now(app: Any):
    clock = getattr(app, "clock", None)
    return clock() if callable(clock) else utc_now()


def summary_text(app: Any, lots: OtherLots) -> str:
    return "lots · " + summarize(getattr(app, "snapshot", None), lots.readings(), _now(app)).text()


class LotsLine(Static):
    """One line across the lots: price of each and in all, hours left on each, alerts per lot."""

    DEFAULT_CSS = """
    LotsLine { height: 1; padding: 0 1; background: $panel; color: $text-muted; }
    """

    def __init__(self, lots: OtherLots, **kwargs: Any) -> None:
        super().__init__("lots · waiting for the first readings…", markup=False, **kwargs)
        self.lots = lots
        self._shown = ""

    def on_mount(self) -> None:
        self.set_interval(REFRESH_SECONDS, self.refresh_line, name="lots-line")

    def refresh_line(self) -> None:
        text = summary_text(self.app, self.lots)
        if text != self._shown:
            self._shown = text
            self.update(text)


class LotPane(Static):
    """Another lot's last reading as text (escaped: it comes from another box)."""

    DEFAULT_CSS = """
    LotPane { padding: 0 1; }
    """

    def __init__(self, lots: OtherLots, index: int, **kwargs: Any) -> None:
        super().__init__("", markup=False, **kwargs)
        self.lots = lots
        self.index = index
        self._shown = ""

    def show(self) -> None:
        text = "\n".join(reading_lines(self.lots.watchers[self.index].reading(), _now(self.app)))
        if text != self._shown:
            self._shown = text
            self.update(text)


class LotsScreen(Screen[None]):
    """A tab per other lot; `o` or escape goes back to this lot's cockpit."""

    BINDINGS = [
        Binding("escape,o", "app.pop_screen", "Back", id="lots-back", tooltip="back to this lot's cockpit"),
    ]
    DEFAULT_CSS = """
    LotsScreen #lots-summary { height: auto; padding: 0 1; background: $panel; }
    """

    def __init__(self, lots: OtherLots) -> None:
        super().__init__()
        self.lots = lots

    def compose(self) -> ComposeResult:
        yield Static("", id="lots-summary", markup=False)
        with TabbedContent(id="lots-tabs"):
            for index, watcher in enumerate(self.lots.watchers):
                with TabPane(watcher.source.name, id=f"lot-tab-{index}"):
                    yield LotPane(self.lots, index, id=f"lot-pane-{index}")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_lots()
        self.set_interval(REFRESH_SECONDS, self.refresh_lots, name="lots-screen")

    def refresh_lots(self) -> None:
        self.query_one("#lots-summary", Static).update(summary_text(self.app, self.lots))
        for pane in self.query(LotPane):
            pane.show()


def open_lots(app: Any) -> None:
    lots = getattr(app, "other_lots", None)
    if not lots:
        app.notify("no other lots: add --lot NAME=URL or [[lot_view]] entries in ~/.config/cockpit/lots.toml", timeout=4)
        return
    if isinstance(app.screen, LotsScreen):
        app.pop_screen()
        return
    app.push_screen(LotsScreen(lots))
