"""The end-to-end calendar: list scheduling of tasks and runs on the lot's GPUs and
one operator, window fit, lot options and reduced protocols. Pure arithmetic, no I/O.

Hours are added as whole nanohours (integers), so the decimals the user wrote add up exactly
(0.1 + 0.2 is 0.3 here) and a plan that fits to the hour is never declared over by a rounding
error; integers also keep a re-plan cheap enough for every engine tick. Money stays Decimal.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

HUMAN = "human"
MACHINE = "machine"
TIERS = ("indispensable", "useful", "exploratory")
REDUCED_PROTOCOLS: tuple[tuple[str, ...], ...] = (("indispensable",), ("indispensable", "useful"))

TWO_LOTS_NOTE = (
    "Two lots are two separate boxes, each with its own GPUs and memory: independent items can "
    "run on each at once, but a run never spans lots, is no shorter on two boxes, and GPU "
    "memory never merges."
)


# ---------------------------------------------------------------- the schedule


@dataclass(frozen=True)
class Slot:
    """One task or run placed on the calendar, in hours from the calendar's origin."""

    id: str
    kind: str  # "human" | "machine"
    tier: str
    gpus: tuple[int, ...]
    start_hours: float
    end_hours: float
    lot: int = 0  # which box, when a plan is spread over several lots

    @property
    def hours(self) -> float:
        return self.end_hours - self.start_hours


@dataclass(frozen=True)
class Schedule:
    """A placed calendar. `committed_hours` runs from the origin to the end of retrieval."""

    slots: tuple[Slot, ...]
    retrieval_hours: float
    committed_hours: float
    busy_hours_per_gpu: dict[int, float]
    human_hours: float
    dropped: tuple[str, ...] = ()  # items left out by a reduced protocol, in file order

    @property
    def retrieval_start_hours(self) -> float:
        """When the last item ends and copying results off the box begins."""
        return self.committed_hours - self.retrieval_hours

    def slot(self, id: str) -> Slot | None:
        return next((s for s in self.slots if s.id == id), None)


TICKS = 10**9  # nanohours in an hour: exact for any decimal of up to 9 places
_FLOAT_HOURS_MAX = 1e290  # a finite, non-negative float below this (NaN fails both comparisons) takes the short way


def _nanohours(value: Any, what: str) -> int:
    """Hours as whole nanohours: 0.1 → 100_000_000, whatever the float's binary expansion."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise ValueError(f"{what}: hours must be a number (got {value!r})")
    if not math.isfinite(value):
        raise ValueError(f"{what}: hours must be a finite number (got {value!r})")
    if value < 0:
        raise ValueError(f"{what}: hours must not be negative (got {value!r})")
    return round(value * TICKS)


def _float(ticks: int) -> float:
    return ticks / TICKS  # int / int is correctly rounded: 48_000_000_000 → 48.0


def _text(value: Any) -> str:
    """An enum's value or a plain string."""
    return str(getattr(value, "value", value))


def _kind(item: Any) -> str:
    return MACHINE if getattr(item, "machine", True) else HUMAN


class _Lane:
    """The busy intervals of one resource (a GPU of a lot, or the operator), kept sorted."""

    __slots__ = ("busy",)

    def __init__(self) -> None:
        self.busy: list[tuple[int, int]] = []

    def add(self, start: int, end: int) -> None:
        self.busy.append((start, end))
        self.busy.sort()


def _earliest(lanes: Sequence[_Lane], ready: int, duration: int) -> int:
    """The earliest start at or after `ready` when every lane is free for `duration`.

    One pass over the lanes' busy intervals in order of start: an interval that overlaps the
    candidate window pushes the candidate to its end, the first that begins after the window
    ends the search. (The live clock re-plans every tick; this is linear where trying each busy
    end against every lane was quadratic.)
    """
    if duration == 0 or not lanes:
        return ready
    busy = lanes[0].busy if len(lanes) == 1 else sorted(i for lane in lanes for i in lane.busy)
    start = ready
    for s, e in busy:
        if e <= start:
            continue
        if s >= start + duration:
            break
        start = e
    return start


