"""What the cockpit looks like, frozen as SVG (pytest-textual-snapshot): the whole screen at 80×24
and 120×40 with fake GPUs, without NVML, with eight simulated GPUs, the stop dialog, the light and
monochrome themes, NO_COLOR, a lot-window alert pinned above three older alerts, and the log screen. Every time shown comes from the fixed snapshot, in UTC.

After a deliberate change of the look: `pytest tests/tui/test_tui_snapshots.py --snapshot-update`,
then review the SVGs in tests/tui/__snapshots__/ before committing them."""

from __future__ import annotations

import pytest

from tests.conftest import NOW, make_app, make_snapshot, stalled_alert, window_and_older_alerts

pytestmark = pytest.mark.usefixtures("utc_local_time", "no_user_themes")  # UTC on screen, no user themes


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


def test_no_color_80x24(snap_compare, seed_campaign, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert snap_compare(_app(seed_campaign), terminal_size=(80, 24), run_before=_first_frame)


def test_window_alert_pinned_above_older_alerts_80x24(snap_compare, seed_campaign):
    app = make_app(seed_campaign, make_snapshot(alerts=window_and_older_alerts()), bell=False)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_first_frame)


def test_log_screen_80x24(snap_compare, seed_campaign):
    from cockpit.record import decisions
    from cockpit.plan.load import load_campaign
    from cockpit.record.runlog import RunLog

    log = RunLog(seed_campaign, clock=lambda: NOW, source_user="ana@gpu-box")
    campaign = load_campaign(seed_campaign)
    decisions.record_note(campaign, log, "setup took 6 h, not 2: driver reinstall", source="cli")
    stop = decisions.record_stop(campaign, log, "v-r16", reason="wrong key", source="key")
    decisions.record_void(campaign, log, stop["seq"], reason="s on the wrong run", source="key")
    decisions.record_decision(campaign, log, "continue", note="pilot F1 0.71 at 2 h", source="key")

    async def open_log(pilot) -> None:
        await _first_frame(pilot)
        await pilot.press("l")
        for _ in range(250):
            if type(pilot.app.screen).__name__ == "LogScreen":
                break
            await pilot.pause(0.02)
        await pilot.pause()

    assert snap_compare(_app(seed_campaign), terminal_size=(80, 24), run_before=open_log)


def test_gpu_health_line_80x24(snap_compare, seed_campaign):
    """Counters since the lot's first sample under the GPU, an uncorrected ECC error marked "!"."""
    from dataclasses import replace

    from tests.conftest import make_gpu

    health = {"since_start": {"ecc_corrected": 2, "ecc_uncorrected": 1, "remap_pending": False, "remap_failed": False,
                              "pcie_replays": 3, "power_slowdown_s": 75.0, "thermal_slowdown_s": 0.0, "energy_j": 4.5e6},
              "energy_kwh_since_start": 1.25}
    snapshot = replace(make_snapshot(alerts=(stalled_alert(),)), gpus=(replace(make_gpu(0), health=health),))
    assert snap_compare(make_app(seed_campaign, snapshot, bell=False), terminal_size=(80, 24), run_before=_first_frame)
