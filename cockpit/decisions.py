"""Recording a person's decisions — stops, the pilot decision, acceptances, notes, acknowledgements —
with the same checks whether they come from the command line (`cli`), a key in the TUI (`key`)
or a stop rule (`auto`). Each function refuses unknown names before anything is written and
returns the event once it is on disk."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cockpit.campaign import Campaign
from cockpit.errors import Finding, UsageError
from cockpit.runlog import RecordedState, RunLog, RunLogError, ensure_started

PILOT_DECISIONS = ("continue", "drop-optional", "revise")


def _names(values: list[str]) -> str:
    return ", ".join(values) if values else "none"


def require_run(campaign: Campaign, run_id: str) -> None:
    if campaign.run(run_id) is None:
        raise UsageError(
            f"no run '{run_id}' in {campaign.file} (runs: {_names([r.id for r in campaign.runs])}); nothing was recorded"
        )


def require_rule(campaign: Campaign, rule_id: str) -> None:
    if campaign.rule(rule_id) is None:
        raise UsageError(
            f"no stop rule '{rule_id}' in {campaign.file} "
            f"(rules: {_names([r.id for r in campaign.model.stop_rules])}); "
            "give a free-text reason for a stop no rule covers; nothing was recorded"
        )


def clean_text(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value:
        raise UsageError(f"{what} is empty; write what happened, e.g. \"loss plateaued at 2.3\"")
    return value


def start(campaign: Campaign, log: RunLog) -> dict[str, Any] | None:
    """The first recording starts the campaign: the plan is frozen and logged once."""
    return ensure_started(campaign, log)


def record_stop(
    campaign: Campaign,
    log: RunLog,
    run_id: str,
    *,
    rule: str | None = None,
    reason: str | None = None,
    source: str,
    last: dict[str, Any] | None = None,
    signal: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Record a stop; with `signal`, send it only after the stop is validated, and record what it did."""
    require_run(campaign, run_id)
    if rule is not None:
        require_rule(campaign, rule)
    reason = clean_text(reason, "the reason")
    if rule is None and reason is None:
        raise UsageError("a stop needs a rule id or a free-text reason; nothing was recorded")
    start(campaign, log)
    with log.transaction() as tx:  # checked and written under one lock: two stops cannot both pass
        earlier = next((e for e in tx.read().events if e["type"] == "stop" and e.get("run") == run_id), None)
        if earlier is not None:
            raise Finding(
                f"run '{run_id}' was already stopped (seq {earlier['seq']}, {earlier.get('ts')}); "
                "nothing was recorded. A relaunch after a fix deserves a new run id (§4); "
                "to add an explanation, record a note on the run"
            )
        # The stop is on disk before any signal leaves: a SIGTERM is never sent for a stop the disk refused.
        stop = tx.append(
            "stop", run=run_id, rule=rule, reason=reason, source=source, last=last or {},
            signal={"requested": signal is not None, "sent": False},
        )
        if signal is None:
            return stop
        outcome = signal()
        try:
            tx.append("signal", run=run_id, stop_seq=stop["seq"], **outcome)
        except RunLogError as error:
            sent = "SIGTERM was sent" if outcome.get("sent") else "no signal was sent"
            raise RunLogError(f"the stop was recorded (seq {stop['seq']}) and {sent}, but that outcome could not be written: {error}") from None
        stop["signal"] = {**stop["signal"], **outcome}
        return stop


def record_decision(
    campaign: Campaign, log: RunLog, decision: str, *, note: str | None = None, source: str
) -> dict[str, Any]:
    if decision not in PILOT_DECISIONS:
        raise UsageError(f"a pilot decision is one of {', '.join(PILOT_DECISIONS)} (got {decision!r})")
    note = clean_text(note, "the note")
    start(campaign, log)
    fields: dict[str, Any] = {"decision": decision, "note": note, "source": source}
    pilot = campaign.model.pilot
    if pilot is not None:
        fields["run"] = pilot.run
        fields["decide_after_hours"] = pilot.decide_after_hours
    if campaign.lot.start is not None:
        fields["lot_hours"] = round((log.clock() - campaign.lot.start).total_seconds() / 3600, 3)
    return log.append("pilot_decision", **fields)


def record_acceptance(campaign: Campaign, log: RunLog, deliverable_id: str, *, source: str) -> dict[str, Any]:
    deliverable = campaign.deliverable(deliverable_id)
    if deliverable is None:
        raise UsageError(
            f"no deliverable '{deliverable_id}' in {campaign.file} "
            f"(deliverables: {_names([d.id for d in campaign.model.deliverables])}); nothing was recorded"
        )
    if not (campaign.directory / deliverable.path).exists():
        raise Finding(f"deliverable '{deliverable.id}': {deliverable.path} does not exist; nothing was recorded")
    start(campaign, log)
    return log.append("accepted", deliverable=deliverable.id, run=deliverable.run, path=deliverable.path, source=source)


def record_note(campaign: Campaign, log: RunLog, text: str, *, run_id: str | None = None, source: str) -> dict[str, Any]:
    if run_id is not None:
        require_run(campaign, run_id)
    cleaned = clean_text(text, "the note")
    start(campaign, log)
    return log.append("note", run=run_id, text=cleaned, source=source)


def acknowledge(
    campaign: Campaign, log: RunLog, rule: str, run_id: str | None, *, source: str, key: str | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """Acknowledge an open alert — the one with `key`, else the newest of (rule, run); refuse when there is none.

    A person looked: `cockpit close` no longer holds the alert against the run's deliverables."""
    note = clean_text(note, "the note")
    with log.transaction() as tx:
        active = RecordedState.from_events(tx.read().events).active_alerts
        open_alert = next(
            (
                a for a in reversed(active)
                if (a.key == key if key else (a.event.get("rule") == rule and a.event.get("run") == run_id))
            ),
            None,
        )
        if open_alert is None:
            who = f" on run '{run_id}'" if run_id else ""
            raise Finding(f"no open alert of rule '{rule}'{who}; nothing was recorded")
        return tx.append(
            "ack", rule=open_alert.event.get("rule"), run=open_alert.event.get("run"), key=open_alert.key,
            alert_seq=open_alert.event["seq"], source=source, **({"note": note} if note else {}),
        )
