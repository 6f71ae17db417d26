"""A run's metrics stream (`runs/<run-id>/metrics.jsonl`), read incrementally: new bytes only,
complete lines only, each good record handed to the run's track (`cockpit.live.track`) and to an
observer (the stop rules). Where reading stopped is saved in `.cockpit/` (`cockpit.live.saved_state`).

Only byte offsets and small summaries stay in memory (toolong's way with logs): a 30-day stream
costs the same memory as a 30-minute one. Bad lines are counted, never fatal.

This module is the hot path of a cold start (a million lines, bench/ingest.py): the reader and
`MetricsStream._consume` stay whole on purpose, with the track's state in locals written back once
per batch and the common line taken through C-level dict updates; split into per-line calls across
modules, each of a million lines would pay the calls and the reloading of that state.
"""

from __future__ import annotations

import json
import os
import stat
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from cockpit.live.metric_values import (
    NONFINITE_TEXT,
    NONFINITE_TEXT_MAX,
    NOT_UNICODE,
    RESERVED,
    STEP_MAX,
    TS_MAX,
    TS_MIN,
    bad_step_reason,
    bad_ts_reason,
    big_int_as_float,
    clean_text_fields,
    is_number,
    safe_text,
    ts_seconds,
)
from cockpit.live.track import RATE_SPACING_S, RunTrack

MAX_LINE_BYTES = 1 << 20  # a metrics line longer than this is skipped and counted, never held
CHUNK_BYTES = 1 << 22  # read 4 MiB at a time: few system calls, bounded memory
HEAD_BYTES = 64  # the first bytes of the file: which writing of it this is (its generation)
TAIL_BYTES = 64  # the bytes just before the offset, read again with the new ones: a rewrite in place shows
_FAST_LINE_BYTES = 4096  # lines shorter than this whose values hold no text take the fast path

Observer = Callable[[dict, int, RunTrack], None]
"""Called with (record, line number, track) for every good record, after the track took it in."""


