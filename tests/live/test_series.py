"""The charts' series: downsampling keeps every extreme, each NaN and the last point in at most
1,000 points whatever the run's length; the engine feeds them and saves them beside the reading
position, so a restart reads nothing twice; the clock history stays bounded."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.live.chart_data import nice_ticks
from cockpit.live.downsample import MAX_POINTS, Downsampled
from cockpit.live.series import ClockHistory, SeriesStore

values = st.one_of(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)


def _is_nan(value: float) -> bool:
    return value != value


def _fed(points: list[tuple[int, float]], max_points: int) -> Downsampled:
    series = Downsampled(max_points)
    for step, value in points:
        series.add(step, value)
    return series


@st.composite
def runs(draw):
    size = draw(st.integers(min_value=1, max_value=3000))
    base = draw(st.lists(values, min_size=1, max_size=60))
    # long runs from a short drawn pattern (hypothesis keeps lists short), with a few drawn values set in
    points = [(step, base[(step * 7) % len(base)]) for step in range(size)]
    for index, value in draw(st.lists(st.tuples(st.integers(0, size - 1), values), max_size=10)):
        points[index] = (index, value)
    return points, draw(st.sampled_from([16, 100, MAX_POINTS]))


@settings(max_examples=150, deadline=None)
@given(runs())
def test_downsampling_keeps_every_extreme_each_nan_and_the_last_point(case):
    points, max_points = case
    series = _fed(points, max_points)
    kept = series.points()
    assert len(kept) <= max_points
    # the last point, as it came
    assert kept[-1][0] == points[-1][0]
    assert kept[-1][1] == points[-1][1] or (_is_nan(kept[-1][1]) and _is_nan(points[-1][1]))
    # the buckets partition the input in order; each keeps its own minimum and maximum exactly,
    # and a non-finite value wherever it held one
    position = 0
    kept_set = {(s, v) for s, v in kept if not _is_nan(v)}
    kept_nan_steps = {s for s, v in kept if not math.isfinite(v)}
    for first, last, count in series.spans():
        chunk = points[position:position + count]
        assert chunk and chunk[0][0] == first and chunk[-1][0] == last
        finite = [p for p in chunk if math.isfinite(p[1])]
        if finite:
            assert min(finite, key=lambda p: p[1])[1] in {v for s, v in kept_set if first <= s <= last}
            assert max(finite, key=lambda p: p[1])[1] in {v for s, v in kept_set if first <= s <= last}
        if len(finite) < len(chunk):
            assert any(first <= s <= last for s in kept_nan_steps), f"a non-finite value in steps {first}-{last} was lost"
        position += count
    assert position == len(points)
    # the series' own extremes, exactly
    finite = [v for _, v in points if math.isfinite(v)]
    if finite:
        kept_values = [v for _, v in kept if math.isfinite(v)]
        assert min(kept_values) == min(finite) and max(kept_values) == max(finite)


@settings(max_examples=50, deadline=None)
@given(runs())
def test_a_saved_series_comes_back_the_same(case):
    points, max_points = case
    series = _fed(points, max_points)
    again = Downsampled.from_dict(json.loads(json.dumps(series.to_dict(), allow_nan=False)), max_points)
    assert repr(again.points()) == repr(series.points())


def test_a_million_points_stay_under_a_thousand_and_the_nan_at_the_end_is_kept():
    series = Downsampled()
    for step in range(1_000_000):
        series.add(step, 2.0 / (1 + step / 1000))
    series.add(1_000_000, math.nan)
    kept = series.points()
    assert len(kept) <= MAX_POINTS
    assert kept[-1][0] == 1_000_000 and _is_nan(kept[-1][1])
    assert kept[0] == (0, 2.0)


def test_the_clock_history_stays_bounded_over_a_30_day_lot():
    history = ClockHistory()
    start = datetime(2026, 11, 1, tzinfo=timezone.utc).timestamp()
    for second in range(0, 30 * 86400, 5):
        history.note(start + second, 100.0 - second / 3600, 720.0 - second / 3600)
    assert len(history.samples) <= MAX_POINTS
    assert history.samples[0].at == start
    assert history.samples[-1].at == start + 30 * 86400 - 5


def test_nice_ticks_cover_the_range():
    assert nice_ticks(0, 1) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert nice_ticks(0.61, 0.83)[0] >= 0.61


# ---------------------------------------------------------------- through the engine


def _write(path, lines):
    with path.open("a") as handle:
        for line in lines:
            handle.write(line + "\n")


def test_the_engine_feeds_the_series_and_a_restart_reads_nothing_twice(seed_campaign):
    from cockpit.live.engine import Engine
    from cockpit.live.gpu import FakeGpus
    from cockpit.plan.load import load_campaign

    campaign = load_campaign(seed_campaign)
    run = campaign.runs[0]
    path = run.metrics_path(seed_campaign)
    path.parent.mkdir(parents=True, exist_ok=True)
    ts = campaign.lot.start.timestamp() + 60
    _write(path, [json.dumps({"ts": ts + s, "step": s, "loss": 3.0 - s / 1000, "eval/macro_f1": 0.5 + s / 10000}) for s in range(2000)])
    _write(path, [json.dumps({"ts": ts + 2001, "event": "checkpoint", "path": "c.pt", "seconds": 2.0})])
    clock = lambda: campaign.lot.start + timedelta(hours=1)  # noqa: E731
    engine = Engine(campaign, clock=clock, gpus=FakeGpus(1))
    snapshot = engine.tick()
    engine.close()
    view = snapshot.series.run(run.id)
    assert view.counts == {"loss": 2000, "eval/macro_f1": 2000}
    assert view.points["loss"][-1] == (1999, 3.0 - 1999 / 1000)
    assert "checkpoint" in [m.kind for m in view.marks]  # and the alerts the rules raised
    assert snapshot.series.clock and snapshot.series.clock[-1].remaining_hours is not None

    _write(path, ['{"ts": %f, "step": 2000, "loss": NaN}' % (ts + 2002)])
    again = Engine(campaign, clock=clock, gpus=FakeGpus(1))
    view = again.tick().series.run(run.id)
    again.close()
    assert view.counts["loss"] == 2001  # the saved 2000 and the one new line: nothing read twice
    assert view.points["loss"][-1][0] == 2000 and _is_nan(view.points["loss"][-1][1])


def test_a_replaced_stream_starts_its_series_again():
    store = SeriesStore(["r"], ["loss"])
    feed = store.observer("r")
    for line in range(1, 11):
        feed({"step": line, "loss": 1.0}, line, None)
    feed({"step": 1, "loss": 5.0}, 1, None)  # line 1 again: the file was read afresh
    assert store.view().run("r").points["loss"] == ((1, 5.0),)


@settings(max_examples=60, deadline=None)
@given(runs(), st.lists(st.integers(min_value=1, max_value=400), max_size=8))
def test_points_seen_between_additions_are_the_points_of_the_whole(case, pauses):
    """The view is kept between ticks (only the open bucket is recomputed): looking at the
    series now and then while it grows gives what looking once at the end gives."""
    points, max_points = case
    watched, fresh = Downsampled(max_points), Downsampled(max_points)
    marks = set()
    total = 0
    for pause in pauses:
        total += pause
        marks.add(total)
    for index, (step, value) in enumerate(points):
        watched.add(step, value)
        fresh.add(step, value)
        if index in marks:
            watched.points()
    assert repr(watched.points()) == repr(fresh.points())


@settings(max_examples=60, deadline=None)
@given(runs())
def test_the_engines_fast_path_keeps_what_add_keeps(case):
    """The observer the engine calls puts the common value in its bucket inline: the same points."""
    points, max_points = case
    store = SeriesStore(["r"], ["loss"], max_points)
    feed = store.observer("r")
    reference = Downsampled(max_points)
    for line, (step, value) in enumerate(points, 1):
        feed({"step": step, "loss": value}, line, None)
        reference.add(step, value)
    assert repr(store.view().run("r").points["loss"]) == repr(reference.points())
    assert store.runs["r"].series["loss"].to_dict() == reference.to_dict()  # buckets, width, count, last


def _bucket_points_by_sort(bucket):
    """The definition: the bucket's minimum, its maximum when another point, its non-finite
    value; ordered by step, a finite point before a non-finite one at the same step."""
    kept = []
    if bucket[4] is not None:
        kept.append((0, (bucket[3], bucket[4])))
        if bucket[5] != bucket[3] or bucket[6] != bucket[4]:
            kept.append((0, (bucket[5], bucket[6])))
    if bucket[7] is not None:
        kept.append((1, bucket[7]))
    kept.sort(key=lambda item: (item[1][0], item[0]))
    return [point for _, point in kept]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), values), min_size=1, max_size=12))
def test_a_buckets_points_come_in_the_order_of_the_definition(points):
    from cockpit.live.downsample import _bucket_points

    series = Downsampled(4)
    series.width = len(points)  # one bucket holds them all
    for step, value in points:
        series.add(step, value)
    (bucket,) = series.buckets
    assert _bucket_points(bucket) == _bucket_points_by_sort(bucket)
