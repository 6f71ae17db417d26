"""What one run's metrics stream has said so far (`RunTrack`): a bounded summary (last values,
steps and their rate, starts, checkpoints, resumes, truncations, the end) that the stream reader
feeds line by line, and its saved form, type-checked field by field when read back.

Memory does not grow with the stream: a 30-day run costs what a 30-minute one does.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from cockpit.live.metric_values import (
    BYTES_MAX,
    RESERVED,
    SECONDS_MAX,
    as_step,
    bad_step_reason,
    bounded_text,
    finite_number,
    format_value,
    iso_seconds,
    is_number,
    nonfinite_from_text,
    short_name,
    shown_value,
    truthy,
)

BAD_LINES_KEPT = 20
TRUNCATIONS_KEPT = 20
CONFIGS_KEPT = 16
METRICS_KEPT = 256  # distinct metric names remembered per run
METRIC_NAME_MAX = 200
RATE_POINTS = 64  # (ts, step) points behind the step-rate estimate
RATE_SPACING_S = 30.0  # at most one rate point per 30 s of the run's time
BAD_FIELDS_KEPT = 20
FINISHED_OK = ("ok", "success", "finished", "done")  # a `finished` status that means a clean end

_INF = math.inf


_NUMBER_TYPES = frozenset({int, float})  # what is_number accepts (bool is neither)

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
        number = _NUMBER_TYPES  # is_number, inlined: asked for every run every tick
        return {k: v for k, v in self.metrics.items() if type(v) in number and k not in RESERVED}

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
        number = finite_number(value)
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
                self.started["host"] = short_name(record.get("host"))
                self.started["pid_ns"] = short_name(record.get("pid_ns"))
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
                "path": bounded_text(record.get("path")),
                "seconds": self._number_field(record, "seconds", "checkpoint", line, SECONDS_MAX),
                "bytes": self._size_field(record, "bytes", "checkpoint", line),
                "line": line,
            }
            self.checkpoints += 1
        elif event == "resume_verified":
            self.resume_verified = {
                "ts": ts,
                "path": bounded_text(record.get("path")),
                "seconds": self._number_field(record, "seconds", "resume_verified", line, SECONDS_MAX),
                "line": line,
            }
            self.resumes += 1
            if ts is not None and (self.first_resume_ts is None or ts < self.first_resume_ts):
                self.first_resume_ts = ts
        elif event == "truncated":
            essential = truthy(record.get("essential"))
            self.truncations += 1
            if essential:
                self.essential_truncations += 1
            step = as_step(record.get("step"))
            self.truncation_events.append({
                "ts": ts,
                "input": bounded_text(record.get("input")),
                "essential": essential,
                "step": step if step is not None else self.last_step,
                "line": line,
            })
        elif event == "finished":
            status = record.get("status")
            self.finished = {"status": bounded_text(status) or "unknown", "ts": ts, "line": line}
        else:
            self.other_events += 1
        value = record.get("step")
        step = as_step(value)
        if step is not None:
            self.note_step(step, ts)
        elif value is not None:
            self.note_bad_field(line, bad_step_reason(value))

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


def _state_value(value: Any) -> Any:
    """A metric value as strict JSON: non-finite floats become their names."""
    if type(value) is float and (value != value or value in (_INF, -_INF)):
        return format_value(value)
    return value


def _from_state_value(value: Any) -> Any:
    if type(value) is str:
        return nonfinite_from_text(value)
    return value if is_number(value) else None



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



def last_metrics(track: RunTrack, limit: int = 16) -> dict[str, Any]:
    """A small dict for a stop or alert event: step, ts and the latest value of each metric."""
    result: dict[str, Any] = {"step": track.last_step, "ts": iso_seconds(track.last_ts)}
    for name, value in track.metrics.items():
        if name in RESERVED or not is_number(value):
            continue
        if len(result) >= limit + 2:
            break
        result[name] = value
    return result
