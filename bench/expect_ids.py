"""The expected-ids check of `cockpit close` on 10,000,000 ids (issue #13 item 14): seconds and
peak RSS of the process that runs it.

    .venv/bin/python bench/expect_ids.py [--ids 10000000] [--missing 3] [--format jsonl|txt|csv] [--repeat 3] [--one-process] [--json]

A temporary campaign gets `data/test_ids.txt` (one id a line) and a deliverable
`out/predictions.jsonl` (one `{"id": …, "label": …}` object a line, in a shuffled block order,
`--missing` ids left out); a fresh process loads the campaign and runs the check of that one
deliverable (`closing._check_ids`, what `close` runs for `expect_ids`), timed from inside
around the check (imports not timed; CPU of the process and of the helper processes the check
starts) and measured from outside for its peak RSS: the largest single process (wait4(2): the
interpreter, imports and the check), and the process tree's summed RSS sampled every 50 ms (the
check's helpers run at once). Targets: ≤ 10 s and ≤ 300 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS, TARGET_RSS_MB = 10.0, 300.0

CAMPAIGN = """schema = 1
id = "bench-expect-ids"
question = "Does the expected-ids check stream?"
corpus = "corpus-v3"

[lot]
gpu_model = "RTX 4090"
gpus = 1
days = 3
price_usd = "47.14"
start = 2026-11-30T08:00:00Z

[[run]]
id = "ctrl-r1"
role = "control"
hours = 10

[[deliverable]]
id = "preds"
run = "ctrl-r1"
kind = "predictions"
path = "out/predictions.{suffix}"
expect_ids = "data/test_ids.txt"
"""

CHILD = """
import json, resource, sys, time
from cockpit.close.closing import DeliverableVerdict, _check_ids
from cockpit.close import ids
from cockpit.plan.load import load_campaign
if sys.argv[2] == "one-process":
    ids.PARALLEL_MIN_BYTES = 1 << 62
campaign = load_campaign(sys.argv[1])
deliverable = campaign.deliverable("preds")
verdict = DeliverableVerdict(deliverable)
def cpu():  # this process's and its helper processes' (waited for when the check returns)
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
started, cpu_started = time.perf_counter(), cpu()
_check_ids(verdict, campaign, campaign.directory / deliverable.path)
seconds, cpu_seconds = time.perf_counter() - started, cpu() - cpu_started
check = verdict.check("expected_ids")
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "ok": check.ok, "detail": check.detail}))
"""


def generate(folder: Path, count: int, missing: int, fmt: str) -> None:
    (folder / "data").mkdir(parents=True)
    (folder / "out").mkdir()
    (folder / "campaign.toml").write_text(CAMPAIGN.format(suffix=fmt))
    block = 100_000
    with open(folder / "data" / "test_ids.txt", "w") as handle:
        for start in range(0, count, block):
            handle.write("".join(f"doc-{n:09d}\n" for n in range(start, min(count, start + block))))
    left_out = {count * (k + 1) // (missing + 1) for k in range(missing)}
    starts = list(range(0, count, block))
    starts = starts[1::2] + starts[0::2]  # not in the expected file's order
    with open(folder / "out" / f"predictions.{fmt}", "w") as handle:
        if fmt == "csv":
            handle.write("id,label\n")
        for start in starts:
            numbers = [n for n in range(start, min(count, start + block)) if n not in left_out]
            if fmt == "jsonl":
                handle.write("".join(f'{{"id": "doc-{n:09d}", "label": "pos"}}\n' for n in numbers))
            elif fmt == "csv":
                handle.write("".join(f"doc-{n:09d},pos\n" for n in numbers))
            else:
                handle.write("".join(f"doc-{n:09d}\n" for n in numbers))


def tree_rss_kb(root: int) -> int:
    """The summed VmRSS of `root` and its descendants, found through /proc/PID/task/*/children (a
    process gone meanwhile counts nothing)."""
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    stack.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return total


def measure_with_rss(folder: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, "-c", CHILD, str(folder), mode], stdout=out, stderr=err, env=env)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.05):
                peak[0] = max(peak[0], tree_rss_kb(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        done.set()
        sampler.join()
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode:
            raise SystemExit(f"the check failed: {err.read().decode()[-2000:]}")
        result = json.loads(out.read())
    result["max_rss_mb"] = usage.ru_maxrss / 1024
    result["tree_rss_mb"] = peak[0] / 1024
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=10_000_000)
    parser.add_argument("--missing", type=int, default=3)
    parser.add_argument("--format", choices=("jsonl", "txt", "csv"), default="jsonl")
    parser.add_argument("--repeat", type=int, default=1, help="measure N times on the same files, keep the fastest")
    parser.add_argument("--one-process", action="store_true", help="no helper processes (as for small files)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-ids-") as tmp:
        folder = Path(tmp) / "campaign"
        started = time.perf_counter()
        generate(folder, args.ids, args.missing, args.format)
        generated = time.perf_counter() - started
        sizes = {p.name: p.stat().st_size for p in (folder / "data" / "test_ids.txt", folder / "out" / f"predictions.{args.format}")}
        runs = [measure_with_rss(folder, "one-process" if args.one_process else "helpers") for _ in range(max(1, args.repeat))]
        result = min(runs, key=lambda run: run["seconds"])
    rows = {
        "ids": args.ids,
        "format": args.format,
        "seconds": round(result["seconds"], 2),
        "all_seconds": [round(run["seconds"], 2) for run in runs],
        "all_cpu_seconds": [round(run["cpu_seconds"], 2) for run in runs],
        "load_average": round(os.getloadavg()[0], 2),
        "cpu_seconds": round(result["cpu_seconds"], 2),
        "max_rss_mb": round(result["max_rss_mb"], 1),
        "tree_rss_mb": round(result["tree_rss_mb"], 1),
        "detail": result["detail"],
        "file_bytes": sizes,
        "generate_seconds": round(generated, 1),
        "pass": result["seconds"] <= TARGET_SECONDS and max(result["max_rss_mb"], result["tree_rss_mb"]) <= TARGET_RSS_MB,
    }
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"expected-ids check, {args.ids:,} ids ({args.format} deliverable): {rows['seconds']} s "
              f"(target ≤ {TARGET_SECONDS:g} s; CPU {rows['cpu_seconds']} s), "
              f"peak RSS {rows['max_rss_mb']} MB, all processes together {rows['tree_rss_mb']} MB (target ≤ {TARGET_RSS_MB:g} MB)")
        print(f"  {rows['detail']}")
        if len(runs) > 1:
            print(f"  runs: {rows['all_seconds']} s wall, {rows['all_cpu_seconds']} s CPU; load average {rows['load_average']}")
        print(f"  files: {', '.join(f'{k} {v / 1e6:.0f} MB' for k, v in sizes.items())}; generated in {rows['generate_seconds']} s")
    return 0 if rows["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
