"""The campaign's stop rules, written before the trials, evaluated on every new metrics record and on each tick.

Record rules (non_finite, below, above, truncated, and a changed configuration) look at every
line as it is read, so a NaN at line 3 of 1,000 counts even when line 1,000 is fine. Time rules
(no_resume, stalled) are evaluated per tick with an injected `now` and the liveness the engine
measured; this module never looks at processes or clocks itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from cockpit.common.times import hours_text, utc_minute
from cockpit.live.metric_values import as_step, format_value, seconds_to_datetime, ts_seconds
from cockpit.live.track import RunTrack
from cockpit.plan.campaign import Action, RuleKind, StopRule

CONFIG_CHANGED = "config-changed"  # the rule id of "a new configuration under an old run id"

_NON_FINITE, _BELOW, _ABOVE = RuleKind.non_finite, RuleKind.below, RuleKind.above


@dataclass(frozen=True, slots=True)
class Trigger:
    """One rule that fired for one run, ready to show and to record."""

    rule_id: str
    run_id: str
    action: str  # an Action's value: "alert" | "stop"
    message: str
    value: float | int | str | None = None
    step: int | None = None
    ts: datetime | None = None
    line: int | None = None

    def event_fields(self) -> dict[str, Any]:
        """The fields of the run log's `alert` event for this trigger."""
        return {
            "rule": self.rule_id,
            "run": self.run_id,
            "action": self.action,
            "message": self.message,
            "value": self.value,
            "step": self.step,
            "metric_ts": self.ts,
            "line": self.line,
        }


@dataclass
class RuleState:
    """Which (rule, run) pairs have fired since their last acknowledgement: one alert per pair."""

    fired: set[tuple[str, str]] = field(default_factory=set)

    def has_fired(self, rule_id: str, run_id: str) -> bool:
        return (rule_id, run_id) in self.fired

    def mark(self, rule_id: str, run_id: str) -> None:
        self.fired.add((rule_id, run_id))

    def acknowledge(self, rule_id: str, run_id: str) -> None:
        """The user saw it: the pair may fire again on a later record."""
        self.fired.discard((rule_id, run_id))

    def to_dict(self) -> dict[str, Any]:
        return {"fired": [list(pair) for pair in sorted(self.fired)]}

    @classmethod
    def from_dict(cls, data: Any) -> "RuleState":
        """A saved state; anything malformed reads as nothing fired (the run log still dedups)."""
        pairs: set[tuple[str, str]] = set()
        fired = data.get("fired") if isinstance(data, Mapping) else None
        if isinstance(fired, list):
            for pair in fired:
                if isinstance(pair, list) and len(pair) == 2 and all(type(p) is str for p in pair):
                    pairs.add((pair[0], pair[1]))
        return cls(pairs)



def _action(rule: StopRule) -> str:
    return rule.action.value if isinstance(rule.action, Action) else str(rule.action)


def _step_of(record: Mapping[str, Any], track: RunTrack) -> int | None:
    step = as_step(record.get("step"))
    return step if step is not None else track.last_step


def _at_step(step: int | None) -> str:
    return f" at step {step}" if step is not None else ""


