"""Stop rules (SPEC §2, seed §4) on crafted streams: every record counts, one trigger per
(rule, run) until acknowledged, time rules with an injected clock, a changed configuration."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from cockpit.live.metrics import MetricsStream
from cockpit.live.saved_state import load_state, save_state
from cockpit.live.track import last_metrics
from cockpit.live.rules import CONFIG_CHANGED, RuleEvaluator, RuleState, Trigger
from cockpit.plan.campaign import StopRule
from cockpit.plan.load import load_campaign

SAMPLES = Path(__file__).resolve().parents[2] / "sample_campaigns"
T0 = 1764489600.0  # 2025-11-30T08:00:00Z
START = datetime.fromtimestamp(T0, tz=timezone.utc)

NAN_LOSS = StopRule(id="nan-loss", kind="non_finite", metric="loss")
ANY_NAN = StopRule(id="any-nan", kind="non_finite", action="stop")
F1_FLOOR = StopRule(id="f1-floor", kind="below", metric="eval/macro_f1", threshold=0.55, after_step=2000,
                    runs=["v-r16", "v-r64"])
LOSS_CEILING = StopRule(id="loss-ceiling", kind="above", metric="loss", threshold=8.0)
TRUNCATED = StopRule(id="truncated-input", kind="truncated", action="stop")
NO_RESUME = StopRule(id="no-resume", kind="no_resume", within_hours=2)
STALLED = StopRule(id="stalled", kind="stalled", minutes=20)


def write(path: Path, *records, mode: str = "a") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode, encoding="utf-8") as handle:
        for record in records:
            handle.write((record if isinstance(record, str) else json.dumps(record)) + "\n")


class Harness:
    """One run's stream and an evaluator, as the engine wires them."""

    def __init__(self, folder: Path, rules, run_id: str = "v-r16", state: RuleState | None = None):
        self.run_id = run_id
        self.path = folder / "runs" / run_id / "metrics.jsonl"
        self.evaluator = RuleEvaluator(rules, state)
        self.stream = MetricsStream(run_id, self.path)

    def write(self, *records, mode: str = "a") -> None:
        write(self.path, *records, mode=mode)

    def poll(self) -> list[Trigger]:
        sink: list[Trigger] = []
        self.stream.poll(self.evaluator.observer(self.run_id, sink))
        return sink

    def tick(self, now, alive: bool = True) -> list[Trigger]:
        return self.evaluator.tick(self.run_id, self.stream.track, now, alive)


def steps(first: int, last: int, every: int = 1, **values):
    return [{"ts": T0 + s, "step": s, **values} for s in range(first, last, every)]


# ---------------------------------------------------------------- record rules


def test_a_nan_at_line_3_of_1000_triggers_though_the_rest_is_finite(tmp_path: Path):
    run = Harness(tmp_path, [NAN_LOSS, LOSS_CEILING])
    records = [{"ts": T0 + i, "step": i * 10, "loss": 2.0 - i / 1000} for i in range(1000)]
    records[2]["loss"] = float("nan")
    run.write(*records)
    triggers = run.poll()
    assert triggers == [Trigger("nan-loss", "v-r16", "alert", "v-r16: loss is NaN at step 20 (rule nan-loss)",
                                triggers[0].value, 20, START + timedelta(seconds=2), 3)]
    assert math.isnan(triggers[0].value)
    assert run.poll() == []  # nothing new, nothing again


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "-INFINITY"])
def test_non_finite_texts_trigger(tmp_path: Path, text: str):
    run = Harness(tmp_path, [NAN_LOSS])
    run.write({"step": 1, "loss": 1.0}, {"step": 2, "loss": text}, {"step": 3, "loss": 1.0})
    (trigger,) = run.poll()
    assert trigger.line == 2 and trigger.step == 2 and not math.isfinite(trigger.value)


def test_infinity_literals_trigger(tmp_path: Path):
    run = Harness(tmp_path, [NAN_LOSS])
    run.write({"step": 5, "loss": float("-inf")})
    (trigger,) = run.poll()
    assert trigger.message == "v-r16: loss is -Infinity at step 5 (rule nan-loss)"


def test_non_finite_without_a_metric_watches_every_metric(tmp_path: Path):
    run = Harness(tmp_path, [ANY_NAN, NAN_LOSS])
    run.write(*steps(0, 50, loss=1.0, grad_norm=0.5), {"ts": T0 + 50, "step": 50, "loss": 1.0, "grad_norm": "inf"})
    (trigger,) = run.poll()
    assert (trigger.rule_id, trigger.action, trigger.line, trigger.value) == ("any-nan", "stop", 51, math.inf)
    assert "grad_norm is Infinity at step 50" in trigger.message


