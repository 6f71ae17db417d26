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


# Bound only when other lots are shown (--lot, lots.toml): the help lists it then, and only then.
OTHER_LOTS_BINDING = Binding("o", "other_lots", "Other lots", id="other_lots",
                             tooltip="a read-only tab per other lot (--lot, lots.toml), each fed by that lot's /snapshot.json")


def key_help(bindings: list[Binding] | None = None, *, lots: bool = False) -> list[KeyHelp]:
    """The lines of the help screen, one per key, in the order above (`o` after `l` when `lots`)."""
    if bindings is None:
        bindings = list(APP_BINDINGS)
        if lots:
            after = next((i + 1 for i, b in enumerate(bindings) if b.key == "l"), len(bindings))
            bindings.insert(after, OTHER_LOTS_BINDING)
    return [KeyHelp(b.key_display or b.key, b.description, b.tooltip) for b in bindings]