class _Prepared:
    """What `schedule` works out from the items alone (not their hours): kept for the next call
    with the very same items, since the live clock re-plans the same campaign every tick."""

    __slots__ = ("items", "gpu_count", "keep", "kept", "dropped", "needs", "gpus_of", "kinds", "tiers",
                 "errors", "position", "followers", "waiting")

    def __init__(self, items: list[Any], gpu_count: int, keep: set[str] | None):
        self.items, self.gpu_count, self.keep = items, gpu_count, keep
        ids = [item.id for item in items]
        if len(set(ids)) != len(ids):
            duplicate = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"'{duplicate}' appears twice in the calendar")
        self.kept = kept = [item for item in items if keep is None or _text(item.tier) in keep]
        kept_ids = {item.id for item in kept}
        self.dropped = dropped = tuple(item.id for item in items if item.id not in kept_ids)
        self.needs: dict[str, list[str]] = {}
        self.gpus_of: dict[str, tuple[int, ...]] = {}
        self.kinds = {item.id: _kind(item) for item in kept}
        self.tiers = {item.id: _text(item.tier) for item in kept}
        self.errors: dict[str, str] = {}  # an item's first error, raised after its hours are checked
        for item in kept:
            self.needs[item.id] = [d for d in item.after if d in kept_ids]
            self.gpus_of[item.id] = tuple(item.gpu_list)
            unknown = next((d for d in item.after if d not in kept_ids and d not in dropped), None)
            outside = next((g for g in self.gpus_of[item.id] if not 0 <= g < gpu_count), None)
            if unknown is not None:
                self.errors[item.id] = f"'{item.id}' comes after '{unknown}', which is no task or run"
            elif outside is not None:
                self.errors[item.id] = (f"'{item.id}' needs GPU {outside}, but the lot holds {gpu_count} "
                                        f"(indexes 0–{gpu_count - 1})")
        # The first item in file order whose dependencies are all placed goes next: file order is
        # the user's priority, `after` only constrains it (Kahn's algorithm with a heap of positions).
        self.position = {item.id: index for index, item in enumerate(kept)}
        self.waiting = {item.id: len(set(self.needs[item.id])) for item in kept}
        self.followers: dict[str, list[str]] = {item.id: [] for item in kept}
        for item in kept:
            for dependency in set(self.needs[item.id]):
                self.followers[dependency].append(item.id)

    def fits(self, items: list[Any], gpu_count: int, keep: set[str] | None) -> bool:
        return (gpu_count == self.gpu_count and keep == self.keep and len(items) == len(self.items)
                and all(a is b for a, b in zip(items, self.items)))


_PREPARED: list[_Prepared] = []  # the last few item lists scheduled (the clock alternates two orders)


def _prepared(items: list[Any], gpu_count: int, keep: set[str] | None) -> _Prepared:
    for plan in _PREPARED:
        if plan.fits(items, gpu_count, keep):
            return plan
    plan = _Prepared(items, gpu_count, keep)
    _PREPARED.insert(0, plan)
    del _PREPARED[4:]
    return plan