@dataclass(slots=True)
class StreamPosition:
    """Where the reader stands in the file: only offsets and identity, never content."""

    offset: int = 0  # bytes consumed: always the start of a line (or inside a skipped long one)
    inode: int | None = None
    device: int | None = None
    size: int = 0
    lines: int = 0  # complete lines consumed
    head: bytes = b""  # the file's first consumed bytes (at most HEAD_BYTES)
    tail: bytes = b""  # the consumed bytes just before `offset` (at most TAIL_BYTES)
    skipping: bool = False  # inside a line longer than the cap: discard up to its newline
    mtime: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset": self.offset, "inode": self.inode, "device": self.device, "size": self.size,
            "lines": self.lines, "head": self.head.hex(), "skipping": self.skipping, "mtime": self.mtime,
            "tail": self.tail.hex(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StreamPosition":
        position = cls(
            offset=data["offset"], inode=data.get("inode"), device=data.get("device"), size=data.get("size", 0),
            lines=data["lines"], head=bytes.fromhex(data.get("head", "")), skipping=bool(data.get("skipping", False)),
            mtime=data.get("mtime"), tail=bytes.fromhex(data.get("tail", "")),
        )
        if len(position.tail) > min(TAIL_BYTES, position.offset):
            raise ValueError("tail")
        for name in ("offset", "size", "lines"):
            value = getattr(position, name)
            if type(value) is not int or value < 0:
                raise ValueError(name)
        for name in ("inode", "device"):
            if getattr(position, name) is not None and type(getattr(position, name)) is not int:
                raise ValueError(name)
        if position.mtime is not None and not is_number(position.mtime):
            raise ValueError("mtime")
        return position


@dataclass(slots=True)  # not frozen: made for every run every tick, and a frozen one costs 3 × to build
class PollResult:
    """What one poll of a metrics file found (a fresh one each poll, read by the caller only)."""

    lines: int = 0  # new complete lines
    records: int = 0
    bad: int = 0
    reset: bool = False  # the file was truncated or replaced and read again from its start
    reset_reason: str | None = None  # "truncated" | "replaced" | "rewritten"
    missing: bool = False  # no file at the path (not yet written, or deleted)
    error: str | None = None  # the file could not be read, in words
    more: bool = False  # stopped at max_bytes: poll again to read the rest
    pending_bytes: int = 0  # an incomplete last line waiting for its newline


class MetricsStream:
    """One run's metrics file: where the reader stands and what the run said so far.

    Not thread-safe: one worker polls a stream at a time.
    """

    def __init__(
        self,
        run_id: str,
        path: str | Path,
        *,
        position: StreamPosition | None = None,
        track: RunTrack | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
        chunk_bytes: int = CHUNK_BYTES,
    ):
        self.run_id = run_id
        self._path = Path(path)
        self._path_text = os.fspath(self._path)  # what the system calls take, made once (polled every tick)
        self.position = position or StreamPosition()
        self.track = track or RunTrack()
        self.max_line_bytes = max_line_bytes
        self.chunk_bytes = max(1, chunk_bytes)
        self.missing = False
        self.error: str | None = None  # why the last poll could not read the file, in words
        self._ts_text: str | None = None  # the last ISO ts parsed, and its value: lines repeat them
        self._ts_value: float | None = None
        # The file's descriptor, kept open between polls while the file keeps growing (an open, an
        # fstat and a close a run a tick saved), with the (device, inode) it was opened on: a path
        # that names another file now, or none, closes it.
        self._fd: int | None = None
        self._fd_file: tuple[int, int] | None = None

    @property
    def path(self) -> Path:
        return self._path

    # ------------------------------------------------------------ polling

    def poll(
        self, observer: Observer | None = None, *, max_bytes: int | None = None, now: float | None = None
    ) -> PollResult:
        """Read the complete lines written since the last poll and hand each record to `observer`.

        `now` (epoch seconds, default the system clock) dates the events read in this poll that
        carry no ts of their own: a `started` line without ts started by the time it was read.

        Never raises for what is in the file or for the file vanishing; an unreadable path comes
        back as `error`.
        """
        result = self._poll(observer, max_bytes, now)
        self.error = result.error
        return result

    def _poll(self, observer: Observer | None, max_bytes: int | None, now: float | None) -> PollResult:
        # Looked at before it is opened: a FIFO or a device is never opened for reading (an open
        # can block, rewind a tape, or read forever from /dev/zero); O_NONBLOCK guards the race.
        try:
            info = os.stat(self._path_text)
            kind = _not_a_file(info.st_mode)
        except (FileNotFoundError, NotADirectoryError):
            self.close()
            self.missing = True
            return PollResult(missing=True)
        except OSError as error:
            self.close()
            return PollResult(error=f"cannot read {self.path}: {error.strerror or error}")
        self.missing = False
        if kind:
            self.close()
            return PollResult(error=f"{self.path} is {kind}, not a metrics file")
        position = self.position
        if (info.st_size == position.offset and info.st_ino == position.inode and info.st_dev == position.device
                and info.st_mtime == position.mtime):
            self.close()  # nothing new since the last read: not opened, and not held open while quiet
            return PollResult()
        fd = self._fd
        if fd is None or self._fd_file != (info.st_dev, info.st_ino):
            self.close()
            try:
                fd = os.open(self._path_text, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
            except (FileNotFoundError, NotADirectoryError):
                self.missing = True
                return PollResult(missing=True)
            except OSError as error:
                return PollResult(error=f"cannot read {self.path}: {error.strerror or error}")
            try:
                info = os.fstat(fd)
            except OSError as error:
                os.close(fd)
                return PollResult(error=f"cannot read {self.path}: {error.strerror or error}")
            kind = _not_a_file(info.st_mode)
            if kind:  # swapped between the look and the open
                os.close(fd)
                return PollResult(error=f"{self.path} is {kind}, not a metrics file")
            self._fd, self._fd_file = fd, (info.st_dev, info.st_ino)
        # else: the path still names the very file the descriptor reads, so its stat is the fstat
        try:
            return self._read(fd, info, observer, max_bytes, time.time() if now is None else now)
        except OSError as error:
            self.close()
            return PollResult(error=f"cannot read {self.path}: {error.strerror or error}")

    def close(self, _close: Callable[[int], None] = os.close) -> None:
        """Release the kept descriptor (the next poll opens the file again). `os.close` is bound
        here, not looked up: a stream freed late in the interpreter's shutdown finds `os` gone."""
        fd, self._fd, self._fd_file = getattr(self, "_fd", None), None, None  # (a half-made stream has none)
        if fd is not None:
            try:
                _close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()

    @property
    def generation(self) -> str | None:
        """Which writing of the file this is: its inode and a digest of its first line. A rerun
        that rewrites the file (in place, or a new file that got the old inode number back) is a
        new generation, so its alerts are new even at the same line numbers."""
        position = self.position
        if position.inode is None:
            return None
        head = position.head.split(b"\n", 1)[0]
        return f"{position.inode}-{zlib.crc32(head):08x}"

    def _read(self, fd: int, info: os.stat_result, observer: Observer | None, max_bytes: int | None,
              polled_at: float) -> PollResult:
        position = self.position
        reason = None
        if position.inode is not None and (info.st_ino != position.inode or info.st_dev != position.device):
            reason = "replaced"
        elif info.st_size < position.offset:
            reason = "truncated"
        first = b""  # the first new bytes, read in one call with the tail they must follow
        tail = position.tail
        if reason is None and tail:
            first = os.pread(fd, len(tail) + min(self.chunk_bytes, info.st_size - position.offset), position.offset - len(tail))
            if first[:len(tail)] != tail:
                reason, first = "rewritten", b""  # other bytes where ours were: written again in place
            else:
                first = first[len(tail):]
        elif reason is None and position.head and os.pread(fd, len(position.head), 0) != position.head:
            reason = "rewritten"  # a position saved before tails were kept: the head says it
        if reason is not None:
            self.position = position = StreamPosition()
            self.track.begin_again(reason)
            tail = b""
        position.inode, position.device = info.st_ino, info.st_dev
        position.mtime = info.st_mtime

        end = info.st_size  # read what was there when we looked; what comes later is the next poll's
        offset = start = position.offset
        lines_before, records, bad = position.lines, 0, 0
        cap, chunk_bytes = self.max_line_bytes, self.chunk_bytes
        pending = b""
        more = False
        while offset + len(pending) < end:
            read_at = offset + len(pending)
            if first:
                chunk, first = first, b""
            else:
                chunk = os.pread(fd, min(chunk_bytes, end - read_at), read_at)
            if not chunk:
                break  # the file shrank under us: the next poll notices
            if position.skipping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    offset = read_at + len(chunk)
                    tail = _tail_after(tail, chunk, len(chunk))
                    continue
                position.skipping = False
                position.lines += 1
                self.track.note_bad(position.lines, f"longer than {cap} bytes: skipped")
                bad += 1
                offset = read_at + newline + 1
                tail = _tail_after(tail, chunk, newline + 1)
                chunk = chunk[newline + 1:]
            data = pending + chunk if pending else chunk
            pieces = data.split(b"\n")
            pending = pieces.pop()
            if pieces:
                got, wrong = self._consume(pieces, observer, info.st_mtime, polled_at)
                records += got
                bad += wrong
                taken = len(data) - len(pending)
                offset += taken
                tail = _tail_after(tail, data, taken)
            if len(pending) > cap:
                position.skipping = True  # never hold more than the cap of one line
                offset += len(pending)
                tail = _tail_after(tail, pending, len(pending))
                pending = b""
            if max_bytes is not None and offset + len(pending) - start >= max_bytes and offset + len(pending) < end:
                more = True
                break
        position.offset = offset
        position.tail = tail
        position.size = info.st_size
        if len(position.head) < HEAD_BYTES and offset > len(position.head):
            position.head = os.pread(fd, min(HEAD_BYTES, offset), 0)
        self.track.lines = position.lines
        return PollResult(
            lines=position.lines - lines_before,
            records=records,
            bad=bad,
            reset=reason is not None,
            reset_reason=reason,
            more=more,
            pending_bytes=len(pending) if not position.skipping else 0,
        )

    def _consume(self, pieces: list[bytes], observer: Observer | None, mtime: float, polled_at: float) -> tuple[int, int]:
        """Take complete lines in. This is the hot path (a million lines on a cold start), so it
        keeps state in locals, writes the track back once per batch, and takes the common line
        (short, parsed by orjson, numbers only) through C-level dict updates.

        `mtime` dates a plain line without ts (the stalled rule measures from it); `polled_at`, the
        time of this poll, dates an event without ts. Whatever a line holds, an exception while
        taking it in makes it a bad line of this run: it never leaves the poll."""
        track = self.track
        metrics = track.metrics
        points = track.rate_points
        known_names = len(metrics)
        loads = orjson.loads
        decode_error = orjson.JSONDecodeError
        cap = self.max_line_bytes
        line = self.position.lines
        records = bad = 0
        first_ts, last_ts, last_line_ts = track.first_ts, track.last_ts, track.last_line_ts
        last_step = track.last_step
        rate_ts, rate_step = track.rate_last_ts, track.rate_last_step
        anchor = points[-1][0] if points else None  # time of the newest rate point
        ts_text, ts_value = self._ts_text, self._ts_value
        for raw in pieces:
            line += 1
            if len(raw) > cap:
                track.note_bad(line, f"longer than {cap} bytes: skipped")
                bad += 1
                continue
            try:
                strict = True  # orjson parsed it: every float in it is finite, every text valid
                try:
                    record = loads(raw)
                except decode_error:
                    record, reason = _parse_slowly(raw)
                    if reason is not None:
                        if reason != "blank":
                            track.note_bad(line, reason)
                            bad += 1
                        continue
                    strict = False
                if type(record) is not dict:
                    track.note_bad(line, "not a JSON object")
                    bad += 1
                    continue
                if not strict and b"\\u" in raw and clean_text_fields(record):
                    track.note_bad_field(line, NOT_UNICODE)
                records += 1
                ts = record.get("ts")
                kind = type(ts)
                if (kind is float or kind is int) and TS_MIN <= ts <= TS_MAX:
                    pass  # epoch seconds: the common case
                elif ts is not None:
                    if kind is str and ts == ts_text:
                        seconds = ts_value
                    else:
                        seconds = ts_seconds(ts)
                        if kind is str:
                            ts_text, ts_value = ts, seconds
                    if seconds is None:
                        track.note_bad_field(line, bad_ts_reason(ts))
                    ts = seconds
                if ts is not None:
                    if first_ts is None:
                        first_ts = ts
                    last_ts = last_line_ts = ts
                else:
                    last_line_ts = mtime
                event = record.get("event")
                if event is None:
                    step = record.get("step")
                    if type(step) is int and -STEP_MAX <= step <= STEP_MAX:
                        if (last_step is not None and step < last_step) or ts is None or rate_ts is None or ts < rate_ts:
                            # rare: a resume to an earlier step, no time, time going back, first point
                            track.rate_last_ts, track.rate_last_step = rate_ts, rate_step
                            track.note_step(step, ts)
                            rate_ts, rate_step = track.rate_last_ts, track.rate_last_step
                            anchor = points[-1][0] if points else None
                        else:
                            if anchor is None or ts - anchor >= RATE_SPACING_S:
                                points.append((ts, step))
                                anchor = ts
                            rate_ts, rate_step = ts, step
                        last_step = track.last_step = step
                    elif step is not None:
                        track.note_bad_field(line, bad_step_reason(step))
                    if strict and len(raw) < _FAST_LINE_BYTES and raw.count(b'"') == 2 * len(record):
                        # no text values at all, so nothing non-finite: keep every value as is
                        # (lists and booleans are filtered when read; short lines keep memory small)
                        metrics.update(record)
                    else:
                        nonfinite = None
                        for name, value in record.items():
                            kind = type(value)
                            if kind is float:
                                # NaN or ±Infinity (from the fallback parser); a NaN ts is no metric
                                if value - value != 0.0 and name not in RESERVED:
                                    nonfinite = name
                            elif kind is str:
                                if len(value) > NONFINITE_TEXT_MAX:
                                    continue
                                value = NONFINITE_TEXT.get(value.lower())
                                if value is None:
                                    continue
                                record[name] = value  # observers see the float, not the text
                                if name not in RESERVED:
                                    nonfinite = name
                            elif kind is int:
                                if not -STEP_MAX <= value <= STEP_MAX:
                                    # only the fallback parser yields such integers: keep them usable as floats
                                    value = big_int_as_float(value)
                                    record[name] = value
                                    if value - value != 0.0 and name not in RESERVED:
                                        nonfinite = name
                            else:
                                continue
                            metrics[name] = value
                        if nonfinite is not None:
                            track.nonfinite_lines += 1
                            track.nonfinite_line = line
                            track.nonfinite_metric = nonfinite
                    if len(metrics) != known_names:
                        track._check_new_metric_names(known_names)
                        known_names = len(metrics)
                else:
                    track.rate_last_ts, track.rate_last_step = rate_ts, rate_step
                    track.take_event(record, event, line, ts if ts is not None else polled_at, ts_read=ts is None)
                    rate_ts, rate_step, last_step = track.rate_last_ts, track.rate_last_step, track.last_step
                    anchor = points[-1][0] if points else None
                if observer is not None:
                    observer(record, line, track)
            except Exception as error:  # a bug meeting an odd line costs that line, not the tick
                track.note_bad(line, f"could not be taken in ({type(error).__name__}: {safe_text(str(error)[:200])[0]}): skipped")
                bad += 1
                anchor = points[-1][0] if points else None
                known_names = len(metrics)
        self.position.lines = line
        track.records += records
        track.first_ts, track.last_ts, track.last_line_ts = first_ts, last_ts, last_line_ts
        track.rate_last_ts, track.rate_last_step = rate_ts, rate_step
        self._ts_text, self._ts_value = ts_text, ts_value
        return records, bad

    # ------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "position": self.position.to_dict(), "track": self.track.to_dict()}

    @classmethod
    def from_dict(cls, run_id: str, path: str | Path, data: Mapping[str, Any]) -> "MetricsStream | None":
        """A saved stream, or None when it is unusable or was for another path (read afresh)."""
        try:
            if str(data["path"]) != str(Path(path)):
                return None
            position = StreamPosition.from_dict(data["position"])
            track = RunTrack.from_dict(data["track"])
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        track.lines = position.lines
        return cls(run_id, path, position=position, track=track)


def _tail_after(tail: bytes, data: bytes, end: int) -> bytes:
    """The last TAIL_BYTES consumed once `data[:end]` is consumed after `tail` (no copy of `data`)."""
    return (tail + data[max(0, end - TAIL_BYTES):end])[-TAIL_BYTES:]


def _not_a_file(mode: int) -> str | None:
    """What a path is when it is not a regular file, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _parse_slowly(raw: bytes) -> tuple[Any, str | None]:
    """The lines orjson refuses: NaN/Infinity literals parse here; the rest get a reason."""
    if not raw.strip():
        return None, "blank"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "nested too deeply"
    except (ValueError, TypeError):  # JSONDecodeError, and ints past Python's digit limit
        return None, "not JSON"
