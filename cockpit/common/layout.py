"""The campaign folder's layout: the names the cockpit owns there and the modes it creates them with."""

from __future__ import annotations

from pathlib import Path

RUNLOG_FILE = "runlog.jsonl"
STATE_DIR = ".cockpit"
FROZEN_PLAN = "plan.toml"
FILE_MODE = 0o640  # readable by the owner's group at most
DIR_MODE = 0o750


def state_dir(directory: str | Path) -> Path:
    """`.cockpit/` in the campaign folder, created owner-and-group only."""
    path = Path(directory) / STATE_DIR
    path.mkdir(mode=DIR_MODE, exist_ok=True)
    return path


def frozen_plan_path(directory: str | Path) -> Path:
    return Path(directory) / STATE_DIR / FROZEN_PLAN
