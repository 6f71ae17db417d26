"""What the charts draw, kept small whatever the lot's length: each run's loss and closing metric
against step, downsampled as the engine reads them; the run's events and decisions by step; and
the clock's history (committed hours remaining, as re-estimated, against the time left).

The engine feeds this module one record at a time (the same observer call the stop rules get) and
saves it in `.cockpit/` beside the reading position, so a restart reads nothing twice. Memory is
bounded: at most `MAX_POINTS` points a series, `MAX_MARKS` marks a run, `MAX_POINTS` clock samples.
The downsampling of one series is cockpit/live/downsample.py; the axes' ticks, cockpit/live/chart_data.py.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cockpit.live.downsample import MAX_POINTS, Downsampled, Point, as_step

MAX_MARKS = 200  # the newest events and decisions kept per run (counts are kept for all)
RATE_SAMPLES = 12  # (ts, step) samples kept for the recent step rate, RATE_SPACING_S apart
RATE_SPACING_S = 30.0
CLOCK_SPACING_S = 60.0
# A run's points are drawn again at most this often (its marks at once): the view costs the
# tick something, and a curve that moves every second says nothing more than one every few.
VIEW_EVERY_S = 3.0  # the clock is sampled at most this often at first; the spacing doubles as the lot goes on
SERIES_VERSION = 1

Observer = Callable[[dict, int, Any], None]


# ---------------------------------------------------------------- a run's series and marks


@dataclass(frozen=True)
class Mark:
    """Something that happened to a run, at a step where one is known: an event of its stream
    (started, checkpoint, resume_verified, truncated, finished) or a decision of the run log
    (alert, stop, note)."""

    kind: str
    step: int | None
    ts: float | None
    text: str = ""


@dataclass(frozen=True)
class RunSeriesView:
    """One run's series as the charts draw them: frozen, at most MAX_POINTS points a metric."""

    run: str
    lines: int
    points: Mapping[str, tuple[Point, ...]]  # metric name → (step, value), in the order they came
    counts: Mapping[str, int]  # metric name → values read
    marks: tuple[Mark, ...]  # stream events and run-log decisions, oldest first (the newest MAX_MARKS)
    mark_counts: Mapping[str, int] = field(default_factory=dict)
    steps_per_hour: float | None = None  # over the last few minutes of metric lines


@dataclass(frozen=True)
class ClockSample:
    """The clock at one moment: what the remaining plan commits against what the lot has left."""

    at: float  # epoch seconds
    committed_remaining_hours: float | None
    remaining_hours: float | None


@dataclass(frozen=True)
class SeriesView:
    """Every run's series and the clock's history, frozen for the views."""

    runs: Mapping[str, RunSeriesView]
    clock: tuple[ClockSample, ...]

    def run(self, run_id: str) -> RunSeriesView | None:
        return self.runs.get(run_id)


_STREAM_EVENTS = {"started", "checkpoint", "resume_verified", "truncated", "finished"}


