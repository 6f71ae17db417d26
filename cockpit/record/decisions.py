"""Recording a person's decisions — stops, the pilot decision, acceptances, notes, acknowledgements —
with the same checks whether they come from the command line (`cli`), a key in the TUI (`key`)
or a stop rule (`auto`). Each function refuses unknown names before anything is written and
returns the event once it is on disk.

Every recording is one locked step (`recording`): refused once the campaign is closed, and the
campaign's first recording writes `campaign_started` just before its own event, so the run log
of a started campaign always begins with it. `log.start_written` tells the caller it did."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cockpit.errors import Finding, UsageError
from cockpit.plan.campaign import Campaign
from cockpit.record.events import VOIDABLE, EventType
from cockpit.record.runlog import RecordedState, RunLog, RunLogError, Transaction
from cockpit.record.start import ensure_started, start_in

PILOT_DECISIONS = ("continue", "drop-optional", "revise")
VOIDABLE_NAMES = {EventType.STOP: "a stop", EventType.PILOT_DECISION: "a pilot decision", EventType.ACCEPTED: "an acceptance", EventType.NOTE: "a note"}


@dataclass(frozen=True)
class StopDoubt:
    """Why a stop is probably a mistake, and the flag a stop confirmed anyway carries."""

    flag: str  # the stop event's field: "after_finish" or "rule_triggered"
    value: bool
    why: str


def stop_doubts(state: RecordedState, run_id: str, rule: str | None, *, finished: bool) -> list[StopDoubt]:
    """A stop of a run that finished cleanly (its deliverables would be rejected as interrupted),
    or under a rule that never raised an alert for that run (the log would give a reason that is
    not true)."""
    doubts: list[StopDoubt] = []
    if finished:
        doubts.append(StopDoubt(
            "after_finish", True,
            f"run '{run_id}' finished cleanly: a stop marks it interrupted and close would reject its deliverables",
        ))
    if rule is not None and not any(
        a.event.get("rule") == rule and a.event.get("run") in (run_id, None) for a in state.alerts
    ):
        doubts.append(StopDoubt(
            "rule_triggered", False,
            f"rule '{rule}' never triggered for run '{run_id}': the log would record a reason that is not true",
        ))
    return doubts


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


def require_open(state: RecordedState) -> None:
    """Refuse a recording once the campaign is closed: its closing report stands on the run log as it was."""
    if state.closed:
        closed = state.closed[-1]
        raise Finding(
            f"the campaign is closed (closed at {closed.get('ts')}, seq {closed.get('seq')}); nothing was recorded. "
            "Its closing report in closing/ stands on the run log as it was"
        )


class Recording:
    """A recording's hold on the run log: the state it was checked against, and `append`, whose first
    call starts the campaign (plan frozen, `campaign_started`) when no recording has yet."""

    def __init__(self, campaign: Campaign, tx: Transaction, events: list[dict[str, Any]]):
        self.campaign = campaign
        self.tx = tx
        self.events = events
        self.state = RecordedState.from_events(events)

    def append(self, type: str, **fields: Any) -> dict[str, Any]:
        start_in(self.tx, self.campaign, self.events)  # writes only the first time, and only when not started
        return self.tx.append(type, **fields)


@contextmanager
def recording(campaign: Campaign, log: RunLog, *, after_close: bool = False) -> Iterator[Recording]:
    """One locked step for a recording: checked against the run log as it is (closed: refused), then
    written — the start first when this is the campaign's first recording.

    `after_close`: an acknowledgement or a void is a review of what was recorded, not a new
    decision; it stays possible after `closed`, so that a closing whose verdict rests on an open
    alert or a mistaken stop can be corrected and run again."""
    with log.transaction() as tx:
        held = Recording(campaign, tx, tx.read().events)
        if not after_close:
            require_open(held.state)
        yield held


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
    finished: bool = False,
    force: bool | None = None,
) -> dict[str, Any]:
    """Record a stop; with `signal`, send it only after the stop is validated, and record what it did.

    With `force` given, a stop that is probably a mistake (see `stop_doubts`; `finished`: the run
    finished cleanly) is refused when False and carries its flags when True. `force=None` (an
    automatic stop, a program) records it as asked."""
    require_run(campaign, run_id)
    if rule is not None:
        require_rule(campaign, rule)
    reason = clean_text(reason, "the reason")
    if rule is None and reason is None:
        raise UsageError("a stop needs a rule id or a free-text reason; nothing was recorded")
    with recording(campaign, log) as tx:  # checked and written under one lock: two stops cannot both pass
        state = tx.state  # a voided stop is no stop
        earlier = state.stop_of(run_id)
        if earlier is not None:
            raise Finding(
                f"run '{run_id}' was already stopped (seq {earlier['seq']}, {earlier.get('ts')}); "
                "nothing was recorded. A relaunch after a fix deserves a new run id, because a changed configuration is a new trial; "
                "to add an explanation, record a note on the run; a mistaken stop is taken back "
                f"with `cockpit void DIR {earlier['seq']} --reason TEXT`"
            )
        flags: dict[str, Any] = {}
        if force is not None:
            doubts = stop_doubts(state, run_id, rule, finished=finished)
            if doubts and not force:
                raise UsageError(
                    "this stop is probably a mistake: " + "; ".join(d.why for d in doubts)
                    + ". Nothing was recorded; add --force to record it anyway (the stop then says so)"
                )
            flags = {d.flag: d.value for d in doubts}
        # The stop is on disk before any signal leaves: a SIGTERM is never sent for a stop the disk refused.
        stop = tx.append(
            EventType.STOP, run=run_id, rule=rule, reason=reason, source=source, last=last or {},
            signal={"requested": signal is not None, "sent": False}, **flags,
        )
        if signal is None:
            return stop
        outcome = signal()
        try:
            tx.append(EventType.SIGNAL, run=run_id, stop_seq=stop["seq"], **outcome)
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
    fields: dict[str, Any] = {"decision": decision, "note": note, "source": source}
    pilot = campaign.model.pilot
    if pilot is not None:
        fields["run"] = pilot.run
        fields["decide_after_hours"] = pilot.decide_after_hours
    if campaign.lot.start is not None:
        fields["lot_hours"] = round((log.clock() - campaign.lot.start).total_seconds() / 3600, 3)
    with recording(campaign, log) as tx:
        return tx.append(EventType.PILOT_DECISION, **fields)


def record_acceptance(campaign: Campaign, log: RunLog, deliverable_id: str, *, source: str) -> dict[str, Any]:
    deliverable = campaign.deliverable(deliverable_id)
    if deliverable is None:
        raise UsageError(
            f"no deliverable '{deliverable_id}' in {campaign.file} "
            f"(deliverables: {_names([d.id for d in campaign.model.deliverables])}); nothing was recorded"
        )
    if not (campaign.directory / deliverable.path).exists():
        raise Finding(f"deliverable '{deliverable.id}': {deliverable.path} does not exist; nothing was recorded")
    with recording(campaign, log) as tx:
        return tx.append(EventType.ACCEPTED, deliverable=deliverable.id, run=deliverable.run, path=deliverable.path, source=source)


def record_note(campaign: Campaign, log: RunLog, text: str, *, run_id: str | None = None, source: str) -> dict[str, Any]:
    if run_id is not None:
        require_run(campaign, run_id)
    cleaned = clean_text(text, "the note")
    with recording(campaign, log) as tx:
        return tx.append(EventType.NOTE, run=run_id, text=cleaned, source=source)


def acknowledge(
    campaign: Campaign, log: RunLog, rule: str, run_id: str | None, *, source: str, key: str | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """Acknowledge an open alert — the one with `key`, else the newest of (rule, run); refuse when there is none.

    A person looked: `cockpit close` no longer holds the alert against the run's deliverables."""
    note = clean_text(note, "the note")
    with recording(campaign, log, after_close=True) as tx:
        active = tx.state.active_alerts
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
            EventType.ACK, rule=open_alert.event.get("rule"), run=open_alert.event.get("run"), key=open_alert.key,
            alert_seq=open_alert.event["seq"], source=source, **({"note": note} if note else {}),
        )


