"""The demo's toy trainer: a real, small training run that `cockpit demo` starts as a background
process (the model and its checkpoints: `cockpit.demo.model`; the campaign set-up: `cockpit.demo.setup`).

It reports through `RunReporter`, evaluates macro-F1 on a held-out set, saves complete checkpoints
and verifies its own resume: a fresh process reloads the first checkpoint and trains K steps, and
the run reports `resume_verified` only when those steps match its own, bit for bit.

    python -m cockpit.demo.trainer --campaign DIR --run ctrl-r1 --step-seconds 0.5
    python -m cockpit.demo.trainer --verify-resume DIR/runs/ctrl-r1/checkpoints/step-50.npz --steps 5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import site
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.demo.model import (
    DEFAULT_LR,
    DEFAULT_LR_GAMMA,
    DEFAULT_LR_STEP_SIZE,
    DEFAULT_STEPS,
    DIVERGE_GAMMA,
    DIVERGE_STEP_SIZE,
    SHORT_CONTEXT,
    CheckpointError,
    Settings,
    State,
    Trainer,
    load_checkpoint,
    save_checkpoint,
    step_lr,
)
from cockpit.feed.reporter import RunReporter


def continuation(state: State, steps: int) -> dict[str, Any]:
    """What `steps` more steps from `state` produce: the losses (exactly, as float hex) and the
    digest of the state they end in. Two runs that resume identically produce the same record."""
    trainer = Trainer(state)
    losses = [trainer.step().hex() for _ in range(steps)]
    return {"from_step": state.step - steps, "steps": steps, "losses": losses,
            "state_sha256": state.digest(), "step": state.step}


@dataclass
class ResumeCheck:
    """A verification process under way: a fresh interpreter reloading `checkpoint`."""

    checkpoint: Path
    steps: int
    process: subprocess.Popen
    spawned_at: float

    @classmethod
    def spawn(cls, checkpoint: Path, steps: int) -> "ResumeCheck":
        command = [sys.executable, "-m", "cockpit.demo.trainer", "--verify-resume", str(checkpoint), "--steps", str(steps)]
        spawned_at = time.time()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, env=child_env(), text=True)
        return cls(checkpoint, steps, process, spawned_at)

    def result(self, expected: dict[str, Any], timeout: float = 120.0) -> tuple[bool, float | None, str]:
        """(matches, seconds from spawn to the state restored, explanation)."""
        try:
            out, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            return False, None, f"the verification process did not answer within {timeout:g} s"
        if self.process.returncode != 0:
            return False, None, f"the verification process failed (exit {self.process.returncode}): {err.strip()[-500:]}"
        try:
            got = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return False, None, f"the verification process printed no result: {out[-300:]!r}"
        seconds = max(0.0, float(got.get("restored_at", self.spawned_at)) - self.spawned_at)
        for key in ("losses", "state_sha256", "step"):
            if got.get(key) != expected.get(key):
                return False, seconds, f"resumed run differs from the run that kept going ({key}: {got.get(key)!r} ≠ {expected.get(key)!r})"
        return True, seconds, "the next steps match exactly"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def verify_in_fresh_process(checkpoint: Path, expected: dict[str, Any], timeout: float = 120.0) -> tuple[bool, float | None, str]:
    """Reload `checkpoint` in a new interpreter, train as many steps as `expected` lists, compare."""
    return ResumeCheck.spawn(checkpoint, len(expected["losses"])).result(expected, timeout)


def child_env() -> dict[str, str]:
    """The environment for a child interpreter: it imports this very copy of the cockpit.

    An installed cockpit is found anyway; a source checkout is put on PYTHONPATH (never a
    site-packages folder, which would then shadow the standard library)."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])  # the folder that holds cockpit/
    installed = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if package_root not in installed:
        env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    return env


# ---------------------------------------------------------------- a run


class Stopped(BaseException):
    """SIGTERM arrived (the cockpit's stop rule, or the user): end the run cleanly.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way (the
    reporter's own never-raise guard) can swallow it."""


def _on_sigterm(signum, frame) -> None:
    raise Stopped()


