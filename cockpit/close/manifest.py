"""manifest.json: every deliverable file and log file with its size and sha256, and where the
closing folder keeps its copies, so a file can be checked later against what was closed."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from cockpit.close.figures import display_path, sha256_file
from cockpit.close.measure import PlanSource
from cockpit.close.summary import ClosingSummary
from cockpit.close.verify import DeliverableVerdict
from cockpit.common.layout import CLOSING_DIR, FROZEN_PLAN, RUNLOG_FILE, STATE_DIR
from cockpit.plan.campaign import Campaign

CLOSING_FILES = ("report.md", "summary.json", "manifest.json", "plan.toml", RUNLOG_FILE, "RELOAD.md")


def read_bytes(path: Path) -> bytes:
    """A file's bytes; none when it does not exist (a campaign that never wrote its run log)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def build_manifest(
    campaign: Campaign,
    summary: ClosingSummary,
    verdicts: list[DeliverableVerdict],
    source: PlanSource,
    runlog_bytes: bytes | None,
) -> dict[str, Any]:
    """Every deliverable file and log file with its size and sha256, and the closing's copies."""
    base = campaign.directory
    files: list[dict[str, Any]] = []
    for verdict in verdicts:
        if not verdict.files:
            files.append({"path": verdict.deliverable.path, "role": "deliverable", "deliverable": verdict.id,
                          "present": False, "size_bytes": None, "sha256": None})
        for entry in verdict.files:
            files.append({"path": entry.path, "role": "deliverable", "deliverable": verdict.id, "present": True,
                          "size_bytes": entry.size_bytes, "sha256": entry.sha256})
    if runlog_bytes is None:
        runlog_bytes = read_bytes(base / RUNLOG_FILE)
    files.append({"path": RUNLOG_FILE, "role": "run log", "present": bool(runlog_bytes), "size_bytes": len(runlog_bytes),
                  "sha256": hashlib.sha256(runlog_bytes).hexdigest(), "copy": f"{CLOSING_DIR}/{RUNLOG_FILE}"})
    plan_bytes = source.text.encode("utf-8")
    files.append({"path": f"{STATE_DIR}/{FROZEN_PLAN}" if source.frozen else "campaign.toml",
                  "role": "frozen plan" if source.frozen else "plan (not frozen)", "present": True,
                  "size_bytes": len(plan_bytes), "sha256": hashlib.sha256(plan_bytes).hexdigest(),
                  "copy": f"{CLOSING_DIR}/plan.toml"})
    if source.frozen:
        today = campaign.text.encode("utf-8")
        files.append({"path": "campaign.toml", "role": "campaign file", "present": True, "size_bytes": len(today),
                      "sha256": hashlib.sha256(today).hexdigest()})
    seen_metrics: set[str] = set()
    for run in [*source.campaign.runs, *campaign.runs]:
        path = (campaign.run(run.id) or run).metrics_path(base)
        shown = display_path(path, base)
        if shown in seen_metrics:
            continue
        seen_metrics.add(shown)
        if path.is_file():
            files.append({"path": shown, "role": "metrics", "run": run.id, "present": True,
                          "size_bytes": path.stat().st_size, "sha256": sha256_file(path)})
        else:
            files.append({"path": shown, "role": "metrics", "run": run.id, "present": False, "size_bytes": None, "sha256": None})
    return {
        "campaign": campaign.id,
        "generated_at": summary.times.generated_at,
        "closed_at": summary.times.closed_at,
        "base": "paths are relative to the campaign folder (the one holding campaign.toml)",
        "files": files,
        "closing_files": list(CLOSING_FILES),
    }

