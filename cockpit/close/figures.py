"""How the closing writes its figures and words: money to the cent, hours to the thousandth, a
metric to four digits, plurals, a path beside the campaign folder, a file's sha256, a stop's cause."""

from __future__ import annotations

import hashlib
import math
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from cockpit.common.times import parse_ts
from cockpit.live.metric_values import format_value

CENT = Decimal("0.01")
HASH_CHUNK = 1 << 20


def money(amount: Decimal) -> str:
    return f"{amount.quantize(CENT, rounding=ROUND_HALF_UP):.2f}"


def cost_per_accepted(price: Decimal, accepted: int) -> Decimal | None:
    """The lot price per accepted deliverable, to the cent (half up); None when none was accepted."""
    if accepted <= 0:
        return None
    return (price / accepted).quantize(CENT, rounding=ROUND_HALF_UP)



def round_hours(value: float | None) -> float | None:
    """Hours as the summary keeps them: to the thousandth (3.6 s), None stays None."""
    return None if value is None else round(value, 3)


def threshold_text(value: float) -> str:
    """0.8 → "0.80" (as the seed writes it), 0.825 → "0.825"."""
    two = f"{value:.2f}"
    return two if float(two) == value else f"{value:g}"


def plain_number(value: Any) -> Any:
    """A metric value for strict JSON: finite numbers as they are, NaN/Infinity as their names."""
    if isinstance(value, float) and not math.isfinite(value):
        return format_value(value)
    return value



def significant(value: Any) -> str:
    """A metric value in the report: 4 significant digits (summary.json keeps full precision)."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    return str(value)


def plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else (plural or word + 's')}"


def display_path(path: Path, base: Path) -> str:
    """`path` relative to the campaign folder when it is inside, else absolute."""
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return str(path)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def short_ts(text: str | None) -> str:
    """An ISO time as the report shows it: "2026-12-01 14:20" (UTC), "—" for none."""
    if not text:
        return "—"
    moment = parse_ts(text)
    return moment.strftime("%Y-%m-%d %H:%M") if moment else text


def stop_cause(rule: Any, reason: Any, *, label_reason: bool = False) -> str:
    """Why a run was stopped, as the report says it: "rule nan-loss, reason: …"."""
    parts = (
        f"rule {rule}" if rule else None,
        (f"reason: {reason}" if label_reason else reason) if reason else None,
    )
    return ", ".join(part for part in parts if part) or "no reason recorded"
