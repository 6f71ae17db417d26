"""Delivery, off the tick and off the UI thread: a notifier follows the run log on its own thread,
sends each new alert, stop, window warning or closing (as `[notify] on` asks) to every channel,
retries a failing channel with backoff for ten minutes and then records one `notify_failed`, and
fetches the heartbeat URL every few minutes while the engine ticks.

The engine never waits on it: `after_tick` only hands over the latest snapshot and wakes the
thread. `step()` is one pass of the thread's loop, callable directly with an injected clock.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from cockpit.common.text import escape_control
from cockpit.common.times import parse_ts, utc_now
from cockpit.notify.claim import NOTIFIED, NOTIFY_FAILED, Item, LedgerFollower, delivery_lock, item_of, record
from cockpit.notify.config import Channel, NotifyConfig, _mask_in, _rough_mask, asset
from cockpit.notify.message import compose
from cockpit.record.runlog import RunLog, RunLogError

RETRY_SECONDS = 600.0  # a failing channel is retried this long, then given up (one notify_failed)
FIRST_BACKOFF_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 120.0
TIMEOUT_SECONDS = 10.0  # one attempt on one channel, connection and answer
GATHER_SECONDS = 0.5  # an auto-stop's alert and its stop, written a moment apart, go as one message
POLL_SECONDS = 1.0  # the run log is looked at this often between ticks' wake-ups

Send = Callable[[Channel, str, str, float], "str | None"]  # → None when delivered, else the error
Fetch = Callable[[str, float], "str | None"]


def apprise_send(channel: Channel, title: str, body: str, timeout: float) -> str | None:
    """One attempt through apprise; None when the service took it, else its error (URL masked)."""
    if channel.problem:
        return channel.problem
    import apprise

    plugin = apprise.Apprise.instantiate(channel.url, asset=asset())
    if plugin is None:
        return "apprise cannot load this URL"
    for name in ("socket_connect_timeout", "socket_read_timeout"):
        if hasattr(plugin, name):
            setattr(plugin, name, timeout)
    sender = apprise.Apprise(asset=asset())
    sender.add(plugin)
    try:
        with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as logs:
            delivered = sender.notify(body=body, title=title)
            said = logs.getvalue()
    except Exception as error:  # a plugin's own bug: a failed attempt, retried like any other
        return _mask_in(f"{type(error).__name__}: {error}", channel.url)
    if delivered:
        return None
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    return _mask_in(escape_control(" ".join(lines[-2:]) or "the service did not take the message"), channel.url)


def http_get(url: str, timeout: float) -> str | None:
    """The heartbeat: one GET; None when it answered 2xx/3xx, else why not (URL masked)."""
    request = urllib.request.Request(url, headers={"User-Agent": "campaign-cockpit heartbeat"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 (the user's own URL)
            answer.read(1024)
        return None
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code} {error.reason}"
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        return _mask_in(escape_control(f"{reason}"), url)


@dataclass
class _Retry:
    attempts: int = 0
    next_at: datetime | None = None
    error: str | None = None


class Notifier:
    """Sends the campaign's notifications on every channel of `config`, once across all the
    cockpits on the campaign (the run log is the ledger), from its own thread once started."""

    def __init__(
        self,
        campaign: Any,
        config: NotifyConfig,
        *,
        clock: Callable[[], datetime] = utc_now,
        send: Send = apprise_send,
        fetch: Fetch = http_get,
        retry_seconds: float = RETRY_SECONDS,
        first_backoff_seconds: float = FIRST_BACKOFF_SECONDS,
        max_backoff_seconds: float = MAX_BACKOFF_SECONDS,
        timeout_seconds: float = TIMEOUT_SECONDS,
        gather_seconds: float = GATHER_SECONDS,
        poll_seconds: float = POLL_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        log: RunLog | None = None,
    ):
        self.campaign_id = campaign.id
        self.directory = campaign.directory
        self.config = config
        self.clock = clock
        self.send = send
        self.fetch = fetch
        self.retry_seconds = retry_seconds
        self.first_backoff = first_backoff_seconds
        self.max_backoff = max_backoff_seconds
        self.timeout = timeout_seconds
        self.gather = gather_seconds
        self.poll = poll_seconds
        self.monotonic = monotonic
        self.log = log or RunLog(self.directory, clock=clock)
        self.follower = LedgerFollower(self.log)
        # Events older than the retry window when this notifier starts were someone else's to send
        # (or came before notifications were set up): a first start never floods the phone.
        self.since = clock() - timedelta(seconds=retry_seconds)
        self._pending: dict[str, dict[int, Item]] = {c.shown: {} for c in config.channels}
        self._seen_at: dict[int, float] = {}  # seq → when this notifier first saw it (monotonic)
        self._retry: dict[str, _Retry] = {c.shown: _Retry() for c in config.channels}
        self._snapshot: Any = None
        self._ticks = 0
        self._heartbeat_ticks = 0
        self._heartbeat_next: datetime | None = None
        self._problems: dict[str, str] = {}  # what is wrong now (heartbeat, a channel retrying, a bug)
        self._ledger_notices: list[str] = []  # channels that gave up, as the run log says
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent: list[dict[str, Any]] = []  # the `notified` events this notifier wrote
        self.heartbeats = 0

    # ------------------------------------------------------------ what the engine side calls

    def after_tick(self, snapshot: Any) -> None:
        """Hand over the latest snapshot (for the message's clock line) and wake the thread. Never blocks."""
        self._snapshot = snapshot
        self._ticks += 1
        self._wake.set()

    def notices(self) -> list[str]:
        """What the views show: config problems, channels that gave up, a failing heartbeat."""
        with self._lock:
            live, ledger = list(self._problems.values()), list(self._ledger_notices)
        return [*self.config.problems, *ledger, *live]

    def start(self) -> "Notifier":
        self._thread = threading.Thread(target=self._run, name="cockpit-notify", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread; what is due is tried once more first, waited for 3 s at most (what is
        left unsent then is sent by another cockpit, or by the next start within ten minutes)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=3.0)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                delay = self.step()
            except Exception as error:  # the notifier runs for days: a bad pass is said, not fatal
                self._problem("bug", f"notifications: {type(error).__name__}: {error}; retrying")
                delay = 5.0
            self._wake.wait(delay)
            self._wake.clear()
        try:
            self.step(flush=True)
        except Exception:
            pass

    def _problem(self, key: str, text: str | None) -> None:
        with self._lock:
            if text is None:
                self._problems.pop(key, None)
            else:
                self._problems[key] = text

    # ------------------------------------------------------------ one pass

    def step(self, *, flush: bool = False) -> float:
        """Read the run log's new lines, send what is due, keep the heartbeat; the seconds until
        the next thing falls due (at most the poll interval)."""
        now = self.clock()
        self._follow()
        wait = self.poll
        for channel in self.config.channels:
            pending = self._pending[channel.shown]
            if not pending:
                continue
            due_in = self._due_in(channel, now, flush)
            if due_in > 0:
                wait = min(wait, due_in)
                continue
            self._deliver(channel, now)
        wait = min(wait, self._heartbeat(now))
        return max(0.05, wait)

    def _follow(self) -> None:
        """The run log's new lines into the ledger and the queues; the ledger's notices copied for
        the tick's thread (which never reads the ledger while this thread changes it)."""
        self._collect(self.follower.follow())
        notices = self.follower.ledger.notices()
        with self._lock:
            self._ledger_notices = notices

    def _collect(self, events: list[dict[str, Any]]) -> None:
        ledger = self.follower.ledger
        for event in events:
            item = item_of(event)
            if item is None or item.kind not in self.config.kinds:
                continue
            moment = parse_ts(event.get("ts")) if isinstance(event.get("ts"), str) else None
            if moment is None or moment < self.since:
                continue
            self._seen_at.setdefault(item.seq, self.monotonic())
            for channel in self.config.channels:
                if (item.seq, channel.shown) not in ledger.done:
                    self._pending[channel.shown][item.seq] = item
        for channel in self.config.channels:  # sent by another cockpit, or acknowledged: not ours to send
            pending = self._pending[channel.shown]
            for seq in [s for s in pending if (s, channel.shown) in ledger.done or s in ledger.acknowledged]:
                del pending[seq]

    def _due_in(self, channel: Channel, now: datetime, flush: bool) -> float:
        retry = self._retry[channel.shown]
        waits = [0.0]
        if retry.next_at is not None:
            waits.append((retry.next_at - now).total_seconds())
        if not flush:
            newest = max(self._seen_at.get(seq, 0.0) for seq in self._pending[channel.shown])
            waits.append(self.gather - (self.monotonic() - newest))
        last = self.follower.ledger.last_sent_ts
        if self.config.min_interval_seconds > 0 and last and retry.attempts == 0:
            moment = parse_ts(last)
            if moment is not None:
                waits.append((moment + timedelta(seconds=self.config.min_interval_seconds) - now).total_seconds())
        return max(waits)

    def _deliver(self, channel: Channel, now: datetime) -> None:
        shown = channel.shown
        retry = self._retry[shown]
        with delivery_lock(self.directory):
            self._follow()  # what another cockpit sent while we waited is left out
            items = sorted(self._pending[shown].values(), key=lambda i: i.seq)
            if not items:
                self._retry[shown] = _Retry()
                return
            title, body = compose(
                items, campaign_id=self.campaign_id, directory=self.directory, snapshot=self._snapshot,
                signals=self.follower.ledger.signals,
            )
            started = time.monotonic()
            error = self.send(channel, title, body, self.timeout)
            now = self.clock()
            retry.attempts += 1
            fields: dict[str, Any] = {
                "key": items[0].key,
                "keys": list(dict.fromkeys(i.key for i in items)),
                "seqs": [i.seq for i in items],
                "kinds": sorted({i.kind for i in items}),
                "channel": shown,
                "attempts": retry.attempts,
            }
            if error is None:
                first = min((parse_ts(i.event["ts"]) for i in items if isinstance(i.event.get("ts"), str)), default=None)
                fields.update(outcome="sent", send_seconds=round(time.monotonic() - started, 3))
                if first is not None:
                    fields["latency_seconds"] = round((now - first).total_seconds(), 3)
                self._forget(shown, items)
                self._record(NOTIFIED, fields)
                self._retry[shown] = _Retry()
                self._problem(f"retry:{shown}", None)
                return
            oldest = min((parse_ts(i.event["ts"]) for i in items if isinstance(i.event.get("ts"), str)), default=now)
            if (now - (oldest or now)).total_seconds() >= self.retry_seconds:
                fields.update(outcome="failed", error=error)
                self._forget(shown, items)
                self._record(NOTIFY_FAILED, fields)
                self._retry[shown] = _Retry()
                self._problem(f"retry:{shown}", None)
                return
            backoff = min(self.max_backoff, self.first_backoff * 2 ** (retry.attempts - 1))
            retry.next_at, retry.error = now + timedelta(seconds=backoff), error
            self._problem(
                f"retry:{shown}",
                f"notifications to {shown} failing ({error}); attempt {retry.attempts}, retrying in {backoff:.0f} s",
            )

    def _forget(self, shown: str, items: list[Item]) -> None:
        """The items of a message sent (or given up): out of the channel's queue; what arrived
        meanwhile stays for the next message."""
        for item in items:
            self._pending[shown].pop(item.seq, None)
            if not any(item.seq in queue for queue in self._pending.values()):
                self._seen_at.pop(item.seq, None)

    def _record(self, kind: str, fields: dict[str, Any]) -> None:
        try:
            event = record(self.log, kind, fields)
        except RunLogError as error:  # sent all the same: say it could not be recorded
            self._problem("record", f"a notification's outcome could not be recorded: {error}")
            return
        self._problem("record", None)
        self._follow()  # an event written meanwhile is queued, not skipped
        if kind == NOTIFIED:
            self.sent.append(event)

    # ------------------------------------------------------------ the heartbeat

    def _heartbeat(self, now: datetime) -> float:
        """Fetch the heartbeat URL when due, if the engine ticked since the last one: a watcher
        whose engine hangs goes quiet, and the service off the box says so."""
        url = self.config.heartbeat_url
        if not url:
            return self.poll
        if self._heartbeat_next is not None and now < self._heartbeat_next:
            return (self._heartbeat_next - now).total_seconds()
        if self._ticks == self._heartbeat_ticks:
            return self.poll  # no tick since the last beat: nothing to vouch for
        self._heartbeat_ticks = self._ticks
        self._heartbeat_next = now + timedelta(seconds=self.config.heartbeat_seconds)
        error = self.fetch(url, self.timeout)
        if error is None:
            self.heartbeats += 1
            self._problem("heartbeat", None)
        else:
            self._problem("heartbeat", f"heartbeat to {self.config.heartbeat_shown or _rough_mask(url)} failed: {error}")
        return self.config.heartbeat_seconds


class NotifyingSource:
    """The engine with a notifier beside it: each tick's snapshot feeds the notifier (which sends
    on its own thread), and the notifier's notices join the snapshot's."""

    def __init__(self, engine: Any, notifier: Notifier):
        self.engine = engine
        self.notifier = notifier

    def tick(self) -> Any:
        snapshot = self.engine.tick()
        self.notifier.after_tick(snapshot)
        extra = self.notifier.notices()
        if extra:
            snapshot = replace(snapshot, notices=tuple(dict.fromkeys((*snapshot.notices, *extra))))
        return snapshot

    def close(self) -> None:
        self.notifier.close()
        self.engine.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def alongside(campaign: Any, engine: Any, *, config: NotifyConfig | None = None, **options: Any) -> Any:
    """`engine`, with notifications and the heartbeat when any are configured (else `engine` itself)."""
    from cockpit.notify.config import load_config

    config = config if config is not None else load_config(campaign)
    if not config.active and not config.problems:
        return engine
    return NotifyingSource(engine, Notifier(campaign, config, clock=getattr(engine, "clock", utc_now), **options).start())
