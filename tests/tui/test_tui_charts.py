"""The chart screens (issue 20): Enter on a run opens its detail (loss and closing metric against
step, thresholds, marks, events and figures; `[`/`]` the other runs, Esc back), `c` compares the
closing metric of every run with the threshold, `b` shows the lot's burn-down. Snapshots at 80×24
and 120×40 with fixed series; the Done-when on real `cockpit demo` data.

After a deliberate change of the look: `pytest tests/tui/test_tui_charts.py --snapshot-update`,
then review the SVGs in tests/tui/__snapshots__/ before committing them."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from cockpit.plan.load import load_campaign
from cockpit.tui.charts import BurndownScreen, CompareScreen, RunDetailScreen
from cockpit.tui.widgets.chart import Chart, render_lines
from tests.chart_fixtures import with_series
from tests.conftest import FakeSource, make_app, make_snapshot
from tests.tui.test_tui import until

pytestmark = pytest.mark.usefixtures("utc_local_time", "no_user_themes")  # UTC on screen, no user themes


def _app(directory, theme=None):
    campaign = load_campaign(directory)
    return make_app(directory, with_series(make_snapshot(), campaign), bell=False, theme=theme)


def _opened(*keys: str, screen: type):
    async def run_before(pilot) -> None:
        app = pilot.app
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.pause()
        app.clear_notifications()
        await pilot.press(*keys)
        await until(pilot, lambda: isinstance(app.screen, screen))
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_run_detail_snapshot(snap_compare, seed_campaign, size):
    assert snap_compare(_app(seed_campaign), terminal_size=size, run_before=_opened("down", "down", "enter", screen=RunDetailScreen))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_compare_snapshot(snap_compare, seed_campaign, size):
    assert snap_compare(_app(seed_campaign), terminal_size=size, run_before=_opened("c", screen=CompareScreen))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_burndown_snapshot(snap_compare, seed_campaign, size):
    assert snap_compare(_app(seed_campaign), terminal_size=size, run_before=_opened("b", screen=BurndownScreen))


def test_run_detail_mono_snapshot(snap_compare, seed_campaign):
    assert snap_compare(_app(seed_campaign, theme="mono"), terminal_size=(80, 24),
                        run_before=_opened("down", "down", "enter", screen=RunDetailScreen))


async def test_enter_opens_the_selected_run_brackets_move_and_escape_goes_back(seed_campaign):
    app = _app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.press("down", "enter")
        await until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
        assert app.screen.run_id == "v-r16"
        await pilot.press("right_square_bracket")
        assert app.screen.run_id == "v-r64"
        loss = app.screen.query_one("#run-charts", Chart).data
        assert loss.title == "v-r64: loss"
        assert [m.kind for m in loss.marks if m.kind == "nan"] and [m.label for m in loss.markers] == ["stop nan-loss"]
        await pilot.press("right_square_bracket")
        assert app.screen.run_id == "ctrl-r1"  # round again
        await pilot.press("left_square_bracket")
        assert app.screen.run_id == "v-r64"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, RunDetailScreen))


async def test_s_and_n_act_on_the_run_the_detail_shows_a_and_s_elsewhere_say_why(seed_campaign):
    """On the chart screens the keys that act on a run act on the run shown, never on the runs
    table's selection out of view; where nothing is shown to act on, the key says why."""
    from cockpit.tui.screens import ConfirmScreen, NoteScreen, StopScreen
    from textual.widgets import Checkbox

    app = _app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.press("down", "enter")
        await until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
        await pilot.press("right_square_bracket")
        assert app.screen.run_id == "v-r64" and app._runs.selected_run_id == "v-r16"
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, StopScreen))
        assert app.screen.run_id == "v-r64"
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, NoteScreen))
        assert app.screen.run_id == "v-r64" and app.screen.query_one("#on-run", Checkbox).value  # about the run shown
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
        await pilot.press("a")
        await until(pilot, lambda: any("No alert is selected here" in n.message for n in app._notifications))
        assert isinstance(app.screen, RunDetailScreen)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        await pilot.press("s")
        await until(pilot, lambda: any("No run is shown here" in n.message for n in app._notifications))
        await pilot.pause()
        assert isinstance(app.screen, CompareScreen) and not isinstance(app.screen, (StopScreen, ConfirmScreen))
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, NoteScreen))
        assert app.screen.run_id is None  # a note on the campaign: no run is shown
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen))
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, NoteScreen))
        assert app.screen.run_id == "v-r16" and not app.screen.query_one("#on-run", Checkbox).value  # the runs table as before


