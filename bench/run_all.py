"""Every benchmark of the cockpit, each in its own process, then one table: figure, measured,
target, pass/fail (issue #9 item 1).

    .venv/bin/python bench/run_all.py [--quick] [--only NAME ...]

Ratios are measured side by side inside each benchmark (the loop and the cockpit alternate in
one run), because these machines are noisy. `--quick` shrinks every benchmark to a smoke test
whose figures are not comparable with the targets. Exit status: 0 when every figure meets its
target, 1 when one does not, 2 when a benchmark failed to run. This is not a CI test: timings
on shared runners say little.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


@dataclass
class Row:
    figure: str
    measured: float | None
    unit: str
    target: float | None  # an upper bound
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.measured is None:
            return "n/a"
        if self.target is None:
            return "info"
        return "pass" if self.measured <= self.target else "FAIL"

    def cells(self) -> tuple[str, str, str, str]:
        measured = "not available" if self.measured is None else f"{_number(self.measured)} {self.unit}".strip()
        target = "–" if self.target is None else f"≤ {_number(self.target)} {self.unit}".strip()
        return self.figure, measured, target, self.verdict


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


@dataclass
class Outcome:
    rows: list[Row]
    seconds: float
    error: str | None = None


def run(script: str, args: list[str], timeout: float, ok_codes: tuple[int, ...] = (0,)) -> tuple[subprocess.CompletedProcess | None, float, str | None]:
    started = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - started, f"{script} did not finish within {timeout:.0f} s"
    seconds = time.perf_counter() - started
    if result.returncode not in ok_codes:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        return result, seconds, f"{script} exited {result.returncode}: " + " / ".join(tail)
    return result, seconds, None


def last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


# ---------------------------------------------------------------------------------------------
# One function a benchmark: run it, turn its output into rows


def status_cold(quick: bool) -> Outcome:
    args = ["--json"] + (["--lines", "100000", "--repeat", "1"] if quick else ["--repeat", "3"])
    result, seconds, error = run("status_cold.py", args, timeout=1800)
    data = last_json(result.stdout) if result and not error else None
    if data is None:
        return Outcome([], seconds, error or "status_cold.py printed no JSON")
    lines = f"{data['lines']:,}"
    return Outcome([
        Row(f"(a) `cockpit status --json` cold, {lines} lines ÷ json.loads loop", data["cold_ratio"], "×", 1.0,
            f"{data['cold_seconds']} s vs {data['loop_seconds']} s, whole processes"),
        Row("(a) `cockpit status` after 1,000 new lines ÷ loop", data["incremental_ratio"], "×", 0.10,
            f"{data['incremental_seconds']} s; a status with nothing new to read takes {data['nothing_new_seconds']} s"),
        Row("    the same less a status with nothing new (fixed cost)", data["incremental_ratio_without_fixed_cost"], "×", None),
        Row("(a) peak RSS of `cockpit status`, cold", data["cold_peak_rss_mb"], "MB", 200.0),
    ], seconds)


INGEST_PATTERNS = {
    "loop": re.compile(r"json\.loads loop\s+([\d.]+) s"),
    "cold": re.compile(r"cockpit cold read\s+([\d.]+) s\s+peak RSS\s+([\d.]+) MB\s+ratio ([\d.]+)"),
    "incremental": re.compile(r"cockpit \+1,000 lines\s+([\d.]+) s\s+peak RSS\s+([\d.]+) MB\s+ratio ([\d.]+)"),
}


def ingest(quick: bool) -> Outcome:
    args = ["--lines", "100000", "--repeat", "1"] if quick else ["--repeat", "3"]
    result, seconds, error = run("ingest.py", args, timeout=1800)
    if error:
        return Outcome([], seconds, error)
    found = {name: pattern.search(result.stdout) for name, pattern in INGEST_PATTERNS.items()}
    if not all(found.values()):
        return Outcome([], seconds, "ingest.py's output changed; cannot read: " + result.stdout.strip()[:300])
    cold, incremental = found["cold"], found["incremental"]
    return Outcome([
        Row("(a) in-process cold read + rules (no imports) ÷ loop", float(cold.group(3)), "×", 1.0,
            f"bench/ingest.py: {cold.group(1)} s vs {found['loop'].group(1)} s"),
        Row("(a) in-process read of 1,000 new lines ÷ loop", float(incremental.group(3)), "×", 0.01, f"{incremental.group(1)} s"),
        Row("(a) in-process peak RSS, cold read", float(cold.group(2)), "MB", 200.0),
    ], seconds)


def engine_tick(quick: bool) -> Outcome:
    args = ["--json"] + (["--ticks", "60"] if quick else [])
    result, seconds, error = run("engine_tick.py", args, timeout=900)
    data = last_json(result.stdout) if result and not error else None
    if data is None:
        return Outcome([], seconds, error or "engine_tick.py printed no JSON")
    return Outcome([
        Row("(b) engine tick CPU, 8 simulated GPUs, 50 runs (median)", data["median_ms"], "ms", data.get("target_ms", 10.0)),
        Row("    95th percentile", data["p95_ms"], "ms", None),
    ], seconds)


TUI_KEYS = {  # names bench/tui_idle.py may give its figures in a JSON object, first match wins
    "cpu": ("cpu_percent_of_a_core", "idle_cpu_percent", "cpu_percent"),
    "frame": ("first_frame_from_app_seconds", "first_frame_seconds", "time_to_first_frame_s"),
    "frame_from_start": ("first_frame_from_process_start_seconds",),
}
TUI_TEXT = {  # and in its text output
    "cpu": re.compile(r"CPU: ([\d.]+) % of one core"),
    "frame": re.compile(r"first frame: ([\d.]+) s from building the app"),
    "frame_from_start": re.compile(r"\(([\d.]+) s from process start"),
}


def _pick(data: dict, names: tuple[str, ...]) -> float | None:
    for name in names:
        value = data.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def tui_idle(quick: bool) -> Outcome:
    title = "(c) TUI idle CPU over 60 s, 1 s refresh, 8 GPUs, 50 runs"
    if not (BENCH / "tui_idle.py").exists():
        return Outcome([Row(title, None, "%", 1.5, "bench/tui_idle.py not present"),
                        Row("(c) TUI time to first frame", None, "s", 1.0)], 0.0)
    window = ["--seconds", "10"] if quick else []
    # exit 1 is the script's own verdict on a target, not a failure to measure
    result, seconds, error = run("tui_idle.py", ["--json", *window], timeout=900, ok_codes=(0, 1))
    figures: dict[str, float | None] = {}
    data = last_json(result.stdout) if result and not error else None
    if data is not None:
        figures = {key: _pick(data, names) for key, names in TUI_KEYS.items()}
    else:  # no --json: read its text
        result, more, error = run("tui_idle.py", window, timeout=900, ok_codes=(0, 1))
        seconds += more
        text = result.stdout if result else ""
        for key, pattern in TUI_TEXT.items():
            found = pattern.search(text)
            figures[key] = float(found.group(1)) if found else None
        if figures["cpu"] is None and not error:
            error = "cannot read tui_idle.py's output: " + text.strip()[:300]
    return Outcome([
        Row(title, figures.get("cpu"), "%", 1.5),
        Row("(c) TUI time to first frame (from building the app)", figures.get("frame"), "s", 1.0),
        Row("    from process start, imports included", figures.get("frame_from_start"), "s", None),
    ], seconds, error)


def memory_30day(quick: bool) -> Outcome:
    args = ["--json"] + (["--ticks", "3000", "--days", "2"] if quick else [])
    result, seconds, error = run("memory_30day.py", args, timeout=3600)
    data = last_json(result.stdout) if result and not error else None
    if data is None:
        return Outcome([], seconds, error or "memory_30day.py printed no JSON")
    first, second = data["per_second"], data["whole_stream"]
    return Outcome([
        Row("(d) memory after a simulated 30-day lot at 1 Hz", data["figure_mb"], "MB", data["target_mb"],
            "the larger of the two lines below"),
        Row(f"    8 GPUs + 50 runs, {first['ticks']:,} ticks → projected to 30 days", first["projected_30_days_mb"], "MB", None,
            f"largest RSS {first['rss_max_mb']} MB + heap growth {first['heap_growth_bytes_per_tick']} bytes a tick "
            f"(ticks {', '.join(first['heap_mb_at'])}); the same over each pair (t, 2t), T/2 ≤ t ≤ T: "
            + (f"{', '.join(str(g) for g in pairs.values())} (t from {min(map(int, pairs)):,} to {max(map(int, pairs)):,}); "
               if (pairs := first.get("doubling_pairs_growth_bytes_per_tick")) else "")
            + f"a straight line through RSS would say {first['rss_line_projection_mb']} MB"),
        Row(f"    one run, {second['lines']:,} lines ({second['days']} days), peak", second["rss_max_mb"], "MB", None),
    ], seconds)


BENCHMARKS: dict[str, Callable[[bool], Outcome]] = {
    "status": status_cold,
    "ingest": ingest,
    "engine": engine_tick,
    "tui": tui_idle,
    "memory": memory_30day,
}


def table(rows: list[Row]) -> str:
    header = ("figure", "measured", "target", "result")
    cells = [header] + [row.cells() for row in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    out = ["  ".join(c.ljust(w) for c, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(cell, widths)) for cell in cells[1:]]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test, not the figures")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), metavar="NAME",
                        help=f"run only these ({', '.join(BENCHMARKS)})")
    args = parser.parse_args()
    rows: list[Row] = []
    errors: list[str] = []
    for name, benchmark in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        print(f"running {name} …", file=sys.stderr, flush=True)
        outcome = benchmark(args.quick)
        print(f"  {name}: {outcome.seconds:.0f} s" + (f" — {outcome.error}" if outcome.error else ""), file=sys.stderr, flush=True)
        rows += outcome.rows
        if outcome.error:
            errors.append(f"{name}: {outcome.error}")
            if not outcome.rows:
                rows.append(Row(f"{name}: did not run", None, "", None, outcome.error))
    print(table(rows))
    notes = [f"  {row.figure.strip()}: {row.note}" for row in rows if row.note]
    if notes:
        print("\nnotes:\n" + "\n".join(notes))
    if args.quick:
        print("\n--quick: smaller sizes; these figures are a smoke test, not comparable with the targets")
    if errors:
        print("\nerrors:\n" + "\n".join(f"  {e}" for e in errors), file=sys.stderr)
        return 2
    return 1 if any(row.verdict == "FAIL" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
