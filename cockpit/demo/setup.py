"""Setting up `cockpit demo`: the demo campaign shipped in the wheel copied into a folder with
its lot starting now, and its toy runs started (and stopped) as background processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

from cockpit.demo.trainer import child_env
from cockpit.feed.reporter import RUN_ID_ENV

RUNS_FILE = "runs.toml"  # how `cockpit demo` starts each run of the demo campaign


def template_files() -> dict[str, bytes]:
    """The demo campaign's files as shipped in the wheel (relative path → content)."""
    root = resources.files("cockpit").joinpath("demo", "template")
    files: dict[str, bytes] = {}

    def walk(node, prefix: str) -> None:
        for child in node.iterdir():
            name = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, name + "/")
            elif not child.name.startswith(".") and child.name != "__pycache__":
                files[name] = child.read_bytes()

    walk(root, "")
    return files


_LOT_START = re.compile(r"(?m)^(\s*start\s*=\s*)\S+(.*)$")


def prepare_demo(target_dir: str | os.PathLike[str], now: datetime) -> Path:
    """Copy the demo campaign into `target_dir` (new or empty) with the lot starting at `now`."""
    if now.tzinfo is None:
        raise ValueError("now must carry a time zone (UTC), e.g. datetime.now(timezone.utc)")
    target = Path(target_dir)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"{target} is not an empty folder; give a new or empty folder for the demo campaign")
    files = template_files()
    start = now.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = files["campaign.toml"].decode("utf-8")
    lot = re.search(r"(?m)^\s*\[lot\]\s*$", text)
    following = re.search(r"(?m)^\s*\[", text[lot.end():]) if lot else None
    end = lot.end() + following.start() if lot and following else len(text)
    if not lot or not _LOT_START.search(text, lot.end(), end):
        raise RuntimeError("the demo template's [lot] table has no start line")  # a packaging bug
    body = _LOT_START.sub(lambda m: f"{m.group(1)}{start}{m.group(2)}", text[lot.end():end], count=1)
    files["campaign.toml"] = (text[: lot.end()] + body + text[end:]).encode("utf-8")
    target.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return target.resolve()


def demo_run_arguments(campaign_dir: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Each run's trainer arguments from the campaign's runs.toml."""
    path = Path(campaign_dir) / RUNS_FILE
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise FileNotFoundError(f"{path}: cannot be read ({error.strerror}); it says how to start each demo run") from None
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not valid TOML: {error}") from None
    runs = raw.get("run")
    if not isinstance(runs, dict) or not runs:
        raise ValueError(f"{path}: needs one [run.ID] table per run, with args = [...]")
    arguments = {}
    for run_id, entry in runs.items():
        args = entry.get("args", []) if isinstance(entry, dict) else None
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"{path}: [run.{run_id}] → args must be a list of strings")
        arguments[run_id] = args
    return arguments


def launch_runs(campaign_dir: str | os.PathLike[str], python: str | None = None) -> list[subprocess.Popen]:
    """Start every run of the demo campaign as a background process of its own session.

    Each one runs `python -m cockpit.demo.trainer --campaign DIR --run ID ARGS` in the campaign
    folder with COCKPIT_RUN_ID set, its stdout and stderr in runs/<id>/stdout.log."""
    from cockpit.plan.campaign import run_path
    from cockpit.plan.load import load_campaign

    directory = Path(campaign_dir).resolve()
    arguments = demo_run_arguments(directory)
    known = {run.id for run in load_campaign(directory).runs}
    unknown = sorted(set(arguments) - known)
    if unknown:
        raise ValueError(f"{directory / RUNS_FILE}: {', '.join(unknown)} is no [[run]] of campaign.toml "
                         f"(runs: {', '.join(sorted(known)) or 'none'})")
    processes = []
    for run_id, args in arguments.items():
        run_dir = run_path(directory, run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        env = {**child_env(), RUN_ID_ENV: run_id, "PYTHONUNBUFFERED": "1"}
        command = [python or sys.executable, "-m", "cockpit.demo.trainer", "--campaign", str(directory), "--run", run_id, *args]
        with open(run_dir / "stdout.log", "ab") as log:
            processes.append(subprocess.Popen(
                command, cwd=directory, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            ))
    return processes


def stop_runs(processes: list[subprocess.Popen], timeout: float = 10.0) -> None:
    """SIGTERM each run still alive (it writes `finished` "stopped"), SIGKILL what outlives `timeout`."""
    alive = [p for p in processes if p.poll() is None]
    for process in alive:
        try:
            process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for process in alive:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
