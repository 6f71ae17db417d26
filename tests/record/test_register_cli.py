"""The recording commands and `log`, run as a user types them."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from tests.conftest import ROOT, run_cli


def log_events(directory):
    result = run_cli("log", str(directory), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_check_accepts_the_samples(cli):
    for name in ("sentiment-lora", "b200-week"):
        result = cli("check", str(ROOT / "sample_campaigns" / name))
        assert result.returncode == 0, result.stderr
        assert "valid" in result.stdout


def test_check_rejects_a_bad_file_without_traceback(cli, seed_campaign):
    toml = seed_campaign / "campaign.toml"
    toml.write_text(toml.read_text().replace("hours = 12 ", "hours = -3 ", 1))
    result = cli("check", str(seed_campaign))
    assert result.returncode == 1
    assert "[[run]] 'ctrl-r1' → hours: must be greater than 0 (got -3)" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_check_on_a_missing_folder(cli, tmp_path):
    result = cli("check", str(tmp_path / "nope"))
    assert result.returncode == 1 and "no such folder" in result.stderr and "Traceback" not in result.stderr


def test_stop_with_a_rule_and_with_a_reason(cli, seed_campaign):
    result = cli("stop", str(seed_campaign), "v-r16", "--rule", "f1-floor", "--force")  # f1-floor never triggered here
    assert result.returncode == 0, result.stderr
    result = cli("stop", str(seed_campaign), "v-r64", "--reason", "loss plateau, frees the GPU")
    assert result.returncode == 0, result.stderr
    body = log_events(seed_campaign)
    types = [e["type"] for e in body["events"]]
    assert types == ["campaign_started", "stop", "stop"]
    first, second = body["events"][1:]
    assert (first["run"], first["rule"], first["reason"], first["source"]) == ("v-r16", "f1-floor", None, "cli")
    assert (second["run"], second["rule"], second["reason"]) == ("v-r64", None, "loss plateau, frees the GPU")
    assert "@" in first["who"] and first["signal"] == {"requested": False, "sent": False}
    assert (seed_campaign / ".cockpit" / "plan.toml").exists()


def test_stop_twice_is_refused(cli, seed_campaign):
    assert cli("stop", str(seed_campaign), "v-r16", "--rule", "f1-floor", "--force").returncode == 0
    again = cli("stop", str(seed_campaign), "v-r16", "--reason", "again")
    assert again.returncode == 1 and "already stopped" in again.stderr
    assert [e["type"] for e in log_events(seed_campaign)["events"]].count("stop") == 1


def test_unknown_names_are_refused_and_nothing_is_written(cli, seed_campaign):
    cases = [
        (("stop", str(seed_campaign), "v-r99", "--rule", "nan-loss"), "no run 'v-r99'"),
        (("stop", str(seed_campaign), "v-r16", "--rule", "nope"), "no stop rule 'nope'"),
        (("accept", str(seed_campaign), "nope"), "no deliverable 'nope'"),
        (("note", str(seed_campaign), "x", "--run", "v-r99"), "no run 'v-r99'"),
        (("log", str(seed_campaign), "--run", "v-r99"), "no run 'v-r99'"),
        (("note", str(seed_campaign), "   "), "the note is empty"),
    ]
    for args, message in cases:
        result = cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr
    assert not (seed_campaign / "runlog.jsonl").exists()


def test_usage_errors_exit_2(cli, seed_campaign):
    assert cli("stop", str(seed_campaign), "v-r16").returncode == 2  # neither --rule nor --reason
    assert cli("decide", str(seed_campaign), "maybe").returncode == 2
    assert cli("plan").returncode == 2


def test_decide_accept_note_and_log(cli, seed_campaign):
    out = seed_campaign / "out" / "ctrl-r1"
    out.mkdir(parents=True)
    (out / "predictions.jsonl").write_text('{"id": "a", "label": 1}\n')
    assert cli("decide", str(seed_campaign), "drop-optional", "--note", "v-r64 is a near copy of v-r16").returncode == 0
    assert cli("accept", str(seed_campaign), "ctrl-r1/predictions").returncode == 0
    assert cli("note", str(seed_campaign), "data check took 3 h, not 2", "--run", "ctrl-r1").returncode == 0
    missing = cli("accept", str(seed_campaign), "v-r16/predictions")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    events = log_events(seed_campaign)["events"]
    assert [e["type"] for e in events] == ["campaign_started", "pilot_decision", "accepted", "note"]
    decision = events[1]
    assert decision["decision"] == "drop-optional" and decision["run"] == "ctrl-r1" and decision["source"] == "cli"
    assert events[3]["run"] == "ctrl-r1"
    only_ctrl = json.loads(run_cli("log", str(seed_campaign), "--json", "--run", "ctrl-r1").stdout)["events"]
    assert [e["type"] for e in only_ctrl] == ["pilot_decision", "accepted", "note"]
    text = run_cli("log", str(seed_campaign))
    assert text.returncode == 0 and "drop-optional — v-r64 is a near copy" in text.stdout


def test_log_reports_bad_lines(cli, seed_campaign):
    assert cli("note", str(seed_campaign), "first").returncode == 0
    with open(seed_campaign / "runlog.jsonl", "ab") as handle:
        handle.write(b'{"seq": 9, "ty')
    assert cli("note", str(seed_campaign), "second").returncode == 0
    body = log_events(seed_campaign)
    assert body["bad_lines"] == 1
    assert [e.get("text") for e in body["events"] if e["type"] == "note"] == ["first", "second"]
    assert "1 bad line skipped" in run_cli("log", str(seed_campaign)).stderr


def _notes_from_one_process(directory, worker):
    script = (
        "import sys\nfrom cockpit.cli import main\n"
        f"for i in range(15):\n    assert main(['note', {str(directory)!r}, f'p{worker}-{{i}}']) == 0\n"
    )
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_sixty_notes_from_four_processes_at_once(seed_campaign):
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda w: _notes_from_one_process(seed_campaign, w), range(4)))
    for result in results:
        assert result.returncode == 0, result.stderr
    body = log_events(seed_campaign)
    notes = [e["text"] for e in body["events"] if e["type"] == "note"]
    assert body["bad_lines"] == 0
    assert sorted(notes) == sorted(f"p{w}-{i}" for w in range(4) for i in range(15))
    assert [e["type"] for e in body["events"]].count("campaign_started") == 1
    assert [e["seq"] for e in body["events"]] == list(range(1, 62))


# ---------------------------------------------------------------- stops that are probably mistakes, void


def _finish(directory, run_id="ctrl-r1"):
    stream = directory / "runs" / run_id / "metrics.jsonl"
    stream.parent.mkdir(parents=True, exist_ok=True)
    stream.write_text(
        '{"ts": 1764489600.0, "event": "started", "pid": 999999}\n'
        '{"ts": 1764489660.0, "step": 100, "loss": 0.3, "eval/macro_f1": 0.81}\n'
        '{"ts": 1764489720.0, "event": "finished", "status": "ok"}\n'
    )


def test_a_stop_under_a_rule_that_never_triggered_needs_force(cli, seed_campaign):
    refused = cli("stop", str(seed_campaign), "v-r16", "--rule", "f1-floor")
    assert refused.returncode == 2
    assert "never triggered for run 'v-r16'" in refused.stderr and "--force" in refused.stderr
    assert not (seed_campaign / "runlog.jsonl").exists() or [e["type"] for e in log_events(seed_campaign)["events"]].count("stop") == 0
    forced = cli("stop", str(seed_campaign), "v-r16", "--rule", "f1-floor", "--force")
    assert forced.returncode == 0, forced.stderr
    (stop,) = [e for e in log_events(seed_campaign)["events"] if e["type"] == "stop"]
    assert stop["rule_triggered"] is False and "after_finish" not in stop


def test_a_stop_under_a_rule_that_triggered_needs_no_force(cli, seed_campaign):
    from cockpit.record.runlog import RunLog

    RunLog(seed_campaign).append("alert", rule="f1-floor", run="v-r16", value=0.41, step=2400, message="F1 0.41")
    result = cli("stop", str(seed_campaign), "v-r16", "--rule", "f1-floor")
    assert result.returncode == 0, result.stderr
    (stop,) = [e for e in log_events(seed_campaign)["events"] if e["type"] == "stop"]
    assert "rule_triggered" not in stop and "after_finish" not in stop


def test_a_stop_of_a_finished_run_needs_force(cli, seed_campaign):
    _finish(seed_campaign)
    refused = cli("stop", str(seed_campaign), "ctrl-r1", "--reason", "oops")
    assert refused.returncode == 2
    assert "finished cleanly" in refused.stderr and "--force" in refused.stderr
    forced = cli("stop", str(seed_campaign), "ctrl-r1", "--reason", "oops", "--force")
    assert forced.returncode == 0, forced.stderr
    (stop,) = [e for e in log_events(seed_campaign)["events"] if e["type"] == "stop"]
    assert stop["after_finish"] is True and "rule_triggered" not in stop


def test_void_takes_a_stop_back_and_the_run_can_be_stopped_again(cli, seed_campaign):
    assert cli("stop", str(seed_campaign), "v-r16", "--reason", "wrong key").returncode == 0
    stop = next(e for e in log_events(seed_campaign)["events"] if e["type"] == "stop")
    result = cli("void", str(seed_campaign), str(stop["seq"]), "--reason", "pressed s on the wrong run")
    assert result.returncode == 0, result.stderr
    assert f"void of seq {stop['seq']}" in result.stdout
    body = log_events(seed_campaign)
    void = body["events"][-1]
    assert void["type"] == "void" and void["voided_seq"] == stop["seq"] and void["seq"] == stop["seq"] + 1
    assert void["reason"] == "pressed s on the wrong run" and void["source"] == "cli" and "@" in void["who"]
    assert stop in body["events"], "the run log keeps the stop: nothing is rewritten"
    runs = {r["id"]: r for r in json.loads(cli("status", str(seed_campaign), "--json").stdout)["runs"]}
    assert runs["v-r16"]["state"] != "stopped", "status treats a voided stop as absent"
    assert cli("stop", str(seed_campaign), "v-r16", "--reason", "real plateau").returncode == 0
    shown = cli("log", str(seed_campaign))
    assert f"takes back seq {stop['seq']} (stop)" in shown.stdout and "None" not in shown.stdout
    status = cli("status", str(seed_campaign), "--json")
    runs = {r["id"]: r for r in json.loads(status.stdout)["runs"]}
    assert runs["v-r16"]["state"] == "stopped"


def test_void_of_a_void_or_an_unknown_seq_is_a_usage_error(cli, seed_campaign):
    assert cli("note", str(seed_campaign), "setup took 6 h").returncode == 0
    note = next(e for e in log_events(seed_campaign)["events"] if e["type"] == "note")
    assert cli("void", str(seed_campaign), str(note["seq"]), "--reason", "wrong campaign").returncode == 0
    void_seq = log_events(seed_campaign)["events"][-1]["seq"]
    cases = [
        ((str(void_seq), "--reason", "x"), "itself a void"),
        (("99", "--reason", "x"), "no event with seq 99"),
        ((str(note["seq"]), "--reason", "x"), "already voided"),
        (("1", "--reason", "x"), "not a decision"),
        ((str(note["seq"]), "--reason", "  "), "the reason is empty"),
        (("zero", "--reason", "x"), "whole number"),
    ]
    before = len(log_events(seed_campaign)["events"])
    for args, message in cases:
        result = cli("void", str(seed_campaign), *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr
    assert len(log_events(seed_campaign)["events"]) == before
    assert cli("void", str(seed_campaign), str(note["seq"])).returncode == 2  # --reason is required


def test_log_never_shows_python_none(cli, seed_campaign):
    from cockpit.record.runlog import RunLog

    log = RunLog(seed_campaign)
    log.append("closed", accepted=0, deliverables=2, cost_per_accepted_usd=None, folder="closing/")
    log.append("run_started", run="v-r16", pid=None, metric_ts=None)
    log.append("stop", run="v-r16", rule=None, reason=None, source="cli")
    result = cli("log", str(seed_campaign))
    assert result.returncode == 0, result.stderr
    assert "None" not in result.stdout
    assert "accepted=0" in result.stdout and "reason: none given" in result.stdout


def test_text_output_never_cuts_a_path_at_its_hyphens(cli, tmp_path, monkeypatch):
    from cockpit.commands.close import _wrap

    path = "/tmp/demo-toy-sentiment/runs/v-short-context/checkpoints/step-1200.pt"
    wrapped = _wrap(f"missing: {path} does not exist and the closing cannot verify it", 4)
    assert path in wrapped.replace("\n", " ")
    result = cli("stop", "--help", env={"COLUMNS": "60"})
    assert "probably a mistake (the run finished cleanly," in " ".join(result.stdout.split())
    assert not any(line.rstrip().endswith("-") for line in result.stdout.splitlines())


def test_check_refuses_an_id_that_would_lead_outside_the_campaign(cli, seed_campaign):
    toml = seed_campaign / "campaign.toml"
    toml.write_text(toml.read_text().replace('id = "resume-test"', 'id = "a/../../../x"', 1).replace('"resume-test"', '"a/../../../x"'))
    result = cli("check", str(seed_campaign))
    assert result.returncode == 1, result.stdout
    assert "[[task]] 'a/../../../x' → id:" in result.stderr and "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_shows_each_path_written_outside_the_campaign_once(cli, seed_campaign, tmp_path):
    scratch = tmp_path / "scratch"
    toml = seed_campaign / "campaign.toml"
    text = toml.read_text().replace(
        "total_steps = 20000", f'total_steps = 20000\nmetrics = "{scratch}/ctrl-r1/metrics.jsonl"\ncheckpoints = "../ckpt/ctrl-r1"', 1
    ).replace('path = "out/ctrl-r1/predictions.jsonl"', f'path = "{scratch}/ctrl-r1/predictions.jsonl"')
    assert text.count(str(scratch)) == 2
    toml.write_text(text)
    result = cli("check", str(seed_campaign))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("(outside the campaign folder)") == 3, out
    assert f"metrics of run ctrl-r1: {scratch}/ctrl-r1/metrics.jsonl (outside the campaign folder)" in out
    assert f"checkpoints of run ctrl-r1: {tmp_path}/ckpt/ctrl-r1 (outside the campaign folder)" in out
    assert f"path of deliverable ctrl-r1/predictions: {scratch}/ctrl-r1/predictions.jsonl (outside the campaign folder)" in out
    plain = cli("check", str(ROOT / "sample_campaigns" / "sentiment-lora"))
    assert "outside the campaign folder" not in plain.stdout


def test_the_start_is_announced_by_the_recording_that_wrote_it_only(cli, seed_campaign):
    from cockpit.plan.load import load_campaign
    from cockpit.record.runlog import RunLog
    from cockpit.record.start import ensure_started

    log = RunLog(seed_campaign)
    log.append("alert", rule="lot-window", run=None, message="an alert of an older cockpit, logged before the start")
    ensure_started(load_campaign(seed_campaign), log)  # that older cockpit's start, after the alert
    for text in ("one", "two"):
        result = cli("note", str(seed_campaign), text)
        assert result.returncode == 0, result.stderr
        assert "started" not in result.stdout, result.stdout
    fresh = seed_campaign.parent / "fresh"
    fresh.mkdir()
    (fresh / "campaign.toml").write_text((seed_campaign / "campaign.toml").read_text())
    said = [cli("note", str(fresh), text).stdout for text in ("one", "two")]
    assert "started: plan frozen" in said[0] and "started" not in said[1]
    assert [e["type"] for e in log_events(fresh)["events"]] == ["campaign_started", "note", "note"]


def test_recording_commands_refuse_after_the_close(cli, seed_campaign):
    (seed_campaign / "out").mkdir()
    (seed_campaign / "out" / "error_analysis.md").write_text("# errors\n")
    assert cli("note", str(seed_campaign), "before the close").returncode == 0
    assert cli("close", str(seed_campaign), env={"COCKPIT_TEMP_ROOTS": str(seed_campaign / "volatile")}).returncode in (0, 1)
    before = log_events(seed_campaign)["events"]
    closed = [e for e in before if e["type"] == "closed"][-1]
    for args in (
        ("note", "after the close"),
        ("stop", "v-r16", "--reason", "late"),
        ("decide", "continue"),
        ("accept", "error-analysis/report"),
    ):
        result = cli(args[0], str(seed_campaign), *args[1:])
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert f"the campaign is closed (closed at {closed['ts']}, seq {closed['seq']}); nothing was recorded" in result.stderr
        assert "Traceback" not in result.stderr and "started" not in result.stdout
    assert log_events(seed_campaign)["events"] == before


def test_ack_records_the_same_event_as_the_key_and_refuses_what_is_not_open(cli, seed_campaign):
    from cockpit.plan.load import load_campaign
    from cockpit.record.runlog import RunLog
    from cockpit.record.start import ensure_started

    log = RunLog(seed_campaign)
    ensure_started(load_campaign(seed_campaign), log)  # as the engine does before it logs an alert
    log.append("alert", rule="truncated-input", run="v-r16", message="essential input doc-991 was truncated")
    log.append("alert", rule="truncated-input", run="v-r64", message="essential input doc-17 was truncated")
    log.append("alert", rule="lot-window", run=None, key="lot-window:6h", message="6 h left in the lot")
    before = (seed_campaign / "runlog.jsonl").read_bytes()

    # no open alert of that rule: a usage error naming the open ones, nothing written
    result = cli("ack", str(seed_campaign), "nan-loss")
    assert result.returncode == 2, result.stderr
    assert "no open alert of rule 'nan-loss'" in result.stderr
    assert "truncated-input on v-r16" in result.stderr and "lot-window" in result.stderr
    assert "nothing was recorded" in result.stderr and "Traceback" not in result.stderr
    # several runs: which one?
    result = cli("ack", str(seed_campaign), "truncated-input")
    assert result.returncode == 2 and "v-r16, v-r64" in result.stderr and "--run" in result.stderr
    result = cli("ack", str(seed_campaign), "truncated-input", "--run", "ctrl-r1")
    assert result.returncode == 2 and "no open alert of rule 'truncated-input' on run 'ctrl-r1'" in result.stderr
    result = cli("ack", str(seed_campaign), "truncated-input", "--run", "v-r99")
    assert result.returncode == 2 and "no run 'v-r99'" in result.stderr
    assert (seed_campaign / "runlog.jsonl").read_bytes() == before

    result = cli("ack", str(seed_campaign), "truncated-input", "--run", "v-r16", "--note", "looked: a title, not essential")
    assert result.returncode == 0, result.stderr
    assert "recorded: acknowledgement of truncated-input on run 'v-r16' (alert seq 2) — seq 5" in result.stdout
    result = cli("ack", str(seed_campaign), "lot-window")
    assert result.returncode == 0, result.stderr
    acks = [e for e in log_events(seed_campaign)["events"] if e["type"] == "ack"]
    assert [(a["rule"], a["run"], a["key"], a["alert_seq"], a["source"]) for a in acks] == [
        ("truncated-input", "v-r16", "truncated-input|v-r16", 2, "cli"), ("lot-window", None, "lot-window:6h", 4, "cli")
    ]
    assert acks[0]["note"] == "looked: a title, not essential" and "note" not in acks[1]
    assert [a.event["run"] for a in log.replay().active_alerts] == ["v-r64"]
    # the one left open is the only one: no --run needed
    assert cli("ack", str(seed_campaign), "truncated-input").returncode == 0
    assert log.replay().active_alerts == []