async def test_a_chart_screen_follows_new_snapshots(seed_campaign):
    campaign = load_campaign(seed_campaign)
    source = FakeSource(make_snapshot())
    app = make_app(seed_campaign, source=source, bell=False, refresh_seconds=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        assert app.screen.query_one(Chart).data.empty
        source.snapshot = with_series(make_snapshot(), campaign)
        await until(pilot, lambda: not app.screen.query_one(Chart).data.empty)
        names = [line.name for line in app.screen.query_one(Chart).data.lines]
        assert names == ["ctrl-r1 (control)", "v-r16 (variant)", "v-r64 (variant)"]


def test_every_line_has_its_own_glyph_so_mono_tells_them_apart(seed_campaign):
    from cockpit.live.chart_data import compare_chart

    campaign = load_campaign(seed_campaign)
    data = compare_chart(campaign, with_series(make_snapshot(), campaign).series)
    glyphs = [line.glyph for line in data.lines]
    assert len(set(glyphs)) == len(glyphs)
    text = "\n".join(line.plain for line in render_lines(data, 80, 20))
    assert all(glyph in text for glyph in glyphs) and "╌ threshold 0.8" in text


# ---------------------------------------------------------------- the Done-when, on the demo's real data


def _train(demo: Path, run: str, *args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "cockpit.demo.trainer", "--campaign", str(demo), "--run", run, *args],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr


@pytest.fixture
def demo_data(tmp_path) -> Path:
    from cockpit.demo.setup import prepare_demo

    demo = prepare_demo(tmp_path / "demo", datetime.now(timezone.utc))
    _train(demo, "ctrl-r1", "--steps", "120", "--checkpoint-every", "40")
    _train(demo, "v-hot-lr", "--diverge", "--steps", "60", "--checkpoint-every", "20")
    _train(demo, "v-short-context", "--truncate-essential", "--steps", "120", "--checkpoint-every", "40")
    return demo


async def test_demo_enter_on_v_hot_lr_shows_the_nan_and_the_stop_c_compares_b_burns_down(demo_data):
    from cockpit.live.engine import Engine
    from cockpit.live.gpu import FakeGpus
    from cockpit.record.runlog import RunLog
    from cockpit.tui.app import CockpitApp

    campaign = load_campaign(demo_data)
    engine = Engine(campaign, gpus=FakeGpus(1), signal_runs=False)
    app = CockpitApp(campaign, engine, RunLog(demo_data), bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        # the nan-loss rule stops v-hot-lr on the first tick; the next tick reads the stop back
        await until(pilot, lambda: app.snapshot is not None and app.snapshot.run("v-hot-lr").state == "stopped", timeout=20)
        await pilot.press("down", "enter")
        await until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
        assert app.screen.run_id == "v-hot-lr"
        loss = app.screen.query_one("#run-charts", Chart)
        data = loss.data
        line = data.lines[0]
        nans = [m for m in data.marks if m.kind == "nan"]
        stops = [m for m in data.markers if m.label.startswith("stop")]
        assert line.points and nans and stops
        assert nans[-1].x >= line.points[-1][0]  # the curve ends in the NaN marker
        assert stops[0].label == "stop nan-loss" and stops[0].x >= line.points[-1][0]
        drawn = "\n".join(text.plain for text in render_lines(data, loss.size.width, loss.size.height))
        assert "×" in drawn and "│ stop nan-loss" in drawn
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        compare = app.screen.query_one(Chart).data
        assert [line.name.split()[0] for line in compare.lines] == ["ctrl-r1", "v-hot-lr", "v-short-context"]
        assert all(line.points for line in compare.lines)
        assert [t.y for t in compare.thresholds] == [0.8]
        await pilot.press("b")
        await until(pilot, lambda: isinstance(app.screen, BurndownScreen))
        burndown = app.screen.query_one(Chart).data
        assert [line.name for line in burndown.lines] == ["committed hours remaining", "plan as frozen", "time left in the lot"]
        assert burndown.lines[0].points  # the clock history the engine kept
        assert {m.label for m in burndown.markers} >= {"pilot decision", "6 h left", "1 h left"}
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, BurndownScreen))
    engine.close()


async def test_the_chart_draws_nothing_twice_but_redraws_on_new_data_or_a_new_theme(seed_campaign):
    app = _app(seed_campaign)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.press("down", "enter")
        await until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
        await pilot.pause()
        chart = app.screen.query_one("#run-charts", Chart)
        drawn = chart.render()
        assert chart.render() is drawn  # same charts, same size, same styles: the text already drawn
        await pilot.press("t")  # another theme: other colours
        await pilot.pause()
        again = chart.render()
        assert again is not drawn and again.plain == drawn.plain
        await pilot.press("right_square_bracket")  # another run's charts
        await pilot.pause()
        assert chart.render().plain != again.plain
