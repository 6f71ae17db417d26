"""Another lot's `/snapshot.json`, fetched on a thread of its own (never in a tick or the UI).
A lot that stops answering keeps its last good reading, with its age; after UNREACHABLE_SECONDS
without an answer it raises the built-in alert `lot-unreachable` (through the engine, so it is
logged once and acknowledged like any other).

The last reading is kept in the campaign's `.cockpit/lots/NAME.json`, so a one-shot
`cockpit status --lot` and a restarted cockpit still show it after the other lot went quiet."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from cockpit.common.times import iso, parse_ts, utc_now
from cockpit.lots.config import LotSource

UNREACHABLE_RULE = "lot-unreachable"
UNREACHABLE_SECONDS = 60.0
POLL_SECONDS = 2.0
TIMEOUT_SECONDS = 5.0
MAX_BYTES = 16 * 2**20  # a snapshot of 50 runs is some tens of kB: anything this big is not one
SAVE_EVERY_SECONDS = 30.0
CACHE_DIR = Path(".cockpit") / "lots"

Fetch = Callable[[str, float], bytes]


class LotFetchError(Exception):
    """The other lot did not answer with a cockpit snapshot; the message says what happened."""


def fetch_url(url: str, timeout: float) -> bytes:
    """GET `url` directly (no proxy: the address is a tunnel's, on this box)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers={"Accept": "application/json"}), timeout=timeout) as response:
            body = response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as error:
        raise LotFetchError(f"HTTP {error.code} {error.reason}") from None
    except urllib.error.URLError as error:
        reason = error.reason
        raise LotFetchError(getattr(reason, "strerror", None) or str(reason)) from None
    except (OSError, ValueError) as error:  # a timeout, a reset connection
        raise LotFetchError(getattr(error, "strerror", None) or str(error) or type(error).__name__) from None
    if len(body) > MAX_BYTES:
        raise LotFetchError(f"the answer is over {MAX_BYTES // 2**20} MiB: not a cockpit snapshot")
    return body


def parse_snapshot(body: bytes) -> dict[str, Any]:
    """A cockpit `/snapshot.json` (the shape of `status --json`), or LotFetchError saying why not."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise LotFetchError("the answer is not JSON: is the URL another cockpit's --metrics address?") from None
    wanted = {"campaign": str, "lot": dict, "runs": list, "alerts": list, "gpus": list}
    if not isinstance(data, dict) or any(not isinstance(data.get(key), kind) for key, kind in wanted.items()):
        raise LotFetchError("the answer is not a cockpit snapshot (no campaign, lot, runs, alerts and gpus)")
    return data


@dataclass(frozen=True)
class LotReading:
    """What is known of another lot: its last good snapshot and whether it answers now."""

    name: str
    url: str
    snapshot: dict[str, Any] | None = None  # the last good /snapshot.json
    fetched_at: datetime | None = None  # when that snapshot was fetched
    error: str | None = None  # why the last attempt failed; None when it answered
    failing_since: datetime | None = None  # the first failed attempt after the last good one
    attempted: bool = False

    @property
    def reachable(self) -> bool:
        return self.attempted and self.error is None

    def age_seconds(self, now: datetime) -> float | None:
        return None if self.fetched_at is None else max(0.0, (now - self.fetched_at).total_seconds())

    def silent_seconds(self, now: datetime) -> float | None:
        """How long the lot has not answered (from its last good reading, else its first failure)."""
        if self.error is None:
            return None
        since = self.fetched_at or self.failing_since
        return None if since is None else max(0.0, (now - since).total_seconds())

    def unreachable(self, now: datetime) -> bool:
        silent = self.silent_seconds(now)
        return silent is not None and silent >= UNREACHABLE_SECONDS

    def to_json(self, now: datetime) -> dict[str, Any]:
        age, silent = self.age_seconds(now), self.silent_seconds(now)
        return {
            "name": self.name,
            "url": self.url,
            "reachable": self.reachable,
            "fetched_at": iso(self.fetched_at) if self.fetched_at else None,
            "age_seconds": None if age is None else round(age, 1),
            "error": self.error,
            "unreachable_seconds": None if silent is None else round(silent, 1),
            "snapshot": self.snapshot,
        }


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class LotWatcher:
    """One other lot, polled every `interval` seconds on its own thread (or once, by `poll_once`)."""

    def __init__(
        self,
        source: LotSource,
        *,
        campaign_dir: str | os.PathLike[str] | None = None,
        clock: Callable[[], datetime] = utc_now,
        fetch: Fetch = fetch_url,
        interval: float = POLL_SECONDS,
        timeout: float = TIMEOUT_SECONDS,
    ):
        self.source = source
        self.clock = clock
        self.fetch = fetch
        self.interval = interval
        self.timeout = timeout
        self.cache = Path(campaign_dir) / CACHE_DIR / f"{source.name}.json" if campaign_dir is not None else None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved_at: datetime | None = None
        self._reading = self._load() or LotReading(source.name, source.url)

    # ------------------------------------------------------------ the last reading, kept on disk

    def _load(self) -> LotReading | None:
        if self.cache is None:
            return None
        try:
            data = json.loads(self.cache.read_text(encoding="utf-8"))
            if data.get("url") != self.source.url:  # the name now points elsewhere: that reading is another lot's
                return None
            snapshot = data.get("snapshot")
            return LotReading(
                self.source.name, self.source.url,
                snapshot=snapshot if isinstance(snapshot, dict) else None,
                fetched_at=parse_ts(data["fetched_at"]) if isinstance(data.get("fetched_at"), str) else None,
                error=data.get("error") if isinstance(data.get("error"), str) else None,
                failing_since=parse_ts(data["failing_since"]) if isinstance(data.get("failing_since"), str) else None,
            )
        except (OSError, ValueError, AttributeError, TypeError):
            return None  # no cache, or one that cannot be trusted: start from nothing

    def save(self) -> None:
        reading = self._reading
        if self.cache is None or not reading.attempted:
            return
        body = {
            "url": reading.url,
            "fetched_at": iso(reading.fetched_at) if reading.fetched_at else None,
            "error": reading.error,
            "failing_since": iso(reading.failing_since) if reading.failing_since else None,
            "snapshot": reading.snapshot,
        }
        try:
            self.cache.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=f".{self.cache.name}.", dir=self.cache.parent)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(body, out, allow_nan=False)
            os.replace(temporary, self.cache)
        except (OSError, ValueError):
            pass  # the reading stays in memory; only a restart would lose it
        self._saved_at = self.clock()

    # ------------------------------------------------------------ polling

    def reading(self) -> LotReading:
        """The latest reading (never blocks)."""
        return self._reading

    def poll_once(self) -> LotReading:
        """One fetch (blocking, up to `timeout`): the reading it leaves."""
        try:
            snapshot = parse_snapshot(self.fetch(self.source.snapshot_url, self.timeout))
        except LotFetchError as error:
            now = self.clock()
            with self._lock:
                before = self._reading
                self._reading = replace(
                    before, error=str(error) or "no answer", attempted=True,
                    failing_since=before.failing_since if before.error is not None and before.failing_since else now,
                )
                flipped = before.error is None
        else:
            now = self.clock()
            with self._lock:
                flipped = self._reading.error is not None or self._reading.snapshot is None
                self._reading = replace(self._reading, snapshot=snapshot, fetched_at=now, error=None, failing_since=None, attempted=True)
        if flipped or self._saved_at is None or (now - self._saved_at).total_seconds() >= SAVE_EVERY_SECONDS:
            self.save()
        return self._reading

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception as error:  # never the end of the watching: said as this lot's error
                with self._lock:
                    self._reading = replace(self._reading, error=f"{type(error).__name__}: {error}", attempted=True,
                                            failing_since=self._reading.failing_since or self.clock())
            self._stop.wait(self.interval)

    def start(self) -> LotWatcher:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"cockpit-lot-{self.source.name}", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 1)
        self.save()


class OtherLots:
    """The other lots of one cockpit: their watchers, their readings, and their alerts for the engine."""

    def __init__(self, watchers: Sequence[LotWatcher]):
        self.watchers = list(watchers)

    @classmethod
    def of(cls, sources: Sequence[LotSource], campaign_dir: str | os.PathLike[str] | None, **options: Any) -> OtherLots:
        return cls([LotWatcher(source, campaign_dir=campaign_dir, **options) for source in sources])

    def __bool__(self) -> bool:
        return bool(self.watchers)

    def start(self) -> OtherLots:
        for watcher in self.watchers:
            watcher.start()
        return self

    def poll_once(self) -> list[LotReading]:
        """Each lot fetched once, side by side (a one-shot `status`: the slowest lot sets the wait)."""
        threads = [threading.Thread(target=w.poll_once, daemon=True) for w in self.watchers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.readings()

    def readings(self) -> list[LotReading]:
        return [watcher.reading() for watcher in self.watchers]

    def close(self) -> None:
        for watcher in self.watchers:
            watcher._stop.set()
        for watcher in self.watchers:
            watcher.close()

    def alerts(self, now: datetime) -> list[tuple[str, dict[str, Any]]]:
        """(key, alert fields) of each lot silent for UNREACHABLE_SECONDS or more: the engine's hook."""
        raised = []
        for reading in self.readings():
            if not reading.unreachable(now):
                continue
            silent = reading.silent_seconds(now) or 0.0
            age = reading.age_seconds(now)
            kept = (
                f"its last reading, {_ago(age)} old, is still shown" if age is not None
                else "there is no reading of it yet"
            )
            raised.append((
                f"{UNREACHABLE_RULE}:{reading.name}",
                {
                    "rule": UNREACHABLE_RULE, "run": None, "lot": reading.name, "severity": "warning", "once": True,
                    "message": f"lot {reading.name} ({reading.url}) has not answered for {_ago(silent)} "
                               f"({reading.error}); {kept}. Check its cockpit and the tunnel to it.",
                },
            ))
        return raised
