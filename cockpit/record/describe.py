"""Run-log events told in one line each, for `cockpit log` and the TUI's log screen."""

from __future__ import annotations

from typing import Any

from cockpit.record.events import EventType


def event_summary(event: dict[str, Any]) -> str:
    """One line that says what a run-log event records, as `cockpit log` and the TUI's log screen show it."""
    kind = event["type"]
    if kind == EventType.CAMPAIGN_STARTED:
        return f"plan frozen, sha256 {str(event.get('plan_sha256', ''))[:12]}…"
    if kind == EventType.STOP:
        cause = f"rule {event['rule']}" if event.get("rule") else f"reason: {event.get('reason') or 'none given'}"
        if event.get("rule") and event.get("reason"):
            cause += f" ({event['reason']})"
        signal = event.get("signal") or {}
        flags = [f for f, on in (("rule never triggered", event.get("rule_triggered") is False), ("after the run finished", event.get("after_finish"))) if on]
        return cause + (", SIGTERM sent" if signal.get("sent") else "") + "".join(f", {f}" for f in flags)
    if kind == EventType.PILOT_DECISION:
        return str(event.get("decision")) + (f" — {event['note']}" if event.get("note") else "")
    if kind in (EventType.ACCEPTED, EventType.REJECTED):
        return str(event.get("deliverable")) + (f" — {event['cause']}" if event.get("cause") else "")
    if kind == EventType.NOTE:
        return str(event.get("text"))
    if kind == EventType.SIGNAL:
        return str(event.get("detail") or ("SIGTERM sent" if event.get("sent") else "no signal sent"))
    if kind == EventType.VOID:
        return f"takes back seq {event.get('voided_seq')} ({event.get('voided_type')}) — {event.get('reason')}"
    if kind in (EventType.NOTIFIED, EventType.NOTIFY_FAILED):  # a notification sent (or given up) on one channel
        keys = event.get("keys") if isinstance(event.get("keys"), list) else [event.get("key")]
        return f"{event.get('channel')}: {', '.join(str(k) for k in keys)}" + (f" — {event['error']}" if event.get("error") else "")
    if kind == EventType.GPU_HEALTH:
        what = f"Xid {event.get('xid')} ({event.get('meaning')})" if event.get("kind") == "xid" else str(event.get("kind"))
        runs = ", ".join(str(r) for r in event.get("runs") or []) or "no run"
        return f"GPU {event.get('gpu')} serial {event.get('serial') or 'not reported'}: {what}; runs on it: {runs}"
    if kind in (EventType.ALERT, EventType.ACK):
        return f"{event.get('rule')}: {event.get('message', '')}".rstrip(": ")
    skip = {"seq", "ts", "type", "run", "who", "source"}
    return ", ".join(
        f"{k}={_plain_value(v)}" for k, v in event.items() if k not in skip and v is not None and not isinstance(v, (dict, list))
    )[:120]


def _plain_value(value: Any) -> str:
    """A value as a person reads it: true/false, not Python's True/False (None is left out)."""
    return str(value).lower() if isinstance(value, bool) else str(value)
