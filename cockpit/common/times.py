"""Times: tz-aware UTC inside, ISO-8601 with a Z outside."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso(moment: datetime) -> str:
    """ISO-8601 in UTC with a Z, to the millisecond."""
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_minute(moment: datetime) -> str:
    """A moment for a message, to the minute in UTC ("2026-11-30 08:00 UTC"); naive is read as UTC."""
    moment = moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def parse_ts(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError, AttributeError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def hours_in(delta: timedelta) -> float:
    """A span as hours: 90 minutes → 1.5."""
    return delta.total_seconds() / 3600.0


def hours_text(value: float | None, digits: int | None = None, *, missing: str = "–") -> str:
    """Hours for a person: "1.5 h" (`digits` None: as few digits as the value needs, `:g`),
    "26.5 h" (`digits=1`); `missing` where there is no value."""
    if value is None:
        return missing
    return f"{value:g} h" if digits is None else f"{value:.{digits}f} h"
