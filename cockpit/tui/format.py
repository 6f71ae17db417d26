"""How the cockpit writes numbers, durations and moments on screen: short enough for 80 columns,
local time for moments (the person reads a wall clock), hours for the lot, never a rate."""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal

from cockpit.common.text import escape_control

DASH = "—"


def local(moment: datetime) -> datetime:
    """The moment in the machine's local time zone (the frozen snapshot keeps UTC)."""
    return moment.astimezone()


def local_time(moment: datetime | None, now: datetime | None = None, *, zone: bool = False) -> str:
    """A moment as a person reads it: the time only when it is today, the weekday within a week,
    the date beyond. `zone` adds the zone's abbreviation (for the lot's end, read once)."""
    if moment is None:
        return DASH
    here = local(moment)
    text: str
    if now is not None and local(now).date() == here.date():
        text = here.strftime("%H:%M")
    elif now is not None and abs((here - local(now)).total_seconds()) < 6 * 86400:
        text = here.strftime("%a %H:%M")
    else:
        text = here.strftime("%a %d %b %H:%M")
    if zone:
        text += " " + (here.strftime("%Z") or here.strftime("%z"))
    return text


def clock_time(moment: datetime | None) -> str:
    """Local wall-clock time with seconds, for "when was this sampled"."""
    return DASH if moment is None else local(moment).strftime("%H:%M:%S")


def hours(value: float | None, digits: int = 1) -> str:
    """Lot hours: `26.5 h`."""
    if value is None or not math.isfinite(value):
        return DASH
    return f"{value:.{digits}f} h"


def duration(value_hours: float | None) -> str:
    """A span long enough to plan with: `42m`, `45h30m`, `12d 04h`."""
    if value_hours is None or not math.isfinite(value_hours):
        return DASH
    sign = "-" if value_hours < 0 else ""
    minutes = int(round(abs(value_hours) * 60))
    if minutes < 60:
        return f"{sign}{minutes}m"
    if minutes < 48 * 60:
        return f"{sign}{minutes // 60}h{minutes % 60:02d}m"
    whole_hours = minutes // 60
    return f"{sign}{whole_hours // 24}d {whole_hours % 24:02d}h"


def age(seconds: float | None) -> str:
    """How long ago: `12s`, `4m`, `3h05m`, `2d 03h`."""
    if seconds is None or not math.isfinite(seconds):
        return DASH
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{int(seconds)}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    return duration(seconds / 3600)


def count(value: int | None) -> str:
    """A step count in at most six characters: `950`, `12.0k`, `1.20M`."""
    if value is None:
        return DASH
    if abs(value) < 10_000:
        return str(value)
    if abs(value) < 1_000_000:
        return f"{value // 1000}k" if value % 1000 == 0 else f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.2f}M"


def step(value: int | None, total: int | None) -> str:
    if value is None:
        return DASH
    return f"{count(value)}/{count(total)}" if total else count(value)


def metric(value: object) -> str:
    """A metric value as the training loop reported it, non-finite values by name."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        number = float(value)
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "inf" if number > 0 else "-inf"
        if isinstance(value, int):
            return count(value)
        magnitude = abs(number)
        if magnitude != 0 and (magnitude < 1e-3 or magnitude >= 1e5):
            return f"{number:.2e}"
        return f"{number:.4g}"
    return escape_control(value)  # a value the training loop wrote as text: its controls escaped


def percent(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return " " + DASH + " "
    return f"{value:3.0f}%"


def gib(value: int | None) -> str:
    """Bytes as GiB with one decimal below 100 GiB, whole above."""
    if value is None:
        return DASH
    amount = value / 2**30
    return f"{amount:.1f}G" if amount < 100 else f"{amount:.0f}G"


def money(value: Decimal) -> str:
    """A lot's price as the lot's price: `47.14 USD` (never divided by hours)."""
    return f"{value:.2f} USD"