def train(
    campaign_dir: Path,
    run_id: str,
    *,
    lr: float,
    steps: int,
    step_seconds: float = 0.0,
    lr_step_size: int = DEFAULT_LR_STEP_SIZE,
    lr_gamma: float = DEFAULT_LR_GAMMA,
    settings: Settings | None = None,
    eval_every: int = 25,
    checkpoint_every: int = 50,
    verify_steps: int = 5,
    metrics_path: Path | None = None,
    checkpoints_dir: Path | None = None,
    predictions_path: Path | None = None,
    sleep=time.sleep,
) -> str:
    """Run the training, reporting to the campaign; returns the finished status ("ok", "stopped")."""
    settings = settings or Settings()
    state = State.fresh(settings, lr, lr_step_size, lr_gamma)
    trainer = Trainer(state)
    from cockpit.plan.campaign import campaign_path, run_path

    checkpoints_dir = checkpoints_dir or run_path(campaign_dir, run_id, "checkpoints")
    predictions_path = predictions_path or campaign_path(campaign_dir, "out", run_id, "predictions.jsonl")
    config = {"run": run_id, "lr": lr, "lr_step_size": lr_step_size, "lr_gamma": lr_gamma,
              "steps": steps, "eval_every": eval_every,
              "checkpoint_every": checkpoint_every, **settings.as_dict()}
    check: ResumeCheck | None = None
    expected: dict[str, Any] | None = None  # the run's own record of the steps the check replays
    own_losses: list[str] = []
    with RunReporter(campaign_dir, run_id, config, metrics_path=metrics_path) as report:
        try:
            for document in trainer.truncated:  # found while tokenising, before the first step
                report.truncated(document.id, document.essential)
            while state.step < steps:
                loss = trainer.step()
                report.log(state.step, loss=loss, lr=step_lr(state.scheduler, state.step))
                if check is not None and expected is None:
                    own_losses.append(loss.hex())
                    if len(own_losses) == check.steps:
                        expected = {"losses": own_losses, "state_sha256": state.digest(), "step": state.step}
                if check is not None and expected is not None and check.process.poll() is not None:
                    _finish_check(check, expected, report)  # the fresh process is done: no waiting
                    check = expected = None
                if state.step % eval_every == 0 or state.step == steps:
                    report.log(state.step, trainer.evaluate())
                if state.step % checkpoint_every == 0:
                    path = checkpoints_dir / f"step-{state.step}.npz"
                    started = time.monotonic()
                    size = save_checkpoint(state, path)
                    report.checkpoint(path, time.monotonic() - started, size)
                    if state.step == checkpoint_every:  # test an early save in a new process: a save that never reloads is no resume point
                        check = ResumeCheck.spawn(path, min(verify_steps, steps - state.step))
                        own_losses = []
                        if check.steps == 0:
                            expected = {"losses": [], "state_sha256": state.digest(), "step": state.step}
                if step_seconds > 0:
                    sleep(step_seconds)
            if check is not None and expected is not None:
                _finish_check(check, expected, report)  # the run ended first: wait for the answer
            _write_predictions(predictions_path, trainer.predictions())
        except Stopped:
            if check is not None:
                check.kill()
            print(f"{run_id}: stopped by SIGTERM at step {state.step}", file=sys.stderr, flush=True)
            report.finish("stopped")
            return "stopped"
    return "ok"


def _finish_check(check: ResumeCheck, expected: dict[str, Any], report: RunReporter) -> None:
    ok, seconds, why = check.result(expected)
    if ok:
        report.resume_verified(check.checkpoint, seconds)
        print(f"resume verified in a fresh process: {check.checkpoint} ({why})", file=sys.stderr, flush=True)
    else:
        print(f"resume NOT verified for {check.checkpoint}: {why}", file=sys.stderr, flush=True)


