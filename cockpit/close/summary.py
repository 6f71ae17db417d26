"""The closing summary, typed: what `closing/summary.json` and `cockpit close --json` hold.

The closing builds one `ClosingSummary`; report.md, RELOAD.md and `cockpit close`'s own lines read
its attributes, and `to_json` is the one way to its JSON (the field order of each record is the
order of its keys). The content hash covers everything but the times, so closing again with
nothing changed finds the same hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from cockpit.close.verify import Check
from cockpit.common.text import json_safe

SUMMARY_SCHEMA = 1


@dataclass(frozen=True)
class LotFacts:
    order_ref: str | None
    gpu_model: str
    gpus: int
    days: int
    window_hours: float
    start: str | None
    end: str | None


@dataclass(frozen=True)
class ClosingTimes:
    """When the campaign was closed against when its lot ends: not in the content hash."""

    closed_at: str
    generated_at: str
    closed_before_lot_end: bool | None  # None: the lot has no start, so no end
    lot_hours_left: float | None
    hours_after_lot_end: float | None
    timing: str  # the same, in words


@dataclass(frozen=True)
class Expense:
    label: str
    usd: str


@dataclass(frozen=True)
class Rejection:
    deliverable: str
    cause: str | None


@dataclass(frozen=True)
class DeliverableRow:
    id: str
    run: str | None
    kind: str
    path: str
    format: str | None
    verdict: str  # accepted | rejected
    cause: str | None
    checks: list[Check]
    size_bytes: int | None
    sha256: str | None
    accepted_by_person: bool


@dataclass(frozen=True)
class RunResult:
    """A run's closing metric (its last value) against the criterion."""

    run: str
    role: str
    value: Any  # a number, or "NaN"/"Infinity" by name
    reached: bool | None  # None: no number reported
    stopped: bool
    open_alerts: list[str]


@dataclass(frozen=True)
class Conclusion:
    """What the campaign concluded. With no [closing] table there is no criterion (metric None),
    and the JSON then has no `unconfirmed` nor `warning`."""

    metric: str | None
    direction: str | None
    threshold: float | None
    runs: list[RunResult]
    reached: list[str]
    variants_reached: list[str]
    negative: bool | None  # None: nothing either way (nothing measured, or unconfirmed)
    text: str
    unconfirmed: list[str] = field(default_factory=list)
    warning: str | None = None  # the criterion changed since the start

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "metric": self.metric, "direction": self.direction, "threshold": self.threshold,
            "runs": [asdict(r) for r in self.runs], "reached": list(self.reached),
            "variants_reached": list(self.variants_reached),
        }
        if self.metric is not None:
            out["unconfirmed"] = list(self.unconfirmed)
        out["negative"] = self.negative
        out["text"] = self.text
        if self.metric is not None:
            out["warning"] = self.warning
        return out


@dataclass(frozen=True)
class PlanFacts:
    source: str  # frozen | campaign.toml
    label: str
    sha256: str
    committed_hours: float
    retrieval_hours: float
    window_hours: float


@dataclass(frozen=True)
class PlannedRow:
    """One planned item (or a run added after the plan was frozen) beside what was measured."""

    id: str
    type: str  # run | task
    kind: str
    tier: str
    role: str | None
    gpus: list[int]
    planned_start: str | None
    planned_end: str | None
    planned_start_hours: float | None
    planned_end_hours: float | None
    planned_hours: float | None
    measured: bool
    measured_start: str | None
    measured_end: str | None
    measured_start_hours: float | None
    measured_end_hours: float | None
    measured_hours: float | None
    deviation_hours: float | None
    state: str
    stopped: bool
    notes: list[str]


@dataclass(frozen=True)
class DecisionRow:
    decision: Any
    note: Any
    run: Any
    ts: Any
    lot_hours: Any
    who: Any
    source: Any


@dataclass(frozen=True)
class StopRow:
    run: Any
    rule: Any
    reason: Any
    source: Any
    ts: Any
    who: Any
    signal_sent: bool


@dataclass(frozen=True)
class NoteRow:
    run: Any
    text: Any
    ts: Any
    who: Any


@dataclass(frozen=True)
class AlertRow:
    """An alert of the run log: what, when, and who acknowledged it (if anyone)."""

    rule: Any
    run: Any
    key: Any
    message: Any
    ts: Any
    seq: Any
    acknowledged: bool
    acknowledged_at: Any
    acknowledged_by: Any
    acknowledged_source: Any
    note: Any


