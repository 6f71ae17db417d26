"""Exactly once, through the run log: what was sent on which channel is written there (a
`notified` event; a `notify_failed` one when a channel gave up), so the TUI and any number of
headless watchers on one campaign send each notification once, and a restart sends nothing again.

A delivery is made under `.cockpit/notify.lock`, a lock only notifiers take: the holder reads the
run log's latest lines, leaves out what is already recorded, sends, and records the outcome under
the run log's own lock before letting go. The run log's lock is never held across a network call,
so an engine writing an alert never waits on a slow server.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cockpit.common.layout import FILE_MODE, state_dir
from cockpit.record.runlog import RunLog, alert_key

NOTIFIED = "notified"
NOTIFY_FAILED = "notify_failed"
LOCK_FILE = "notify.lock"
WINDOW_RULE = "lot-window"


@contextmanager
def delivery_lock(directory: str | Path) -> Iterator[None]:
    """Held while one notifier checks the ledger, sends and records: blocks only other notifiers."""
    path = state_dir(directory) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Item:
    """One run-log event that goes out: an alert, a stop, a window warning, the closing."""

    seq: int
    kind: str  # alert | stop | window | closed
    key: str  # the alert key ("nan-loss|v-hot-lr"), "stop|RUN", "closed"
    event: dict[str, Any]


def item_of(event: dict[str, Any]) -> Item | None:
    """The notification an event makes, if it makes one."""
    kind = event.get("type")
    seq = event.get("seq")
    if not isinstance(seq, int):
        return None
    if kind == "alert":
        return Item(seq, "window" if event.get("rule") == WINDOW_RULE else "alert", alert_key(event), event)
    if kind == "stop":
        return Item(seq, "stop", f"stop|{event.get('run') or ''}", event)
    if kind == "closed":
        return Item(seq, "closed", "closed", event)
    return None


@dataclass
class Ledger:
    """What the run log says about notifications, followed line by line: which (event seq,
    channel) pairs are done (sent, or given up), the last outcome of each channel, the acks."""

    done: set[tuple[int, str]] = field(default_factory=set)
    last_outcome: dict[str, dict[str, Any]] = field(default_factory=dict)  # channel → its last notified / notify_failed
    last_sent_ts: str | None = None  # when the last message went out, on any channel
    acknowledged: set[int] = field(default_factory=set)  # seqs of alerts a person acknowledged
    signals: dict[int, dict[str, Any]] = field(default_factory=dict)  # stop seq → what its SIGTERM did
    _open: dict[str, int] = field(default_factory=dict)  # alert key → seq of its open alert

    def apply(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            kind = event.get("type")
            if kind in (NOTIFIED, NOTIFY_FAILED):
                channel = str(event.get("channel"))
                for seq in event.get("seqs") or []:
                    if isinstance(seq, int):
                        self.done.add((seq, channel))
                self.last_outcome[channel] = event
                if kind == NOTIFIED:
                    self.last_sent_ts = event.get("ts")
            elif kind == "alert" and isinstance(event.get("seq"), int):
                self._open[alert_key(event)] = event["seq"]
            elif kind == "ack":
                seq = self._open.pop(alert_key(event), None)
                if seq is not None:
                    self.acknowledged.add(seq)
            elif kind == "signal" and isinstance(event.get("stop_seq"), int):
                self.signals[event["stop_seq"]] = event

    def failed_channels(self) -> list[dict[str, Any]]:
        """The channels whose last outcome is a failure: each `notify_failed` event."""
        return [e for e in self.last_outcome.values() if e.get("type") == NOTIFY_FAILED]

    def notices(self) -> list[str]:
        return [failed_notice(e) for e in self.failed_channels()]


def failed_notice(event: dict[str, Any]) -> str:
    """The notice for a channel that gave up: which, why, when (the channel is masked already)."""
    return (
        f"notifications to {event.get('channel')} failed: {event.get('error')} (gave up at {event.get('ts')} "
        f"after {event.get('attempts')} attempts; `cockpit notify DIR --test` tries again)"
    )


class LedgerFollower:
    """A ledger kept up with the run log, reading only its new lines."""

    def __init__(self, log: RunLog):
        self.log = log
        self.ledger = Ledger()
        self.offset = 0

    def follow(self) -> list[dict[str, Any]]:
        """The new events (also applied to the ledger)."""
        events, _bad, self.offset = self.log.read_from(self.offset)
        self.ledger.apply(events)
        return events


def record(log: RunLog, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Append `notified` or `notify_failed` under the run log's lock."""
    with log.transaction() as tx:
        return tx.append(kind, **fields)


def ledger_of(log: RunLog) -> Ledger:
    ledger = Ledger()
    ledger.apply(log.read().events)
    return ledger
