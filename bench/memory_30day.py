"""Memory over a simulated 30-day lot at one sample a second (issue #9 item 1d; target ≤ 150 MB).

    .venv/bin/python bench/memory_30day.py [--ticks 30000] [--runs 50] [--gpus 8] [--json]

30 days at 1 Hz is 2,592,000 ticks; at a few milliseconds a tick that is hours of real time, so
the lot is simulated in two parts, each driving the real `Engine` with an injected clock:

1. **Per-second state** — 8 simulated GPUs, 50 runs, the clock advancing 1 s a tick and every run
   appending one metric line a tick (an eval line every 10), for `--ticks` ticks. RSS is read
   every 1,000 ticks (after a garbage collection). What the cockpit keeps grows only if its heap
   grows, so the growth a tick is measured on the heap, not on RSS: the bytes the interpreter
   holds in objects (pymalloc's allocated blocks, from `sys._debugmallocstats`) plus what glibc's
   malloc has handed out (`mallinfo2`), at ticks T and 2T (T = half the run). Those two moments
   are the same phase of every bounded history: a downsampled series of N points and of 2N
   points keeps the same number of buckets (its bucket width doubles), so the difference is what
   grows with time. The same difference over the pairs (t, 2t) with T/2 ≤ t ≤ T is printed
   beside it, from the first pair to the last: an event that happened once at tick s (an
   interpreter table that doubled) is inside every pair with t < s ≤ 2t and outside the others,
   so it shows as a step in the pairs' growth between t just under s and t = s. A series' merge
   does the same: the doubling keeps a series' bucket count, not exactly what its buckets hold, so
   pairs either side of a merge can disagree (measured: 33 against 8 bytes a tick, bench/README.md). RSS cannot be fitted instead: glibc keeps freed chunks
   and trims them now and then, so RSS moves by ±4 MB with no growth behind it (measured: 58.7–64.0 MB over ticks
   13,000–30,000 while RSS less malloc's free chunks stayed 57.2–58.2 MB), and a line through
   that, extended 86 times its length, says 200–400 MB. The figure is the largest RSS seen plus
   that growth extended to 2,592,000 ticks; RSS's own straight-line slope is printed beside it.
   Part of the measured growth is still bounded (the clock history fills to 1,000 samples at one
   a minute, i.e. by tick 60,000; a series' buckets hold more distinct step numbers as they
   widen), so the projection errs high.
2. **A whole 30-day stream** — one run whose stream grows by 3,600 lines (one hour at 1 Hz)
   between ticks, the clock advancing an hour a tick, for 720 ticks: 2,592,000 lines, the full
   lot, read incrementally by the same engine. RSS is read after every simulated day.

Both parts include the charts' series (issue 20): each run's loss and closing metric downsampled
to at most 1,000 points, and the clock history; the points kept, the clock samples and the size of
the saved state (`.cockpit/metrics-state.json`, which holds them) are printed beside the RSS.

The figure is the larger of part 1's projection to 30 days and part 2's peak RSS: the cockpit
holds both kinds of state at once, and neither depends on the other.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import os
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cockpit.live.engine import Engine  # noqa: E402
from cockpit.live.fake_gpus import FakeGpus  # noqa: E402
from cockpit.plan.load import load_campaign  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_tick  # noqa: E402  (its campaign; importing it pauses the collector until the campaign is loaded, as the cockpit starts)

THIRTY_DAYS_S = 30 * 24 * 3600
TARGET_MB = 150.0
LOT_START = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)


class SimulatedTime:
    """The lot's clock, moved by hand: wall time for the engine, monotonic seconds for its saves."""

    def __init__(self, start: datetime):
        self.now = start
        self.seconds = 0.0

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        self.seconds += seconds

    def __call__(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        return self.seconds


def campaign_text(runs: int, gpus: int) -> str:
    """The engine benchmark's campaign, over a 31-day lot so 30 days of ticks stay inside it."""
    return engine_tick.campaign_text(runs, gpus, LOT_START, days=31, total_steps=100_000_000, campaign_id="memory-30-days")


def heap_parts() -> dict[str, int]:
    """What this process's heap holds, by who hands it out: pymalloc's allocated blocks (Python's
    objects of up to 512 bytes) and, where glibc is there, malloc's bytes in use in its heap
    (`uordblks`: larger objects, C buffers) and in its mmapped chunks (`hblkhd`)."""
    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(capture.fileno(), 2)
        try:
            sys._debugmallocstats()  # written by C to file descriptor 2
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read().decode("ascii", "replace")
    found = re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", text)
    parts = {"pymalloc": int(found.group(1).replace(",", "")) if found else 0}
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        info = libc.mallinfo2
    except (OSError, AttributeError):
        return parts
    fields = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    info.restype = type("MallInfo2", (ctypes.Structure,), {"_fields_": [(name, ctypes.c_size_t) for name in fields]})
    figures = info()
    parts.update(malloc_heap=figures.uordblks, malloc_mmapped=figures.hblkhd)
    return parts


def heap_bytes() -> tuple[int, str]:
    """The bytes this process's heap holds in objects (`heap_parts`, summed), and what was counted."""
    parts = heap_parts()
    return sum(parts.values()), "pymalloc" + (" + malloc in use" if len(parts) > 1 else "")


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def line(ts: float, step: int) -> str:
    if step % 10 == 9:
        return json.dumps({"ts": ts, "step": step, "eval/acc": 0.5 + (step % 7) / 100, "eval/loss": 1.2}) + "\n"
    return json.dumps({"ts": ts, "step": step, "loss": 2.0 / (1 + step % 1000), "lr": 1e-4, "grad_norm": 0.7}) + "\n"


def make_campaign(folder: Path, runs: int, gpus: int, clock: SimulatedTime) -> list:
    (folder / "campaign.toml").write_text(campaign_text(runs, gpus))
    handles = []
    for index in range(runs):
        path = folder / "runs" / f"r{index}" / "metrics.jsonl"
        path.parent.mkdir(parents=True)
        handle = open(path, "a")
        # pids far beyond pid_max: the runs are "not alive", so nothing is ever signalled
        handle.write(json.dumps({"ts": clock.now.timestamp(), "event": "started", "pid": 2_000_000_000 + index,
                                 "config_sha256": "ab" * 32}) + "\n")
        handle.flush()
        handles.append(handle)
    return handles


def slope_per_tick(points: list[tuple[int, float]]) -> float:
    n = len(points)
    if n < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0


def per_second(ticks: int, runs: int, gpus: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="cockpit-memory-"))
    try:
        clock = SimulatedTime(LOT_START + timedelta(minutes=5))
        handles = make_campaign(folder, runs, gpus, clock)
        engine = Engine(load_campaign(folder), clock=clock, gpus=FakeGpus(gpus, clock=clock), monotonic=clock.monotonic)
        samples: list[tuple[int, float]] = []
        blocks: list[tuple[int, float]] = []
        full_at_fit: dict | None = None
        half = ticks // 2
        heap: dict[int, tuple[int, str]] = {}
        started = time.perf_counter()
        for tick in range(1, ticks + 1):
            clock.advance(1.0)
            ts = clock.now.timestamp()
            for handle in handles:
                handle.write(line(ts, tick))
                handle.flush()
            engine.tick()
            if tick in (half, ticks) or tick % 1000 == 0 and tick >= half / 2:
                gc.collect()
                heap[tick] = heap_bytes()  # every doubling pair (t, 2t) with T/2 ≤ t ≤ T: printed below
            if tick % 1000 == 0:
                if full_at_fit is None and tick > ticks / 3:
                    full_at_fit = _bounded_full(engine)
                gc.collect()
                samples.append((tick, rss_mb()))
                blocks.append((tick, float(sys.getallocatedblocks())))
        seconds = time.perf_counter() - started
        kept = _series_figures(engine)
        engine.close()
        kept["state_kb"] = round((folder / ".cockpit" / "metrics-state.json").stat().st_size / 1024, 1)
        for handle in handles:
            handle.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    warm = [p for p in samples if p[0] > ticks / 3] or samples
    slope = slope_per_tick(warm)
    warm_blocks = [p for p in blocks if p[0] > ticks / 3] or blocks
    end = samples[-1][1] if samples else rss_mb()
    peak = max((y for _, y in samples), default=end)
    growth = (heap[ticks][0] - heap[half][0]) / (ticks - half)  # bytes a tick, T to 2T
    # The same measure over each doubling pair (t, 2t), T/2 ≤ t ≤ T, in the order of t: a step is
    # something that happened once (inside the pairs with t < s ≤ 2t); a steady fall, history filling.
    pairs = [(t, round((heap[2 * t][0] - heap[t][0]) / t, 1)) for t in range(1000 * -(-half // 2000), half + 1, 1000)
             if t in heap and 2 * t in heap]
    projected = peak + max(0.0, growth) * (THIRTY_DAYS_S - ticks) / 2**20
    line_projection = end + max(0.0, slope) * (THIRTY_DAYS_S - ticks)
    return {
        "ticks": ticks,
        "simulated_hours": round(ticks / 3600, 2),
        "runs": runs,
        "gpus": gpus,
        "seconds": round(seconds, 1),
        "ms_per_tick": round(seconds * 1000 / ticks, 2),
        "rss_after_warmup_mb": round(warm[0][1], 1) if warm else None,
        "rss_end_mb": round(end, 1),
        "rss_max_mb": round(max(y for _, y in samples), 1) if samples else None,
        "slope_mb_per_day": round(slope * 86400, 3),
        "rss_line_projection_mb": round(line_projection, 1),
        "heap_mb_at": {str(half): round(heap[half][0] / 2**20, 2), str(ticks): round(heap[ticks][0] / 2**20, 2)},
        "heap_counted": heap[ticks][1],
        "heap_growth_bytes_per_tick": round(growth, 2),
        "doubling_pairs_growth_bytes_per_tick": {str(t): growth for t, growth in pairs},
        "projected_30_days_mb": round(projected, 1),
        "blocks_after_warmup": int(warm_blocks[0][1]) if warm_blocks else None,
        "blocks_end": int(blocks[-1][1]) if blocks else None,
        "blocks_slope_per_day": round(slope_per_tick(warm_blocks) * 86400, 1),
        "rss_every_1000_ticks_mb": [round(y, 1) for _, y in samples],
        "full_when_fit_began": full_at_fit,
        "series": kept,
    }


def whole_stream(days: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="cockpit-memory-stream-"))
    try:
        clock = SimulatedTime(LOT_START + timedelta(minutes=5))
        handle = make_campaign(folder, 1, 1, clock)[0]
        engine = Engine(load_campaign(folder), clock=clock, gpus=FakeGpus(1, clock=clock), monotonic=clock.monotonic)
        engine.tick()
        per_day: list[float] = []
        step = 0
        started = time.perf_counter()
        for hour in range(days * 24):
            base = clock.now.timestamp()
            handle.write("".join(line(base + second + 1, step + second) for second in range(3600)))
            handle.flush()
            step += 3600
            clock.advance(3600.0)
            snapshot = engine.tick()
            if (hour + 1) % 24 == 0:
                gc.collect()
                per_day.append(rss_mb())
        seconds = time.perf_counter() - started
        run = snapshot.run("r0")
        stream_bytes = (folder / "runs" / "r0" / "metrics.jsonl").stat().st_size
        kept = _series_figures(engine)
        engine.close()
        kept["state_kb"] = round((folder / ".cockpit" / "metrics-state.json").stat().st_size / 1024, 1)
        handle.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if run.step != step - 1:
        raise SystemExit(f"the engine read to step {run.step}, the stream ends at {step - 1}")
    return {
        "days": days,
        "lines": step,
        "stream_mb": round(stream_bytes / 1e6, 1),
        "seconds": round(seconds, 1),
        "rss_day_1_mb": round(per_day[0], 1),
        "rss_end_mb": round(per_day[-1], 1),
        "rss_max_mb": round(max(per_day), 1),
        "rss_each_day_mb": [round(v, 1) for v in per_day],
        "series": kept,
    }


def _bounded_full(engine: Engine) -> dict:
    """Which bounded histories had reached their bound: a series once its buckets first merged,
    the clock history once it holds its most samples."""
    series = [ds for run in engine.series.runs.values() for ds in run.series.values()]
    clock = engine.series.clock
    return {"series_full": sum(1 for ds in series if ds.width > 1), "series": len(series),
            "clock_samples": len(clock.samples), "clock_max": clock.max_samples}


def _series_figures(engine: Engine) -> dict:
    """How much the charts keep: the most points of any series, values read, clock samples."""
    view = engine.series.view()
    points = [len(p) for run in view.runs.values() for p in run.points.values()]
    values = [n for run in view.runs.values() for n in run.counts.values()]
    if max(points, default=0) > 1000 or len(view.clock) > 1000:
        raise SystemExit(f"the series are not bounded: {max(points, default=0)} points, {len(view.clock)} clock samples")
    return {"series": len(points), "points_max": max(points, default=0), "values_read_max": max(values, default=0),
            "clock_samples": len(view.clock)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=30_000, help="1 Hz ticks of part 1 (default 30,000: 8.3 simulated hours)")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--days", type=int, default=30, help="simulated days of part 2's stream")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.ticks < 2000 or args.ticks % 1000 or args.days < 1:
        # T and 2T are the same phase of every history only at whole multiples of the cadences
        parser.error("--ticks must be a multiple of 1,000 of at least 2,000, and --days at least 1")
    first = per_second(args.ticks, args.runs, args.gpus)
    second = whole_stream(args.days)
    figure = max(first["projected_30_days_mb"], second["rss_max_mb"], first["rss_max_mb"] or 0)
    result = {"per_second": first, "whole_stream": second, "figure_mb": round(figure, 1), "target_mb": TARGET_MB}
    if args.json:
        print(json.dumps(result))
        return
    print(f"part 1: {first['ticks']:,} ticks at 1 s ({first['simulated_hours']} h), {first['runs']} runs, {first['gpus']} simulated GPUs, "
          f"{first['ms_per_tick']} ms a tick")
    heap_at = list(first["heap_mb_at"].items())
    print(f"        RSS {first['rss_after_warmup_mb']} MB after warm-up → {first['rss_end_mb']} MB at the end, at most {first['rss_max_mb']} MB")
    print(f"        heap ({first['heap_counted']}) {heap_at[0][1]} MB at tick {int(heap_at[0][0]):,} → {heap_at[1][1]} MB at tick "
          f"{int(heap_at[1][0]):,}: {first['heap_growth_bytes_per_tick']} bytes a tick → {first['projected_30_days_mb']} MB at 30 days")
    pairs = first["doubling_pairs_growth_bytes_per_tick"]
    if pairs:
        print(f"        the same over (t, 2t) for t = {', '.join(f'{int(t):,}' for t in pairs)}: "
              f"{', '.join(str(g) for g in pairs.values())} bytes a tick")
    print(f"        (a straight line through RSS: {first['slope_mb_per_day']} MB/day → {first['rss_line_projection_mb']} MB; not the figure)")
    print(f"        allocated blocks {first['blocks_after_warmup']:,} after warm-up → {first['blocks_end']:,} at the end "
          f"({first['blocks_slope_per_day']:+,.0f} a day)")
    full = first["full_when_fit_began"]
    if full:
        print(f"        when the fit began: {full['series_full']} of {full['series']} series at their bound; "
              f"clock history {full['clock_samples']} of {full['clock_max']} samples")
    print(f"part 2: {second['lines']:,} lines ({second['stream_mb']} MB) over {second['days']} simulated days, one run")
    print(f"        RSS {second['rss_day_1_mb']} MB after day 1 → {second['rss_end_mb']} MB after day {second['days']} "
          f"(max {second['rss_max_mb']} MB)")
    for name, part in (("part 1", first), ("part 2", second)):
        kept = part["series"]
        print(f"{name} series: {kept['series']} series, at most {kept['points_max']} points each "
              f"({kept['values_read_max']:,} values read), {kept['clock_samples']} clock samples, saved state {kept['state_kb']} KB")
    print(f"memory after a 30-day lot: {result['figure_mb']} MB (target ≤ {TARGET_MB:.0f} MB)")


if __name__ == "__main__":
    main()