class RunSeries:
    """A run's downsampled metrics and its marks, fed record by record."""

    def __init__(self, run_id: str, metrics: Iterable[str], max_points: int = MAX_POINTS):
        self.run_id = run_id
        self.max_points = max_points
        self.metrics = tuple(dict.fromkeys(metrics))
        self.series: dict[str, Downsampled] = {name: Downsampled(max_points) for name in self.metrics}
        self._pairs = tuple(self.series.items())
        self.lines = 0  # the stream's line number of the last record taken
        self.last_step: int | None = None
        self.stream_marks: deque[Mark] = deque(maxlen=MAX_MARKS)
        self.stream_counts: dict[str, int] = {}
        self.log_marks: deque[Mark] = deque(maxlen=MAX_MARKS)  # rebuilt from the run log at each start
        self.log_counts: dict[str, int] = {}
        self.rate: deque[tuple[float, int]] = deque(maxlen=RATE_SAMPLES)
        self.version = 0
        self._marks_changed = 0  # counts every mark taken (a full deque keeps its length)
        self._marks_cache: tuple[tuple[int, int, int], tuple[Mark, ...]] | None = None
        self._view_marks = -1
        self._view_at = 0.0
        self._view: tuple[int, RunSeriesView] | None = None

    def reset(self) -> None:
        """The stream was replaced or truncated and is read from its start again."""
        self.series = {name: Downsampled(self.max_points) for name in self.metrics}
        self._pairs = tuple(self.series.items())
        self.lines = 0
        self.last_step = None
        self.stream_marks.clear()
        self.stream_counts = {}
        self.rate.clear()
        self._marks_changed += 1
        self.version += 1

    def take(self, record: dict, line: int, track: Any = None) -> None:
        """One record of the run's stream (values already parsed: a "nan" text is a float here).

        The hot path (every line of a million-line stream on a cold start): the common value goes
        into its open bucket inline, without a call; the rest goes through `Downsampled.add`."""
        if line <= self.lines:
            self.reset()  # line numbers start again: the file was read afresh from its start
        self.lines = line
        self.version += 1
        get = record.get
        event = get("event")
        if event is None:
            step = get("step")
            if type(step) is not int:
                return
            self.last_step = step
            ts = get("ts")
            rate = self.rate
            if (type(ts) is float or type(ts) is int) and (not rate or ts - rate[-1][0] >= RATE_SPACING_S or step < rate[-1][1]):
                if rate and (step < rate[-1][1] or ts < rate[-1][0]):
                    rate.clear()  # a resume to an earlier step, or time going back: measure afresh
                rate.append((float(ts), step))
            for name, series in self._pairs:
                value = get(name)
                if value is None:
                    continue
                kind = type(value)
                if kind is int:
                    value = float(value)
                elif kind is not float:
                    continue
                buckets = series.buckets
                if buckets and value - value == 0.0:
                    bucket = buckets[-1]
                    if bucket[2] < series.width and bucket[4] is not None:
                        bucket[1] = step
                        bucket[2] += 1
                        series.count += 1
                        series.last_step, series.last_value = step, value
                        if value < bucket[4]:
                            bucket[3], bucket[4] = step, value
                        elif value > bucket[6]:
                            bucket[5], bucket[6] = step, value
                        continue
                    if bucket[2] >= series.width and len(buckets) < series.max_buckets:
                        buckets.append([step, step, 1, step, value, step, value, None])  # a new bucket, no merge due
                        series.count += 1
                        series.last_step, series.last_value = step, value
                        continue
                series.add(step, value)
        elif isinstance(event, str) and event in _STREAM_EVENTS:
            ts = record.get("ts")
            step = record.get("step")
            self.stream_marks.append(Mark(event, step if type(step) is int else self.last_step,
                                          ts if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None,
                                          _event_text(event, record)))
            self.stream_counts[event] = self.stream_counts.get(event, 0) + 1
            self._marks_changed += 1

    def take_log_event(self, event: Mapping[str, Any], ts: float | None) -> None:
        kind = event.get("type")
        step = event.get("step")
        if kind == "stop":
            step = (event.get("last") or {}).get("step") if isinstance(event.get("last"), dict) else None
            text = event.get("rule") or event.get("reason") or ""
        elif kind == "alert":
            text = str(event.get("rule") or "")
        elif kind == "note":
            text = str(event.get("text") or "")
        elif kind == "void":
            text = f"seq {event.get('voided_seq', event.get('seq_voided', '?'))} voided"
        else:
            return
        self.log_marks.append(Mark(str(kind), step if type(step) is int else None, ts, str(text)[:200]))
        self.log_counts[str(kind)] = self.log_counts.get(str(kind), 0) + 1
        self._marks_changed += 1
        self.version += 1

    def view(self, moment: float | None = None) -> RunSeriesView:
        """The frozen view; with `moment` (monotonic seconds), new points alone wait VIEW_EVERY_S."""
        cached = self._view
        if cached is not None and cached[0] == self.version:
            return cached[1]
        if (cached is not None and moment is not None and self._view_marks == self._marks_changed
                and 0 <= moment - self._view_at < VIEW_EVERY_S):
            return cached[1]
        self._view_marks = self._marks_changed
        self._view_at = moment if moment is not None else 0.0
        marks_key = (self._marks_changed, len(self.stream_marks), len(self.log_marks))
        if self._marks_cache is None or self._marks_cache[0] != marks_key:
            ordered = tuple(sorted([*self.stream_marks, *self.log_marks], key=lambda m: (m.ts is None, m.ts or 0.0)))
            self._marks_cache = (marks_key, ordered)
        marks = self._marks_cache[1]
        view = RunSeriesView(
            run=self.run_id,
            lines=self.lines,
            points={name: series.points() for name, series in self.series.items()},
            counts={name: series.count for name, series in self.series.items()},
            marks=marks,
            mark_counts={**self.stream_counts, **self.log_counts},
            steps_per_hour=self._steps_per_hour(),
        )
        self._view = (self.version, view)
        return view

    def _steps_per_hour(self) -> float | None:
        if len(self.rate) < 2 or self.last_step is None:
            return None
        (first_ts, first_step), (last_ts, last_step) = self.rate[0], self.rate[-1]
        return (last_step - first_step) * 3600.0 / (last_ts - first_ts) if last_ts > first_ts else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "rate": [list(item) for item in self.rate],
            "last_step": self.last_step,
            "series": {name: series.to_dict() for name, series in self.series.items()},
            "marks": [[m.kind, m.step, m.ts, m.text] for m in self.stream_marks],
            "counts": dict(self.stream_counts),
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        """Take a saved state back (raises ValueError/TypeError/KeyError on a bad one)."""
        lines = data["lines"]
        if type(lines) is not int or lines < 0:
            raise ValueError("lines")
        series = {}
        for name in self.metrics:
            saved = (data.get("series") or {}).get(name)
            series[name] = Downsampled.from_dict(saved, self.max_points) if saved is not None else Downsampled(self.max_points)
        marks = deque(maxlen=MAX_MARKS)
        for kind, step, ts, text in data.get("marks", []):
            marks.append(Mark(str(kind), step if type(step) is int else None,
                              float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None, str(text)))
        counts = {str(k): int(v) for k, v in (data.get("counts") or {}).items()}
        last_step = data.get("last_step")
        self.rate = deque(((float(ts), as_step(step)) for ts, step in data.get("rate", [])), maxlen=RATE_SAMPLES)
        self.series, self.lines, self.stream_marks, self.stream_counts = series, lines, marks, counts
        self._pairs = tuple(series.items())
        self._marks_changed += 1
        self.last_step = last_step if type(last_step) is int else None
        self.version += 1


