"""The closing's hardware incidents and energy: what a renter sends the provider to claim paid
hours back, and the kWh each run and each accepted deliverable cost (measured; no electricity
price is assumed).

An incident is a `gpu_health` event of the run log: its time, the GPU's serial and UUID, the runs
on that GPU, the run hours lost (from the incident to the run's end or restart), and the seqs of
the events that prove it. Energy comes from `.cockpit/gpu-health.json`, which the cockpit keeps
from NVML's energy counter while it watches."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cockpit.close.summary import ClosingSummary
from cockpit.common.times import parse_ts
from cockpit.live.gpu_health import HEALTH_EVENT, read_health_file
from cockpit.plan.campaign import Campaign
from cockpit.record.runlog import RecordedState, RunLog

KWH = 3.6e6  # joules in a kilowatt-hour
# Kinds whose runs stop computing (or compute garbage) from the incident on; a slowed GPU still computes.
LOSES_HOURS = ("xid", "ecc", "idle")


def _ts(text: Any) -> datetime | None:
    return parse_ts(text) if isinstance(text, str) else None


def hardware_incidents(campaign: Campaign, state: RecordedState, measures: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every `gpu_health` event with the runs it touched and the run hours they lost."""
    events = RunLog(campaign.directory).read().events
    alerts = {e.get("health_seq"): e for e in events if e["type"] == "alert" and isinstance(e.get("health_seq"), int)}
    acks = {e.get("alert_seq"): e for e in events if e["type"] == "ack"}
    out = []
    for event in events:
        if event["type"] != HEALTH_EVENT:
            continue
        at = _ts(event.get("observed_at")) or _ts(event.get("ts"))
        runs = []
        for run_id in event.get("runs") or []:
            runs.append(_run_loss(str(run_id), at, event.get("kind"), state, measures.get(str(run_id))))
        alert = alerts.get(event["seq"]) or {}
        ack = acks.get(alert.get("seq")) if alert else None
        lost = [r["hours_lost"] for r in runs if isinstance(r["hours_lost"], (int, float))]
        out.append({
            "seq": event["seq"],
            "alert_seq": alert.get("seq"),
            "ack_seq": ack.get("seq") if ack else None,
            "ts": event.get("observed_at") or event.get("ts"),
            "kind": event.get("kind"),
            "rule": event.get("rule"),
            "xid": event.get("xid"),
            "xid_class": event.get("xid_class"),
            "meaning": event.get("meaning"),
            "gpu": event.get("gpu"),
            "name": event.get("name"),
            "serial": event.get("serial"),
            "uuid": event.get("uuid"),
            "driver_version": event.get("driver_version"),
            "counters_before": event.get("counters_before"),
            "counters_after": event.get("counters_after"),
            "runs": runs,
            "run_hours_lost": round(sum(lost), 3) if lost else (0.0 if event.get("kind") in LOSES_HOURS else None),
            "simulated": bool(event.get("simulated")),
        })
    return out


def _run_loss(run_id: str, at: datetime | None, kind: Any, state: RecordedState, measure: Any) -> dict[str, Any]:
    """From the incident to the run's end (its last metrics line) or its restart, whichever is first."""
    entry: dict[str, Any] = {"run": run_id, "until": None, "ended_by": None, "hours_lost": None}
    if at is None or kind not in LOSES_HOURS:
        entry["ended_by"] = "slowed, not stopped" if kind == "throttle" else None
        return entry
    restarts = sorted(
        moment for moment in (_ts(e.get("metric_ts")) or _ts(e.get("ts")) for e in state.runs_started if e.get("run") == run_id)
        if moment is not None and moment > at
    )
    end = getattr(measure, "end", None)
    until, how = None, None
    if restarts:
        until, how = restarts[0], "restart"
    if end is not None and end >= at and (until is None or end < until):
        until, how = end, "end"
    if until is None:
        entry["ended_by"] = "no line after the incident" if end is not None else "not measured"
        entry["hours_lost"] = 0.0 if end is not None else None
        return entry
    entry.update(until=until.isoformat().replace("+00:00", "Z"), ended_by=how,
                 hours_lost=round((until - at).total_seconds() / 3600.0, 3))
    return entry


def energy(campaign: Campaign, accepted: int) -> dict[str, Any]:
    """kWh per run and per accepted deliverable, as NVML's energy counter measured them."""
    data = read_health_file(campaign.directory)
    gpus = data.get("gpus") if isinstance(data.get("gpus"), dict) else {}
    total_j = sum(float(g.get("energy_j") or 0.0) for g in gpus.values() if isinstance(g, dict))
    runs = {str(k): float(v) for k, v in (data.get("runs_energy_j") or {}).items() if isinstance(v, (int, float))}
    measured = bool(gpus) and total_j > 0
    simulated = any(isinstance(g, dict) and g.get("simulated") for g in gpus.values())
    return {
        "measured": measured,
        "simulated": simulated,
        "total_kwh": round(total_j / KWH, 4) if measured else None,
        "per_run_kwh": {run: round(j / KWH, 4) for run, j in sorted(runs.items())},
        "unattributed_kwh": round(float(data.get("unattributed_energy_j") or 0.0) / KWH, 4) if measured else None,
        "per_accepted_deliverable_kwh": round(total_j / KWH / accepted, 4) if measured and accepted else None,
    }


