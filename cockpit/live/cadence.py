"""How often to save: Daly's interval, its expected overhead and the last final save a lot allows.

Kept apart from cockpit.resume.verify (checkpoint inspection) so the engine needs only this formula."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any


def daly_interval(save_seconds: float, mtbf_seconds: float) -> float:
    """Daly's higher-order optimum checkpoint interval (2006), in seconds of compute between saves.

    τ = sqrt(2δM)·[1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ  for δ < 2M, else M.
    """
    if not (save_seconds > 0 and mtbf_seconds > 0):
        raise ValueError("save time and MTBF must be positive")
    delta, m = float(save_seconds), float(mtbf_seconds)
    if delta >= 2 * m:
        return m
    ratio = delta / (2 * m)
    return math.sqrt(2 * delta * m) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - delta


def expected_overhead(interval_seconds: float, save_seconds: float, mtbf_seconds: float, restart_seconds: float = 0.0) -> float:
    """Daly's expected wall time over pure compute, minus one: saves plus work redone after failures.

    T_wall / T_solve = (M/τ) · e^(R/M) · (e^((τ+δ)/M) − 1)
    """
    m = float(mtbf_seconds)
    tau = float(interval_seconds)
    return (m / tau) * math.exp(restart_seconds / m) * math.expm1((tau + save_seconds) / m) - 1.0


def latest_final_save(lot_end: datetime, retrieval_hours: float, save_seconds: float) -> datetime:
    """The last moment a final save can start so that save + copy-off ends by the lot's end."""
    return lot_end - timedelta(hours=retrieval_hours) - timedelta(seconds=save_seconds)


@dataclass(frozen=True)
class SaveAdvice:
    save_seconds: float
    source: str  # "checkpoint events", "reload" or "given"
    mtbf_hours: float
    interval_seconds: float
    overhead_fraction: float
    restart_seconds: float
    latest_final_save: datetime | None = None
    lot_end: datetime | None = None
    retrieval_hours: float | None = None
    too_late: bool | None = None

    def to_json(self) -> dict[str, Any]:
        from cockpit.common.times import iso

        return {
            "save_seconds": round(self.save_seconds, 3),
            "save_seconds_source": self.source,
            "mtbf_hours": self.mtbf_hours,
            "interval_minutes": round(self.interval_seconds / 60, 2),
            "interval_hours": round(self.interval_seconds / 3600, 4),
            "overhead_fraction": round(self.overhead_fraction, 5),
            "restart_seconds": round(self.restart_seconds, 3),
            "latest_final_save": iso(self.latest_final_save) if self.latest_final_save else None,
            "lot_end": iso(self.lot_end) if self.lot_end else None,
            "retrieval_hours": self.retrieval_hours,
            "too_late": self.too_late,
        }


def save_advice(
    save_seconds: float, *, mtbf_hours: float = 24.0, source: str = "given", restart_seconds: float = 0.0,
    lot_end: datetime | None = None, retrieval_hours: float = 0.0, now: datetime | None = None,
) -> SaveAdvice:
    if not (math.isfinite(mtbf_hours) and mtbf_hours > 0):
        raise ValueError(f"the MTBF must be a positive number of hours (got {mtbf_hours})")
    if not (math.isfinite(save_seconds) and save_seconds > 0):
        raise ValueError(f"the save time must be a positive number of seconds (got {save_seconds})")
    mtbf = mtbf_hours * 3600.0
    interval = daly_interval(save_seconds, mtbf)
    latest = latest_final_save(lot_end, retrieval_hours, save_seconds) if lot_end is not None else None
    return SaveAdvice(
        save_seconds=save_seconds, source=source, mtbf_hours=mtbf_hours, interval_seconds=interval,
        overhead_fraction=expected_overhead(interval, save_seconds, mtbf, restart_seconds),
        restart_seconds=restart_seconds, latest_final_save=latest, lot_end=lot_end,
        retrieval_hours=retrieval_hours if lot_end is not None else None,
        too_late=(now > latest) if (latest is not None and now is not None) else None,
    )
