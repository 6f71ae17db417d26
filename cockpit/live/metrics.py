"""A run's metrics stream (`runs/<run-id>/metrics.jsonl`): read it incrementally, new bytes only,
and keep a bounded summary of the run (`RunTrack`) that survives restarts through `.cockpit/`.

Only byte offsets and small summaries stay in memory (toolong's way with logs): a 30-day stream
costs the same memory as a 30-minute one. Bad lines are counted, never fatal.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from cockpit.common.layout import DIR_MODE, FILE_MODE, METRICS_STATE_FILE, STATE_DIR

MAX_LINE_BYTES = 1 << 20  # a metrics line longer than this is skipped and counted, never held
CHUNK_BYTES = 1 << 22  # read 4 MiB at a time: few system calls, bounded memory
HEAD_BYTES = 64  # the first bytes of the file, to notice a file rewritten in place past our offset
BAD_LINES_KEPT = 20
TRUNCATIONS_KEPT = 20
CONFIGS_KEPT = 16
METRICS_KEPT = 256  # distinct metric names remembered per run
METRIC_NAME_MAX = 200
RATE_POINTS = 64  # (ts, step) points behind the step-rate estimate
RATE_SPACING_S = 30.0  # at most one rate point per 30 s of the run's time
MILLISECONDS_ABOVE = 1e11  # an epoch above this is in milliseconds (a 2026 epoch is ~1.8e9 s)
STEP_MAX = 1 << 53  # a step past this is no step (and would overflow rates)
# Plausible ranges: a value outside them is a counted bad field of its run, never a crash downstream
# (dates past year 9999, timedeltas past a C int). A `ts` is a time in this century.
TS_MIN = 946684800.0  # 2000-01-01T00:00:00Z
TS_MAX = 4102444800.0  # 2100-01-01T00:00:00Z
SECONDS_MAX = 7 * 86400.0  # a save or a reload that takes more than a week is no measurement
BYTES_MAX = 1 << 50  # 1 PiB: no checkpoint is larger
BAD_FIELDS_KEPT = 20
FINISHED_OK = ("ok", "success", "finished", "done")  # a `finished` status that means a clean end
STATE_FILE = METRICS_STATE_FILE  # in the campaign's .cockpit/ folder
STATE_VERSION = 1
STATE_FILE_MODE = FILE_MODE
STATE_DIR_MODE = DIR_MODE

_INF = math.inf
# Text a writer may use for a non-finite value (compared lower-case).
_NONFINITE_TEXT: dict[str, float] = {
    "nan": math.nan, "+nan": math.nan, "-nan": math.nan,
    "inf": _INF, "+inf": _INF, "-inf": -_INF,
    "infinity": _INF, "+infinity": _INF, "-infinity": -_INF,
}
_NONFINITE_TEXT_MAX = max(len(k) for k in _NONFINITE_TEXT)
_RESERVED = frozenset({"ts", "step", "event"})  # fields of a line that are not metrics
_FAST_LINE_BYTES = 4096  # lines shorter than this whose values hold no text take the fast path

Observer = Callable[[dict, int, "RunTrack"], None]
"""Called with (record, line number, track) for every good record, after the track took it in."""


# ---------------------------------------------------------------- values


def nonfinite_from_text(value: str) -> float | None:
    """"nan", "inf", "-Infinity" (any case) → the float; any other text → None."""
    if len(value) > _NONFINITE_TEXT_MAX:
        return None
    return _NONFINITE_TEXT.get(value.lower())


def is_number(value: Any) -> bool:
    kind = type(value)
    return kind is float or kind is int


def format_value(value: Any) -> str:
    """A metric value as a person reads it: NaN, Infinity, -Infinity, 0.6123, 1200."""
    if type(value) is float:
        if value != value:
            return "NaN"
        if value in (_INF, -_INF):
            return "Infinity" if value > 0 else "-Infinity"
        return f"{value:.6g}"
    return str(value)


def ts_seconds(value: Any) -> float | None:
    """A line's `ts` as epoch seconds: epoch seconds (number or text) or ISO-8601 (naive = UTC).

    Epochs above 1e11 are read as milliseconds, a common slip of JavaScript-minded writers.
    Anything else (bool, NaN, garbage, a time outside 2000-2100) is None: the line still counts,
    its time is unknown.
    """
    kind = type(value)
    if kind is float or kind is int:
        try:
            seconds = float(value)
        except OverflowError:  # an integer past any float
            return None
    elif kind is str:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                moment = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
            except ValueError:
                return None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=timezone.utc)
            try:
                seconds = moment.timestamp()
            except (OverflowError, OSError, ValueError):
                return None
            return seconds if TS_MIN <= seconds <= TS_MAX else None
    else:
        return None
    if seconds != seconds or seconds in (_INF, -_INF):
        return None
    if abs(seconds) > MILLISECONDS_ABOVE:
        seconds /= 1000.0
    return seconds if TS_MIN <= seconds <= TS_MAX else None


def seconds_to_datetime(seconds: float | None) -> datetime | None:
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def iso_seconds(seconds: float | None) -> str | None:
    moment = seconds_to_datetime(seconds)
    if moment is None:
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(value: str) -> tuple[str, bool]:
    """Text that encodes as UTF-8, and whether it had to change: a lone surrogate (what Python's
    `json.dumps` writes for a file name that is not UTF-8) becomes U+FFFD."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", value), True
    return value, False