def schedule(
    items: Iterable[Any],
    gpu_count: int,
    retrieval_hours: float,
    hours: Mapping[str, float] | None = None,
    keep_tiers: Collection[str] | None = None,
    lots: int = 1,
) -> Schedule:
    """Place `items` (campaign tasks and runs, in file order) on the calendar.

    Items are taken in file order, each as soon as everything it comes `after` has ended, and
    placed at the earliest time its resources are free: a machine item needs every GPU it names
    (two items sharing a GPU never overlap, an item on [0, 1] waits for both), a human item needs
    the operator (human items never overlap each other, but run beside machine items). An earlier
    item keeps its place; a later one may use an idle gap before it. Retrieval follows the last
    item.

    `hours` overrides an item's hours (0 = already done; the live clock re-plans from measured
    progress this way). `keep_tiers` keeps only those tiers: a dependency on a dropped item is
    dropped with it. `lots` > 1 spreads machine items over that many separate boxes of
    `gpu_count` GPUs each (an item never spans boxes); `busy_hours_per_gpu` then counts box b's
    GPU g as b * gpu_count + g.
    """
    if gpu_count < 1:
        raise ValueError(f"a lot holds at least one GPU (got {gpu_count})")
    if lots < 1:
        raise ValueError(f"at least one lot (got {lots})")
    retrieval = _nanohours(retrieval_hours, "retrieval")
    overrides = dict(hours or {})
    keep = None if keep_tiers is None else {_text(t) for t in keep_tiers}
    unknown_tiers = sorted((keep or set()) - set(TIERS))
    if unknown_tiers:
        raise ValueError(f"unknown tier {', '.join(unknown_tiers)} (tiers: {', '.join(TIERS)})")

    plan = _prepared(list(items), gpu_count, keep)
    kept, dropped, needs, gpus_of, kinds, tiers = plan.kept, plan.dropped, plan.needs, plan.gpus_of, plan.kinds, plan.tiers
    durations: dict[str, int] = {}
    errors = plan.errors
    for item in kept:
        value = overrides.get(item.id, item.hours)
        if type(value) is float and 0.0 <= value <= _FLOAT_HOURS_MAX:  # the live clock's case, checked inline
            durations[item.id] = round(value * TICKS)
        else:
            durations[item.id] = _nanohours(value, f"'{item.id}'")
        if errors:
            wrong = errors.get(item.id)
            if wrong:
                raise ValueError(wrong)

    gpu_lanes = {(lot, gpu): _Lane() for lot in range(lots) for gpu in range(gpu_count)}
    operator = _Lane()
    placed: dict[str, tuple[int, int, int]] = {}
    slots: list[Slot] = []
    # The first item in file order whose dependencies are all placed goes next: file order is
    # the user's priority, `after` only constrains it (Kahn's algorithm with a heap of positions).
    position, followers = plan.position, plan.followers
    waiting = dict(plan.waiting)
    ready_heap = [position[i] for i, count in waiting.items() if count == 0]
    heapq.heapify(ready_heap)
    while ready_heap:
        item = kept[heapq.heappop(ready_heap)]
        for follower in followers[item.id]:
            waiting[follower] -= 1
            if waiting[follower] == 0:
                heapq.heappush(ready_heap, position[follower])
        duration = durations[item.id]
        inputs = needs[item.id]
        ready = max([placed[d][1] for d in inputs]) if inputs else 0
        kind = kinds[item.id]
        gpus = gpus_of[item.id] if kind == MACHINE else ()
        lot = 0
        if kind == HUMAN:
            start = _earliest([operator], ready, duration)
            if duration:
                operator.add(start, start + duration)
        elif lots == 1:
            start = _earliest([gpu_lanes[(0, g)] for g in gpus], ready, duration)
        else:
            # On several boxes: the earliest start wins; on a tie, the box its inputs are on.
            near = {placed[d][2] for d in needs[item.id]}
            start, _, lot = min(
                (_earliest([gpu_lanes[(b, g)] for g in gpus], ready, duration), b not in near, b)
                for b in range(lots)
            )
        if kind != HUMAN and duration:
            for gpu in gpus:
                gpu_lanes[(lot, gpu)].add(start, start + duration)
        placed[item.id] = (start, start + duration, lot)
        slots.append(
            Slot(
                id=item.id,
                kind=kind,
                tier=tiers[item.id],
                gpus=gpus,
                start_hours=_float(start),
                end_hours=_float(start + duration),
                lot=lot,
            )
        )

    if len(placed) < len(kept):
        stuck = [f"'{i.id}'" for i in kept if i.id not in placed]
        raise ValueError("dependency cycle among " + ", ".join(stuck))
    last_end = max((end for _, end, _ in placed.values()), default=0)
    busy = {
        lot * gpu_count + gpu: _float(sum(e - s for s, e in gpu_lanes[(lot, gpu)].busy))
        for lot in range(lots)
        for gpu in range(gpu_count)
    }
    human = _float(sum(e - s for s, e in operator.busy))
    slots.sort(key=lambda s: position[s.id])
    return Schedule(
        slots=tuple(slots),
        retrieval_hours=_float(retrieval),
        committed_hours=_float(last_end + retrieval),
        busy_hours_per_gpu=busy,
        human_hours=human,
        dropped=dropped,
    )


# ---------------------------------------------------------------- window fit


