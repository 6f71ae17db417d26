"""The campaign's value types and limits: money, hours, ids, the lot start, the schema version.

Each constrained type is an `Annotated` alias whose metadata is annotated_types' constraints
(`Gt`, `Le`, `MinLen`) or one of the three small markers below, so the tables of
`cockpit.plan.campaign` are complete at run time (`typing.get_type_hints(Run)` works) and none
of this imports pydantic: pydantic reads the metadata when `cockpit.plan.schema` builds its
validator, the markers through `__get_pydantic_core_schema__`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from annotated_types import Gt, Le


SCHEMA = 1
CENT = Decimal("0.01")
MONEY_DIGITS = 12  # whole-dollar digits at most: a lot price of a trillion USD is a typo
MAX_HOURS = 24 * 3660.0  # ten years: longer than any lot; keeps date arithmetic finite
MAX_STEPS = 10**12  # more optimizer steps than any training run takes; keeps rates and ETAs finite
MAX_GPU_INDEX = 63  # a box holds at most 64 GPUs

# Ids become folder and file names (runs/<run id>/metrics.jsonl): one pattern keeps each id a plain
# name — no separator, no `..`, no control character — so no path derived from an id leaves the
# campaign folder. A deliverable id may join a few such names with `/` ("ctrl-r1/predictions").
ID_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
ID_PATTERN = rf"^{ID_NAME}$"
DELIVERABLE_ID_PATTERN = rf"^{ID_NAME}(?:/{ID_NAME}){{0,3}}$"
ID_RULE = "a letter or digit, then up to 63 letters, digits, '.', '_' or '-'"
_ID = re.compile(ID_PATTERN)


def _shown(value: Any, limit: int = 60) -> str:
    """A value as an error message quotes it: never the whole of a 10 MB string."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(text)} characters)"


# ---------------------------------------------------------------- markers pydantic reads


@dataclass(frozen=True)
class Before:
    """Convert or check a value before its type is validated (pydantic's BeforeValidator)."""

    check: Callable[[Any], Any]

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(self.check, handler(source))


@dataclass(frozen=True)
class After:
    """Check a value once its type is validated (pydantic's AfterValidator)."""

    check: Callable[[Any], Any]

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.check, handler(source))


@dataclass(frozen=True)
class _SchemaKey:
    """One key of the core schema of a str or float (also inside `| None`): what pydantic's
    Field(pattern=...) and Field(allow_inf_nan=False) set, which annotated_types has no name for."""

    key: str
    value: Any

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        schema = handler(source)
        inner = schema["schema"] if schema.get("type") == "nullable" else schema
        inner[self.key] = self.value
        return schema


def Pattern(pattern: str) -> _SchemaKey:  # noqa: N802  read as a type's constraint, like Gt(0)
    """A str matching `pattern` (the error names the pattern)."""
    return _SchemaKey("pattern", pattern)


Finite = _SchemaKey("allow_inf_nan", False)  # a float that is neither NaN nor ±infinity


# ---------------------------------------------------------------- checks


def _money(value: Any) -> Decimal:
    """Dollars with cents: "47.14", 47.14 or 110 → Decimal("47.14"); never a binary float inside."""
    if isinstance(value, bool):
        raise ValueError(f"must be an amount in USD such as \"47.14\" (got {value!r})")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite amount in USD (got {value!r})")
        value = repr(value)  # the shortest text that reads back as this float: 47.14 → "47.14"
    if isinstance(value, (int, str)):
        try:
            amount = Decimal(str(value).strip())
        except InvalidOperation:
            raise ValueError(f"must be an amount in USD such as \"47.14\" (got {_shown(value)})") from None
    elif isinstance(value, Decimal):
        amount = value
    else:
        raise ValueError(f"must be an amount in USD such as \"47.14\" (got {_shown(value)})")
    if not amount.is_finite():
        raise ValueError(f"must be a finite amount in USD (got {_shown(value)})")
    if amount.adjusted() >= MONEY_DIGITS:
        raise ValueError(f"is not a plausible amount in USD (got {_shown(value)}); write the price with cents, e.g. \"47.14\"")
    if amount < 0:
        raise ValueError(f"must not be negative (got {value!r})")
    if amount != amount.quantize(CENT):
        raise ValueError(f"must be whole cents, at most two decimals (got {value!r})")
    return amount.quantize(CENT)


def _lot_start(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None:
        raise ValueError(
            f"needs a time zone (got {value.isoformat()}); write it in UTC with a Z, "
            f"e.g. {value.isoformat()}Z"
        )
    if isinstance(value, datetime) and not 1971 <= value.year <= 9000:
        raise ValueError(f"is not a plausible lot start (got {value.isoformat()}); write it like 2026-11-30T08:00:00Z")
    if not isinstance(value, (datetime, type(None))):
        raise ValueError(
            f"must be a TOML date-time with a zone, e.g. 2026-11-30T08:00:00Z (got {value!r})"
        )
    return value


def _known_schema(value: int) -> int:
    if value != SCHEMA:
        raise ValueError(f"this cockpit reads schema {SCHEMA} (got {value}); write schema = 1")
    return value


# ---------------------------------------------------------------- the constrained types

Money = Annotated[Decimal, Before(_money)]  # dollars with whole cents, from "47.14", 47.14 or 110
PositiveHours = Annotated[float, Gt(0), Le(MAX_HOURS), Finite]
Identifier = Annotated[str, Pattern(ID_PATTERN)]  # a letter or digit, then up to 63 letters, digits, . _ -
DeliverableId = Annotated[str, Pattern(DELIVERABLE_ID_PATTERN)]  # such names joined by /, e.g. "ctrl-r1/predictions"
LotStart = Annotated[datetime | None, Before(_lot_start)]  # a TOML date-time with a zone
SchemaVersion = Annotated[int, After(_known_schema)]  # SCHEMA
