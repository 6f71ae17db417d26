"""Notification benchmark (issue 17): how long a NaN line takes to reach a channel, and what the
notifier costs the tick, healthy and against a server that hangs.

    .venv/bin/python bench/notify_latency.py [--rounds 10] [--interval 1.0]

A local HTTP server on 127.0.0.1 takes apprise's `json://` posts. Each round writes a NaN loss
line to a run of the seed campaign, lets a watcher's loop (the engine with the notifier beside
it, one tick every --interval seconds) find it, and times line → post; then the alert is
acknowledged so the next round's line alerts again. The tick figures are the engine's `tick()`, what the
notifier adds to it (handing over the snapshot, reading its notices), and the whole tick with a server that answers after 5 s (the tick must not wait on it).
Targets: latency p95 ≤ 5 s at a 1 s interval; slowest tick with a hanging server ≤ 0.25 s.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cockpit.live.engine import Engine  # noqa: E402
from cockpit.live.gpu import FakeGpus  # noqa: E402
from cockpit.notify.config import load_config  # noqa: E402
from cockpit.notify.sender import Notifier, NotifyingSource  # noqa: E402
from cockpit.plan.load import load_campaign  # noqa: E402
from cockpit.record import decisions  # noqa: E402
from cockpit.record.runlog import RunLog  # noqa: E402

POSTS: list[float] = []
DELAY = [0.0]
STATUS = [200]


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        POSTS.append(time.time())
        time.sleep(DELAY[0])
        self.send_response(STATUS[0])
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def campaign_dir(base: Path) -> Path:
    target = base / "seed"
    shutil.copytree(ROOT / "sample_campaigns" / "sentiment-lora", target,
                    ignore=shutil.ignore_patterns("runlog.jsonl", ".cockpit", "runs", "closing"))
    start = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    path = target / "campaign.toml"
    path.write_text(re.sub(r"(?m)^start = .*$", f"start = {start}", path.read_text(), count=1))
    return target


def write(directory: Path, text: str) -> None:
    path = directory / "runs" / "v-r64" / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(text + "\n")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"json://127.0.0.1:{server.server_address[1]}/"
    with tempfile.TemporaryDirectory() as temporary:
        directory = campaign_dir(Path(temporary))
        campaign = load_campaign(directory)
        config = load_config(campaign, environ={"COCKPIT_NOTIFY": url})
        engine = NotifyingSource(Engine(campaign, gpus=FakeGpus(1)), Notifier(campaign, config).start())
        write(directory, json.dumps({"ts": time.time(), "event": "started", "pid": 4_000_000, "config_sha256": "c" * 64}))
        latencies, with_notifier, without = [], [], []
        for round_number in range(args.rounds):
            posted = len(POSTS)
            written = time.time()
            write(directory, '{"ts": %f, "step": %d, "loss": NaN}' % (written, round_number + 1))
            deadline = written + 30
            while len(POSTS) == posted and time.time() < deadline:
                began = time.perf_counter()
                snapshot = engine.engine.tick()
                middle = time.perf_counter()
                engine.notifier.after_tick(snapshot)  # what NotifyingSource.tick adds to the engine's tick
                engine.notifier.notices()
                with_notifier.append(time.perf_counter() - middle)
                without.append(middle - began)
                pause = written + args.interval * (1 + len(with_notifier)) - time.time()
                end = time.time() + max(0.0, min(args.interval, pause))
                while len(POSTS) == posted and time.time() < end:
                    time.sleep(0.005)
            if len(POSTS) == posted:
                print(f"round {round_number}: no post within 30 s", file=sys.stderr)
                return 1
            latencies.append(POSTS[-1] - written)
            decisions.acknowledge(campaign, RunLog(directory), "nan-loss", "v-r64", source="cli")
            engine.tick()
        # a server that hangs 5 s and then refuses: the tick must not notice
        DELAY[0], STATUS[0] = 5.0, 500
        write(directory, '{"ts": %f, "step": %d, "loss": NaN}' % (time.time(), args.rounds + 10))
        hanging = []
        until = time.time() + 8
        while time.time() < until:
            began = time.perf_counter()
            engine.tick()
            hanging.append(time.perf_counter() - began)
            time.sleep(0.1)
        DELAY[0] = 0.0
        engine.close()
    server.shutdown()
    print(f"line → post, {args.rounds} rounds at a {args.interval:g} s tick: median {statistics.median(latencies):.2f} s, "
          f"p95 {percentile(latencies, 0.95):.2f} s, max {max(latencies):.2f} s (target p95 ≤ 5 s)")
    print(f"the engine's tick: median {statistics.median(without) * 1000:.2f} ms; what the notifier adds to it: "
          f"median {statistics.median(with_notifier) * 1e6:.0f} µs, max {max(with_notifier) * 1e6:.0f} µs")
    print(f"tick while the server hangs 5 s: slowest {max(hanging) * 1000:.1f} ms over {len(hanging)} ticks (target ≤ 250 ms)")
    ok = percentile(latencies, 0.95) <= 5.0 and max(hanging) <= 0.25
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