def _event_text(event: str, record: Mapping[str, Any]) -> str:
    if event == "checkpoint" or event == "resume_verified":
        path = record.get("path")
        seconds = record.get("seconds")
        parts = [str(path)[-80:] if isinstance(path, str) else ""]
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            parts.append(f"{seconds:.1f} s")
        return " ".join(p for p in parts if p)
    if event == "truncated":
        essential = " (essential)" if record.get("essential") is True else ""
        return f"{str(record.get('input', ''))[:80]}{essential}"
    if event == "finished":
        return str(record.get("status", ""))[:40]
    if event == "started":
        pid = record.get("pid")
        return f"pid {pid}" if type(pid) is int else ""
    return ""


# ---------------------------------------------------------------- the clock's history


class ClockHistory:
    """The clock's readings over the lot, at most `max_samples`: one sample per `spacing` seconds,
    every other one dropped (and the spacing doubled) when full; the newest reading always last."""

    def __init__(self, max_samples: int = MAX_POINTS, spacing: float = CLOCK_SPACING_S):
        self.max_samples = max_samples
        self.spacing = spacing
        self.samples: list[ClockSample] = []
        self._provisional = False  # the last sample is the newest reading, not yet a kept one
        self.version = 0

    def note(self, at: float, committed_remaining_hours: float | None, remaining_hours: float | None) -> None:
        sample = ClockSample(at, committed_remaining_hours, remaining_hours)
        samples = self.samples
        if samples and at < samples[-1].at:
            return  # a clock that went back: the history keeps its order
        if self._provisional and len(samples) >= 2 and at - samples[-2].at < self.spacing:
            samples[-1] = sample  # within the spacing of the last kept one: replace the newest reading
        else:
            samples.append(sample)
            if len(samples) > self.max_samples:
                self.samples = samples = samples[:-1:2] + [samples[-1]]
                self.spacing *= 2
        self._provisional = True
        self.version += 1

    def to_dict(self) -> dict[str, Any]:
        return {"spacing": self.spacing, "samples": [[s.at, s.committed_remaining_hours, s.remaining_hours] for s in self.samples]}

    def restore(self, data: Mapping[str, Any]) -> None:
        spacing = data["spacing"]
        if not isinstance(spacing, (int, float)) or isinstance(spacing, bool) or not spacing > 0:
            raise ValueError("spacing")
        samples = []
        for at, committed, remaining in data["samples"]:
            samples.append(ClockSample(float(at), _hours(committed), _hours(remaining)))
        self.samples = samples[-self.max_samples:]
        self.spacing = float(spacing)
        self.version += 1


