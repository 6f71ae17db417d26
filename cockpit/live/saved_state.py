"""Where the cockpit stopped reading, saved in the campaign's `.cockpit/metrics-state.json`:
each run's stream (offsets, identity, its track) and what the engine keeps beside it (rule state).

A missing, corrupt or foreign file reads as empty: a lost position only means reading again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cockpit.common.files import write_atomic
from cockpit.common.layout import DIR_MODE, FILE_MODE, METRICS_STATE_FILE, STATE_DIR
from cockpit.live.metrics import MetricsStream

STATE_FILE = METRICS_STATE_FILE  # in the campaign's .cockpit/ folder
STATE_VERSION = 1
STATE_FILE_MODE = FILE_MODE
STATE_DIR_MODE = DIR_MODE


@dataclass
class SavedState:
    """What `.cockpit/` remembered: each run's stream, plus whatever the engine keeps beside it."""

    streams: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def stream(self, run_id: str, path: str | Path) -> MetricsStream:
        """The run's stream where it was left, or a fresh one (unknown, unusable, or moved)."""
        saved = self.streams.get(run_id)
        if isinstance(saved, dict):
            restored = MetricsStream.from_dict(run_id, path, saved)
            if restored is not None:
                return restored
        return MetricsStream(run_id, path)


def state_file(directory: str | Path) -> Path:
    """Where a campaign's reading positions and rule state are saved (`.cockpit/`, created on the
    first save)."""
    return Path(directory) / STATE_DIR / STATE_FILE


def save_state(
    path: str | Path,
    streams: Iterable[MetricsStream] | Mapping[str, MetricsStream],
    *,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Write the readers' state atomically (`write_atomic`: temporary file, fsync, rename), mode 0o640."""
    path = Path(path)
    items = streams.values() if isinstance(streams, Mapping) else streams
    document = {
        "version": STATE_VERSION,
        "streams": {stream.run_id: stream.to_dict() for stream in items},
        "extra": dict(extra or {}),
    }
    # ASCII with escapes: whatever text slipped through still encodes (a lone surrogate never
    # stops the reading position from being saved)
    data = json.dumps(document, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
    path.parent.mkdir(mode=STATE_DIR_MODE, parents=True, exist_ok=True)
    write_atomic(path, data, mode=STATE_FILE_MODE)


def load_state(path: str | Path) -> SavedState:
    """The saved state; a missing, unreadable, corrupt or foreign-version file reads as empty."""
    try:
        data = Path(path).read_bytes()
        document = json.loads(data)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return SavedState()
    if not isinstance(document, dict) or document.get("version") != STATE_VERSION:
        return SavedState()
    streams = document.get("streams")
    extra = document.get("extra")
    return SavedState(
        streams={str(k): v for k, v in streams.items() if isinstance(v, dict)} if isinstance(streams, dict) else {},
        extra=extra if isinstance(extra, dict) else {},
    )
