"""Ingest benchmark: reading a 1,000,000-line metrics stream with the stop rules, against a
plain Python loop that `json.loads` every line (issue #4 item 7; issue #9 item 1a).

    .venv/bin/python bench/ingest.py [--lines 1000000] [--repeat 3]

Each phase runs in its own process so its peak memory is its own; the phases alternate and
the best of `--repeat` is kept, because these machines are noisy. Targets: cold read ≤ 1.0 ×
the loop, 1,000 new lines after a restart ≤ 0.01 × the loop, peak memory ≤ 200 MB. Timed: the
cockpit's reading, rules on every record, a tick and saving the state (imports are not timed,
as the loop's interpreter start is not).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

START = 1764489600.0  # 2025-11-30T08:00:00Z


def generate(path: Path, lines: int, first_step: int = 0, seed: int = 7) -> int:
    """A stream as `json.dumps` writes it: metric lines, evals every 100 steps, some events."""
    rng = random.Random(seed)
    total = 0
    with open(path, "a", encoding="utf-8") as handle:
        if first_step == 0:
            handle.write(json.dumps({"ts": START, "event": "started", "pid": 4242, "config_sha256": "ab" * 32}) + "\n")
        for i in range(first_step, first_step + lines - (1 if first_step == 0 else 0)):
            ts = round(START + i * 0.25, 3)
            if i % 5000 == 4999:
                record = {"ts": ts, "event": "checkpoint", "path": f"runs/v-r16/checkpoints/step-{i}.pt",
                          "seconds": 12.4, "bytes": 1048576}
            elif i % 100 == 99:
                record = {"ts": ts, "step": i, "eval/macro_f1": round(0.6 + rng.random() * 0.2, 4),
                          "eval/loss": round(1.5 + rng.random(), 4)}
            else:
                record = {"ts": ts, "step": i, "loss": round(2.5 - i * 1e-6 + rng.random() * 0.1, 6),
                          "lr": 0.0001, "grad_norm": round(rng.random() * 2, 4)}
            text = json.dumps(record) + "\n"
            total += len(text)
            handle.write(text)
    return total


def rules():
    from cockpit.plan.campaign import StopRule

    return [
        StopRule(id="nan-loss", kind="non_finite", metric="loss"),
        StopRule(id="any-nan", kind="non_finite"),
        StopRule(id="f1-floor", kind="below", metric="eval/macro_f1", threshold=0.55, after_step=2000),
        StopRule(id="loss-ceiling", kind="above", metric="loss", threshold=50.0),
        StopRule(id="truncated-input", kind="truncated"),
        StopRule(id="no-resume", kind="no_resume", within_hours=2),
        StopRule(id="stalled", kind="stalled", minutes=20),
    ]


def phase_baseline(path: Path) -> dict:
    started = time.perf_counter()
    count = 0
    with open(path, "rb") as handle:
        for line in handle:
            json.loads(line)
            count += 1
    return {"seconds": time.perf_counter() - started, "lines": count}


def phase_cockpit(path: Path, state: Path) -> dict:
    """A cold `status`: no saved state, read everything, rules on every record, save the state."""
    import cockpit.plan.campaign  # noqa: F401  the campaign is loaded before any stream is read
    from cockpit.live.metrics import MetricsStream
    from cockpit.live.saved_state import save_state
    from cockpit.live.rules import RuleEvaluator

    started = time.perf_counter()
    evaluator = RuleEvaluator(rules())
    stream = MetricsStream("v-r16", path)
    triggers: list = []
    result = stream.poll(evaluator.observer("v-r16", triggers))
    triggers += evaluator.tick("v-r16", stream.track, START + 300000, True)
    save_state(state, [stream], extra={"rules": evaluator.state.to_dict()})
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "lines": result.lines, "bad": result.bad, "triggers": [t.rule_id for t in triggers],
            "steps_per_hour": stream.track.steps_per_hour}


def phase_incremental(path: Path, state: Path) -> dict:
    """A later `status`: load the state, read only the new lines, evaluate, save."""
    import cockpit.plan.campaign  # noqa: F401
    from cockpit.live.saved_state import load_state, save_state
    from cockpit.live.rules import RuleEvaluator, RuleState

    started = time.perf_counter()
    saved = load_state(state)
    evaluator = RuleEvaluator(rules(), RuleState.from_dict(saved.extra.get("rules")))
    stream = saved.stream("v-r16", path)
    triggers: list = []
    result = stream.poll(evaluator.observer("v-r16", triggers))
    save_state(state, [stream], extra={"rules": evaluator.state.to_dict()})
    return {"seconds": time.perf_counter() - started, "lines": result.lines}


def child(args: argparse.Namespace) -> None:
    path, state = Path(args.path), Path(args.state)
    if args.phase == "baseline":
        result = phase_baseline(path)
    elif args.phase == "cockpit":
        result = phase_cockpit(path, state)
    else:
        result = phase_incremental(path, state)
    # ru_maxrss is in KiB on Linux
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def run_phase(phase: str, path: Path, state: Path) -> dict:
    output = subprocess.run(
        [sys.executable, __file__, "--phase", phase, "--path", str(path), "--state", str(state)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(output.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--phase", choices=("baseline", "cockpit", "incremental"))
    parser.add_argument("--path")
    parser.add_argument("--state")
    args = parser.parse_args()
    if args.phase:
        child(args)
        return

    with tempfile.TemporaryDirectory() as folder:
        path, state = Path(folder) / "metrics.jsonl", Path(folder) / ".cockpit" / "state.json"
        size = generate(path, args.lines)
        print(f"stream: {args.lines:,} lines, {size / 1e6:.1f} MB ({size / args.lines:.0f} bytes a line)")
        baseline, cockpit = [], []
        for _ in range(args.repeat):
            baseline.append(run_phase("baseline", path, state))
            cockpit.append(run_phase("cockpit", path, state))
        generate(path, 1000, first_step=args.lines)
        incremental = run_phase("incremental", path, state)

    best_loop = min(r["seconds"] for r in baseline)
    best_cold = min(r["seconds"] for r in cockpit)
    last = cockpit[-1]
    print(f"json.loads loop      {best_loop:7.3f} s   peak RSS {max(r['peak_rss_mb'] for r in baseline):6.1f} MB")
    print(f"cockpit cold read    {best_cold:7.3f} s   peak RSS {max(r['peak_rss_mb'] for r in cockpit):6.1f} MB"
          f"   ratio {best_cold / best_loop:.3f} (target ≤ 1.0)")
    print(f"cockpit +1,000 lines {incremental['seconds']:7.4f} s   peak RSS {incremental['peak_rss_mb']:6.1f} MB"
          f"   ratio {incremental['seconds'] / best_loop:.4f} (target ≤ 0.01), read {incremental['lines']} lines")
    print(f"cold read: {last['lines']:,} lines, {last['bad']} bad, triggers {last['triggers']}, "
          f"{last['steps_per_hour']:.0f} steps/h")
    print("all runs (s): loop " + " ".join(f"{r['seconds']:.3f}" for r in baseline)
          + " | cockpit " + " ".join(f"{r['seconds']:.3f}" for r in cockpit))


if __name__ == "__main__":
    main()