def incidents_markdown(summary: ClosingSummary) -> list[str]:
    """The report's "Hardware incidents" and "Energy" sections."""
    lines = ["## Hardware incidents", ""]
    incidents = summary.hardware_incidents
    for item in incidents:
        what = (f"Xid {item['xid']} ({item.get('meaning') or 'unknown'}), {item.get('xid_class') or 'unknown'} class"
                if item.get("kind") == "xid" else str(item.get("kind")))
        runs = ", ".join(
            f"{r['run']} ({r['hours_lost']:g} h lost, to its {r['ended_by']})" if isinstance(r.get("hours_lost"), (int, float)) and r.get("until")
            else f"{r['run']} ({r.get('ended_by') or 'hours not measured'})"
            for r in item["runs"]
        ) or "no run was on it"
        seqs = f"gpu_health seq {item['seq']}" + (f", alert seq {item['alert_seq']}" if item.get("alert_seq") else "") + (
            f", ack seq {item['ack_seq']}" if item.get("ack_seq") else "")
        hours = f"{item['run_hours_lost']:g} run hours lost" if isinstance(item.get("run_hours_lost"), (int, float)) else "run hours lost: not computed"
        simulated = " **SIMULATED (demo)**" if item.get("simulated") else ""
        lines.append(
            f"- {item.get('ts')}{simulated} · GPU {item.get('gpu')} {item.get('name') or ''}, serial {item.get('serial') or 'not reported'}, "
            f"UUID {item.get('uuid') or 'not reported'}, driver {item.get('driver_version') or 'unknown'} · {what} · runs: {runs} · {hours} · {seqs}"
        )
    if incidents:
        lines += ["", "Send the provider these lines with closing/runlog.jsonl: each seq is a line of that file "
                  "(the counters before and after are in the gpu_health event)."]
    else:
        lines.append("- No hardware incident was recorded.")
    power = summary.energy
    lines += ["", "## Energy", ""]
    if not power.get("measured"):
        lines.append("- Not measured: no GPU energy counter was read while a cockpit watched.")
        return lines + [""]
    label = " (SIMULATED GPUs: not a measurement)" if power.get("simulated") else ""
    lines.append(f"Measured by NVML's energy counter while a cockpit watched{label}; no electricity price is assumed.")
    lines += ["", "| | kWh |", "|---|---|", f"| All GPUs, since the lot's first sample | {power['total_kwh']:g} |"]
    for run, kwh in power["per_run_kwh"].items():
        lines.append(f"| run {run} | {kwh:g} |")
    if power.get("unattributed_kwh"):
        lines.append(f"| no run on the GPU, or no cockpit watching | {power['unattributed_kwh']:g} |")
    per = power.get("per_accepted_deliverable_kwh")
    lines.append(f"| per accepted deliverable | {per:g} |" if per is not None else "| per accepted deliverable | undefined: 0 accepted |")
    return lines + [""]


def incidents_text(summary: ClosingSummary) -> list[tuple[int, str]]:
    """`cockpit close`'s lines (indent, text) on the hardware incidents and energy."""
    lines: list[tuple[int, str]] = []
    incidents = summary.hardware_incidents
    if incidents:
        lines += [(0, ""), (0, f"hardware incidents: {len(incidents)} (the evidence for the provider is in closing/report.md)")]
    for item in incidents:
        what = f"Xid {item['xid']} ({item.get('meaning')})" if item.get("kind") == "xid" else str(item.get("kind"))
        runs = ", ".join(
            f"{r['run']} {r['hours_lost']:g} h" if isinstance(r.get("hours_lost"), (int, float)) else f"{r['run']} ({r.get('ended_by') or '?'})"
            for r in item["runs"]
        ) or "no run"
        hours = f"{item['run_hours_lost']:g} run hours lost" if isinstance(item.get("run_hours_lost"), (int, float)) else "hours not computed"
        lines.append((2,
            f"{item.get('ts')}{' (simulated)' if item.get('simulated') else ''}: GPU {item.get('gpu')} serial "
            f"{item.get('serial') or 'not reported'}, {what}; runs: {runs}; {hours} (run log seq {item['seq']})"
        ))
    power = summary.energy
    if power.get("measured"):
        per = power.get("per_accepted_deliverable_kwh")
        lines += [(0, ""), (0, f"energy: {power['total_kwh']:g} kWh measured on the GPUs{' (SIMULATED)' if power.get('simulated') else ''}"
                  + (f", {per:g} kWh per accepted deliverable" if per is not None else ""))]
    return lines