class RuleEvaluator:
    """The campaign's rules, compiled per run, with the memory of what already fired.

    `state` is mutated in place (observers hold its set): acknowledge through the evaluator.
    """

    def __init__(self, rules: Sequence[StopRule], state: RuleState | None = None):
        self.rules = list(rules)
        self.state = state or RuleState()
        self._compiled: dict[str, _RunRules] = {}

    def _for(self, run_id: str) -> "_RunRules":
        compiled = self._compiled.get(run_id)
        if compiled is None:
            compiled = self._compiled[run_id] = _RunRules(run_id, [r for r in self.rules if r.applies_to(run_id)])
        return compiled

    # ------------------------------------------------------------ records

    def observer(self, run_id: str, sink: list[Trigger]) -> Callable[[dict, int, RunTrack], None]:
        """A function for `MetricsStream.poll`: checks each record, appends first triggers to sink."""
        rules = self._for(run_id)
        fired = self.state.fired
        threshold_checks = rules.threshold_checks
        nonfinite_checks = rules.nonfinite_checks
        any_nonfinite = rules.any_nonfinite
        truncated = rules.truncated
        fire = self._fire

        def observe(record: dict, line: int, track: RunTrack) -> None:
            if "event" in record:
                event = record["event"]
                if event == "truncated":
                    if truncated and track.truncation_events:
                        last = track.truncation_events[-1]
                        if last["line"] == line and last["essential"]:
                            text = f"essential input {last['input'] or '(unnamed)'} was truncated{_at_step(last['step'])}"
                            for rule in truncated:
                                if (rule.id, run_id) not in fired:
                                    fire(sink, rule, run_id, text, last["input"], last["step"], record, line)
                elif event == "started" and track.config_change_line == line:
                    self._config_changed(sink, run_id, track, record, line)
                return
            for metric, rule, below, threshold, after_step in threshold_checks:
                value = record.get(metric)
                kind = type(value)
                if (kind is not float and kind is not int) or not (value < threshold if below else value > threshold):
                    continue
                if (rule.id, run_id) in fired:
                    continue
                step = _step_of(record, track)
                if after_step is not None and (step is None or step < after_step):
                    continue
                text = f"{metric} is {format_value(value)}, {'below' if below else 'above'} {format_value(threshold)}"
                if step is not None:
                    text += f",{_at_step(step)}"
                fire(sink, rule, run_id, text, value, step, record, line)
            if track.nonfinite_line == line:
                # the track saw a non-finite value on this very line: only now look for which rule
                step = _step_of(record, track)
                for metric, rule in nonfinite_checks:
                    value = record.get(metric)
                    kind = type(value)
                    if (kind is float or kind is int) and value - value != 0 and (rule.id, run_id) not in fired:
                        text = f"{metric} is {format_value(value)}{_at_step(step)}"
                        fire(sink, rule, run_id, text, value, step, record, line)
                if any_nonfinite:
                    metric = track.nonfinite_metric or "a metric"
                    value = record.get(metric)
                    text = f"{metric} is {format_value(value)}{_at_step(step)}"
                    for rule in any_nonfinite:
                        if (rule.id, run_id) not in fired:
                            fire(sink, rule, run_id, text, value, step, record, line)

        return observe

    def _fire(
        self, sink: list[Trigger], rule: StopRule, run_id: str, text: str, value: Any, step: int | None,
        record: Mapping[str, Any] | None, line: int | None, ts: datetime | None = None,
    ) -> None:
        self.state.mark(rule.id, run_id)
        if ts is None and record is not None:
            ts = seconds_to_datetime(ts_seconds(record.get("ts")))
        sink.append(Trigger(rule.id, run_id, _action(rule), f"{run_id}: {text} (rule {rule.id})", value, step, ts, line))

    def _config_changed(self, sink: list[Trigger], run_id: str, track: RunTrack, record: dict, line: int) -> None:
        if self.state.has_fired(CONFIG_CHANGED, run_id):
            return
        self.state.mark(CONFIG_CHANGED, run_id)
        shas = track.config_sha256s
        new = record.get("config_sha256")
        before = next((s for s in reversed(shas) if s != new), None)
        was = f"{before[:12]}… → " if before else ""
        text = (
            f"{run_id}: the configuration changed under the same run id "
            f"(config_sha256 {was}{str(new)[:12]}…); a new configuration needs a new run id: a changed configuration is a new trial, and results under one id must come from one configuration"
        )
        ts = seconds_to_datetime(ts_seconds(record.get("ts")))
        sink.append(Trigger(CONFIG_CHANGED, run_id, Action.alert.value, text, new, track.last_step, ts, line))

    # ------------------------------------------------------------ ticks

    def tick(self, run_id: str, track: RunTrack, now: datetime | float, alive: bool | None) -> list[Trigger]:
        """The time rules for one run at `now`, given whether its process is alive (None: it
        cannot be seen from here — another host or pid namespace, no pid reported — so `stalled`
        goes on silence alone)."""
        rules = self._for(run_id)
        if not rules.no_resume and not rules.stalled:
            return []
        now_s = now.timestamp() if isinstance(now, datetime) else float(now)
        moment = now if isinstance(now, datetime) else datetime.fromtimestamp(now_s, tz=timezone.utc)
        sink: list[Trigger] = []
        if track.finished is not None:
            return sink  # a finished run has nothing left to resume or to stall
        for rule in rules.no_resume:
            if self.state.has_fired(rule.id, run_id):
                continue
            start = track.first_started_ts if track.first_started_ts is not None else track.first_ts
            if start is None:
                continue  # not started yet: no clock to run
            deadline = start + (rule.within_hours or 0) * 3600.0
            if now_s < deadline:
                continue
            if track.first_resume_ts is not None and track.first_resume_ts <= deadline:
                continue
            started = seconds_to_datetime(start)
            when = utc_minute(started) if started else "its start"
            text = f"no verified resume within {hours_text(rule.within_hours or 0)} of the run's start ({when})"
            self._fire(sink, rule, run_id, text, None, track.last_step, None, None, moment)
        if alive is not False and track.last_line_ts is not None:
            quiet_minutes = (now_s - track.last_line_ts) / 60.0
            for rule in rules.stalled:
                if self.state.has_fired(rule.id, run_id) or quiet_minutes < (rule.minutes or 0):
                    continue
                text = f"no metric line for {quiet_minutes:.0f} min " + (
                    "while its process is alive" if alive else "(its process cannot be seen from here: silence alone decides)"
                )
                self._fire(sink, rule, run_id, text, round(quiet_minutes, 1), track.last_step, None, None, moment)
        return sink

    def acknowledge(self, rule_id: str, run_id: str) -> None:
        self.state.acknowledge(rule_id, run_id)


class _RunRules:
    """One run's applicable rules, sorted by what they look at, so a record costs few lookups."""

    __slots__ = ("run_id", "threshold_checks", "nonfinite_checks", "any_nonfinite", "truncated", "no_resume", "stalled")

    def __init__(self, run_id: str, rules: Iterable[StopRule]):
        self.run_id = run_id
        # (metric, rule, is_below, threshold, after_step): a flat list is the cheapest to walk
        self.threshold_checks: list[tuple[str, StopRule, bool, float, int | None]] = []
        self.nonfinite_checks: list[tuple[str, StopRule]] = []
        self.any_nonfinite: list[StopRule] = []
        self.truncated: list[StopRule] = []
        self.no_resume: list[StopRule] = []
        self.stalled: list[StopRule] = []
        for rule in rules:
            kind = rule.kind
            if kind in (_BELOW, _ABOVE) and rule.metric and rule.threshold is not None:
                self.threshold_checks.append((rule.metric, rule, kind is _BELOW, rule.threshold, rule.after_step))
            elif kind is _NON_FINITE and rule.metric:
                self.nonfinite_checks.append((rule.metric, rule))
            elif kind is _NON_FINITE:
                self.any_nonfinite.append(rule)
            elif kind is RuleKind.truncated:
                self.truncated.append(rule)
            elif kind is RuleKind.no_resume:
                self.no_resume.append(rule)
            elif kind is RuleKind.stalled:
                self.stalled.append(rule)
