"""The campaign folder's layout: the names the cockpit reads and owns there, and the modes it
creates its own files and folders with. Runs own `runs/<run id>/`; the cockpit owns the run log,
`.cockpit/` and `closing/`."""

from __future__ import annotations

from pathlib import Path

CAMPAIGN_FILE = "campaign.toml"
RUNS_DIR = "runs"  # runs/<run id>/ belongs to the run
METRICS_FILE = "metrics.jsonl"  # runs/<run id>/metrics.jsonl unless [[run]] metrics says otherwise
CHECKPOINTS_DIR = "checkpoints"  # runs/<run id>/checkpoints unless [[run]] checkpoints says otherwise
RUNLOG_FILE = "runlog.jsonl"
STATE_DIR = ".cockpit"
FROZEN_PLAN = "plan.toml"  # .cockpit/plan.toml: campaign.toml as it was when the campaign started
METRICS_STATE_FILE = "metrics-state.json"  # .cockpit/metrics-state.json: the stream readers' positions
CLOSING_DIR = "closing"
FILE_MODE = 0o640  # readable by the owner's group at most
DIR_MODE = 0o750


def state_dir(directory: str | Path) -> Path:
    """`.cockpit/` in the campaign folder, created owner-and-group only."""
    path = Path(directory) / STATE_DIR
    path.mkdir(mode=DIR_MODE, exist_ok=True)
    return path


def frozen_plan_path(directory: str | Path) -> Path:
    return Path(directory) / STATE_DIR / FROZEN_PLAN
