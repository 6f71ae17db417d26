"""The run log (`runlog.jsonl`): the campaign's append-only register of decisions and alerts.

Every event is one complete JSON line, written under an exclusive lock, flushed and fsynced
before `append` returns, so several writers (the TUI, the CLI, a headless watcher) can share it
and nothing recorded is lost. Readers skip torn or bad lines and count them.
"""

from __future__ import annotations

import errno
import fcntl
import getpass
import json
import math
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from cockpit.common.files import append_to
from cockpit.common.layout import FILE_MODE, RUNLOG_FILE
from cockpit.common.times import Clock, iso, utc_now
from cockpit.record.events import VOIDABLE, EventType


def who() -> str:
    """The person recording: user@host."""
    try:
        user = getpass.getuser()
    except Exception:  # no name for this uid (a container): keep the number
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


class RunLogError(Exception):
    """The run log could not be written; nothing was recorded."""


def _plain(value: Any) -> Any:
    """Values as strict JSON: Decimal and datetimes as text, non-finite floats as their names."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Decimal):
        return f"{value:.2f}" if value == value.quantize(Decimal("0.01")) else str(value)
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    return value


def encode_event(event: dict[str, Any]) -> bytes:
    return json.dumps(_plain(event), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        event = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(event, dict) or not isinstance(event.get("seq"), int) or not isinstance(event.get("type"), str):
        return None
    return event


@dataclass(frozen=True)
class LogRead:
    """Events read from the run log, with the bad lines skipped and counted."""

    events: list[dict[str, Any]]
    bad_lines: int
    bad_line_numbers: list[int]


class Transaction:
    """What a writer may do while it holds the run log's lock."""

    def __init__(self, log: "RunLog", fd: int):
        self._log = log
        self._fd = fd

    def read(self) -> LogRead:
        return self._log.read()

    def append(self, type: str, **fields: Any) -> dict[str, Any]:
        return self._log._append_locked(self._fd, type, fields)

    def append_many(self, events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Write several events as one write and one fsync: all of them are on disk, or none."""
        return self._log._append_many_locked(self._fd, events)


class RunLog:
    """The run log of the campaign in `directory`."""

    def __init__(self, directory: str | Path, clock: Clock = utc_now, source_user: str | None = None):
        self.directory = Path(directory)
        self.path = self.directory / RUNLOG_FILE
        self.clock = clock
        self.who = source_user or who()
        self.start_written: dict[str, Any] | None = None  # the `campaign_started` this writer appended, if it did

    # ------------------------------------------------------------ writing

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Hold the exclusive lock: read and append as one step (e.g. "log this alert unless logged")."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        except OSError as error:
            raise RunLogError(f"cannot open {self.path}: {error.strerror}; nothing was recorded") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield Transaction(self, fd)
        finally:
            os.close(fd)  # closing releases the lock

    def append(self, type: str, **fields: Any) -> dict[str, Any]:
        """Write one event and return it (with its seq) once it is on disk."""
        with self.transaction() as tx:
            return tx.append(type, **fields)

    def _append_locked(self, fd: int, type: str, fields: dict[str, Any]) -> dict[str, Any]:
        return self._append_many_locked(fd, [(type, fields)])[0]

    def _append_many_locked(self, fd: int, items: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        size = os.fstat(fd).st_size
        seq, ts = _last_seq(fd, size), iso(self.clock())
        lines = []
        for type, fields in items:
            seq += 1
            event: dict[str, Any] = {"seq": seq, "ts": ts, "type": type}
            event.update(fields)
            event.setdefault("who", self.who)
            lines.append(encode_event(event))
        try:
            append_to(fd, b"".join(lines), size)  # a torn last line ended first; all or nothing
        except OSError as error:
            reason = "the disk is full" if error.errno == errno.ENOSPC else error.strerror
            raise RunLogError(f"cannot write to {self.path}: {reason}; nothing was recorded") from None
        return [json.loads(line) for line in lines]

    # ------------------------------------------------------------ reading

    def read(self) -> LogRead:
        """Every well-formed event in order; torn or bad lines are skipped and counted."""
        events: list[dict[str, Any]] = []
        bad: list[int] = []
        try:
            handle = open(self.path, "rb")
        except FileNotFoundError:
            return LogRead([], 0, [])
        except OSError as error:
            raise RunLogError(f"cannot read {self.path}: {error.strerror}") from None
        with handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                event = _decode(line)
                if event is None:
                    bad.append(number)
                else:
                    events.append(event)
        return LogRead(events, len(bad), bad)

    def read_from(self, offset: int) -> tuple[list[dict[str, Any]], int, int]:
        """Events in complete lines after byte `offset`: (events, bad lines, new offset).

        For a watcher that keeps up with the log without re-reading it; a line still being
        written is left for the next call."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            return [], 0, 0
        except OSError as error:
            raise RunLogError(f"cannot read {self.path}: {error.strerror}") from None
        end = data.rfind(b"\n") + 1
        events: list[dict[str, Any]] = []
        bad = 0
        for line in data[:end].split(b"\n"):
            if not line.strip():
                continue
            event = _decode(line)
            if event is None:
                bad += 1
            else:
                events.append(event)
        return events, bad, offset + end

    def replay(self) -> "RecordedState":
        return RecordedState.from_events(self.read().events)


def _last_seq(fd: int, size: int) -> int:
    """The seq of the last well-formed event, reading backwards from the end."""
    chunk = 65536
    end = size
    tail = b""
    while end > 0:
        start = max(0, end - chunk)
        tail = os.pread(fd, end - start, start) + tail
        end = start
        lines = tail.split(b"\n")
        complete = lines if start == 0 else lines[1:]  # the first piece may be cut mid-line
        for line in reversed(complete):
            event = _decode(line) if line.strip() else None
            if event is not None:
                return int(event["seq"])
        tail = lines[0] if start > 0 else b""
    return 0


# ---------------------------------------------------------------- replay


@dataclass
class AlertRecord:
    """An alert already in the run log: its rule, run and when it was logged."""

    event: dict[str, Any]
    acknowledged: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return alert_key(self.event)


def alert_key(event: dict[str, Any]) -> str:
    """What makes two alerts the same alert: an explicit `key` (e.g. "lot-window:6h"), else rule and run."""
    key = event.get("key")
    if isinstance(key, str) and key:
        return key
    return f"{event.get('rule', '')}|{event.get('run') or ''}"




def voided_seqs(events: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The seqs of the decisions taken back, each with the `void` event that took it back."""
    kinds = {e["seq"]: e["type"] for e in events}
    found: dict[int, dict[str, Any]] = {}
    for event in events:
        target = event.get("voided_seq") if event["type"] == EventType.VOID else None
        if isinstance(target, int) and kinds.get(target) in VOIDABLE and target not in found:
            found[target] = event
    return found


def live_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events without the decisions a `void` took back: what every reader treats as recorded.
    The run log itself keeps both (it is never rewritten); the `void` events stay in the list."""
    voided = voided_seqs(events)
    return [e for e in events if e["seq"] not in voided] if voided else list(events)


@dataclass
class RecordedState:
    """What the run log says happened: the campaign's recorded decisions and alerts. A decision
    a `void` took back is absent here; `voided` keeps each (void event, decision taken back)."""

    started: dict[str, Any] | None = None
    stops: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    accepted: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[AlertRecord] = field(default_factory=list)
    runs_started: list[dict[str, Any]] = field(default_factory=list)
    closed: list[dict[str, Any]] = field(default_factory=list)
    voided: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    _open_alerts: dict[str, AlertRecord] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._open_alerts = {a.key: a for a in self.alerts if a.acknowledged is None}

    @classmethod
    def from_events(cls, events: list[dict[str, Any]]) -> "RecordedState":
        return cls().apply(events)

    def apply(self, events: list[dict[str, Any]]) -> "RecordedState":
        """Fold the events that follow the ones already applied into this state, in order: a
        follower of the run log pays for its new lines, not for the whole log again."""
        state, open_alerts = self, self._open_alerts
        by_type = {
            EventType.STOP: state.stops,
            EventType.PILOT_DECISION: state.decisions,
            EventType.ACCEPTED: state.accepted,
            EventType.REJECTED: state.rejected,
            EventType.NOTE: state.notes,
            EventType.RUN_STARTED: state.runs_started,
            EventType.CLOSED: state.closed,
        }
        for event in events:
            kind = event["type"]
            if kind == EventType.CAMPAIGN_STARTED and state.started is None:
                state.started = event
            elif kind in by_type:
                by_type[kind].append(event)
            elif kind == EventType.ALERT:
                record = AlertRecord(event)
                state.alerts.append(record)
                open_alerts[record.key] = record
            elif kind == EventType.SIGNAL:  # what a stop's SIGTERM did, written once the stop was on disk
                stop = next((s for s in state.stops if s.get("seq") == event.get("stop_seq")), None)
                if stop is not None:
                    outcome = {k: v for k, v in event.items() if k not in ("seq", "ts", "type", "run", "who", "stop_seq")}
                    stop["signal"] = {**(stop.get("signal") or {}), **outcome}
            elif kind == EventType.ACK:
                record = open_alerts.pop(alert_key(event), None)
                if record is not None:
                    record.acknowledged = event
            elif kind == EventType.VOID:
                state._take_back(event)
        return state

    def _take_back(self, void: dict[str, Any]) -> None:
        target = void.get("voided_seq")
        if not isinstance(target, int) or any(taken.get("seq") == target for _, taken in self.voided):
            return
        for kind in VOIDABLE:
            entries = {EventType.STOP: self.stops, EventType.PILOT_DECISION: self.decisions, EventType.ACCEPTED: self.accepted, EventType.NOTE: self.notes}[kind]
            for index, entry in enumerate(entries):
                if entry.get("seq") == target:
                    del entries[index]
                    self.voided.append((void, entry))
                    return

    @property
    def active_alerts(self) -> list[AlertRecord]:
        return [a for a in self.alerts if a.acknowledged is None]

    def stop_of(self, run_id: str) -> dict[str, Any] | None:
        for stop in self.stops:  # asked several times a run a tick: a plain loop, no generator
            if stop.get("run") == run_id:
                return stop
        return None

    @property
    def pilot_decision(self) -> dict[str, Any] | None:
        return self.decisions[-1] if self.decisions else None