def _hours(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("hours")
    return float(value)


# ---------------------------------------------------------------- the engine's store


class SeriesStore:
    """Every run's series and the clock history: what the engine feeds and saves."""

    def __init__(self, run_ids: Iterable[str], metrics: Iterable[str], max_points: int = MAX_POINTS):
        self.metrics = tuple(dict.fromkeys(metrics))
        self.runs: dict[str, RunSeries] = {run_id: RunSeries(run_id, self.metrics, max_points) for run_id in run_ids}
        self.clock = ClockHistory(max_points)
        self._view: tuple[tuple[int, ...], SeriesView] | None = None

    @classmethod
    def for_campaign(cls, campaign: Any, saved: Any = None, lines: Mapping[str, int] | None = None) -> "SeriesStore":
        """The store for a campaign's runs (loss and the closing metric), restored from what
        `.cockpit/` saved where it matches each stream's reading position (`lines`); a run whose
        stream is read afresh starts its series afresh too."""
        closing = campaign.model.closing
        metrics = ["loss"] + ([closing.metric] if closing and closing.metric != "loss" else [])
        store = cls([run.id for run in campaign.runs], metrics)
        store.restore(saved, lines or {})
        return store

    def observer(self, run_id: str, then: Observer | None = None) -> Observer:
        """The stream observer that feeds the run's series, then `then` (the stop rules)."""
        take = self.runs[run_id].take
        if then is None:
            return take

        def both(record: dict, line: int, track: Any) -> None:
            take(record, line, track)
            then(record, line, track)

        return both

    def take_log(self, events: Iterable[Mapping[str, Any]], parse_ts: Callable[[Any], datetime | None]) -> None:
        """Decisions from the run log, on the runs they name."""
        for event in events:
            run = self.runs.get(event.get("run")) if isinstance(event.get("run"), str) else None
            if run is not None and event.get("type") in ("alert", "stop", "note"):
                moment = parse_ts(event.get("ts")) if isinstance(event.get("ts"), str) else None
                run.take_log_event(event, moment.timestamp() if moment else None)

    def note_clock(self, now: datetime, committed_remaining_hours: float | None, remaining_hours: float | None) -> None:
        self.clock.note(now.timestamp(), committed_remaining_hours, remaining_hours)

    def view(self, moment: float | None = None) -> SeriesView:
        """Every run's view (see RunSeries.view for `moment`) and the clock history."""
        runs = {run_id: run.view(moment) for run_id, run in self.runs.items()}
        key = (self.clock.version, *(id(view) for view in runs.values()))
        if self._view is not None and self._view[0] == key:
            return self._view[1]
        view = SeriesView(runs=runs, clock=tuple(self.clock.samples))
        self._view = (key, view)
        return view

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": SERIES_VERSION,
            "metrics": list(self.metrics),
            "runs": {run_id: run.to_dict() for run_id, run in self.runs.items()},
            "clock": self.clock.to_dict(),
        }

    def restore(self, saved: Any, lines: Mapping[str, int]) -> None:
        if not isinstance(saved, dict) or saved.get("version") != SERIES_VERSION:
            return
        if list(saved.get("metrics") or []) != list(self.metrics):
            return  # the closing metric changed: every series is read afresh with the streams
        runs = saved.get("runs") if isinstance(saved.get("runs"), dict) else {}
        for run_id, run in self.runs.items():
            data = runs.get(run_id)
            if not isinstance(data, dict) or data.get("lines") != lines.get(run_id, 0):
                continue  # saved at another reading position: this run's series start afresh
            try:
                run.restore(data)
            except (KeyError, TypeError, ValueError, IndexError):
                run.reset()
        clock = saved.get("clock")
        if isinstance(clock, dict):
            try:
                self.clock.restore(clock)
            except (KeyError, TypeError, ValueError):
                self.clock = ClockHistory(self.clock.max_samples)


# ---------------------------------------------------------------- reading without an engine


def series_of(campaign: Any) -> SeriesView:
    """The series as `.cockpit/` saved them, brought up to date by reading each stream's new
    bytes (for `close`: nothing is saved back, the watching cockpit owns the saved state)."""
    from cockpit.common.times import parse_ts
    from cockpit.live.saved_state import load_state, state_file
    from cockpit.record.runlog import RunLog, RunLogError

    directory = campaign.directory
    saved = load_state(state_file(directory))
    streams = {run.id: saved.stream(run.id, run.metrics_path(directory)) for run in campaign.runs}
    store = SeriesStore.for_campaign(campaign, (saved.extra or {}).get("series"),
                                     {run_id: stream.position.lines for run_id, stream in streams.items()})
    for run_id, stream in streams.items():
        stream.poll(store.observer(run_id))
    try:
        events = RunLog(directory).read().events
    except RunLogError:
        events = []
    store.take_log(events, parse_ts)
    return store.view()