def test_a_non_finite_ts_or_step_is_no_metric(tmp_path: Path):
    run = Harness(tmp_path, [ANY_NAN])
    run.write({"loss": float("nan"), "ts": float("nan")}, {"step": "nan", "loss": 1.0})
    (trigger,) = run.poll()
    assert trigger.line == 1 and "loss is NaN" in trigger.message


def test_a_finite_stream_triggers_nothing(tmp_path: Path):
    run = Harness(tmp_path, [ANY_NAN, NAN_LOSS, F1_FLOOR, LOSS_CEILING, TRUNCATED])
    run.write({"ts": T0, "event": "started", "pid": 1, "config_sha256": "a" * 64},
              *steps(0, 5000, 100, loss=1.0, **{"eval/macro_f1": 0.7}),
              {"ts": T0, "event": "truncated", "input": "doc-3", "essential": False},
              {"ts": T0, "step": 6000, "phase": "nan-free text", "ok": True})
    assert run.poll() == []


def test_quality_floor_before_and_after_after_step(tmp_path: Path):
    run = Harness(tmp_path, [F1_FLOOR])
    run.write({"ts": T0, "step": 1000, "eval/macro_f1": 0.40})  # warm-up: below is expected
    run.write({"ts": T0 + 1, "step": 1999, "eval/macro_f1": 0.41})
    assert run.poll() == []
    run.write({"ts": T0 + 2, "step": 2500, "eval/macro_f1": 0.62}, {"ts": T0 + 3, "step": 3000, "eval/macro_f1": 0.50})
    (trigger,) = run.poll()
    assert trigger.message == "v-r16: eval/macro_f1 is 0.5, below 0.55, at step 3000 (rule f1-floor)"
    assert (trigger.value, trigger.step, trigger.line) == (0.50, 3000, 4)


def test_after_step_includes_the_step_itself_and_uses_the_last_step_when_a_line_has_none(tmp_path: Path):
    run = Harness(tmp_path, [F1_FLOOR])
    run.write({"step": 2000, "loss": 1.0}, {"eval/macro_f1": 0.30})  # an eval line without a step
    (trigger,) = run.poll()
    assert trigger.step == 2000 and trigger.line == 2


def test_a_floor_without_any_step_known_waits(tmp_path: Path):
    run = Harness(tmp_path, [F1_FLOOR])
    run.write({"eval/macro_f1": 0.30})
    assert run.poll() == []


def test_above_rule(tmp_path: Path):
    run = Harness(tmp_path, [LOSS_CEILING])
    run.write(*steps(0, 10, loss=7.9), {"step": 10, "loss": 8.0}, {"step": 11, "loss": 9.25})
    (trigger,) = run.poll()
    assert trigger.message == "v-r16: loss is 9.25, above 8, at step 11 (rule loss-ceiling)"


def test_rules_apply_only_to_their_runs(tmp_path: Path):
    control = Harness(tmp_path, [F1_FLOOR], run_id="ctrl-r1")
    control.write({"step": 3000, "eval/macro_f1": 0.1})
    assert control.poll() == []
    variant = Harness(tmp_path, [F1_FLOOR], run_id="v-r64")
    variant.write({"step": 3000, "eval/macro_f1": 0.1})
    assert [t.run_id for t in variant.poll()] == ["v-r64"]


def test_non_essential_vs_essential_truncation(tmp_path: Path):
    run = Harness(tmp_path, [TRUNCATED])
    run.write({"ts": T0, "step": 100, "loss": 1.0},
              {"ts": T0 + 1, "event": "truncated", "input": "doc-17", "essential": False},
              {"ts": T0 + 2, "event": "truncated", "input": "doc-20"})
    assert run.poll() == []
    run.write({"ts": T0 + 3, "event": "truncated", "input": "doc-991", "essential": True})
    (trigger,) = run.poll()
    assert trigger.message == "v-r16: essential input doc-991 was truncated at step 100 (rule truncated-input)"
    assert (trigger.action, trigger.value, trigger.line) == ("stop", "doc-991", 4)
    assert run.stream.track.essential_truncations == 1 and run.stream.track.truncations == 3


def test_one_trigger_per_rule_and_run_until_acknowledged(tmp_path: Path):
    run = Harness(tmp_path, [NAN_LOSS])
    run.write({"step": 1, "loss": "nan"}, {"step": 2, "loss": "nan"})
    assert [t.line for t in run.poll()] == [1]
    run.write({"step": 3, "loss": "nan"})
    assert run.poll() == []
    run.evaluator.acknowledge("nan-loss", "v-r16")
    run.write({"step": 4, "loss": 1.0}, {"step": 5, "loss": "nan"})
    assert [t.line for t in run.poll()] == [5]


