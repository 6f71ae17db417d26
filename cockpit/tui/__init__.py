"""The cockpit's terminal UI (Textual): a view over the engine's snapshots and the keys that
record decisions. Only `cockpit.commands.tui` imports it; the core never does."""

from cockpit.tui.app import CockpitApp

__all__ = ["CockpitApp"]