@dataclass(frozen=True)
class WindowFit:
    """How the committed work fits the lot's window, with or without extra hours."""

    window_hours: float
    committed_hours: float  # the schedule's, plus any extra hours
    uncommitted_hours: float  # window − committed: negative when the plan is over
    fits: bool
    over_by_hours: float  # 0 when it fits


def window_fit(committed_hours: float, window_hours: float, extra_hours: float = 0.0) -> WindowFit:
    """Does the plan (grown by `extra_hours`) end, retrieval included, within the lot's window?"""
    committed = _nanohours(committed_hours, "committed") + _nanohours(extra_hours, "extra")
    window = _nanohours(window_hours, "window")
    return WindowFit(
        window_hours=_float(window),
        committed_hours=_float(committed),
        uncommitted_hours=_float(window - committed),
        fits=committed <= window,
        over_by_hours=_float(max(0, committed - window)),
    )


# ---------------------------------------------------------------- lot options and reduced protocols


@dataclass(frozen=True)
class LotOption:
    """A way to buy the lot time: `lots` lots of `days` days, for `price_usd` in all."""

    label: str
    days: int
    lots: int
    gpus_per_lot: int
    price_usd: Decimal  # the price of the lot(s), never derived from hours
    committed_hours: float
    window_hours: float
    fits: bool
    current: bool  # the lot the campaign file names
    source: str  # "catalogue" | "your order"


@dataclass(frozen=True)
class ReducedProtocol:
    """The plan keeping only some tiers, in the current lot."""

    tiers: tuple[str, ...]
    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    committed_hours: float  # plus any extra hours
    fits: bool
    over_by_hours: float
    schedule: Schedule


