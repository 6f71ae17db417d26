"""What the campaign concluded: each run's closing metric (its last value) against the criterion
written before the trials ([closing] of the frozen plan), in words a report can carry."""

from __future__ import annotations

import math
from collections.abc import Mapping

from cockpit.close.figures import plain_number, significant, threshold_text
from cockpit.close.measure import RunMeasure
from cockpit.close.summary import Conclusion, RunResult
from cockpit.close.verify import about_output
from cockpit.plan.campaign import Campaign
from cockpit.record.runlog import RecordedState


def conclude(plan: Campaign, today: Campaign, measures: Mapping[str, RunMeasure], state: RecordedState) -> Conclusion:
    """Each run's closing metric (its last value) against the threshold written before the trials."""
    closing = plan.model.closing or today.model.closing
    if closing is None:
        return Conclusion(
            metric=None, direction=None, threshold=None, runs=[], reached=[], variants_reached=[], negative=None,
            text="no [closing] table: the campaign did not say what lets it close, so no conclusion is computed",
        )
    metric, direction, threshold = closing.metric, closing.direction.value, closing.threshold
    sign = "≥" if direction == "max" else "≤"
    limit = threshold_text(threshold)
    runs: list[RunResult] = []
    open_by_run: dict[str, list[str]] = {}
    for alert in state.active_alerts:
        if alert.event.get("run") and about_output(alert.event):
            open_by_run.setdefault(str(alert.event["run"]), []).append(str(alert.event.get("rule")))
    every_run = [*today.runs, *(r for r in plan.runs if today.run(r.id) is None)]
    for run in every_run:
        measure = measures.get(run.id)
        value = measure.last_values.get(metric) if measure else None
        reached = None
        if isinstance(value, (int, float)):
            reached = math.isfinite(value) and (value >= threshold if direction == "max" else value <= threshold)
        runs.append(RunResult(
            run=run.id, role=run.role.value, value=plain_number(value), reached=reached,
            stopped=state.stop_of(run.id) is not None, open_alerts=open_by_run.get(run.id, []),
        ))
    reached_ids = [r.run for r in runs if r.reached]
    variants = [r for r in runs if r.role == "variant"]
    # A value no person has looked at behind an open alert (a truncated essential input, a run
    # that died) is not a result yet: it is named, unconfirmed, until the alert is acknowledged.
    variants_reached = [r.run for r in variants if r.reached and not r.open_alerts]
    unconfirmed = [r for r in variants if r.reached and r.open_alerts]

    def shown(row: RunResult, with_alerts: bool = True) -> str:
        text = significant(row.value) if row.value is not None else "not reported"  # 4 digits; summary.json's runs keep them all
        alerts = f" (open alert {', '.join(row.open_alerts)})" if row.open_alerts and with_alerts else ""
        return f"{row.run} {text}" + (" (stopped)" if row.stopped else "") + alerts

    def unconfirmed_text() -> str:
        values = "; ".join(shown(r, with_alerts=False) for r in unconfirmed)
        alerts = "; ".join(f"{', '.join(r.open_alerts)} on {r.run}" for r in unconfirmed)
        return (
            f"{', '.join(r.run for r in unconfirmed)} report{'s' if len(unconfirmed) == 1 else ''} "
            f"{metric} {sign} {limit} ({values}) with open alert {alerts} that no person acknowledged: "
            "look at it and acknowledge it (`cockpit ack DIR RULE --run RUN`, or `a` in the cockpit) "
            "before the result stands"
        )

    if variants_reached:
        text = (
            f"{', '.join(variants_reached)} reached {metric} {sign} {limit} "
            f"({'; '.join(shown(r) for r in variants if r.run in variants_reached)})"
        )
        if unconfirmed:
            text += ". Unconfirmed: " + unconfirmed_text()
    elif unconfirmed:
        text = "unconfirmed: " + unconfirmed_text()
    elif variants and not any(r.reached is not None for r in variants):
        # nothing measured is not a negative result: the campaign cannot say either way
        text = f"inconclusive: no variant reported {metric} ({'; '.join(shown(r) for r in variants)})"
    elif variants:
        text = (
            f"no variant reached {limit} ({metric} {sign} {limit}: "
            f"{'; '.join(shown(r) for r in variants)}) — a negative result, and a valid conclusion"
        )
    else:
        text = f"no variant in the campaign; {metric} {sign} {limit} is the closing criterion"
    controls = [r for r in runs if r.role == "control"]
    if controls:
        text += ". Control: " + "; ".join(
            shown(r) + (f", reached {limit}" if r.reached else "") for r in controls
        )
    warning = None
    if today.model.closing is not None and plan.model.closing is not None and today.model.closing != plan.model.closing:
        warning = (
            f"[closing] changed since the start (now {today.model.closing.metric} {today.model.closing.direction.value} "
            f"{threshold_text(today.model.closing.threshold)}); the criterion written before the trials stands"
        )
    return Conclusion(
        metric=metric, direction=direction, threshold=threshold, runs=runs, reached=reached_ids,
        variants_reached=variants_reached, unconfirmed=[r.run for r in unconfirmed],
        negative=(
            False if variants_reached
            else None if unconfirmed or not any(r.reached is not None for r in variants)
            else True
        ),
        text=text, warning=warning,
    )
