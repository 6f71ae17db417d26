"""`cockpit status DIR --json` as a user types it, on a campaign whose run wrote a 1,000,000-line
metrics stream: cold (no `.cockpit/` state, no run log) and after 1,000 new lines, each against a
plain Python loop that `json.loads` every line of the same stream (issue #9 item 1a).

    .venv/bin/python bench/status_cold.py [--lines 1000000] [--repeat 3] [--json]

Every figure is one whole process, timed from outside (wall clock from spawn to exit, so the
cockpit's interpreter start and imports count, as they do for the user; so does the loop's).
The loop and the cold status alternate and the best of `--repeat` is kept, because these machines
are noisy; each incremental status is paired with one that finds nothing new, whose time is the
fixed cost of any `status` (interpreter start, imports, campaign, snapshot). The package is
byte-compiled first, as `pip install` leaves it. Peak memory is the status process's own maximum
RSS, from wait4(2). NVML is turned off (`COCKPIT_NVML=off`): this measures reading the stream,
not the driver.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import generate  # noqa: E402  the same stream as bench/ingest.py

CAMPAIGN = ROOT / "sample_campaigns" / "sentiment-lora"
RUN = "v-r16"
LOOP = """
import json, sys
with open(sys.argv[1], "rb") as handle:
    for line in handle:
        json.loads(line)
"""
# +1,000 lines: ≤ 0.10 × the loop since the campaign is validated with pydantic at each load (issue 15)
TARGET_COLD, TARGET_INCREMENTAL, TARGET_RSS_MB = 1.0, 0.10, 200.0


def timed(argv: list[str], stdout_path: Path | None = None) -> dict:
    """Run argv to completion: wall seconds, CPU seconds and peak RSS (MB) of that process alone."""
    env = {**os.environ, "COCKPIT_NVML": "off", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    out = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
    try:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env, cwd=ROOT)
        stderr = process.stderr.read()
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
    finally:
        if stdout_path:
            out.close()
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4; tell Popen
    return {
        "seconds": seconds,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,  # KiB on Linux
        "returncode": process.returncode,
        "stderr": stderr.decode("utf-8", "replace")[-2000:],
    }


def status(campaign: Path, out: Path) -> dict:
    result = timed([sys.executable, "-m", "cockpit", "status", str(campaign), "--json"], out)
    if result["returncode"] not in (0, 1):  # 1: alerts are active, a normal answer
        raise SystemExit(f"cockpit status failed ({result['returncode']}): {result['stderr']}")
    body = json.loads(out.read_text())
    run = next(r for r in body["runs"] if r["id"] == RUN)
    result["step"] = run["step"]
    return result


def last_step(stream: Path) -> int:
    """The step of the stream's last line that has one: what `status` must report."""
    with open(stream, "rb") as handle:
        handle.seek(max(0, stream.stat().st_size - 4096))
        tail = handle.read().splitlines()[1:]
    return next(json.loads(line)["step"] for line in reversed(tail) if b'"step"' in line)


def check_step(result: dict, stream: Path) -> None:
    """A benchmark of a wrong answer is worthless: status must have read to the end."""
    if result["step"] != last_step(stream):
        raise SystemExit(f"cockpit status reported step {result['step']}, the stream ends at step {last_step(stream)}")


def cold(campaign: Path, out: Path) -> dict:
    shutil.rmtree(campaign / ".cockpit", ignore_errors=True)
    (campaign / "runlog.jsonl").unlink(missing_ok=True)
    return status(campaign, out)


def compile_package() -> None:
    """Byte-compile cockpit/ as `pip install` does when it installs the package. Without it, a
    machine that exports PYTHONDONTWRITEBYTECODE=1 (this sandbox does) recompiles the whole package
    from source in every `status` process, a cost no installed cockpit pays (about 0.1 s here)."""
    import compileall

    if not compileall.compile_dir(str(ROOT / "cockpit"), quiet=1):
        raise SystemExit("byte-compiling cockpit/ failed")


