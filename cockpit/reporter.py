"""Kept for code written before the package layout: `from cockpit.reporter import RunReporter` goes on
working. The reporter lives in `cockpit.feed.reporter`; new code imports it from there."""

from cockpit.feed.reporter import (  # noqa: F401
    RUN_ID_ENV,
    ReporterWarning,
    RunReporter,
    config_sha256,
    metric_value,
    process_identity,
)

__all__ = ["RunReporter", "ReporterWarning", "config_sha256", "process_identity", "RUN_ID_ENV"]
