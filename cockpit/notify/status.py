"""What `status`, `watch` and `notify` say about notifications: the channels configured (masked),
and each channel whose last delivery gave up (its `notify_failed`), also as a notice."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cockpit.common.text import escape_control
from cockpit.notify.claim import failed_notice, ledger_of
from cockpit.notify.config import NotifyConfig, load_config
from cockpit.record.runlog import RunLog, RunLogError


def describe(config: NotifyConfig) -> list[str]:
    """The lines the commands print about the configuration (secrets masked)."""
    if config.channels:
        count = len(config.channels)
        lines = [f"notify    {count} channel{'s' if count != 1 else ''} (from {config.source}), "
                 f"sends {', '.join(sorted(config.kinds))}: "
                 + ", ".join(c.shown + (" (INVALID)" if c.problem else "") for c in config.channels)]
    else:
        lines = ["notify    no channel: alerts stay on this box (`cockpit notify DIR` says how to add one)"]
    if config.heartbeat_url:
        lines.append(f"heartbeat {config.heartbeat_shown} every {config.heartbeat_seconds / 60:g} min while a cockpit watches")
    return [escape_control(line) for line in lines]


def with_notify(campaign: Any, snapshot: Any, config: NotifyConfig | None = None) -> tuple[Any, dict[str, Any], list[str]]:
    """(the snapshot with the notification notices, `status --json`'s `notify` object, text lines)."""
    config = config if config is not None else load_config(campaign)
    failed: list[dict[str, Any]] = []
    log = RunLog(campaign.directory)
    if log.path.exists():
        try:
            failed = ledger_of(log).failed_channels()
        except RunLogError:
            failed = []  # the engine's own notice says the run log cannot be read
    payload = config.to_json()
    payload["failed"] = [
        {"channel": e.get("channel"), "error": e.get("error"), "ts": e.get("ts"), "seq": e.get("seq"), "attempts": e.get("attempts")}
        for e in failed
    ]
    notices = [*config.problems, *(failed_notice(e) for e in failed)]
    if notices:
        snapshot = replace(snapshot, notices=tuple(dict.fromkeys((*snapshot.notices, *notices))))
    return snapshot, payload, describe(config)
