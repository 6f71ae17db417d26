"""The run log's event types (`runlog.jsonl`, docs/run-log.md): the `type` of every event.

A `StrEnum`: each member is the very string written in the file (`EventType.STOP == "stop"`), so
events read back from JSON compare equal to the members and nothing on disk changes.
"""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    CAMPAIGN_STARTED = "campaign_started"  # the first live use: the plan frozen into .cockpit/plan.toml
    RUN_STARTED = "run_started"  # a run's `started` event seen in its metrics stream
    ALERT = "alert"  # a stop rule triggered, or a built-in condition holds
    ACK = "ack"  # an alert acknowledged
    STOP = "stop"  # a run stopped (by a person, or by a rule with action = "stop")
    SIGNAL = "signal"  # what the SIGTERM of a stop did, written once the stop was on disk
    PILOT_DECISION = "pilot_decision"
    ACCEPTED = "accepted"  # a deliverable accepted
    REJECTED = "rejected"  # a deliverable rejected (by a closing's verification)
    NOTE = "note"
    VOID = "void"  # a decision taken back
    CLOSED = "closed"  # the campaign closed
    GPU_HEALTH = "gpu_health"  # a GPU incident (Xid, ECC, throttling, idle) with its evidence: once per incident
    NOTIFIED = "notified"  # a notification sent on one channel (the ledger that makes it go out once)
    NOTIFY_FAILED = "notify_failed"  # a channel that kept failing for 10 minutes: given up, shown as a notice


# The decisions a `void` may take back.
VOIDABLE = (EventType.STOP, EventType.PILOT_DECISION, EventType.ACCEPTED, EventType.NOTE)
