"""What the cockpit looks like, frozen as SVG (pytest-textual-snapshot): the whole screen at 80×24
and 120×40 with fake GPUs, without NVML, with eight simulated GPUs, the stop dialog, and the
light and monochrome themes. Every time shown comes from the fixed snapshot, in UTC.

After a deliberate change of the look: `pytest tests/test_tui_snapshots.py --snapshot-update`,
then review the SVGs in tests/__snapshots__/ before committing them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the fakes live in test_tui.py, whatever the import mode
from test_tui import make_app, make_snapshot, stalled_alert  # noqa: E402
from test_tui import no_user_themes, utc_local_time  # noqa: E402, F401 — autouse fixtures: UTC, no user themes


async def _first_frame(pilot) -> None:
    """Wait for the first snapshot on screen; drop the toasts (the new-alert one) from the picture."""
    app = pilot.app
    for _ in range(250):
        if app.snapshot is not None:
            break
        await pilot.pause(0.02)
    assert app.snapshot is not None, "no snapshot reached the screen"
    await pilot.pause()
    app.clear_notifications()
    await pilot.pause()


def _app(directory, **snapshot_options):
    theme = snapshot_options.pop("theme", None)
    snapshot = make_snapshot(alerts=(stalled_alert(),), **snapshot_options)
    return make_app(directory, snapshot, bell=False, theme=theme)


def test_main_screen_80x24(snap_compare, seed_campaign):
    assert snap_compare(_app(seed_campaign), terminal_size=(80, 24), run_before=_first_frame)


def test_main_screen_120x40(snap_compare, seed_campaign):
    assert snap_compare(_app(seed_campaign, gpus=2), terminal_size=(120, 40), run_before=_first_frame)


def test_nvml_unavailable_80x24(snap_compare, seed_campaign):
    assert snap_compare(_app(seed_campaign, nvml=False), terminal_size=(80, 24), run_before=_first_frame)


def test_eight_simulated_gpus_80x24(snap_compare, seed_campaign):
    assert snap_compare(_app(seed_campaign, gpus=8, simulated=True), terminal_size=(80, 24), run_before=_first_frame)


def test_stop_dialog_80x24(snap_compare, seed_campaign):
    async def open_stop(pilot) -> None:
        await _first_frame(pilot)
        await pilot.press("s", "down")

    assert snap_compare(_app(seed_campaign), terminal_size=(80, 24), run_before=open_stop)


@pytest.mark.parametrize("theme", ["light", "mono"])
def test_other_themes_80x24(snap_compare, seed_campaign, theme):
    assert snap_compare(_app(seed_campaign, theme=theme), terminal_size=(80, 24), run_before=_first_frame)
