"""The live engine: sources (NVML, psutil, metrics streams, the run log) → rules and clock →
one frozen snapshot that the TUI, `status` and `watch` all render."""

from __future__ import annotations

from typing import Any

from cockpit.campaign import Campaign


def last_metrics_of_run(campaign: Campaign, run_id: str) -> dict[str, Any]:
    """The run's last step and metric values, for a stop event ({} when it has reported nothing)."""
    run = campaign.run(run_id)
    path = run.metrics_path(campaign.directory) if run else None
    if path is None or not path.exists():
        return {}
    raise NotImplementedError("reading metrics lands with cockpit/metrics.py")


def terminate_run_of(campaign: Campaign, run_id: str) -> dict[str, Any]:
    raise NotImplementedError("signalling lands with cockpit/procs.py")