def test_fired_pairs_survive_a_restart(tmp_path: Path):
    run = Harness(tmp_path, [NAN_LOSS])
    run.write({"step": 1, "loss": "nan"})
    assert len(run.poll()) == 1
    state = tmp_path / ".cockpit" / "state.json"
    save_state(state, [run.stream], extra={"rules": run.evaluator.state.to_dict()})

    saved = load_state(state)
    again = Harness(tmp_path, [NAN_LOSS], state=RuleState.from_dict(saved.extra["rules"]))
    again.stream = saved.stream("v-r16", again.path)
    again.write({"step": 2, "loss": "nan"})
    assert again.poll() == []
    # even a lost reader state (re-reading the file) does not fire the pair again
    again.stream = MetricsStream("v-r16", again.path)
    assert again.poll() == []


def test_rule_state_round_trip_and_damage():
    state = RuleState()
    state.mark("nan-loss", "v-r16")
    state.mark(CONFIG_CHANGED, "ctrl-r1")
    assert RuleState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    assert RuleState.from_dict(None) == RuleState()
    assert RuleState.from_dict({"fired": [["a"], [1, 2], "x", ["ok", "run"]]}).fired == {("ok", "run")}


def test_trigger_is_frozen_and_gives_the_alert_event_fields():
    trigger = Trigger("nan-loss", "v-r16", "alert", "v-r16: loss is NaN at step 3 (rule nan-loss)", math.nan, 3, START, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        trigger.rule_id = "x"  # type: ignore[misc]
    fields = trigger.event_fields()
    assert fields["rule"] == "nan-loss" and fields["run"] == "v-r16" and fields["step"] == 3
    assert fields["message"] == trigger.message and fields["metric_ts"] == START


def test_last_metrics_for_a_stop_event_keep_the_nan(tmp_path: Path):
    run = Harness(tmp_path, [NAN_LOSS])
    run.write({"ts": T0, "step": 1200, "loss": float("nan"), "eval/macro_f1": 0.61})
    run.poll()
    last = last_metrics(run.stream.track)
    assert last["step"] == 1200 and last["ts"] == "2025-11-30T08:00:00.000Z"
    assert math.isnan(last["loss"]) and last["eval/macro_f1"] == 0.61


# ---------------------------------------------------------------- a changed configuration


def test_a_new_config_under_an_old_run_id_triggers(tmp_path: Path):
    run = Harness(tmp_path, [])
    run.write({"ts": T0, "event": "started", "pid": 10, "config_sha256": "a" * 64}, *steps(0, 5, loss=1.0))
    assert run.poll() == []
    run.write({"ts": T0 + 100, "event": "started", "pid": 11, "config_sha256": "a" * 64})  # a resume: same config
    assert run.poll() == []
    run.write({"ts": T0 + 200, "event": "started", "pid": 12, "config_sha256": "b" * 64})
    (trigger,) = run.poll()
    assert (trigger.rule_id, trigger.action, trigger.line, trigger.value) == (CONFIG_CHANGED, "alert", 8, "b" * 64)
    assert "aaaaaaaaaaaa… → bbbbbbbbbbbb…" in trigger.message and "new run id" in trigger.message


def test_a_new_config_in_a_rewritten_file_still_triggers(tmp_path: Path):
    run = Harness(tmp_path, [])
    run.write({"ts": T0, "event": "started", "pid": 10, "config_sha256": "a" * 64}, *steps(0, 50, loss=1.0))
    run.poll()
    # stopped, fixed, restarted under the same id: the trainer opens the file with "w"
    run.write({"ts": T0 + 900, "event": "started", "pid": 20, "config_sha256": "c" * 64}, mode="w")
    (trigger,) = run.poll()
    assert trigger.rule_id == CONFIG_CHANGED and trigger.line == 1 and run.stream.track.resets == 1


# ---------------------------------------------------------------- time rules


def test_no_resume_within_hours_of_the_start(tmp_path: Path):
    run = Harness(tmp_path, [NO_RESUME])
    assert run.tick(START + timedelta(hours=5)) == []  # not started: no clock runs
    run.write({"ts": T0, "event": "started", "pid": 1, "config_sha256": "a" * 64}, *steps(0, 10, loss=1.0))
    run.poll()
    assert run.tick(START + timedelta(hours=1, minutes=59)) == []
    (trigger,) = run.tick(START + timedelta(hours=2))
    assert trigger.message == (
        "v-r16: no verified resume within 2 h of the run's start (2025-11-30 08:00 UTC) (rule no-resume)"
    )
    assert trigger.ts == START + timedelta(hours=2)
    assert run.tick(START + timedelta(hours=3)) == []  # once


def test_a_resume_verified_in_time_satisfies_no_resume(tmp_path: Path):
    run = Harness(tmp_path, [NO_RESUME])
    run.write({"ts": T0, "event": "started", "pid": 1},
              {"ts": T0 + 3600, "event": "resume_verified", "path": "ckpt", "seconds": 31.0})
    run.poll()
    assert run.tick(T0 + 10 * 3600) == []


def test_a_resume_verified_too_late_does_not(tmp_path: Path):
    run = Harness(tmp_path, [NO_RESUME])
    run.write({"ts": T0, "event": "started", "pid": 1},
              {"ts": T0 + 3 * 3600, "event": "resume_verified", "path": "ckpt", "seconds": 31.0})
    run.poll()
    assert len(run.tick(T0 + 4 * 3600)) == 1


def test_a_finished_run_needs_no_resume_and_cannot_stall(tmp_path: Path):
    run = Harness(tmp_path, [NO_RESUME, STALLED])
    run.write({"ts": T0, "event": "started", "pid": 1}, {"ts": T0 + 600, "event": "finished", "status": "ok"})
    run.poll()
    assert run.tick(T0 + 10 * 3600, alive=True) == []
    run.write({"ts": T0 + 7200, "event": "started", "pid": 2})  # started again: watched again
    run.poll()
    assert [t.rule_id for t in run.tick(T0 + 10 * 3600, alive=True)] == ["no-resume", "stalled"]


def test_stalled_while_alive(tmp_path: Path):
    run = Harness(tmp_path, [STALLED])
    assert run.tick(T0 + 3600) == []  # no line at all: nothing to measure from
    run.write({"ts": T0, "event": "started", "pid": 1}, {"ts": T0 + 60, "step": 10, "loss": 1.0})
    run.poll()
    assert run.tick(T0 + 60 + 19 * 60) == []
    assert run.tick(T0 + 60 + 45 * 60, alive=False) == []  # a dead process is not stalled
    (trigger,) = run.tick(START + timedelta(minutes=1 + 21))
    assert trigger.message == "v-r16: no metric line for 21 min while its process is alive (rule stalled)"
    assert trigger.value == 21.0 and trigger.step == 10
    assert run.tick(T0 + 5 * 3600) == []


def test_a_line_without_ts_counts_from_the_file_write_time(tmp_path: Path):
    run = Harness(tmp_path, [STALLED])
    run.write({"step": 1, "loss": 1.0})
    mtime = T0 + 1000
    os.utime(run.path, (mtime, mtime))
    run.poll()
    assert run.tick(mtime + 19 * 60) == []
    assert len(run.tick(mtime + 20 * 60)) == 1


# ---------------------------------------------------------------- the sample campaign's rules


def test_the_seed_campaign_rules_on_three_runs(tmp_path: Path):
    """NaN in one run, a quality drop after warm-up in another, an essential truncation in a
    third: exactly those alerts, each once however often the streams are read."""
    campaign = load_campaign(SAMPLES / "sentiment-lora")
    rules = campaign.model.stop_rules
    evaluator = RuleEvaluator(rules)
    run_ids = [r.id for r in campaign.runs]
    assert {"ctrl-r1", "v-r16", "v-r64"} <= set(run_ids)
    streams = {run_id: MetricsStream(run_id, tmp_path / run_id / "metrics.jsonl") for run_id in run_ids}
    for run_id in run_ids:
        write(streams[run_id].path, {"ts": T0, "event": "started", "pid": 100, "config_sha256": "a" * 64},
              {"ts": T0 + 60, "event": "resume_verified", "path": "x", "seconds": 3.0},
              *steps(0, 1000, 100, loss=1.0, **{"eval/macro_f1": 0.5}))
    write(streams["ctrl-r1"].path, {"ts": T0 + 1000, "step": 1000, "loss": float("nan")}, *steps(1100, 1500, 100, loss=0.9))
    write(streams["v-r16"].path, *steps(2000, 4000, 500, loss=1.0, **{"eval/macro_f1": 0.52}))
    write(streams["v-r64"].path, {"ts": T0 + 1000, "event": "truncated", "input": "doc-991", "essential": True})

    found: list[Trigger] = []
    for _ in range(3):
        for run_id, stream in streams.items():
            stream.poll(evaluator.observer(run_id, found))
            found += evaluator.tick(run_id, stream.track, T0 + 1500, alive=True)
    assert sorted((t.rule_id, t.run_id) for t in found) == [
        ("f1-floor", "v-r16"), ("nan-loss", "ctrl-r1"), ("truncated-input", "v-r64"),
    ]
    by_rule = {t.rule_id: t for t in found}
    assert by_rule["f1-floor"].step == 2000 and by_rule["nan-loss"].step == 1000