def _write_predictions(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    os.replace(temporary, path)


# ---------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cockpit.demo.trainer",
        description="The cockpit demo's toy trainer: softmax regression with Adam on a generated corpus.",
    )
    parser.add_argument("--campaign", type=Path, metavar="DIR", help="the campaign folder (holds campaign.toml)")
    parser.add_argument("--run", metavar="RUN", help="the run's id in campaign.toml")
    parser.add_argument("--lr", type=float, default=DEFAULT_LR, help=f"Adam's base learning rate (default {DEFAULT_LR:g})")
    parser.add_argument("--lr-step-size", type=int, default=DEFAULT_LR_STEP_SIZE, metavar="N",
                        help=f"the schedule multiplies the rate by --lr-gamma every N steps (default {DEFAULT_LR_STEP_SIZE})")
    parser.add_argument("--lr-gamma", type=float, default=DEFAULT_LR_GAMMA, metavar="G", help=f"(default {DEFAULT_LR_GAMMA:g})")
    parser.add_argument("--steps", type=int, help="optimizer steps (default: the run's total_steps, else 600); "
                        "with --verify-resume: steps to train after the reload")
    parser.add_argument("--step-seconds", type=float, default=0.0, metavar="S", help="sleep S seconds a step so a demo run lasts minutes")
    parser.add_argument("--diverge", action="store_true", help=f"multiply the learning rate by {DIVERGE_GAMMA:g} every "
                        f"{DIVERGE_STEP_SIZE} steps: the loss becomes NaN near step 48")
    parser.add_argument("--truncate-essential", action="store_true", help=f"cut documents to {SHORT_CONTEXT} tokens, truncating an essential one")
    parser.add_argument("--max-tokens", type=int, default=512, help="context length in tokens (default 512: nothing is cut)")
    parser.add_argument("--seed", type=int, default=7, help="the RNG seed for input dropout (default 7)")
    parser.add_argument("--eval-every", type=int, default=25, metavar="N")
    parser.add_argument("--checkpoint-every", type=int, default=50, metavar="N")
    parser.add_argument("--verify-steps", type=int, default=5, metavar="K", help="steps compared after reloading the first checkpoint")
    parser.add_argument("--verify-resume", type=Path, metavar="CHECKPOINT", help="reload CHECKPOINT, train --steps steps, print the result as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.verify_resume is not None:
        if args.steps is not None and args.steps < 0:
            parser.error(f"--steps must be 0 or more with --verify-resume (got {args.steps})")
        return _verify_main(args.verify_resume, args.steps if args.steps is not None else 5)
    for name in ("steps", "eval_every", "checkpoint_every", "lr_step_size", "max_tokens"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be a positive whole number (got {value})")
    for name in ("verify_steps", "step_seconds"):
        value = getattr(args, name)
        if value < 0 or (isinstance(value, float) and not math.isfinite(value)):
            parser.error(f"--{name.replace('_', '-')} must be 0 or more (got {value})")
    if args.campaign is None or not args.run:
        parser.error("give --campaign DIR and --run RUN (or --verify-resume CHECKPOINT)")
    return _train_main(args, parser)


def _verify_main(checkpoint: Path, steps: int) -> int:
    try:
        state = load_checkpoint(checkpoint)
    except CheckpointError as error:
        print(f"cannot resume from {checkpoint}: {error}", file=sys.stderr)
        return 1
    restored_at = time.time()
    record = continuation(state, steps)
    record["restored_at"] = restored_at
    print(json.dumps(record))
    return 0


def _train_main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from cockpit.plan.campaign import CampaignError  # only the run side needs pydantic
    from cockpit.plan.load import load_campaign

    try:
        campaign = load_campaign(args.campaign)
    except CampaignError as error:
        print(f"cannot start the run: {error}", file=sys.stderr)
        return 1
    run = campaign.run(args.run)
    if run is None:
        known = ", ".join(r.id for r in campaign.runs) or "none"
        parser.error(f"no run '{args.run}' in {campaign.file} (runs: {known})")
    settings = Settings(seed=args.seed, max_tokens=SHORT_CONTEXT if args.truncate_essential else args.max_tokens)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        status = train(
            campaign.directory,
            run.id,
            lr=args.lr,
            lr_step_size=DIVERGE_STEP_SIZE if args.diverge else args.lr_step_size,
            lr_gamma=DIVERGE_GAMMA if args.diverge else args.lr_gamma,
            steps=args.steps or run.total_steps or DEFAULT_STEPS,
            step_seconds=args.step_seconds,
            settings=settings,
            eval_every=args.eval_every,
            checkpoint_every=args.checkpoint_every,
            verify_steps=args.verify_steps,
            metrics_path=run.metrics_path(campaign.directory),
            checkpoints_dir=run.checkpoints_path(campaign.directory),
        )
    except Stopped:  # before the reporter was even set up
        return 128 + signal.SIGTERM
    return 0 if status == "ok" else 128 + signal.SIGTERM


if __name__ == "__main__":
    sys.exit(main())