def shown_value(value: Any, limit: int = 40) -> str:
    """A bad value, short and printable, for the reason a field was ignored."""
    if type(value) is int and not -STEP_MAX <= value <= STEP_MAX:
        text = format_value(_big_int(value)) if value.bit_length() < 1024 else f"an integer of {value.bit_length()} bits"
    elif is_number(value):
        text = format_value(value)
    else:
        text = ascii(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bad_ts(value: Any) -> str:
    return (
        f"ts {shown_value(value)} is not a time between 2000-01-01 and 2100-01-01 "
        "(epoch seconds or milliseconds, or ISO-8601): the line's time is ignored"
    )


def _clean_text_fields(record: dict) -> bool:
    """Lone surrogates in a record's keys and text values replaced in place; True if there were any.

    Only the top level: nothing nested is kept or shown."""
    dirty = False
    for name in list(record):
        value = record[name]
        if type(value) is str:
            clean, changed = safe_text(value)
            if changed:
                record[name] = clean
                dirty = True
        clean_name, changed = safe_text(name)
        if changed:
            record[clean_name] = record.pop(name)
            dirty = True
    return dirty


_NOT_UNICODE = (
    "text that is not valid Unicode (a lone surrogate, as json.dumps writes for a file name that is "
    "not UTF-8): replaced with U+FFFD"
)


def _state_value(value: Any) -> Any:
    """A metric value as strict JSON: non-finite floats become their names."""
    if type(value) is float and (value != value or value in (_INF, -_INF)):
        return format_value(value)
    return value


def _from_state_value(value: Any) -> Any:
    if type(value) is str:
        return nonfinite_from_text(value)
    return value if is_number(value) else None


# ---------------------------------------------------------------- the summary of one run


@dataclass(slots=True)
class RunTrack:
    """What one run's stream has said so far, in memory that does not grow with the stream."""

    lines: int = 0  # complete lines read in the current file (blank and bad included)
    records: int = 0  # lines that were JSON objects
    bad_lines: int = 0
    bad_samples: deque = field(default_factory=lambda: deque(maxlen=BAD_LINES_KEPT))  # (line, reason)
    last_step: int | None = None
    # name → last value (non-finite kept). The hot path stores a short line's values as they
    # are, so this may also hold ts, step and non-numbers: read it through `metric_values`.
    metrics: dict = field(default_factory=dict)
    metric_names_dropped: int = 0
    first_ts: float | None = None  # epoch seconds, as the run wrote them
    last_ts: float | None = None
    last_line_ts: float | None = None  # the last line's ts, or the file's mtime for a line without one
    bad_fields: int = 0  # implausible values ignored in lines that were read (a ts in 1970, seconds in ns)
    bad_field_samples: deque = field(default_factory=lambda: deque(maxlen=BAD_FIELDS_KEPT))  # (line, reason)
    nonfinite_lines: int = 0
    nonfinite_line: int | None = None  # the latest line holding a non-finite metric, and which
    nonfinite_metric: str | None = None
    started: dict | None = None  # {"pid", "config_sha256", "ts", "line"} of the latest start
    # The latest `started` line had no usable ts: its "ts" is when the cockpit first read the line,
    # a time the process had certainly started by (never the file's mtime, which moves with every write).
    started_ts_read: bool = False
    first_started_ts: float | None = None
    starts: int = 0
    config_sha256s: list = field(default_factory=list)  # distinct, in order of appearance
    config_change_line: int | None = None  # the latest `started` line that brought a new config
    checkpoint: dict | None = None  # {"ts", "path", "seconds", "bytes", "line"}
    checkpoints: int = 0
    resume_verified: dict | None = None  # {"ts", "path", "seconds", "line"}
    first_resume_ts: float | None = None
    resumes: int = 0
    truncations: int = 0
    essential_truncations: int = 0
    truncation_events: deque = field(default_factory=lambda: deque(maxlen=TRUNCATIONS_KEPT))
    finished: dict | None = None  # {"status", "ts", "line"}
    other_events: int = 0
    rate_points: deque = field(default_factory=lambda: deque(maxlen=RATE_POINTS))  # (ts, step)
    rate_last_ts: float | None = None
    rate_last_step: int | None = None
    resets: int = 0  # times the file was truncated or replaced and read again
    last_reset: str | None = None

    # ------------------------------------------------------------ reading it

    @property
    def metric_values(self) -> dict[str, Any]:
        """The last value of each metric (non-finite kept), without the line's ts and step."""
        return {k: v for k, v in self.metrics.items() if k not in _RESERVED and is_number(v)}

    @property
    def steps_per_hour(self) -> float | None:
        """Steps per hour over the recent (ts, step) points; None until there is progress to measure."""
        if not self.rate_points or self.rate_last_ts is None or self.rate_last_step is None:
            return None
        first_ts, first_step = self.rate_points[0]
        elapsed = self.rate_last_ts - first_ts
        steps = self.rate_last_step - first_step
        if elapsed < 1.0 or steps <= 0:
            return None
        return steps * 3600.0 / elapsed

    @property
    def bad_line_numbers(self) -> list[int]:
        return [line for line, _ in self.bad_samples]

    @property
    def finished_cleanly(self) -> bool:
        """The run said `finished` with a status that means a clean end (no status: a clean end)."""
        return self.finished is not None and str(self.finished.get("status", "ok")).lower() in FINISHED_OK

    @property
    def essential_truncation(self) -> dict | None:
        return next((t for t in reversed(self.truncation_events) if t.get("essential")), None)

    # ------------------------------------------------------------ taking lines in

    def note_bad(self, line: int, reason: str) -> None:
        self.bad_lines += 1
        self.bad_samples.append((line, reason))

    def note_bad_field(self, line: int, reason: str) -> None:
        """A value of a line that was read was implausible and ignored (the rest of the line counts)."""
        self.bad_fields += 1
        self.bad_field_samples.append((line, reason))

    def notices(self, run_id: str) -> list[str]:
        """What the views say about this run's stream beyond its values: ignored fields, a guessed start."""
        said: list[str] = []
        if self.bad_fields:
            line, reason = self.bad_field_samples[-1] if self.bad_field_samples else (None, "")
            plural = "s" if self.bad_fields != 1 else ""
            said.append(
                f"run {run_id}: {self.bad_fields} implausible value{plural} ignored in its metrics"
                + (f" (the latest, line {line}: {reason})" if line is not None else "")
            )
        if self.started and self.started_ts_read:
            moment = iso_seconds(self.started.get("ts"))
            said.append(
                f"run {run_id}: its `started` line (line {self.started.get('line')}) has no ts; its start is taken "
                f"as when the cockpit first read it ({moment}): write \"ts\" in the event to be exact"
            )
        return said

    def _number_field(self, record: dict, name: str, event: str, line: int, top: float) -> float | None:
        """A duration-like field (seconds) when present and plausible; an implausible one is counted."""
        value = record.get(name)
        if value is None:
            return None
        number = _number(value)
        if number is None or not 0.0 <= number <= top:
            self.note_bad_field(line, f"{event} {name} {shown_value(value)} is not a duration between 0 and {top:g} s (a week): ignored")
            return None
        return number

    def _size_field(self, record: dict, name: str, event: str, line: int) -> int | None:
        value = record.get(name)
        if value is None:
            return None
        if type(value) is not int or not 0 <= value <= BYTES_MAX:
            self.note_bad_field(line, f"{event} {name} {shown_value(value)} is not a size between 0 and 2^50 bytes (1 PiB): ignored")
            return None
        return value

    def note_step(self, step: int, ts: float | None) -> None:
        """A step reached at a time: the step rate's raw material (spaced, bounded)."""
        last = self.last_step
        self.last_step = step
        if ts is None:
            return
        points = self.rate_points
        if last is not None and step < last:
            points.clear()  # resumed from an earlier checkpoint: measure afresh
        elif self.rate_last_ts is not None and ts < self.rate_last_ts:
            return  # time went backwards: keep the estimate from the points we trust
        if not points or ts - points[-1][0] >= RATE_SPACING_S:
            points.append((ts, step))
        self.rate_last_ts = ts
        self.rate_last_step = step

    def take_event(self, record: dict, event: Any, line: int, ts: float | None, *, ts_read: bool = False) -> None:
        """A line with an `event`: started, checkpoint, resume_verified, truncated, finished.

        `ts_read`: the line had no usable ts and `ts` is when it was read."""
        if event == "started":
            pid = record.get("pid")
            if pid is not None and not (type(pid) is int and 0 < pid < 1 << 31):
                self.note_bad_field(line, f"started pid {shown_value(pid)} is not a process id: ignored")
                pid = None
            sha = record.get("config_sha256")
            sha = sha if type(sha) is str and 0 < len(sha) <= 200 else None
            self.started = {
                "pid": pid,
                "config_sha256": sha,
                "ts": ts,
                "line": line,
            }
            self.started_ts_read = ts_read
            if "host" in record or "pid_ns" in record:  # where the pid means something (newer writers)
                self.started["host"] = _name(record.get("host"))
                self.started["pid_ns"] = _name(record.get("pid_ns"))
            self.starts += 1
            self.finished = None  # started again: whatever finished before is running now
            if self.first_started_ts is None:
                self.first_started_ts = ts
            if sha is not None and sha not in self.config_sha256s:
                if self.config_sha256s:
                    self.config_change_line = line
                self.config_sha256s.append(sha)
                del self.config_sha256s[:-CONFIGS_KEPT]
        elif event == "checkpoint":
            self.checkpoint = {
                "ts": ts,
                "path": _text(record.get("path")),
                "seconds": self._number_field(record, "seconds", "checkpoint", line, SECONDS_MAX),
                "bytes": self._size_field(record, "bytes", "checkpoint", line),
                "line": line,
            }
            self.checkpoints += 1
        elif event == "resume_verified":
            self.resume_verified = {
                "ts": ts,
                "path": _text(record.get("path")),
                "seconds": self._number_field(record, "seconds", "resume_verified", line, SECONDS_MAX),
                "line": line,
            }
            self.resumes += 1
            if ts is not None and (self.first_resume_ts is None or ts < self.first_resume_ts):
                self.first_resume_ts = ts
        elif event == "truncated":
            essential = _truthy(record.get("essential"))
            self.truncations += 1
            if essential:
                self.essential_truncations += 1
            step = as_step(record.get("step"))
            self.truncation_events.append({
                "ts": ts,
                "input": _text(record.get("input")),
                "essential": essential,
                "step": step if step is not None else self.last_step,
                "line": line,
            })
        elif event == "finished":
            status = record.get("status")
            self.finished = {"status": _text(status) or "unknown", "ts": ts, "line": line}
        else:
            self.other_events += 1
        value = record.get("step")
        step = as_step(value)
        if step is not None:
            self.note_step(step, ts)
        elif value is not None:
            self.note_bad_field(line, _bad_step(value))

    def begin_again(self, reason: str) -> None:
        """The file was truncated or replaced: forget what it said, keep the run's config history."""
        configs, resets = list(self.config_sha256s), self.resets
        fresh = RunTrack()
        for name in self.__slots__:
            setattr(self, name, getattr(fresh, name))
        self.config_sha256s = configs
        self.resets = resets + 1
        self.last_reset = reason

    def _check_new_metric_names(self, known: int) -> None:
        """Names past the cap or absurdly long are dropped, so memory stays bounded."""
        metrics = self.metrics
        for name in list(metrics)[known:]:
            if len(name) > METRIC_NAME_MAX or len(metrics) > METRICS_KEPT:
                del metrics[name]
                self.metric_names_dropped += 1

    # ------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, deque):
                value = [list(v) if isinstance(v, tuple) else v for v in value]
            elif name == "metrics":
                value = {k: _state_value(v) for k, v in value.items() if is_number(v)}
            data[name] = value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunTrack":
        """Rebuild a saved track; raises ValueError/TypeError when the data is not one.

        Every field is type-checked: a damaged state file must not hand the engine, say, a pid
        that no line of the stream ever named.
        """
        track = cls()
        for name in cls.__slots__:
            if name not in data:
                continue
            value = data[name]
            if name == "metrics":
                if not isinstance(value, dict):
                    raise TypeError(name)
                restored = ((str(k), _from_state_value(v)) for k, v in islice(value.items(), METRICS_KEPT))
                track.metrics = {k: v for k, v in restored if v is not None}
            elif name == "config_sha256s":
                if not isinstance(value, list) or not all(type(v) is str for v in value):
                    raise TypeError(name)
                track.config_sha256s = value[-CONFIGS_KEPT:]
            elif name in _DEQUE_ITEMS:
                if not isinstance(value, list):
                    raise TypeError(name)
                shape = _DEQUE_ITEMS[name]
                items = [_checked_item(v, shape, name) for v in value]
                setattr(track, name, deque(items, maxlen=getattr(track, name).maxlen))
            elif name in _RECORD_FIELDS:
                setattr(track, name, None if value is None else _checked_record(value, _RECORD_FIELDS[name], name))
            else:
                _check_type(value, _SCALAR_FIELDS[name], name)
                setattr(track, name, value)
        return track


_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_INT = (int, type(None))
_OPT_STR = (str, type(None))
_SCALAR_FIELDS: dict[str, tuple[type, ...]] = {
    "lines": (int,), "records": (int,), "bad_lines": (int,), "last_step": _OPT_INT,
    "metric_names_dropped": (int,), "first_ts": _OPT_NUM, "last_ts": _OPT_NUM, "last_line_ts": _OPT_NUM,
    "nonfinite_lines": (int,), "nonfinite_line": _OPT_INT, "nonfinite_metric": _OPT_STR,
    "first_started_ts": _OPT_NUM, "starts": (int,), "config_change_line": _OPT_INT, "checkpoints": (int,),
    "first_resume_ts": _OPT_NUM, "resumes": (int,), "truncations": (int,), "essential_truncations": (int,),
    "other_events": (int,), "rate_last_ts": _OPT_NUM, "rate_last_step": _OPT_INT, "resets": (int,),
    "last_reset": _OPT_STR, "bad_fields": (int,), "started_ts_read": (bool,),
}
_RECORD_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "started": {"pid": _OPT_INT, "config_sha256": _OPT_STR, "ts": _OPT_NUM, "line": _OPT_INT, "host": _OPT_STR, "pid_ns": _OPT_STR},
    "checkpoint": {"ts": _OPT_NUM, "path": _OPT_STR, "seconds": _OPT_NUM, "bytes": _OPT_INT, "line": _OPT_INT},
    "resume_verified": {"ts": _OPT_NUM, "path": _OPT_STR, "seconds": _OPT_NUM, "line": _OPT_INT},
    "finished": {"status": (str,), "ts": _OPT_NUM, "line": _OPT_INT},
}
_DEQUE_ITEMS: dict[str, Any] = {
    "bad_samples": ((int,), (str,)),
    "bad_field_samples": ((int,), (str,)),
    "rate_points": (_NUM, (int,)),
    "truncation_events": {"ts": _OPT_NUM, "input": _OPT_STR, "essential": (bool,), "step": _OPT_INT, "line": _OPT_INT},
}


