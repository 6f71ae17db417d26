"""The calendar (seed §2, §3): list scheduling on GPUs and one operator, window fit, lot options
and reduced protocols, checked against the seed's figures and against the scheduling rules."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.plan.campaign import Run, Task
from cockpit.plan.load import load_campaign, read_campaign_text
from cockpit.plan.schedule import plan_report, schedule, window_fit

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "sample_campaigns" / "sentiment-lora"
B200 = ROOT / "sample_campaigns" / "b200-week"


def campaign_from(body: str, lot: str = 'gpu_model = "RTX 4090"\ngpus = 1\ndays = 3\n', calendar: str = "retrieval_hours = 1\n"):
    text = f'schema = 1\nid = "t"\n[lot]\n{lot}[calendar]\n{calendar}{body}'
    return read_campaign_text(text, Path("/nonexistent"))


def machine(id: str, hours: float, gpus=(0,), after=(), tier="indispensable") -> Task:
    return Task(id=id, kind="machine", hours=hours, gpus=list(gpus), after=list(after), tier=tier)


def human(id: str, hours: float, after=(), tier="indispensable") -> Task:
    return Task(id=id, kind="human", hours=hours, after=list(after), tier=tier)


def overlap(a, b) -> bool:
    return max(a.start_hours, b.start_hours) < min(a.end_hours, b.end_hours)


# ---------------------------------------------------------------- the seed's figures


def test_seed_campaign_commits_48_hours_of_a_72_hour_lot():
    report = plan_report(load_campaign(SEED))
    assert report.window_hours == 72
    assert report.committed_hours == 48
    assert report.uncommitted_hours == 24
    assert report.fits is True
    assert report.over_by_hours == 0
    plan = report.schedule
    assert plan.slot("setup").start_hours == 0
    assert plan.slot("error-analysis").end_hours == 47
    assert plan.retrieval_start_hours == 47
    assert plan.busy_hours_per_gpu == {0: 39.0}
    assert plan.human_hours == 8


def test_thirty_more_hours_is_78_and_over_by_6():
    report = plan_report(load_campaign(SEED), extra_hours=30)
    assert report.committed_hours == 78
    assert report.over_by_hours == 6
    assert report.fits is False
    assert report.uncommitted_hours == -6
    assert report.schedule.committed_hours == 48  # the extra is added, not scheduled


def test_catalogue_options_are_decimal_lot_prices():
    report = plan_report(load_campaign(SEED))
    prices = {(o.days, o.lots): o.price_usd for o in report.options}
    assert prices[(3, 1)] == Decimal("47.14")
    assert prices[(7, 1)] == Decimal("110.00")
    assert prices[(30, 1)] == Decimal("390.00")
    assert prices[(3, 2)] == Decimal("94.28") == Decimal("47.14") * 2
    assert all(isinstance(p, Decimal) for p in prices.values())
    assert [o.current for o in report.options if o.current] == [True]
    assert next(o for o in report.options if o.current).days == 3


def test_seven_day_lot_fits_the_grown_plan_and_three_days_does_not():
    report = plan_report(load_campaign(SEED), extra_hours=30)
    by = {(o.days, o.lots): o for o in report.options}
    assert by[(3, 1)].fits is False
    assert by[(7, 1)].fits is True and by[(7, 1)].committed_hours == 78
    # Two boxes run the independent variants at once (36 h + 30 h), a chain is not shortened.
    assert by[(3, 2)].committed_hours == 66 and by[(3, 2)].fits is True
    assert any("never spans lots" in note and "memory never merges" in note for note in report.notes)


def test_two_lots_never_shorten_a_chain():
    campaign = campaign_from(
        '[[run]]\nid = "a"\nrole = "control"\nhours = 40\n'
        '[[run]]\nid = "b"\nrole = "variant"\nhours = 40\nafter = ["a"]\n'
    )
    report = plan_report(campaign)
    by = {(o.days, o.lots): o for o in report.options}
    assert by[(3, 1)].committed_hours == by[(3, 2)].committed_hours == 81
    assert not by[(3, 2)].fits and by[(7, 1)].fits


def test_b200_lot_is_priced_once_and_is_the_only_option():
    report = plan_report(load_campaign(B200))
    assert [(o.days, o.lots, o.price_usd) for o in report.options] == [(7, 1, Decimal("1450.00"))]
    assert report.options[0].source == "your order"
    assert any("not per GPU" in note for note in report.notes)


def test_a_duration_the_catalogue_does_not_sell_is_listed_as_the_users_own_lot():
    campaign = campaign_from(
        '[[run]]\nid = "a"\nrole = "control"\nhours = 10\n',
        lot='gpu_model = "RTX 4090"\ndays = 5\nprice_usd = "80.00"\n',
    )
    options = plan_report(campaign).options
    own = [o for o in options if o.source == "your order"]
    assert [(o.days, o.lots, o.price_usd, o.current) for o in own] == [(5, 1, Decimal("80.00"), True)]
    assert [o.days for o in options] == sorted(o.days for o in options)


# ---------------------------------------------------------------- scheduling rules


def test_b200_runs_both_gpus_at_once():
    plan = plan_report(load_campaign(B200)).schedule
    lora, full = plan.slot("lora-r64"), plan.slot("full-ft")
    assert lora.gpus == (0,) and full.gpus == (1,)
    assert lora.start_hours == full.start_hours == 9
    assert overlap(lora, full)
    long = plan.slot("full-ft-long")
    assert long.gpus == (0, 1)
    assert long.start_hours == max(full.end_hours, plan.slot("resume-test").end_hours) == 49
    assert plan.committed_hours == 112
    assert plan.busy_hours_per_gpu == {0: 95.0, 1: 100.0}


def test_two_machine_items_on_one_gpu_never_overlap_without_a_dependency():
    plan = schedule([machine("a", 5), machine("b", 3)], gpu_count=1, retrieval_hours=0)
    assert (plan.slot("a").start_hours, plan.slot("a").end_hours) == (0, 5)
    assert (plan.slot("b").start_hours, plan.slot("b").end_hours) == (5, 8)
    assert plan.committed_hours == 8


def test_items_on_different_gpus_run_side_by_side():
    plan = schedule([machine("a", 5, gpus=[0]), machine("b", 3, gpus=[1])], gpu_count=2, retrieval_hours=1)
    assert plan.slot("b").start_hours == 0
    assert plan.committed_hours == 6


def test_an_item_on_two_gpus_waits_for_both():
    items = [machine("a", 5, gpus=[0]), machine("b", 8, gpus=[1]), machine("both", 2, gpus=[0, 1])]
    plan = schedule(items, gpu_count=2, retrieval_hours=0)
    assert plan.slot("both").start_hours == 8
    assert plan.busy_hours_per_gpu == {0: 7.0, 1: 10.0}


def test_human_items_overlap_machine_items_but_not_each_other():
    items = [machine("train", 10), human("write", 4), human("review", 3)]
    plan = schedule(items, gpu_count=1, retrieval_hours=0)
    assert plan.slot("write").start_hours == 0  # beside the machine
    assert plan.slot("review").start_hours == 4  # after the other human item
    assert plan.human_hours == 7
    assert plan.committed_hours == 10


def test_dependencies_are_honoured_even_against_file_order():
    items = [machine("late", 2, after=["early"]), machine("early", 3, gpus=[1])]
    plan = schedule(items, gpu_count=2, retrieval_hours=0)
    assert plan.slot("late").start_hours == 3
    assert [s.id for s in plan.slots] == ["late", "early"]  # slots keep file order


def test_a_later_item_uses_an_idle_gap_without_moving_earlier_ones():
    items = [
        machine("prep", 4, gpus=[0]),
        machine("big", 10, gpus=[0, 1], after=["prep"]),
        machine("small", 3, gpus=[1]),
    ]
    plan = schedule(items, gpu_count=2, retrieval_hours=0)
    assert plan.slot("big").start_hours == 4
    assert plan.slot("small").start_hours == 0


def test_retrieval_follows_the_last_item():
    plan = schedule([machine("a", 5), human("b", 7)], gpu_count=1, retrieval_hours=2)
    assert plan.retrieval_start_hours == 7
    assert plan.committed_hours == 9


def test_hours_override_zero_means_done():
    items = [machine("a", 5), machine("b", 3, after=["a"])]
    plan = schedule(items, gpu_count=1, retrieval_hours=1, hours={"a": 0, "b": 1.5})
    assert plan.slot("a").hours == 0
    assert (plan.slot("b").start_hours, plan.slot("b").end_hours) == (0, 1.5)
    assert plan.committed_hours == 2.5


def test_reduced_protocol_drops_dependencies_on_dropped_items():
    report = plan_report(load_campaign(SEED))
    indispensable, with_useful = report.reduced
    assert indispensable.tiers == ("indispensable",)
    assert indispensable.dropped == ("v-r16", "v-r64")
    # error-analysis came after both variants; without them it follows the control
    assert indispensable.schedule.slot("error-analysis").start_hours == 18
    assert indispensable.committed_hours == 23 and indispensable.fits
    assert with_useful.tiers == ("indispensable", "useful")
    assert with_useful.dropped == ("v-r64",)
    assert with_useful.committed_hours == 36 and with_useful.fits


def test_reduced_protocols_carry_the_extra_hours():
    indispensable, with_useful = plan_report(load_campaign(SEED), extra_hours=50).reduced
    assert (indispensable.committed_hours, indispensable.fits) == (73, False)
    assert indispensable.over_by_hours == 1
    assert (with_useful.committed_hours, with_useful.fits) == (86, False)


def test_hours_add_up_exactly_as_written():
    items = [machine("a", 0.1), machine("b", 0.2)]
    plan = schedule(items, gpu_count=1, retrieval_hours=0)
    assert plan.committed_hours == 0.3
    fit = window_fit(71.9, 72, extra_hours=0.1)
    assert fit.fits and fit.over_by_hours == 0 and fit.committed_hours == 72


@pytest.mark.parametrize(
    "items, message",
    [
        ([machine("a", 1, after=["b"]), machine("b", 1, after=["a"])], "cycle"),
        ([machine("a", 1, after=["ghost"])], "ghost"),
        ([machine("a", 1, gpus=[3])], "GPU 3"),
        ([machine("a", 1), machine("a", 2)], "twice"),
    ],
)
def test_bad_calendars_are_refused_with_a_reason(items, message):
    with pytest.raises(ValueError, match=message):
        schedule(items, gpu_count=1, retrieval_hours=0)


def test_negative_or_unknown_inputs_are_refused():
    with pytest.raises(ValueError, match="negative"):
        schedule([machine("a", 1)], gpu_count=1, retrieval_hours=0, hours={"a": -1})
    with pytest.raises(ValueError, match="tier"):
        schedule([machine("a", 1)], gpu_count=1, retrieval_hours=0, keep_tiers=["essential"])


def test_runs_and_tasks_schedule_alike():
    items = [Run(id="r", role="control", hours=4, gpus=[1]), machine("t", 2, gpus=[1])]
    plan = schedule(items, gpu_count=2, retrieval_hours=0)
    assert plan.slot("r").kind == "machine" and plan.slot("r").gpus == (1,)
    assert plan.slot("t").start_hours == 4


# ---------------------------------------------------------------- property: the rules always hold


@st.composite
def calendars(draw):
    gpu_count = draw(st.integers(1, 3))
    count = draw(st.integers(1, 9))
    items = []
    for index in range(count):
        earlier = [f"i{j}" for j in range(index)]
        after = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=3)) if earlier else []
        hours = draw(st.sampled_from([0.25, 0.5, 1, 1.5, 2, 3, 5, 8, 12]))
        tier = draw(st.sampled_from(["indispensable", "useful", "exploratory"]))
        if draw(st.booleans()):
            items.append(human(f"i{index}", hours, after=after, tier=tier))
        else:
            gpus = draw(st.lists(st.integers(0, gpu_count - 1), min_size=1, max_size=gpu_count, unique=True))
            items.append(machine(f"i{index}", hours, gpus=gpus, after=after, tier=tier))
    draw(st.randoms()).shuffle(items)  # file order need not follow dependencies
    keep = draw(st.sampled_from([None, ("indispensable",), ("indispensable", "useful")]))
    lots = draw(st.sampled_from([1, 1, 2]))
    return items, gpu_count, keep, lots


@settings(max_examples=150, deadline=None)
@given(calendars(), st.sampled_from([0, 0.5, 2]))
def test_no_shared_gpu_or_operator_overlaps_and_dependencies_hold(calendar, retrieval):
    items, gpu_count, keep, lots = calendar
    plan = schedule(items, gpu_count, retrieval, keep_tiers=keep, lots=lots)
    by_id = {i.id: i for i in items}
    slots = plan.slots
    for index, a in enumerate(slots):
        assert a.hours == pytest.approx(by_id[a.id].hours)
        for b in slots[index + 1:]:
            if a.lot == b.lot and set(a.gpus) & set(b.gpus):
                assert not overlap(a, b), (a, b)
            if a.kind == b.kind == "human":
                assert not overlap(a, b), (a, b)
        for dependency in by_id[a.id].after:
            before = plan.slot(dependency)
            if before is not None:
                assert a.start_hours >= before.end_hours, (a, before)
            else:
                assert dependency in plan.dropped
    kept = {i.id for i in items if keep is None or i.tier.value in keep}
    assert {s.id for s in slots} == kept
    assert plan.committed_hours == pytest.approx(max((s.end_hours for s in slots), default=0) + retrieval)


# The earliest common free time of several lanes: the scan the live clock re-runs every tick
# (issue 15: the engine tick's target) must say exactly what the definition says.

def _earliest_by_definition(lanes: list[list[tuple[int, int]]], ready: int, duration: int) -> int:
    """The first of `ready` and the busy ends after it at which every lane is free for `duration`."""
    if duration == 0 or not lanes:
        return ready
    for start in sorted({ready} | {e for lane in lanes for _, e in lane if e > ready}):
        if all(not (s < start + duration and start < e) for lane in lanes for s, e in lane):
            return start
    raise AssertionError("unreachable")


_intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)).map(lambda p: (p[0], p[0] + p[1])), max_size=8)


@settings(max_examples=400, deadline=None)
@given(st.lists(_intervals, max_size=4), st.integers(0, 70), st.integers(0, 25))
def test_the_earliest_free_start_of_several_lanes_is_the_definitions(lanes, ready, duration):
    from cockpit.plan.schedule import _earliest, _Lane

    built = []
    for busy in lanes:
        lane = _Lane()
        for start, end in busy:
            lane.add(start, end)
        built.append(lane)
    assert _earliest(built, ready, duration) == _earliest_by_definition(lanes, ready, duration)


def test_a_replan_of_the_same_items_reuses_their_checks_and_new_items_are_checked_afresh():
    items = [machine("a", 2, gpus=[0]), machine("b", 3, gpus=[0], after=["a"])]
    first = schedule(items, 1, 1)
    again = schedule(items, 1, 1, hours={"a": 1})  # the live clock: the same items, other hours
    assert [(s.id, s.start_hours, s.end_hours) for s in again.slots] == [("a", 0, 1), ("b", 1, 4)]
    assert schedule(items, 1, 1) == first
    with pytest.raises(ValueError, match="'b' needs GPU 1, but the lot holds 1"):
        schedule([items[0], machine("b", 3, gpus=[1], after=["a"])], 1, 1)
    with pytest.raises(ValueError, match="'b' comes after 'x', which is no task or run"):
        schedule([items[0], machine("b", 3, gpus=[0], after=["x"])], 1, 1)
    with pytest.raises(ValueError, match="'a': hours must not be negative"):  # its hours first, as ever
        schedule(items, 1, 1, hours={"a": -1})
    wide = [machine("c", 1, gpus=[1])]
    assert schedule(wide, 2, 1).slots[0].gpus == (1,)
    with pytest.raises(ValueError, match="'c' needs GPU 1, but the lot holds 1"):  # the same items, a smaller lot
        schedule(wide, 1, 1)
