"""Engine tick benchmark: CPU of one `Engine.tick()` with 8 simulated GPUs and 50 live runs
(issue #4 item 7, issue #9 item 1b; target ≤ 10 ms of CPU a tick).

    .venv/bin/python bench/engine_tick.py [--ticks 300] [--runs 50] [--gpus 8]

Each run appends 5 metric lines between ticks (a busy campaign at 1 Hz) and has a live process of
its own (a `sleep` started by the benchmark, whose pid its `started` event reports), so the tick
checks 50 running processes as it would on a real box. The process starts as the cockpit's does
(the garbage collector paused for the imports, what they made frozen once the campaign is loaded). The GPUs are sampled between ticks, as the
cockpit's sampler thread does (`GpuSampler`: the tick takes the newest sample, it never samples), so
each tick gets a fresh simulated sample and the simulation's own cost is not the tick's. The figure
is the process CPU time (user + system) of the ticks alone, median and 95th percentile.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cockpit.common import startup  # noqa: E402

# As the cockpit's entry point does (cockpit.cli.entry): the collector paused while the modules
# load, the start's objects frozen once the campaign is loaded, collection on for the ticks.
startup.pause_collection()

from cockpit.live.engine import Engine  # noqa: E402
from cockpit.live.fake_gpus import FakeGpus  # noqa: E402
from cockpit.plan.load import load_campaign  # noqa: E402


def campaign_text(runs: int, gpus: int, start: datetime, *, days: int = 30, total_steps: int = 1_000_000,
                  campaign_id: str = "bench") -> str:
    """A campaign of `runs` runs spread over `gpus` GPUs with one stop rule of each kind."""
    head = f"""schema = 1
id = "{campaign_id}"
[closing]
metric = "eval/acc"
direction = "max"
threshold = 0.8
[lot]
gpu_model = "bench GPU"
gpus = {gpus}
days = {days}
price_usd = "999.00"
start = {start.strftime('%Y-%m-%dT%H:%M:%SZ')}
[calendar]
retrieval_hours = 2
[[stop_rule]]
id = "nan"
kind = "non_finite"
metric = "loss"
[[stop_rule]]
id = "floor"
kind = "below"
metric = "eval/acc"
threshold = 0.01
after_step = 10
[[stop_rule]]
id = "blowup"
kind = "above"
metric = "loss"
threshold = 1000
[[stop_rule]]
id = "trunc"
kind = "truncated"
[[stop_rule]]
id = "resume"
kind = "no_resume"
within_hours = 200
[[stop_rule]]
id = "stalled"
kind = "stalled"
minutes = 30
"""
    body = "".join(
        f'\n[[run]]\nid = "r{i}"\nrole = "{"control" if i == 0 else "variant"}"\nhours = 10\ngpus = [{i % gpus}]\ntotal_steps = {total_steps}\n'
        for i in range(runs)
    )
    return head + body


class SampledBetweenTicks:
    """The sampler's side of the engine (`latest()`), fed a new simulated sample before each tick."""

    def __init__(self, gpus: FakeGpus):
        self.gpus = gpus
        self.snapshot = gpus.sample()

    def resample(self) -> None:
        self.snapshot = self.gpus.sample()

    def latest(self):
        return self.snapshot

    def sample(self):
        return self.snapshot

    def close(self) -> None:
        self.gpus.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="cockpit-bench-"))
    sleepers: list[subprocess.Popen] = []
    try:
        now = datetime.now(timezone.utc)
        (folder / "campaign.toml").write_text(campaign_text(args.runs, args.gpus, now - timedelta(hours=1)))
        streams = []
        for i in range(args.runs):
            path = folder / "runs" / f"r{i}" / "metrics.jsonl"
            path.parent.mkdir(parents=True)
            handle = open(path, "a")
            process = subprocess.Popen(["sleep", "3600"])  # the run's own process
            sleepers.append(process)
            started = {"ts": time.time(), "event": "started", "pid": process.pid, "config_sha256": "ab" * 32}
            handle.write(json.dumps(started) + "\n")
            streams.append(handle)
        gpus = SampledBetweenTicks(FakeGpus(args.gpus))
        engine = Engine(load_campaign(folder), gpus=gpus)
        step = 0
        costs = []
        for tick in range(args.ticks):
            for handle in streams:
                for _ in range(5):
                    step += 1
                    handle.write(json.dumps({"ts": time.time(), "step": step, "loss": 1.0 / (1 + step), "eval/acc": 0.5}) + "\n")
                handle.flush()
            gpus.resample()  # the sampler thread's work, between ticks
            before = time.process_time()
            last = engine.tick()
            costs.append((time.process_time() - before) * 1000)
        engine.close()
        not_running = [r.id for r in last.runs if r.state != "running"]
        if not_running:  # the figure would not be the one this benchmark names
            raise SystemExit(f"runs not seen running by the last tick: {', '.join(not_running)}")
        for handle in streams:
            handle.close()
        costs = costs[5:]  # the first ticks load the state and compile rules
        result = {
            "ticks": len(costs),
            "median_ms": round(statistics.median(costs), 2),
            "p95_ms": round(sorted(costs)[int(len(costs) * 0.95) - 1], 2),
            "target_ms": 10.0,
        }
        if args.json:
            print(json.dumps(result))
        else:
            print(f"engine tick, {args.gpus} simulated GPUs, {args.runs} runs, 5 new lines a run a tick: "
                  f"median {result['median_ms']} ms CPU, p95 {result['p95_ms']} ms (target ≤ 10 ms)")
    finally:
        for process in sleepers:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
