"""Starting a campaign: the plan frozen into `.cockpit/plan.toml` and `campaign_started` logged first."""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path
from typing import Any

from cockpit.common.files import write_atomic
from cockpit.common.layout import FROZEN_PLAN, STATE_DIR, frozen_plan_path, state_dir
from cockpit.record.events import EventType
from cockpit.record.runlog import RunLog, RunLogError, Transaction, _decode


def frozen_plan_text(directory: str | Path) -> str | None:
    try:
        return frozen_plan_path(directory).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None


def _freeze(campaign: Any) -> str:
    """Write campaign.toml's text to .cockpit/plan.toml (atomically) unless a plan is frozen already;
    return the frozen text."""
    frozen = frozen_plan_text(campaign.directory)
    if frozen is not None:
        return frozen
    try:
        write_atomic(state_dir(campaign.directory) / FROZEN_PLAN, campaign.text)
    except OSError as error:
        reason = "the disk is full" if error.errno == errno.ENOSPC else (error.strerror or str(error))
        raise RunLogError(
            f"cannot freeze the plan into {STATE_DIR}/{FROZEN_PLAN}: {reason}; the campaign is not started and nothing was recorded"
        ) from None
    return campaign.text


def ensure_started(campaign: Any, log: RunLog) -> dict[str, Any] | None:
    """Freeze the plan and log `campaign_started` the first time the campaign is used live.

    Returns the new event, or None when the run log already holds one. Decided from the run log
    itself, under its lock: two cockpits starting at once log it once, and a start whose event
    could not be written (a full disk) is logged by the next one — with the plan frozen first.
    """
    if is_started(log):
        return None  # the common case, without taking the lock
    with log.transaction() as tx:
        return start_in(tx, campaign)


def start_in(tx: Transaction, campaign: Any, events: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """`ensure_started` inside a lock already held: a recording calls it just before its own event,
    so `campaign_started` is the run log's first event. `events` are the run log's, read under that
    lock; the new event joins them, so a second call in the same lock writes nothing. A campaign
    closed before it ever started is not started after its close (a start logged after `closed`
    would tell a false story); None then, as when it has started already."""
    if events is None:
        events = tx.read().events
    if any(e["type"] in (EventType.CAMPAIGN_STARTED, EventType.CLOSED) for e in events):
        return None
    plan = _freeze(campaign)
    event = tx.append(
        EventType.CAMPAIGN_STARTED,
        campaign=campaign.id,
        plan_sha256=hashlib.sha256(plan.encode("utf-8")).hexdigest(),
        plan_file=f"{STATE_DIR}/{FROZEN_PLAN}",
        plan=plan,
    )
    tx._log.start_written = event
    events.append(event)
    return event


def is_started(log: RunLog) -> bool:
    """Whether the campaign has started: the log's first well-formed event is `campaign_started`
    (seq 1 whenever it exists), read without the lock."""
    try:
        with open(log.path, "rb") as handle:
            for line in handle:
                event = _decode(line) if line.strip() else None
                if event is not None:
                    return event["type"] == EventType.CAMPAIGN_STARTED
    except OSError:
        return False
    return False


def plan_drift(campaign: Any) -> str | None:
    """A sentence when campaign.toml no longer matches the plan frozen at the start, else None."""
    frozen = frozen_plan_text(campaign.directory)
    if frozen is None or frozen == campaign.text:
        return None
    return (
        "campaign.toml has changed since the campaign started; the frozen plan in "
        f"{STATE_DIR}/{FROZEN_PLAN} stays the reference for planned vs actual. "
        "A run whose configuration changed after a stop needs a new run id: a changed configuration is a new trial."
    )
