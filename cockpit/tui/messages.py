"""The messages of the cockpit's UI, in one place: what its workers post to the UI thread (a new
snapshot, a failed tick, a decision on disk, a decision refused) and what its screens ask of the
app (void an event). Small; the UI thread acts on them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual.message import Message

from cockpit.live.snapshot import Snapshot


@dataclass
class SnapshotReady(Message, bubble=False):
    """The engine produced a snapshot: the latest replaces any older one still queued."""

    snapshot: Snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotReady)


@dataclass
class SourceFailed(Message, bubble=False):
    """`tick()` raised: the panels keep the last snapshot and say the engine failed."""

    error: BaseException


@dataclass
class Recorded(Message, bubble=False):
    """A decision is in the run log (the event as written, with its seq)."""

    event: dict[str, Any]
    summary: str
    kind: str  # stop | pilot_decision | note | ack
    after: Callable[[dict[str, Any]], None] | None = None  # what the UI does once it is on disk


@dataclass
class RecordFailed(Message, bubble=False):
    """A decision was refused or could not be written: nothing was recorded."""

    what: str
    reason: str


@dataclass
class VoidRequested(Message):
    """The person asked, on the log screen, to void the event `seq` for `reason`; the app writes it."""

    seq: int
    reason: str
