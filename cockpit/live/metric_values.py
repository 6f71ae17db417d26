"""The values of a metrics line, read the way the stream reader and the run's track read them:
a `ts` in any of the forms writers use, steps, non-finite numbers written as text, text that is
not valid Unicode, and each implausible value's reason in words (a counted bad field, never a crash).

Plain functions over plain values: no file, no state (one small cache of converted times).
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

MILLISECONDS_ABOVE = 1e11  # an epoch above this is in milliseconds (a 2026 epoch is ~1.8e9 s)
STEP_MAX = 1 << 53  # a step past this is no step (and would overflow rates)
# Plausible ranges: a value outside them is a counted bad field of its run, never a crash downstream
# (dates past year 9999, timedeltas past a C int). A `ts` is a time in this century.
TS_MIN = 946684800.0  # 2000-01-01T00:00:00Z
TS_MAX = 4102444800.0  # 2100-01-01T00:00:00Z
SECONDS_MAX = 7 * 86400.0  # a save or a reload that takes more than a week is no measurement
BYTES_MAX = 1 << 50  # 1 PiB: no checkpoint is larger

_INF = math.inf
# Text a writer may use for a non-finite value (compared lower-case).
NONFINITE_TEXT: dict[str, float] = {
    "nan": math.nan, "+nan": math.nan, "-nan": math.nan,
    "inf": _INF, "+inf": _INF, "-inf": -_INF,
    "infinity": _INF, "+infinity": _INF, "-infinity": -_INF,
}
NONFINITE_TEXT_MAX = max(len(k) for k in NONFINITE_TEXT)
RESERVED = frozenset({"ts", "step", "event"})  # fields of a line that are not metrics


def nonfinite_from_text(value: str) -> float | None:
    """"nan", "inf", "-Infinity" (any case) → the float; any other text → None."""
    if len(value) > NONFINITE_TEXT_MAX:
        return None
    return NONFINITE_TEXT.get(value.lower())


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
        return _utc_datetime(seconds)
    except TypeError:  # not a number (nor hashable)
        return None


@lru_cache(maxsize=512)  # every tick converts each run's start and last line time again: mostly the same
def _utc_datetime(seconds: float) -> datetime | None:
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
        text = format_value(big_int_as_float(value)) if value.bit_length() < 1024 else f"an integer of {value.bit_length()} bits"
    elif is_number(value):
        text = format_value(value)
    else:
        text = ascii(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bad_ts_reason(value: Any) -> str:
    return (
        f"ts {shown_value(value)} is not a time between 2000-01-01 and 2100-01-01 "
        "(epoch seconds or milliseconds, or ISO-8601): the line's time is ignored"
    )


def clean_text_fields(record: dict) -> bool:
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


NOT_UNICODE = (
    "text that is not valid Unicode (a lone surrogate, as json.dumps writes for a file name that is "
    "not UTF-8): replaced with U+FFFD"
)


def as_step(value: Any) -> int | None:
    """A line's step when it is a plausible one (an int within ±2**53), else None."""
    return value if type(value) is int and -STEP_MAX <= value <= STEP_MAX else None


def bad_step_reason(value: Any) -> str:
    return f"step {shown_value(value)} is not a whole number between -2^53 and 2^53: ignored"


def big_int_as_float(value: int) -> float:
    try:
        return float(value)
    except OverflowError:
        return _INF if value > 0 else -_INF


def bounded_text(value: Any) -> str | None:
    if type(value) is str:
        return safe_text(value[:1000])[0]
    return None


def short_name(value: Any) -> str | None:
    """A short identifying text (a host name, a namespace): anything else reads as unknown."""
    return value if type(value) is str and 0 < len(value) <= 255 else None


def finite_number(value: Any) -> float | None:
    if not is_number(value):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def truthy(value: Any) -> bool:
    if value is True or (type(value) is int and value == 1):
        return True
    return type(value) is str and value.strip().lower() in ("true", "yes", "1")