def _check_type(value: Any, kinds: tuple[type, ...], name: str) -> None:
    # bool is an int to isinstance; no saved field is a bool where a number is meant
    if type(value) not in kinds:
        raise TypeError(name)


_OPTIONAL_KEYS = frozenset({"host", "pid_ns"})  # a start's, written only by newer writers


def _checked_record(value: Any, shape: dict[str, tuple[type, ...]], name: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not set(shape) - _OPTIONAL_KEYS <= set(value) <= set(shape):
        raise TypeError(name)
    for key, kinds in shape.items():
        if key in value:
            _check_type(value[key], kinds, f"{name}.{key}")
    return dict(value)


def _checked_item(value: Any, shape: Any, name: str) -> Any:
    if isinstance(shape, dict):
        return _checked_record(value, shape, name)
    if not isinstance(value, list) or len(value) != len(shape):
        raise TypeError(name)
    for item, kinds in zip(value, shape):
        _check_type(item, kinds, name)
    return tuple(value)


def as_step(value: Any) -> int | None:
    """A line's step when it is a plausible one (an int within ±2**53), else None."""
    return value if type(value) is int and -STEP_MAX <= value <= STEP_MAX else None


def _bad_step(value: Any) -> str:
    return f"step {shown_value(value)} is not a whole number between -2^53 and 2^53: ignored"


def _big_int(value: int) -> float:
    try:
        return float(value)
    except OverflowError:
        return _INF if value > 0 else -_INF


def _text(value: Any) -> str | None:
    if type(value) is str:
        return safe_text(value[:1000])[0]
    return None


def _name(value: Any) -> str | None:
    """A short identifying text (a host name, a namespace): anything else reads as unknown."""
    return value if type(value) is str and 0 < len(value) <= 255 else None


def _number(value: Any) -> float | None:
    if not is_number(value):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _truthy(value: Any) -> bool:
    if value is True or (type(value) is int and value == 1):
        return True
    return type(value) is str and value.strip().lower() in ("true", "yes", "1")


def last_metrics(track: RunTrack, limit: int = 16) -> dict[str, Any]:
    """A small dict for a stop or alert event: step, ts and the latest value of each metric."""
    result: dict[str, Any] = {"step": track.last_step, "ts": iso_seconds(track.last_ts)}
    for name, value in track.metrics.items():
        if name in _RESERVED or not is_number(value):
            continue
        if len(result) >= limit + 2:
            break
        result[name] = value
    return result


# ---------------------------------------------------------------- reading the file


@dataclass(slots=True)
class StreamPosition:
    """Where the reader stands in the file: only offsets and identity, never content."""

    offset: int = 0  # bytes consumed: always the start of a line (or inside a skipped long one)
    inode: int | None = None
    device: int | None = None
    size: int = 0
    lines: int = 0  # complete lines consumed
    head: bytes = b""  # the file's first consumed bytes (at most HEAD_BYTES)
    skipping: bool = False  # inside a line longer than the cap: discard up to its newline
    mtime: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset": self.offset, "inode": self.inode, "device": self.device, "size": self.size,
            "lines": self.lines, "head": self.head.hex(), "skipping": self.skipping, "mtime": self.mtime,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StreamPosition":
        position = cls(
            offset=data["offset"], inode=data.get("inode"), device=data.get("device"), size=data.get("size", 0),
            lines=data["lines"], head=bytes.fromhex(data.get("head", "")), skipping=bool(data.get("skipping", False)),
            mtime=data.get("mtime"),
        )
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


@dataclass(frozen=True, slots=True)
class PollResult:
    """What one poll of a metrics file found."""

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
        self.path = Path(path)
        self.position = position or StreamPosition()
        self.track = track or RunTrack()
        self.max_line_bytes = max_line_bytes
        self.chunk_bytes = max(1, chunk_bytes)
        self.missing = False
        self.error: str | None = None  # why the last poll could not read the file, in words
        self._ts_text: str | None = None  # the last ISO ts parsed, and its value: lines repeat them
        self._ts_value: float | None = None

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
            kind = _not_a_file(os.stat(self.path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            self.missing = True
            return PollResult(missing=True)
        except OSError as error:
            return PollResult(error=f"cannot read {self.path}: {error.strerror or error}")
        if kind:
            self.missing = False
            return PollResult(error=f"{self.path} is {kind}, not a metrics file")
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        except (FileNotFoundError, NotADirectoryError):
            self.missing = True
            return PollResult(missing=True)
        except OSError as error:
            return PollResult(error=f"cannot read {self.path}: {error.strerror or error}")
        self.missing = False
        try:
            return self._read(fd, observer, max_bytes, time.time() if now is None else now)
        except OSError as error:
            return PollResult(error=f"cannot read {self.path}: {error.strerror or error}")
        finally:
            os.close(fd)

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

    def _read(self, fd: int, observer: Observer | None, max_bytes: int | None, polled_at: float) -> PollResult:
        info = os.fstat(fd)
        kind = _not_a_file(info.st_mode)
        if kind:  # swapped between the look and the open
            return PollResult(error=f"{self.path} is {kind}, not a metrics file")
        position = self.position
        reason = None
        if position.inode is not None and (info.st_ino != position.inode or info.st_dev != position.device):
            reason = "replaced"
        elif info.st_size < position.offset:
            reason = "truncated"
        elif position.head and os.pread(fd, len(position.head), 0) != position.head:
            reason = "rewritten"
        if reason is not None:
            self.position = position = StreamPosition()
            self.track.begin_again(reason)
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
            chunk = os.pread(fd, min(chunk_bytes, end - read_at), read_at)
            if not chunk:
                break  # the file shrank under us: the next poll notices
            if position.skipping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    offset = read_at + len(chunk)
                    continue
                position.skipping = False
                position.lines += 1
                self.track.note_bad(position.lines, f"longer than {cap} bytes: skipped")
                bad += 1
                offset = read_at + newline + 1
                chunk = chunk[newline + 1:]
            data = pending + chunk if pending else chunk
            pieces = data.split(b"\n")
            pending = pieces.pop()
            if pieces:
                got, wrong = self._consume(pieces, observer, info.st_mtime, polled_at)
                records += got
                bad += wrong
                offset += len(data) - len(pending)
            if len(pending) > cap:
                position.skipping = True  # never hold more than the cap of one line
                offset += len(pending)
                pending = b""
            if max_bytes is not None and offset + len(pending) - start >= max_bytes and offset + len(pending) < end:
                more = True
                break
        position.offset = offset
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
                if not strict and b"\\u" in raw and _clean_text_fields(record):
                    track.note_bad_field(line, _NOT_UNICODE)
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
                        track.note_bad_field(line, _bad_ts(ts))
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
                        track.note_bad_field(line, _bad_step(step))
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
                                if value - value != 0.0 and name not in _RESERVED:
                                    nonfinite = name
                            elif kind is str:
                                if len(value) > _NONFINITE_TEXT_MAX:
                                    continue
                                value = _NONFINITE_TEXT.get(value.lower())
                                if value is None:
                                    continue
                                record[name] = value  # observers see the float, not the text
                                if name not in _RESERVED:
                                    nonfinite = name
                            elif kind is int:
                                if not -STEP_MAX <= value <= STEP_MAX:
                                    # only the fallback parser yields such integers: keep them usable as floats
                                    value = _big_int(value)
                                    record[name] = value
                                    if value - value != 0.0 and name not in _RESERVED:
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


# ---------------------------------------------------------------- the state file


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
    """Write the readers' state atomically (temporary file, fsync, rename), mode 0o640."""
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
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, STATE_FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(temporary)
        raise
    os.close(fd)
    try:
        os.replace(temporary, path)
    except BaseException:
        _unlink_quietly(temporary)
        raise


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


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