def record_void(campaign: Campaign, log: RunLog, seq: int, *, reason: str, source: str) -> dict[str, Any]:
    """Take back a mistaken stop, pilot decision, acceptance or note by appending a `void` event
    (the run log is never edited). Refused for an unknown seq, a `void`, an event that is not a
    decision, or one already voided."""
    reason = clean_text(reason, "the reason")
    if reason is None:
        raise UsageError("a void needs a reason (--reason TEXT): say why the decision was a mistake; nothing was recorded")
    kinds = ", ".join(VOIDABLE_NAMES.values())
    with recording(campaign, log, after_close=True) as tx:
        events = tx.events
        target = next((e for e in events if e["seq"] == seq), None)
        if target is None:
            last = events[-1]["seq"] if events else 0
            raise UsageError(
                f"no event with seq {seq} in {log.path.name} (seqs run 1 to {last}); see `cockpit log DIR`; nothing was recorded"
            )
        if target["type"] == EventType.VOID:
            raise UsageError(
                f"seq {seq} is itself a void: a void cannot be taken back; record the decision again instead; nothing was recorded"
            )
        if target["type"] not in VOIDABLE:
            raise UsageError(
                f"seq {seq} is a '{target['type']}' event, not a decision; only {kinds} can be voided; nothing was recorded"
            )
        earlier = next((v for v, taken in tx.state.voided if taken.get("seq") == seq), None)
        if earlier is not None:
            raise UsageError(f"seq {seq} was already voided (seq {earlier['seq']}, by {earlier.get('who')}); nothing was recorded")
        return tx.append(
            EventType.VOID, voided_seq=seq, voided_type=target["type"], run=target.get("run"), reason=reason, source=source,
        )
