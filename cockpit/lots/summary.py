"""The view across lots: this lot and the others, side by side (total price of the lots, hours
left on each, alerts per lot), and another lot's reading as text lines for `status` and the TUI.
Everything read from another lot is escaped before it reaches a terminal."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from cockpit.common.text import escape_control
from cockpit.common.times import parse_ts
from cockpit.lots.watcher import LotReading, _ago
from cockpit.live.snapshot import Snapshot

THIS_LOT = "this lot"
READ_ONLY = "read-only: decisions on this lot are recorded on the box that owns its run log ({url}); take them there"


@dataclass(frozen=True)
class LotLine:
    """One lot in the summary."""

    name: str
    local: bool
    campaign: str | None
    price_usd: Decimal | None
    remaining_hours: float | None
    alerts: int | None
    reachable: bool
    age_seconds: float | None  # of the reading shown (0 for this lot)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "local": self.local,
            "campaign": self.campaign,
            "price_usd": None if self.price_usd is None else f"{self.price_usd:.2f}",
            "remaining_hours": None if self.remaining_hours is None else round(self.remaining_hours, 3),
            "alerts": self.alerts,
            "reachable": self.reachable,
            "age_seconds": None if self.age_seconds is None else round(self.age_seconds, 1),
        }


@dataclass(frozen=True)
class Summary:
    lines: tuple[LotLine, ...]

    @property
    def total_price_usd(self) -> Decimal:
        return sum((line.price_usd for line in self.lines if line.price_usd is not None), Decimal("0"))

    @property
    def priced_all(self) -> bool:
        return all(line.price_usd is not None for line in self.lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "total_price_usd": f"{self.total_price_usd:.2f}",
            "priced_all": self.priced_all,
            "lots": [line.to_json() for line in self.lines],
        }

    def text(self) -> str:
        parts = []
        for line in self.lines:
            left = "–" if line.remaining_hours is None else f"{line.remaining_hours:.1f} h left"
            alerts = "alerts –" if line.alerts is None else f"{line.alerts} alert{'s' if line.alerts != 1 else ''}"
            price = "price –" if line.price_usd is None else f"{line.price_usd:.2f} USD"
            state = "" if line.local or line.reachable else (
                " (NOT ANSWERING" + (f", reading {_ago(line.age_seconds)} old)" if line.age_seconds is not None else ", no reading)")
            )
            parts.append(f"{line.name}: {price}, {left}, {alerts}{state}")
        total = f"total {self.total_price_usd:.2f} USD for {len(self.lines)} lots" + ("" if self.priced_all else " (a lot without a reading not counted)")
        return escape_control(" · ".join(parts) + " · " + total)


def _price(value: Any) -> Decimal | None:
    try:
        return Decimal(str(value)) if isinstance(value, str) else None
    except InvalidOperation:
        return None


def _remaining(snapshot: dict[str, Any], age: float, now: datetime) -> float | None:
    """Hours left now: from the lot's end when the reading has it, else its figure less the reading's age."""
    end = snapshot.get("lot", {}).get("end") if isinstance(snapshot.get("lot"), dict) else None
    moment = parse_ts(end) if isinstance(end, str) else None
    if moment is not None and snapshot.get("started"):
        return max(0.0, (moment - now).total_seconds() / 3600)
    value = snapshot.get("remaining_hours")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0.0, value - age / 3600)
    return None


def summarize(local: Snapshot | None, readings: list[LotReading], now: datetime) -> Summary:
    lines = []
    if local is not None:
        lines.append(LotLine(
            THIS_LOT, True, local.lot.campaign_id, local.lot.price_usd, local.clock.remaining_hours,
            sum(1 for alert in local.alerts if not alert.acknowledged), True, 0.0,
        ))
    for reading in readings:
        snapshot, age = reading.snapshot, reading.age_seconds(now)
        if snapshot is None:
            lines.append(LotLine(reading.name, False, None, None, None, None, reading.reachable, None))
            continue
        lines.append(LotLine(
            reading.name, False,
            snapshot.get("campaign") if isinstance(snapshot.get("campaign"), str) else None,
            _price((snapshot.get("lot") or {}).get("price_usd")),
            _remaining(snapshot, age or 0.0, now),
            len(snapshot.get("alerts") or []),
            reading.reachable, age,
        ))
    return Summary(tuple(lines))


def _hours(value: Any) -> str:
    return f"{value:.1f} h" if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


def _value(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def reading_lines(reading: LotReading, now: datetime) -> list[str]:
    """Another lot as text: whether it answers, its clock, GPUs, runs and alerts, and that it is read-only."""
    lines = [f"lot {reading.name} · {reading.url}"]
    age, silent = reading.age_seconds(now), reading.silent_seconds(now)
    if reading.error is not None:
        lines.append(
            f"NOT ANSWERING for {_ago(silent or 0.0)}: {reading.error}"
            + (f"; the last reading below is {_ago(age)} old" if age is not None else "; no reading yet")
        )
    elif age is not None:
        lines.append(f"read {_ago(age)} ago")
    else:
        lines.append("waiting for its first answer")
    lines.append(READ_ONLY.format(url=reading.url))
    snapshot = reading.snapshot
    if snapshot is None:
        return [escape_control(line) for line in lines]
    lot = snapshot.get("lot") if isinstance(snapshot.get("lot"), dict) else {}
    lines += [
        "",
        f"{snapshot.get('campaign')} · {lot.get('gpu_model')} × {lot.get('gpus')} · {lot.get('days')}-day lot · "
        f"{lot.get('price_usd')} USD for the lot",
        f"clock  elapsed {_hours(snapshot.get('elapsed_hours'))} · left {_hours(snapshot.get('remaining_hours'))} · "
        f"remaining plan {_hours(snapshot.get('committed_remaining_hours'))} · projected finish {snapshot.get('projected_finish') or '–'}"
        + (" — PAST THE LOT'S END" if snapshot.get("fits") is False else ""),
    ]
    nvml = snapshot.get("nvml") if isinstance(snapshot.get("nvml"), dict) else {}
    if not nvml.get("available"):
        lines.append(f"GPUs   {nvml.get('reason') or 'NVML unavailable'}")
    for gpu in snapshot.get("gpus") or []:
        if not isinstance(gpu, dict):
            continue
        if gpu.get("lost"):
            lines.append(f"GPU {gpu.get('index')}  {gpu.get('name')}: LOST")
            continue
        used, total = gpu.get("memory_used_bytes"), gpu.get("memory_total_bytes")
        memory = f"{used / 2**30:.1f}/{total / 2**30:.0f} GiB" if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total else "mem –"
        lines.append(
            f"GPU {gpu.get('index')}  {gpu.get('name')}{' (SIMULATED)' if gpu.get('simulated') else ''}: "
            f"{_value(gpu.get('utilization_percent'))} % · {memory} · {_value(gpu.get('temperature_c'))} °C · {_value(gpu.get('power_watts'))} W"
        )
    lines.append("")
    lines.append(f"{'run':<18}{'state':<12}{'step':>10}  {'loss':>9}  quality")
    for run in snapshot.get("runs") or []:
        if not isinstance(run, dict):
            continue
        step = run.get("step")
        steps = "–" if step is None else (f"{step}/{run.get('total_steps')}" if run.get("total_steps") else str(step))
        lines.append(f"{str(run.get('id')):<18}{str(run.get('state')):<12}{steps:>10}  {_value(run.get('loss')):>9}  {_value(run.get('quality'))}")
    lines.append("")
    alerts = [a for a in snapshot.get("alerts") or [] if isinstance(a, dict)]
    if alerts:
        lines.append(f"{len(alerts)} active alert{'s' if len(alerts) != 1 else ''}:")
        lines += [f"  ! [{a.get('rule')}] {a.get('message')}" for a in alerts]
    else:
        lines.append("no active alerts")
    return [escape_control(line) for line in lines]
