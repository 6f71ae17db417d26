"""The cockpit's keys, in one place: what each does, for the footer, the help screen (`?`) and the
app's bindings. A new screen or feature adds its line here and an `action_…` on the app."""

from __future__ import annotations

from textual.binding import Binding

from cockpit.tui.charts import CHART_BINDINGS
from cockpit.tui.screens import KeyHelp

APP_BINDINGS: list[Binding] = [
    Binding("s", "stop", "Stop run", id="stop", tooltip="record a stop of the selected run (a rule or a reason); offers SIGTERM when its pid is known"),
    Binding("d", "decide", "Pilot decision", id="decide", tooltip="continue / drop-optional / revise, with a note"),
    Binding("a", "acknowledge", "Acknowledge", id="acknowledge", tooltip="acknowledge the selected alert"),
    Binding("n", "note", "Note", id="note", tooltip="record an explained deviation, optionally on the selected run"),
    Binding("l", "log", "Run log", id="log", tooltip="the run log, newest first; v there takes back a mistaken decision (a void event)"),
    Binding("t", "cycle_theme", "Theme", id="theme", tooltip="next theme (dark, light, mono, then yours)"),
    Binding("question_mark", "help", "Help", id="help", key_display="?", tooltip="this list"),
    Binding("q", "quit", "Quit", id="quit", priority=True, tooltip="leave the cockpit (the runs go on)"),
    *CHART_BINDINGS,  # Enter, c, b: the chart screens (cockpit.tui.charts)
]


def key_help(bindings: list[Binding] | None = None) -> list[KeyHelp]:
    """The lines of the help screen, one per key, in the order above."""
    return [KeyHelp(b.key_display or b.key, b.description, b.tooltip) for b in (APP_BINDINGS if bindings is None else bindings)]