@dataclass(frozen=True)
class PlanReport:
    """Everything `cockpit plan` shows."""

    campaign_id: str
    gpu_model: str
    gpu_count: int
    days: int
    lot_price_usd: Decimal
    schedule: Schedule
    extra_hours: float
    fit: WindowFit
    options: tuple[LotOption, ...]
    reduced: tuple[ReducedProtocol, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    # the window fit's figures, flat, as `plan --json` names them
    @property
    def window_hours(self) -> float:
        return self.fit.window_hours

    @property
    def committed_hours(self) -> float:
        return self.fit.committed_hours

    @property
    def uncommitted_hours(self) -> float:
        return self.fit.uncommitted_hours

    @property
    def fits(self) -> bool:
        return self.fit.fits

    @property
    def over_by_hours(self) -> float:
        return self.fit.over_by_hours


def lot_options(
    items: Sequence[Any],
    gpu_count: int,
    retrieval_hours: float,
    current_days: int,
    current_price: Decimal,
    offers: Sequence[Any],
    extra_hours: float = 0.0,
    one_lot: Schedule | None = None,
) -> tuple[LotOption, ...]:
    """Each catalogue duration at one lot and at two lots (price × 2), shortest first.

    `offers` are the catalogue's lots for the campaign's GPU model (objects with `days` and
    `price_usd`). Two lots are scheduled as two boxes: independent items may run on each at once,
    an item never spans them. Without catalogue offers the only option is the user's own lot at
    its price; a duration the catalogue does not sell is listed as the user's own lot too.
    """
    one = one_lot or schedule(items, gpu_count, retrieval_hours)
    two = schedule(items, gpu_count, retrieval_hours, lots=2)
    options: list[LotOption] = []

    def add(days: int, lots: int, price: Decimal, plan: Schedule, source: str) -> None:
        fit = window_fit(plan.committed_hours, days * 24, extra_hours)
        label = f"{lots} × {days}-day lot{'s' if lots > 1 else ''}"
        options.append(
            LotOption(
                label=label,
                days=days,
                lots=lots,
                gpus_per_lot=gpu_count,
                price_usd=(price * lots).quantize(Decimal("0.01")),
                committed_hours=fit.committed_hours,
                window_hours=fit.window_hours,
                fits=fit.fits,
                current=lots == 1 and days == current_days,
                source=source,
            )
        )

    catalogue = sorted(offers, key=lambda o: o.days)
    if not catalogue:
        add(current_days, 1, current_price, one, "your order")
        return tuple(options)
    if all(o.days != current_days for o in catalogue):
        add(current_days, 1, current_price, one, "your order")
    for offer in catalogue:
        add(offer.days, 1, offer.price_usd, one, "catalogue")
        add(offer.days, 2, offer.price_usd, two, "catalogue")
    options.sort(key=lambda o: (o.days, o.lots))
    return tuple(options)


def reduced_protocols(
    items: Sequence[Any],
    gpu_count: int,
    retrieval_hours: float,
    window_hours: float,
    extra_hours: float = 0.0,
) -> tuple[ReducedProtocol, ...]:
    """Indispensable only, then indispensable + useful, each scheduled in the current lot."""
    protocols = []
    for tiers in REDUCED_PROTOCOLS:
        plan = schedule(items, gpu_count, retrieval_hours, keep_tiers=tiers)
        fit = window_fit(plan.committed_hours, window_hours, extra_hours)
        protocols.append(
            ReducedProtocol(
                tiers=tiers,
                kept=tuple(s.id for s in plan.slots),
                dropped=plan.dropped,
                committed_hours=fit.committed_hours,
                fits=fit.fits,
                over_by_hours=fit.over_by_hours,
                schedule=plan,
            )
        )
    return tuple(protocols)


def plan_report(campaign: Any, extra_hours: float = 0.0, offers: Sequence[Any] | None = None) -> PlanReport:
    """The calendar of a loaded campaign, its window fit, lot options and reduced protocols.

    `offers` defaults to the catalogue's lots for the campaign's GPU model.
    """
    if offers is None:
        from cockpit.plan import catalog

        offers = catalog.offers(campaign.lot.gpu_model)
    lot = campaign.lot
    items = list(campaign.items)
    retrieval = campaign.model.calendar.retrieval_hours
    gpu_count = lot.gpu_count
    plan = schedule(items, gpu_count, retrieval)
    fit = window_fit(plan.committed_hours, lot.window_hours, extra_hours)
    options = lot_options(
        items, gpu_count, retrieval, lot.days, campaign.price, offers, extra_hours, one_lot=plan
    )
    reduced = reduced_protocols(items, gpu_count, retrieval, lot.window_hours, extra_hours)

    notes = []
    if gpu_count > 1:
        notes.append(
            f"A {lot.gpu_model} lot holds {gpu_count} GPUs for one price: the price is for the "
            "whole lot, not per GPU."
        )
    if any(o.lots == 2 for o in options):
        notes.append(TWO_LOTS_NOTE)
        notes.append(
            "Hours for two lots assume independent items are split between the boxes and that "
            "outputs can be moved from one box to the other."
        )
    if not offers:
        notes.append(
            f"The catalogue quotes no {lot.gpu_model} lot: the only option shown is your own "
            f"lot at the price of your order."
        )
    catalogue_price = next((o.price_usd for o in offers if o.days == lot.days), None)
    if catalogue_price is not None and catalogue_price != campaign.price:
        notes.append(
            f"Your order says {campaign.price:.2f} USD for this {lot.days}-day lot; the "
            f"catalogue says {catalogue_price:.2f} USD. Options show catalogue prices."
        )
    if extra_hours:
        notes.append(
            f"The extra {extra_hours:g} h are added to every option and reduced protocol."
        )
    notes.append(
        "Uncommitted hours are a margin, not a debt: the campaign buys a decision, not busy hours."
    )
    return PlanReport(
        campaign_id=campaign.id,
        gpu_model=lot.gpu_model,
        gpu_count=gpu_count,
        days=lot.days,
        lot_price_usd=campaign.price,
        schedule=plan,
        extra_hours=_float(_nanohours(extra_hours, "extra")),
        fit=fit,
        options=options,
        reduced=reduced,
        notes=tuple(notes),
    )


def describe_tiers(tiers: Sequence[str]) -> str:
    """("indispensable", "useful") → "indispensable + useful"."""
    return " + ".join(tiers)


__all__ = [
    "HUMAN",
    "MACHINE",
    "TIERS",
    "REDUCED_PROTOCOLS",
    "TWO_LOTS_NOTE",
    "Slot",
    "Schedule",
    "schedule",
    "WindowFit",
    "window_fit",
    "LotOption",
    "ReducedProtocol",
    "PlanReport",
    "lot_options",
    "reduced_protocols",
    "plan_report",
    "describe_tiers",
]
