"""How much CPU the cockpit's own UI takes while a person just watches, and how soon it shows.

Runs the app headless against a fake engine with 8 GPUs and 50 runs (ten of them training, so
their steps, losses and ETAs move every tick, and every GPU's sparklines shift) at a 1 s refresh,
for 60 s by default, and prints the process's CPU time over wall time (the whole process: the UI
thread and the polling worker; the fake engine itself costs next to nothing) and the time from
building the app to the first snapshot on screen. Targets: ≤ 1.5 % of one core, first frame ≤ 1 s.

    .venv/bin/python bench/tui_idle.py [--seconds 60] [--size 120x40] [--refresh 1.0]
                                       [--gpus 8] [--runs 50] [--running 10]
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before the imports: the figure a person waits for includes them

import argparse  # noqa: E402
import asyncio  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from datetime import datetime, timedelta, timezone  # noqa: E402
from decimal import Decimal  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cockpit.live.snapshot import (
    AlertView,
    ClockView,
    GpuView,
    HostView,
    LotView,
    NvmlView,
    RunView,
    Snapshot,
)
from cockpit.plan.load import load_campaign  # noqa: E402
from cockpit.record.runlog import RunLog  # noqa: E402
from cockpit.tui.app import CockpitApp  # noqa: E402

IMPORTED = time.perf_counter()
GIB = 2**30
HISTORY = 120  # samples kept per GPU sparkline, as a bounded engine history would


class MovingSource:
    """A fake engine whose numbers move every tick like a busy 8-GPU box."""

    def __init__(self, gpus: int = 8, runs: int = 50, running: int = 10, seed: int = 7):
        self.random = random.Random(seed)
        self.start = datetime.now(timezone.utc) - timedelta(hours=20)
        self.gpus = gpus
        self.utilization = [[90.0] * HISTORY for _ in range(gpus)]
        self.memory = [[70.0] * HISTORY for _ in range(gpus)]
        self.steps = [0] * runs
        self.running = running
        self.ticks = 0

    def tick(self) -> Snapshot:
        self.ticks += 1
        now = datetime.now(timezone.utc)
        rnd = self.random
        gpu_views = []
        for index in range(self.gpus):
            utilization = min(100.0, max(0.0, self.utilization[index][-1] + rnd.uniform(-6, 6)))
            memory = min(100.0, max(0.0, self.memory[index][-1] + rnd.uniform(-1, 1)))
            self.utilization[index] = self.utilization[index][1:] + [utilization]
            self.memory[index] = self.memory[index][1:] + [memory]
            gpu_views.append(GpuView(
                index=index, name="NVIDIA B200", utilization_percent=utilization,
                memory_used_bytes=int(memory / 100 * 180 * GIB), memory_total_bytes=180 * GIB,
                temperature_c=60 + utilization / 5, power_watts=300 + utilization * 6, power_limit_watts=1000,
                utilization_history=tuple(self.utilization[index]), memory_history=tuple(self.memory[index]),
            ))
        run_views = []
        for number in range(len(self.steps)):
            training = number < self.running
            if training:
                self.steps[number] += rnd.randint(3, 9)
            step = self.steps[number] or None
            loss = 2.5 * math.exp(-(step or 0) / 4000) + rnd.uniform(0, 0.02) if training else None
            run_views.append(RunView(
                id=f"run-{number:02d}", role="control" if number == 0 else "variant",
                tier=("indispensable", "useful", "exploratory")[number % 3],
                state="running" if training else "planned", step=step, total_steps=20000, loss=loss,
                quality=0.6 + (step or 0) / 100000 if training else None,
                last={"step": step, "loss": loss} if training else {},
                eta=now + timedelta(hours=3 + number) if training else None,
                last_checkpoint_at=now - timedelta(minutes=number) if training else None,
                resume_verified=number % 2 == 0, resume_verified_at=None, pid=1000 + number if training else None,
                alive=training or None,
            ))
        elapsed = (now - self.start).total_seconds() / 3600
        return Snapshot(
            taken_at=now,
            lot=LotView("bench-8x50", "How light is the cockpit?", "B200", 8, 7, Decimal("900.00"), "BENCH-1",
                        self.start, self.start + timedelta(days=7)),
            clock=ClockView(now=now, started=True, elapsed_hours=elapsed, remaining_hours=168 - elapsed,
                            window_hours=168, committed_hours=120, committed_remaining_hours=100 - elapsed / 2,
                            uncommitted_hours=48, projected_finish=now + timedelta(hours=100 - elapsed / 2),
                            retrieval_hours=2, fits=True),
            nvml=NvmlView(True, None, simulated=True),
            gpus=tuple(gpu_views),
            host=HostView(35.0, 400 * GIB, 2000 * GIB, 1000 * GIB, 8000 * GIB, 7000 * GIB),
            runs=tuple(run_views),
            alerts=(AlertView("stalled", "run-03", "no metric line for 20 min", self.start + timedelta(hours=19), 12),),
        )


async def measure(seconds: float, size: tuple[int, int], refresh: float, gpus: int = 8, runs: int = 50, running: int = 10) -> dict[str, float]:
    campaign = load_campaign(ROOT / "sample_campaigns" / "sentiment-lora")
    source = MovingSource(gpus=gpus, runs=runs, running=min(running, runs))
    with tempfile.TemporaryDirectory() as scratch:
        constructed = time.perf_counter()
        app = CockpitApp(campaign, source, RunLog(scratch), bell=False, refresh_seconds=refresh)
        running = asyncio.create_task(app.run_async(headless=True, size=size))
        while app.first_frame_seconds is None:
            if running.done():
                running.result()
            await asyncio.sleep(0.005)
        first_frame = time.perf_counter()
        await asyncio.sleep(2 * refresh)  # let the first updates settle before measuring
        cpu_before, wall_before, ticks_before = time.process_time(), time.perf_counter(), source.ticks
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu_before, time.perf_counter() - wall_before
        ticks = source.ticks - ticks_before
        app.exit()
        await running
    return {
        "cpu_percent_of_a_core": 100 * cpu / wall,
        "cpu_ms_per_tick": 1000 * cpu / max(1, ticks),
        "ticks": ticks,
        "wall_seconds": wall,
        "first_frame_from_app_seconds": first_frame - constructed,
        "first_frame_from_process_start_seconds": first_frame - STARTED,
        "import_seconds": IMPORTED - STARTED,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--size", default="120x40", help="terminal WIDTHxHEIGHT (default 120x40)")
    parser.add_argument("--refresh", type=float, default=1.0, help="seconds between snapshots (default 1)")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--running", type=int, default=10, help="runs reporting a new step every tick (default 10)")
    args = parser.parse_args()
    width, height = (int(part) for part in args.size.lower().split("x"))
    result = asyncio.run(measure(args.seconds, (width, height), args.refresh, args.gpus, args.runs, args.running))
    print(f"cockpit TUI idle, {args.gpus} GPUs × {args.runs} runs ({min(args.running, args.runs)} moving), "
          f"{width}x{height}, refresh {args.refresh:g} s, {result['wall_seconds']:.0f} s measured")
    print(f"  CPU: {result['cpu_percent_of_a_core']:.2f} % of one core ({result['cpu_ms_per_tick']:.1f} ms per tick, {result['ticks']} ticks)  target ≤ 1.5 %")
    print(f"  first frame: {result['first_frame_from_app_seconds']:.3f} s from building the app "
          f"({result['first_frame_from_process_start_seconds']:.3f} s from process start, imports {result['import_seconds']:.3f} s)  target ≤ 1 s")
    ok = result["cpu_percent_of_a_core"] <= 1.5 and result["first_frame_from_app_seconds"] <= 1.0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
