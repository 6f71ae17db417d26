"""One series of (step, value) kept small whatever its length: min/max buckets that merge as
the series grows (at most `MAX_POINTS` points), every extreme, each non-finite value and the last
point kept; saved as strict JSON (non-finite values by name). cockpit/live/series.py keeps one per
metric of each run."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MAX_POINTS = 1000  # per series, whatever the run's length
# One bucket yields its minimum, its maximum and (when it held one) its first non-finite value:
# at most 3 points a bucket, plus the series' last point.
MAX_BUCKETS = (MAX_POINTS - 1) // 3

Point = tuple[int, float]
_NONFINITE_NAMES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _encode(value: float) -> float | str:
    """Strict JSON has no NaN: non-finite values are saved by name."""
    if value != value:
        return "nan"
    if value in (math.inf, -math.inf):
        return "inf" if value > 0 else "-inf"
    return value


def _decode(value: Any) -> float:
    if isinstance(value, str):
        return _NONFINITE_NAMES[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("not a number")
    return float(value)


class Downsampled:
    """One series of (step, value), min/max-bucketed: consecutive points fall into buckets of
    `width` points; when there are too many buckets, neighbours merge and the width doubles.
    Each bucket keeps its minimum and its maximum (every extreme at the bucket's resolution, the
    series' own minimum and maximum exactly) and its first non-finite value (a NaN is never
    averaged away); the last point is always kept as it came."""

    __slots__ = ("max_buckets", "width", "buckets", "count", "last_step", "last_value", "_prefix", "_prefix_count",
                 "_prefix_of")

    def __init__(self, max_points: int = MAX_POINTS):
        if max_points < 4:
            raise ValueError("a series needs room for at least 4 points")
        self.max_buckets = (max_points - 1) // 3
        self.width = 1  # input points a bucket holds
        # [first_step, last_step, count, min_step, min_value, max_step, max_value, nonfinite (step, value) | None]
        self.buckets: list[list[Any]] = []
        self.count = 0
        # The last point, as two fields: a (step, value) tuple a point would be one more object
        # for the garbage collector to count, every line of every run.
        self.last_step: int | None = None
        self.last_value: float = 0.0
        # The points of the closed buckets (all but the last), kept between views: only a merge
        # (which makes a new bucket list) changes them, so a view each tick costs the open bucket only.
        self._prefix: tuple[Point, ...] = ()
        self._prefix_count = 0
        self._prefix_of: list | None = None

    @property
    def last(self) -> Point | None:
        return None if self.last_step is None else (self.last_step, self.last_value)

    def add(self, step: int, value: float) -> None:
        self.count += 1
        self.last_step, self.last_value = step, value
        buckets = self.buckets
        bucket = buckets[-1] if buckets else None
        if bucket is None or bucket[2] >= self.width:
            bucket = [step, step, 0, None, None, None, None, None]
            buckets.append(bucket)
            if len(buckets) > self.max_buckets:
                self._merge()
                bucket = self.buckets[-1]
        bucket[1] = step
        bucket[2] += 1
        if value - value == 0.0:
            if bucket[4] is None:
                bucket[3] = bucket[5] = step
                bucket[4] = bucket[6] = value
            elif value < bucket[4]:
                bucket[3], bucket[4] = step, value
            elif value > bucket[6]:
                bucket[5], bucket[6] = step, value
        elif bucket[7] is None:
            bucket[7] = (step, value)

    def _merge(self) -> None:
        old = self.buckets
        merged: list[list[Any]] = []
        for index in range(0, len(old) - 1, 2):
            merged.append(_merge_into(old[index], old[index + 1]))
        if len(old) % 2:
            merged.append(old[-1])
        self.buckets = merged
        self.width *= 2

    def points(self) -> tuple[Point, ...]:
        """The kept points in the order they came: per bucket its extremes and its non-finite value,
        then the last point (once)."""
        buckets = self.buckets
        closed = len(buckets) - 1 if buckets else 0
        if self._prefix_of is not buckets or self._prefix_count > closed:
            self._prefix, self._prefix_count, self._prefix_of = (), 0, buckets
        if self._prefix_count < closed:
            extra: list[Point] = []
            for bucket in buckets[self._prefix_count:closed]:
                extra.extend(_bucket_points(bucket))
            self._prefix += tuple(extra)
            self._prefix_count = closed
        out = list(_bucket_points(buckets[-1])) if buckets else []
        last = self.last
        tail = out[-1] if out else (self._prefix[-1] if self._prefix else None)
        if last is not None and (tail is None or not _same_point(tail, last)):
            out.append(last)
        return self._prefix + tuple(out)

    def spans(self) -> list[tuple[int, int, int]]:
        """(first step, last step, points) of each bucket: what each kept extreme stands for."""
        return [(b[0], b[1], b[2]) for b in self.buckets]

    def to_dict(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "count": self.count,
            "last": None if self.last is None else [self.last[0], _encode(self.last[1])],
            "buckets": [
                [b[0], b[1], b[2], b[3], b[4], b[5], b[6], None if b[7] is None else [b[7][0], _encode(b[7][1])]]
                for b in self.buckets
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], max_points: int = MAX_POINTS) -> "Downsampled":
        series = cls(max_points)
        width, count = data["width"], data["count"]
        if type(width) is not int or width < 1 or type(count) is not int or count < 0:
            raise ValueError("width/count")
        series.width, series.count = width, count
        last = data.get("last")
        if last is not None:
            series.last_step, series.last_value = as_step(last[0]), _decode(last[1])
        buckets = []
        for item in data["buckets"]:
            first, final, n, min_step, min_value, max_step, max_value, nonfinite = item
            if min_value is not None:
                min_value, max_value = _decode(min_value), _decode(max_value)
                min_step, max_step = as_step(min_step), as_step(max_step)
            buckets.append([
                as_step(first), as_step(final), int(n), min_step, min_value, max_step, max_value,
                None if nonfinite is None else (as_step(nonfinite[0]), _decode(nonfinite[1])),
            ])
        if len(buckets) > series.max_buckets:
            raise ValueError("more buckets than allowed")
        series.buckets = buckets
        return series


def _bucket_points(bucket: list[Any]) -> list[Point]:
    """A bucket's minimum, its maximum (if another point) and its non-finite value, by step (a
    finite point before a non-finite one at the same step). Called for every bucket of every
    series a view draws: two or three points put in order by hand, without a sort."""
    nonfinite = bucket[7]
    if bucket[4] is None:
        return [] if nonfinite is None else [nonfinite]
    low = (bucket[3], bucket[4])
    if bucket[5] != bucket[3] or bucket[6] != bucket[4]:
        high = (bucket[5], bucket[6])
        kept = [low, high] if low[0] <= high[0] else [high, low]
    else:
        kept = [low]
    if nonfinite is not None:
        step = nonfinite[0]
        at = len(kept)
        while at and kept[at - 1][0] > step:
            at -= 1
        kept.insert(at, nonfinite)
    return kept


def as_step(value: Any) -> int:
    if type(value) is not int:
        raise TypeError("step")
    return value


def _same_point(a: Point, b: Point) -> bool:
    return a[0] == b[0] and (a[1] == b[1] or (a[1] != a[1] and b[1] != b[1]))


def _merge_into(a: list[Any], b: list[Any]) -> list[Any]:
    """Bucket `b` (the later) merged into bucket `a`, in place: no new list per bucket at each merge."""
    a[1] = b[1]
    a[2] += b[2]
    if a[7] is None:
        a[7] = b[7]
    if b[4] is not None:
        if a[4] is None:
            a[3:7] = b[3:7]
        else:
            if b[4] < a[4]:
                a[3], a[4] = b[3], b[4]
            if b[6] > a[6]:
                a[5], a[6] = b[5], b[6]
    return a
