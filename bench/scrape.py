"""One Prometheus scrape of the cockpit's exporter with 8 GPUs and 50 runs (issue 19: ≤ 2 ms).

    .venv/bin/python bench/scrape.py [--repeat 2000] [--json]

A scrape reads the latest snapshot and never runs a tick. The whole `GET /metrics` is timed from a
SEPARATE client process (http.client, driven over a pipe: the client's Python does not share the
server's GIL, as Prometheus does not). Figures, each the median of their runs (95th percentile
beside it):

- render: the metric families of a NEW snapshot turned into the text format, in process;
- publish on the tick: what publishing a snapshot costs the tick once something scrapes (the
  render is made there, so that a scrape is a lookup);
- scrape, new snapshot: a whole GET right after a new snapshot was published, on a kept
  (keep-alive) connection, as Prometheus scrapes;
- scrape, same snapshot, keep-alive: a whole GET between two ticks (the kept rendering);
- scrape, same snapshot, new connection: the same with a fresh TCP connection each time.

The target is on "scrape, new snapshot" (the whole GET, the worst case). The snapshot holds
8 GPUs with their health counters, 50 running runs with 6 metrics each (4 of them read by the
rules and the closing) and 12 active alerts.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cockpit.export.metrics import BUILT_IN_RULES, LabelSets, exposition  # noqa: E402
from cockpit.export.server import Address, LatestSnapshot, MetricsServer  # noqa: E402
from cockpit.live.snapshot import AlertView, ClockView, GpuView, LotView, NvmlView, RunView, Snapshot  # noqa: E402

TARGET_MS = 2.0
GPUS, RUNS = 8, 50
METRICS = ("loss", "eval/macro_f1", "eval/loss", "grad_norm")  # read by the rules and the closing
EXTRA = ("lr", "tokens_per_second")  # reported, not read by any rule: not exported


def make_snapshot(now: datetime) -> Snapshot:
    start = now - timedelta(hours=30)
    runs = tuple(
        RunView(
            id=f"run-{i:02d}", role="variant", tier="useful", state="running", step=1000 + i, total_steps=5000,
            loss=0.5, quality=0.7, last={name: 0.1 * (i + 1) for name in METRICS + EXTRA}, eta=None,
            last_checkpoint_at=None, resume_verified=True, resume_verified_at=None, pid=10_000 + i, alive=True,
        )
        for i in range(RUNS)
    )
    gpus = tuple(
        GpuView(i, "NVIDIA H100 80GB HBM3", uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000", utilization_percent=90.0 + i,
                memory_used_bytes=60 * 2**30, memory_total_bytes=80 * 2**30, temperature_c=65.0, power_watts=600.0,
                power_limit_watts=700.0, health={"counters": {
                    "ecc_corrected": i, "ecc_uncorrected": 0, "remapped_correctable": 0, "remapped_uncorrectable": 0,
                    "remap_pending": False, "remap_failed": False, "pcie_replays": 3, "power_slowdown_s": 12.5,
                    "thermal_slowdown_s": 0.0, "energy_j": 1.5e8}})
        for i in range(GPUS)
    )
    alerts = tuple(AlertView("f1-floor", f"run-{i:02d}", "eval/macro_f1 below the floor", now, i) for i in range(10)) + (
        AlertView("gpu-throttled", None, "GPU 3 slowed by power cap", now, 11), AlertView("lot-window", None, "6 h left", now, 12),
    )
    return Snapshot(
        taken_at=now,
        lot=LotView("bench", None, "H100", GPUS, 7, Decimal("1450.00"), None, start, start + timedelta(days=7)),
        clock=ClockView(now=now, started=True, elapsed_hours=30.0, remaining_hours=138.0, window_hours=168.0, committed_hours=120.0,
                        committed_remaining_hours=90.0, uncommitted_hours=48.0, projected_finish=now + timedelta(hours=91),
                        retrieval_hours=1.0, fits=True),
        nvml=NvmlView(available=True, reason=None),
        gpus=gpus, host=None, runs=runs, alerts=alerts,
    )


def labels() -> LabelSets:
    return LabelSets(
        runs=frozenset(f"run-{i:02d}" for i in range(RUNS)),
        rules=frozenset({"f1-floor", "nan-loss", "grad-blowup", *BUILT_IN_RULES}),
        metrics=METRICS,
    )


def figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": statistics.median(ordered) * 1000, "p95_ms": ordered[int(len(ordered) * 0.95)] * 1000}


def client(port: int) -> int:
    """The client process: one GET per line on stdin ("keep" reuses the connection, "fresh" opens
    a new one), answering each with its elapsed seconds on stdout."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    for line in sys.stdin:
        if line.strip() == "fresh":
            connection.close()
        started = time.perf_counter()
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        response.read()
        elapsed = time.perf_counter() - started
        if response.status != 200:
            print(f"status {response.status}", flush=True)
            return 1
        print(repr(elapsed), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--client", type=int, metavar="PORT", help=argparse.SUPPRESS)  # the client process
    args = parser.parse_args()
    if args.client:
        return client(args.client)
    now = datetime.now(timezone.utc)
    base, sets = make_snapshot(now), labels()
    body = exposition(base, sets)

    render = []
    for i in range(args.repeat):
        snapshot = replace(base, taken_at=now + timedelta(seconds=i))  # a new snapshot each time
        started = time.perf_counter()
        exposition(snapshot, sets)
        render.append(time.perf_counter() - started)

    latest = LatestSnapshot(sets)
    server = MetricsServer(Address("127.0.0.1", 0), latest)
    process = subprocess.Popen([sys.executable, __file__, "--client", str(server.address.port)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert process.stdin is not None and process.stdout is not None

    def scrape(how: str) -> float:
        process.stdin.write(how + "\n")
        answer = process.stdout.readline()
        try:
            return float(answer)
        except ValueError:
            raise SystemExit(f"the client process failed: {answer.strip() or 'no answer'}") from None

    publish, new, same, fresh = [], [], [], []
    try:
        latest.publish(base)
        scrape("fresh")  # open the kept connection (and ask for the text: from now on it is made at publish)
        for i in range(args.repeat // 4):
            started = time.perf_counter()
            latest.publish(replace(base, taken_at=now + timedelta(seconds=i)))
            publish.append(time.perf_counter() - started)
            new.append(scrape("keep"))
            same.append(scrape("keep"))
            fresh.append(scrape("fresh"))
    finally:
        process.stdin.close()
        process.wait(timeout=10)
        server.close()

    result = {
        "gpus": GPUS, "runs": RUNS, "series_bytes": len(body), "series": body.count(b"\n") - body.count(b"\n#"),
        "render_new_snapshot": figures(render),
        "publish_on_the_tick": figures(publish),
        "scrape_new_snapshot": figures(new),
        "scrape_same_snapshot": figures(same),
        "scrape_same_snapshot_new_connection": figures(fresh),
        "target_ms": TARGET_MS,
    }
    result["pass"] = result["scrape_new_snapshot"]["median_ms"] <= TARGET_MS
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{GPUS} GPUs, {RUNS} runs: {result['series']} series, {len(body)} bytes")
        for key in ("render_new_snapshot", "publish_on_the_tick", "scrape_new_snapshot", "scrape_same_snapshot", "scrape_same_snapshot_new_connection"):
            print(f"  {key.replace('_', ' '):<38} median {result[key]['median_ms']:.3f} ms, p95 {result[key]['p95_ms']:.3f} ms")
        print(f"  target: a whole scrape of a new snapshot ≤ {TARGET_MS} ms (median): {'met' if result['pass'] else 'NOT met'}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