@dataclass(frozen=True)
class PersonAcceptance:
    deliverable: Any
    ts: Any
    who: Any
    verified: bool | None  # None: no such deliverable today


@dataclass(frozen=True)
class VoidedRow:
    """A decision taken back by a `void` event: absent from everything else."""

    seq: Any
    type: Any
    run: Any
    ts: Any
    void_seq: Any
    voided_by: Any
    voided_at: Any
    reason: Any


@dataclass(frozen=True)
class ClosingSummary:
    campaign: str
    question: str | None
    corpus: str | None
    lot: LotFacts
    lot_price_usd: str
    other_expenses_usd: str
    other_expenses: list[Expense]
    accepted: int
    deliverables_total: int
    cost_per_accepted_usd: str | None  # None: nothing accepted (never 0: the cost stands)
    cost_per_accepted: str  # the same, in words
    rejections: list[Rejection]
    deliverables: list[DeliverableRow]
    conclusion: Conclusion
    plan: PlanFacts
    planned_vs_actual: list[PlannedRow]
    decisions: list[DecisionRow]
    stops: list[StopRow]
    notes: list[NoteRow]
    alerts: list[AlertRow]
    accepted_by_person: list[PersonAcceptance]
    voided: list[VoidedRow]
    runlog_bad_lines: int
    all_accepted: bool
    warnings: list[str]
    # The GPU incidents (close/incidents.py: JSON-ready records, one per `gpu_health` event) and the
    # measured energy in kWh: the evidence a renter sends the provider.
    hardware_incidents: list[dict[str, Any]] = field(default_factory=list)
    energy: dict[str, Any] = field(default_factory=dict)
    schema: int = SUMMARY_SCHEMA
    times: ClosingTimes | None = None  # None until the closing time is known
    summary_sha256: str | None = None  # the content hash, once recorded in a `closed` event

    def with_times(self, times: ClosingTimes, summary_sha256: str | None = None) -> ClosingSummary:
        return replace(self, times=times, summary_sha256=summary_sha256)

    def to_json(self) -> dict[str, Any]:
        """summary.json: the times after `lot`, the content hash last (when recorded)."""
        out: dict[str, Any] = {
            "schema": self.schema, "campaign": self.campaign, "question": self.question, "corpus": self.corpus,
            "lot": asdict(self.lot),
        }
        if self.times is not None:
            out.update(asdict(self.times))
        out.update({
            "lot_price_usd": self.lot_price_usd,
            "other_expenses_usd": self.other_expenses_usd,
            "other_expenses": [asdict(e) for e in self.other_expenses],
            "accepted": self.accepted,
            "deliverables_total": self.deliverables_total,
            "cost_per_accepted_usd": self.cost_per_accepted_usd,
            "cost_per_accepted": self.cost_per_accepted,
            "rejections": [asdict(r) for r in self.rejections],
            "deliverables": [asdict(d) for d in self.deliverables],
            "conclusion": self.conclusion.to_json(),
            "plan": asdict(self.plan),
            "planned_vs_actual": [asdict(r) for r in self.planned_vs_actual],
            "decisions": [asdict(d) for d in self.decisions],
            "stops": [asdict(s) for s in self.stops],
            "notes": [asdict(n) for n in self.notes],
            "alerts": [asdict(a) for a in self.alerts],
            "accepted_by_person": [asdict(a) for a in self.accepted_by_person],
            "voided": [asdict(v) for v in self.voided],
            "runlog_bad_lines": self.runlog_bad_lines,
            "all_accepted": self.all_accepted,
            "warnings": list(self.warnings),
            "hardware_incidents": list(self.hardware_incidents),
            "energy": dict(self.energy),
        })
        if self.summary_sha256 is not None:
            out["summary_sha256"] = self.summary_sha256
        return out

    def content_sha256(self) -> str:
        """sha256 of the content: the canonical JSON of everything but the times and this hash."""
        body = replace(self, times=None, summary_sha256=None).to_json()
        data = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(data.encode("utf-8")).hexdigest()


def summary_json(summary: ClosingSummary | dict[str, Any]) -> str:
    """The text of summary.json (and of `cockpit close --json`)."""
    body = summary.to_json() if isinstance(summary, ClosingSummary) else summary
    return json_safe(json.dumps(body, ensure_ascii=False, indent=2, allow_nan=False)) + "\n"
