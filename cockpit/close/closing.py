"""Closing a campaign: verify each deliverable, set the lot price against the ones accepted, state
what the campaign concluded, and set the frozen plan beside what was measured.

`close_campaign` writes `DIR/closing/` (report.md, summary.json, manifest.json, plan.toml,
runlog.jsonl, RELOAD.md) and records `closed` in the run log; `evaluate` does the same work
without writing anything. No Textual here: `cockpit close` and the TUI share this module.

The parts, one concept a module: verify (the checks on each deliverable), reloaders (by type),
temp_folders, measure (runs measured, planned vs actual), conclusion, summary (the typed
summary and its JSON), report (report.md, RELOAD.md), manifest; this module puts them together.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from functools import cached_property
from pathlib import Path
from typing import Any

from cockpit.close.conclusion import conclude
from cockpit.close.incidents import energy, hardware_incidents
from cockpit.close.figures import cost_per_accepted, money, plural, round_hours, short_ts
from cockpit.close.manifest import build_manifest, read_bytes
from cockpit.close.measure import PlanSource, measure_run, plan_source, planned_vs_actual
from cockpit.close.reloaders import RELOAD_TIMEOUT_S
from cockpit.close.report import render_reload, render_report
from cockpit.close.summary import (
    AlertRow,
    ClosingSummary,
    ClosingTimes,
    DecisionRow,
    DeliverableRow,
    Expense,
    LotFacts,
    NoteRow,
    PersonAcceptance,
    PlanFacts,
    Rejection,
    StopRow,
    VoidedRow,
    summary_json,
)
from cockpit.close.temp_folders import TempFolders, temp_roots_from_env
from cockpit.close.verify import CLOSE_SOURCE, DeliverableVerdict, verify_deliverables
from cockpit.common.files import write_atomic
from cockpit.common.layout import CLOSING_DIR, DIR_MODE, RUNLOG_FILE
from cockpit.common.times import iso, parse_ts, utc_now
from cockpit.close.ids import IDS_SHOWN, IdsError, compare_id_files, iter_id_batches
from cockpit.errors import Finding
from cockpit.live.saved_state import load_state, state_file
from cockpit.plan.campaign import Campaign
from cockpit.plan.load import load_campaign
from cockpit.plan.schedule import schedule
from cockpit.record.runlog import AlertRecord, RecordedState, RunLog



def _check_ids(verdict: DeliverableVerdict, campaign: Campaign, path: Path) -> None:
    expect_path = campaign.directory / verdict.deliverable.expect_ids
    shown = verdict.deliverable.expect_ids
    if not expect_path.is_file():
        verdict.set("expected_ids", False, f"the expected-ids file {shown} does not exist")
        return
    problem = None
    if path.is_dir():
        problem = "expected ids cannot be checked in a folder: point the deliverable at its predictions file"
    elif path.suffix.lower() not in (".jsonl", ".ndjson", ".csv", ".tsv", ".json", ".txt", ".ids", ""):
        problem = f"expected ids cannot be checked in a '{path.suffix}' file (JSON Lines, CSV or a plain id list)"
    try:
        if problem:
            for _ in iter_id_batches(expect_path):  # an unreadable expected-ids file is named first
                pass
            verdict.set("expected_ids", False, problem)
            return
        result = compare_id_files(expect_path, path)
    except IdsError as error:
        if getattr(error, "side", "expected") == "present":
            verdict.set("expected_ids", False, f"ids cannot be read from the deliverable: {error}")
        else:
            verdict.set("expected_ids", False, f"the expected-ids file cannot be read: {error}")
        return
    if result.missing:
        shown_ids = ", ".join(result.first) + (", …" if result.missing > IDS_SHOWN else "")
        verdict.set(
            "expected_ids", False,
            f"{result.missing} of {result.unique} expected ids are missing (e.g. {shown_ids})",
        )
    else:
        verdict.set("expected_ids", True, f"all {result.unique} expected ids are present")



# ---------------------------------------------------------------- the whole closing


@dataclass
class ClosingOutcome:
    """What `cockpit close` found and wrote."""

    campaign: Campaign
    facts: ClosingSummary  # the typed summary; `summary` is its JSON
    verdicts: list[DeliverableVerdict]
    report_markdown: str
    reload_markdown: str
    manifest: dict[str, Any]
    plan_text: str
    folder: Path
    closed_event: dict[str, Any] | None = None  # the `closed` event this closing stands on
    recorded: bool = False  # a new `closed` event was appended (False: the same content was already closed)

    @cached_property
    def summary(self) -> dict[str, Any]:
        """The summary as summary.json holds it."""
        return self.facts.to_json()

    @property
    def all_accepted(self) -> bool:
        return all(v.accepted for v in self.verdicts)

    @property
    def exit_code(self) -> int:
        return 0 if self.all_accepted else 1


def _campaign_of(directory: str | Path | Campaign) -> Campaign:
    return directory if isinstance(directory, Campaign) else load_campaign(directory)


def _utc(now: datetime | None) -> datetime:
    if now is None:
        return utc_now()
    return now if now.tzinfo is not None else now.replace(tzinfo=timezone.utc)  # naive means UTC


def evaluate(
    directory: str | Path | Campaign,
    *,
    now: datetime | None = None,
    temp_roots: Iterable[str | Path] | None = None,
    reload_timeout: float = RELOAD_TIMEOUT_S,
) -> ClosingOutcome:
    """Everything a closing finds, without writing anything (closed_at = `now`)."""
    campaign = _campaign_of(directory)
    now = _utc(now)
    read = RunLog(campaign.directory).read()
    state = RecordedState.from_events(read.events)
    body, verdicts, source = _summary(campaign, state, read.bad_lines, temp_roots, reload_timeout)
    summary = body.with_times(_times(campaign, closed_at=now, generated_at=now))
    return _assemble(campaign, summary, verdicts, source, manifest_files=None)


def close_campaign(
    directory: str | Path | Campaign,
    *,
    now: datetime | None = None,
    temp_roots: Iterable[str | Path] | None = None,
    reload_timeout: float = RELOAD_TIMEOUT_S,
) -> ClosingOutcome:
    """Verify, record `closed` in the run log, and write DIR/closing/.

    Closing again with nothing changed writes the same files except `generated_at`: the content
    is hashed without its timestamps, and when the last `closed` event carries the same hash it
    stands (its time stays the closing time) and no new event is appended.
    """
    campaign = _campaign_of(directory)
    now = _utc(now)
    log = RunLog(campaign.directory, clock=lambda: now)
    read = log.read()
    state = RecordedState.from_events(read.events)
    body, verdicts, source = _summary(campaign, state, read.bad_lines, temp_roots, reload_timeout)
    content_sha = body.content_sha256()
    folder = campaign.directory / CLOSING_DIR
    _check_writable(folder)  # before anything is recorded: `closed` never points at a folder that cannot be written
    with log.transaction() as tx:  # two closings at once record one event for one content
        closed = [e for e in tx.read().events if e["type"] == "closed"]
        event = closed[-1] if closed and closed[-1].get("summary_sha256") == content_sha else None
        recorded = event is None
        if event is None:
            # Each verdict in the register, then the closing, as one write and one fsync: a disk
            # that refuses the last line keeps none of them, so a retry records them once.
            events: list[tuple[str, dict[str, Any]]] = [
                ("rejected", {"deliverable": r.deliverable, "cause": r.cause, "source": CLOSE_SOURCE})
                for r in body.rejections
            ]
            events.append((
                "closed",
                {
                    "accepted": body.accepted,
                    "deliverables": body.deliverables_total,
                    "lot_price_usd": body.lot_price_usd,
                    "cost_per_accepted_usd": body.cost_per_accepted_usd,
                    "summary_sha256": content_sha,
                    "folder": f"{CLOSING_DIR}/",
                },
            ))
            event = tx.append_many(events)[-1]
    closed_at = parse_ts(event["ts"]) or now
    summary = body.with_times(_times(campaign, closed_at=closed_at, generated_at=now), summary_sha256=content_sha)
    runlog_bytes = read_bytes(log.path)
    closing = _assemble(campaign, summary, verdicts, source, manifest_files=runlog_bytes)
    closing.closed_event = event
    closing.recorded = recorded
    try:
        _write_folder(folder, closing, runlog_bytes)
    except OSError as error:
        raise Finding(
            f"the closing is recorded (seq {event['seq']}) but {folder} could not be written: "
            f"{error.strerror or error}; free the space or fix the folder and run `cockpit close` again"
        ) from None
    return closing


def _check_writable(folder: Path) -> None:
    probe = folder / ".write-test"
    try:
        folder.mkdir(mode=DIR_MODE, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise Finding(f"cannot write the closing folder {folder}: {error.strerror or error}; nothing was recorded") from None


def _summary(
    campaign: Campaign,
    state: RecordedState,
    bad_lines: int,
    temp_roots: Iterable[str | Path] | None,
    reload_timeout: float,
) -> tuple[ClosingSummary, list[DeliverableVerdict], PlanSource]:
    """The summary without its times: what the content hash covers."""
    roots = tuple(temp_roots) if temp_roots is not None else temp_roots_from_env()
    temp = TempFolders(roots, campaign.directory)
    verdicts = verify_deliverables(campaign, state=state, temp=temp, check_ids=_check_ids, reload_timeout=reload_timeout)
    source = plan_source(campaign)
    plan = source.campaign

    run_paths: dict[str, Path] = {}
    for run in plan.runs:
        run_paths[run.id] = run.metrics_path(campaign.directory)
    for run in campaign.runs:  # today's path wins: a metrics path fixed after the start
        run_paths[run.id] = run.metrics_path(campaign.directory)
    saved = load_state(state_file(campaign.directory))
    measures = {rid: measure_run(rid, path, campaign.directory, saved) for rid, path in run_paths.items()}

    price = campaign.price
    accepted = [v for v in verdicts if v.accepted]
    ratio = cost_per_accepted(price, len(accepted))
    expenses = campaign.model.expenses
    expenses_total = sum((e.usd for e in expenses), Decimal("0.00"))
    if ratio is not None:
        ratio_text = f"{money(ratio)} USD per accepted deliverable ({money(price)} / {len(accepted)})"
    else:
        # Never 0: the cost stands, and the rejections (listed beside it) say why nothing counts.
        ratio_text = f"undefined: 0 deliverables accepted; the lot cost {money(price)} USD"
        if not verdicts:
            ratio_text += " (the campaign declares no deliverable)"

    warnings: list[str] = []
    inside = temp.campaign_root()
    if inside is not None:
        warnings.append(
            f"the campaign folder {campaign.directory} is itself under {inside}, which the box loses when "
            "the lot ends: copy closing/ and the deliverables off the box before then"
        )
    if not source.frozen:
        warnings.append(f"planned times come from {source.label}" + (f": {source.problem}" if source.problem else ""))
    elif source.text != campaign.text:
        warnings.append(
            "campaign.toml has changed since the campaign started; planned vs actual uses the frozen plan"
        )
    if bad_lines:
        warnings.append(f"the run log has {plural(bad_lines, 'unreadable line')} (skipped)")
    for measure in measures.values():
        if measure.error:
            warnings.append(f"run {measure.run}: {measure.error}")
        elif measure.bad_lines:
            warnings.append(f"run {measure.run}: {plural(measure.bad_lines, 'metrics line')} did not parse (skipped)")
    conclusion = conclude(plan, campaign, measures, state)
    if conclusion.warning:
        warnings.append(conclusion.warning)

    lot = campaign.lot
    placed = schedule(plan.items, plan.lot.gpu_count, plan.model.calendar.retrieval_hours)
    summary = ClosingSummary(
        campaign=campaign.id,
        question=campaign.model.question,
        corpus=campaign.model.corpus,
        lot=LotFacts(
            order_ref=lot.order_ref, gpu_model=lot.gpu_model, gpus=lot.gpu_count, days=lot.days,
            window_hours=lot.window_hours, start=iso(lot.start) if lot.start else None, end=iso(lot.end) if lot.end else None,
        ),
        lot_price_usd=money(price),
        other_expenses_usd=money(expenses_total),
        other_expenses=[Expense(e.label, money(e.usd)) for e in expenses],
        accepted=len(accepted),
        deliverables_total=len(verdicts),
        cost_per_accepted_usd=money(ratio) if ratio is not None else None,
        cost_per_accepted=ratio_text,
        rejections=[Rejection(v.id, v.cause) for v in verdicts if not v.accepted],
        deliverables=[_deliverable_row(v) for v in verdicts],
        conclusion=conclusion,
        plan=PlanFacts(
            source="frozen" if source.frozen else "campaign.toml",
            label=source.label,
            sha256=hashlib.sha256(source.text.encode("utf-8")).hexdigest(),
            committed_hours=placed.committed_hours,
            retrieval_hours=placed.retrieval_hours,
            window_hours=plan.lot.window_hours,
        ),
        planned_vs_actual=planned_vs_actual(plan, campaign, measures, state),
        decisions=[
            DecisionRow(
                decision=d.get("decision"), note=d.get("note"), run=d.get("run"), ts=d.get("ts"),
                lot_hours=d.get("lot_hours"), who=d.get("who"), source=d.get("source"),
            )
            for d in state.decisions
        ],
        stops=[
            StopRow(
                run=s.get("run"), rule=s.get("rule"), reason=s.get("reason"), source=s.get("source"),
                ts=s.get("ts"), who=s.get("who"),
                signal_sent=bool((s.get("signal") or {}).get("sent")) if isinstance(s.get("signal"), dict) else False,
            )
            for s in state.stops
        ],
        notes=[NoteRow(run=n.get("run"), text=n.get("text"), ts=n.get("ts"), who=n.get("who")) for n in state.notes],
        alerts=[_alert_row(a) for a in state.alerts],
        accepted_by_person=[
            PersonAcceptance(
                deliverable=e.get("deliverable"), ts=e.get("ts"), who=e.get("who"),
                verified=_verified(verdicts, e.get("deliverable")),
            )
            for e in state.accepted
        ],
        voided=[  # decisions taken back by a `void` event: absent from everything above
            VoidedRow(
                seq=taken.get("seq"), type=taken.get("type"), run=taken.get("run"), ts=taken.get("ts"),
                void_seq=void.get("seq"), voided_by=void.get("who"), voided_at=void.get("ts"), reason=void.get("reason"),
            )
            for void, taken in state.voided
        ],
        runlog_bad_lines=bad_lines,
        all_accepted=all(v.accepted for v in verdicts),
        warnings=warnings,
        hardware_incidents=hardware_incidents(campaign, state, measures),  # GPU evidence for the provider
        energy=energy(campaign, len(accepted)),
    )
    return summary, verdicts, source


def _alert_row(alert: AlertRecord) -> AlertRow:
    event, ack = alert.event, alert.acknowledged or {}
    return AlertRow(
        rule=event.get("rule"), run=event.get("run"), key=alert.key, message=event.get("message"),
        ts=event.get("ts"), seq=event.get("seq"),
        acknowledged=alert.acknowledged is not None,
        acknowledged_at=ack.get("ts"), acknowledged_by=ack.get("who"),
        acknowledged_source=ack.get("source"), note=ack.get("note"),
    )


def _verified(verdicts: list[DeliverableVerdict], deliverable_id: Any) -> bool | None:
    verdict = next((v for v in verdicts if v.id == deliverable_id), None)
    return verdict.accepted if verdict else None


def _deliverable_row(verdict: DeliverableVerdict) -> DeliverableRow:
    d = verdict.deliverable
    return DeliverableRow(
        id=d.id,
        run=d.run,
        kind=d.kind.value,
        path=d.path,
        format=verdict.format,
        verdict="accepted" if verdict.accepted else "rejected",
        cause=verdict.cause,
        checks=list(verdict.checks),
        size_bytes=verdict.size_bytes,
        sha256=verdict.sha256,
        accepted_by_person=verdict.accepted_by_person is not None,
    )


def _times(campaign: Campaign, *, closed_at: datetime, generated_at: datetime) -> ClosingTimes:
    """When it was closed and generated, against the end of the lot."""
    end = campaign.lot.end
    before = None if end is None else closed_at < end
    left = None if end is None else round_hours(max(0.0, (end - closed_at).total_seconds() / 3600.0))
    after = None if end is None else round_hours(max(0.0, (closed_at - end).total_seconds() / 3600.0))
    if end is None:
        timing = "the lot has no start time, so whether it closed before the lot ended is unknown"
    elif before:
        timing = (
            f"closed {left:g} h before the lot ends ({short_ts(iso(end))} UTC); those hours were "
            "left unused, a margin and not a debt"
        )
    else:
        timing = f"closed {after:g} h after the lot ended ({short_ts(iso(end))} UTC)"
    return ClosingTimes(
        closed_at=iso(closed_at), generated_at=iso(generated_at), closed_before_lot_end=before,
        lot_hours_left=left, hours_after_lot_end=after, timing=timing,
    )


def _assemble(
    campaign: Campaign,
    summary: ClosingSummary,
    verdicts: list[DeliverableVerdict],
    source: PlanSource,
    manifest_files: bytes | None,
) -> ClosingOutcome:
    folder = campaign.directory / CLOSING_DIR
    manifest = build_manifest(campaign, summary, verdicts, source, manifest_files)
    return ClosingOutcome(
        campaign=campaign,
        facts=summary,
        verdicts=verdicts,
        report_markdown=render_report(summary),
        reload_markdown=render_reload(summary, verdicts),
        manifest=manifest,
        plan_text=source.text,
        folder=folder,
    )


# ---------------------------------------------------------------- writing


def _write_folder(folder: Path, closing: ClosingOutcome, runlog_bytes: bytes) -> None:
    folder.mkdir(mode=DIR_MODE, exist_ok=True)
    write_atomic(folder / "summary.json", summary_json(closing.facts).encode("utf-8"))
    from cockpit.close.charts import with_charts  # charts (issue 20): closing/chart-*.svg, linked from report.md

    report, charts = with_charts(folder, closing.campaign, closing.report_markdown)
    write_atomic(folder / "report.md", report.encode("utf-8"))
    write_atomic(folder / "RELOAD.md", closing.reload_markdown.encode("utf-8"))
    write_atomic(folder / "plan.toml", closing.plan_text.encode("utf-8"))
    write_atomic(folder / RUNLOG_FILE, runlog_bytes)
    manifest = {**closing.manifest, "closing_files": [*closing.manifest["closing_files"], *charts]}
    write_atomic(folder / "manifest.json", (json.dumps(manifest, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))

