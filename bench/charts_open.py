"""The run detail screen on a 1,000,000-line run opens in ≤ 300 ms after the engine's first read
(issue 20 item 4); and what the charts' series cost the engine's cold read of that stream.

    .venv/bin/python bench/charts_open.py [--lines 1000000] [--repeat 3] [--json]

1. A campaign whose one run wrote `--lines` lines (`ingest.generate`: metric lines, an eval every
   100 steps, checkpoints, a NaN loss at the end).
2. The engine's first tick on it (cold: no `.cockpit/`), timed with the series fed as the engine
   feeds them, and again with the series observer bypassed (the cost the series add to a cold read).
3. The TUI (headless, 80×24 and 120×40) on that engine's snapshot: from the Enter key to the run
   detail screen drawn (both charts rendered, the events listed), best of `--repeat`.
Target: the screen open ≤ 300 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ingest  # noqa: E402  (its stream generator)

TARGET_MS = 300.0
LOT_START = datetime.fromtimestamp(ingest.START, timezone.utc) - timedelta(hours=1)

CAMPAIGN = f"""schema = 1
id = "charts-open"
question = "Does the detail screen open fast on a long run?"
corpus = "c"
[closing]
metric = "eval/macro_f1"
direction = "max"
threshold = 0.80
[lot]
gpu_model = "RTX 4090"
gpus = 1
days = 30
price_usd = "390.00"
start = {LOT_START.strftime('%Y-%m-%dT%H:%M:%SZ')}
[[run]]
id = "v-r16"
role = "variant"
hours = 100
total_steps = 2000000
[[stop_rule]]
id = "nan-loss"
kind = "non_finite"
metric = "loss"
[[stop_rule]]
id = "f1-floor"
kind = "below"
metric = "eval/macro_f1"
threshold = 0.55
after_step = 2000
"""


def make(folder: Path, lines: int) -> Path:
    (folder / "campaign.toml").write_text(CAMPAIGN)
    path = folder / "runs" / "v-r16" / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    ingest.generate(path, lines)
    with path.open("a") as handle:  # the end of a run that diverged
        handle.write(json.dumps({"ts": ingest.START + lines * 0.25, "step": lines, "loss": math.nan}) + "\n")
    return folder


def first_tick(folder: Path, clock, *, series: bool) -> tuple[float, object, object]:
    from cockpit.live.engine import Engine
    from cockpit.live.gpu import FakeGpus
    from cockpit.plan.load import load_campaign

    shutil.rmtree(folder / ".cockpit", ignore_errors=True)
    (folder / "runlog.jsonl").unlink(missing_ok=True)
    engine = Engine(load_campaign(folder), clock=clock, gpus=FakeGpus(1), signal_runs=False, persist=False)
    if not series:
        engine.series.observer = lambda run_id, then=None: then or (lambda record, line, track: None)
    started = time.perf_counter()
    snapshot = engine.tick()
    return time.perf_counter() - started, engine, snapshot


async def open_detail(folder: Path, snapshot, size: tuple[int, int]) -> dict[str, float]:
    """Seconds from Enter to the detail screen drawn: the first time (the screen is made), again
    (the kept screen shown), and a bare one-line Screen pushed and drawn the same way (Textual's
    own floor for a screen switch on this machine)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from cockpit.plan.load import load_campaign
    from cockpit.record.runlog import RunLog
    from cockpit.tui.app import CockpitApp
    from cockpit.tui.charts import RunDetailScreen
    from cockpit.tui.widgets.chart import Chart
    from textual.screen import Screen
    from textual.widgets import Static

    class Bare(Screen):
        def compose(self):
            yield Static("a bare screen")

    class Source:
        def tick(self):
            return snapshot

    app = CockpitApp(load_campaign(folder), Source(), RunLog(folder), bell=False, refresh_seconds=3600)
    async with app.run_test(size=size) as pilot:
        while app.snapshot is None:
            await pilot.pause(0.01)
        await pilot.pause()
        times = {}
        for name in ("first", "again"):
            started = time.perf_counter()
            await pilot.press("enter")
            while not isinstance(app.screen, RunDetailScreen):
                await asyncio.sleep(0.001)
            screen = app.screen
            await pilot.pause()  # one refresh: the charts laid out and drawn
            for chart in screen.query(Chart):
                chart.render()  # the drawing itself, should the pause have left it for later
            times[name] = time.perf_counter() - started
            assert screen.query_one("#run-charts", Chart).data.lines[0].points, "no curve on the screen"
            await pilot.press("escape")
            await pilot.pause()
        started = time.perf_counter()
        await app.push_screen(Bare())
        await pilot.pause()
        times["bare_screen"] = time.perf_counter() - started
    return times


def draw_only(campaign, snapshot, size: tuple[int, int]) -> float:
    """The cockpit's own part: the charts' data from the series and their text cells, no Textual."""
    from cockpit.live.chart_data import run_chart
    from cockpit.tui.widgets.chart import render_lines

    started = time.perf_counter()
    view = snapshot.series.run("v-r16")
    for metric in ("loss", "eval/macro_f1"):
        render_lines(run_chart(campaign, "v-r16", view, metric), size[0] // 2, size[1] - 9)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="cockpit-charts-open-"))
    try:
        make(folder, args.lines)
        now = datetime.fromtimestamp(ingest.START + args.lines * 0.25 + 60, timezone.utc)
        clock = lambda: now  # noqa: E731
        with_series, without_series = [], []
        snapshot = None
        for _ in range(args.repeat):
            seconds, engine, snapshot = first_tick(folder, clock, series=True)
            with_series.append(seconds)
            seconds, _, _ = first_tick(folder, clock, series=False)
            without_series.append(seconds)
        view = snapshot.series.run("v-r16")
        from cockpit.plan.load import load_campaign

        campaign = load_campaign(folder)
        opened, drawn = {}, {}
        for size in ((80, 24), (120, 40)):
            runs = [asyncio.run(open_detail(folder, snapshot, size)) for _ in range(args.repeat)]
            opened[f"{size[0]}x{size[1]}"] = {key: min(r[key] for r in runs) for key in runs[0]}
            drawn[f"{size[0]}x{size[1]}"] = min(draw_only(campaign, snapshot, size) for _ in range(args.repeat))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result = {
        "lines": args.lines + 1,
        "first_tick_s": round(min(with_series), 3),
        "first_tick_without_series_s": round(min(without_series), 3),
        "series_cost_fraction": round(min(with_series) / min(without_series) - 1, 3),
        "points_kept": {name: len(points) for name, points in view.points.items()},
        "values_read": dict(view.counts),
        "open_ms": {size: {key: round(value * 1000, 1) for key, value in times.items()} for size, times in opened.items()},
        "draw_only_ms": {size: round(seconds * 1000, 2) for size, seconds in drawn.items()},
        "target_ms": TARGET_MS,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['lines']:,} lines: the engine's first tick {result['first_tick_s']} s "
          f"({result['first_tick_without_series_s']} s without the series: +{result['series_cost_fraction'] * 100:.0f} %)")
    print(f"series kept: {result['points_kept']} points of {result['values_read']} values")
    for size, ms in result["open_ms"].items():
        print(f"run detail screen at {size}: Enter to drawn {ms['first']} ms the first time, {ms['again']} ms again "
              f"(target ≤ {TARGET_MS:.0f} ms); a bare Textual screen {ms['bare_screen']} ms; "
              f"the charts' data and cells alone {result['draw_only_ms'][size]} ms")


if __name__ == "__main__":
    main()