def measure(lines: int, repeat: int) -> dict:
    compile_package()
    with tempfile.TemporaryDirectory(prefix="cockpit-status-bench-") as folder:
        campaign = Path(folder) / "campaign"
        shutil.copytree(CAMPAIGN, campaign)
        stream = campaign / "runs" / RUN / "metrics.jsonl"
        stream.parent.mkdir(parents=True)
        size = generate(stream, lines)
        out = Path(folder) / "status.json"

        loops, colds, increments = [], [], []
        for _ in range(repeat):
            loops.append(timed([sys.executable, "-c", LOOP, str(stream)]))
            colds.append(cold(campaign, out))
            check_step(colds[-1], stream)
        # the state the last cold status saved is the starting point: 1,000 new lines each time,
        # each followed by a status with nothing new (the fixed cost: interpreter, imports, campaign)
        first_step = lines
        unchanged = []
        for _ in range(max(5, repeat)):
            generate(stream, 1000, first_step=first_step)
            first_step += 1000
            increments.append(status(campaign, out))
            check_step(increments[-1], stream)
            unchanged.append(status(campaign, out))

    loop = min(r["seconds"] for r in loops)
    best_cold = min(r["seconds"] for r in colds)
    best_incremental = min(r["seconds"] for r in increments)
    fixed = min(r["seconds"] for r in unchanged)
    return {
        "lines": lines,
        "stream_mb": round(size / 1e6, 1),
        "loop_seconds": round(loop, 3),
        "cold_seconds": round(best_cold, 3),
        "cold_ratio": round(best_cold / loop, 3),
        "incremental_seconds": round(best_incremental, 3),
        "incremental_ratio": round(best_incremental / loop, 4),
        "nothing_new_seconds": round(fixed, 3),
        "incremental_ratio_without_fixed_cost": round(max(0.0, best_incremental - fixed) / loop, 4),
        "cold_peak_rss_mb": round(max(r["peak_rss_mb"] for r in colds), 1),
        "incremental_peak_rss_mb": round(max(r["peak_rss_mb"] for r in increments), 1),
        "loop_peak_rss_mb": round(max(r["peak_rss_mb"] for r in loops), 1),
        "cold_cpu_seconds": round(min(r["cpu_seconds"] for r in colds), 3),
        "runs": {
            "loop": [round(r["seconds"], 3) for r in loops],
            "cold": [round(r["seconds"], 3) for r in colds],
            "incremental": [round(r["seconds"], 3) for r in increments],
            "nothing_new": [round(r["seconds"], 3) for r in unchanged],
        },
        "targets": {"cold_ratio": TARGET_COLD, "incremental_ratio": TARGET_INCREMENTAL, "peak_rss_mb": TARGET_RSS_MB},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.lines < 2 or args.repeat < 1:
        parser.error("--lines must be at least 2 and --repeat at least 1")
    result = measure(args.lines, args.repeat)
    if args.json:
        print(json.dumps(result))
        return
    print(f"stream: {result['lines']:,} lines, {result['stream_mb']} MB; every figure is a whole process, best of {args.repeat}")
    print(f"json.loads loop               {result['loop_seconds']:7.3f} s   peak RSS {result['loop_peak_rss_mb']:6.1f} MB")
    print(f"cockpit status --json, cold   {result['cold_seconds']:7.3f} s   peak RSS {result['cold_peak_rss_mb']:6.1f} MB"
          f"   ratio {result['cold_ratio']:.3f} (target ≤ {TARGET_COLD})")
    print(f"cockpit status, +1,000 lines  {result['incremental_seconds']:7.3f} s   peak RSS {result['incremental_peak_rss_mb']:6.1f} MB"
          f"   ratio {result['incremental_ratio']:.4f} (target ≤ {TARGET_INCREMENTAL})")
    print(f"a status with nothing new takes {result['nothing_new_seconds']:.3f} s (interpreter, imports, campaign, snapshot); "
          f"the 1,000 lines add {result['incremental_ratio_without_fixed_cost']:.4f} of the loop")
    runs = result["runs"]
    print("all runs (s): " + " | ".join(f"{k} " + " ".join(f"{v:.3f}" for v in values) for k, values in runs.items()))


if __name__ == "__main__":
    main()
