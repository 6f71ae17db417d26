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
    result = cli("stop", str(seed_campaign), "v-r16", "--rule", "f1-floor")
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
    assert cli("stop", str(seed_campaign), "v-r16", "--rule", "f1-floor").returncode == 0
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


def test_ack_records_the_same_event_as_the_key_and_refuses_what_is_not_open(cli, seed_campaign):
    from cockpit.runlog import RunLog

    log = RunLog(seed_campaign)
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
    assert "recorded: acknowledgement of truncated-input on run 'v-r16' (alert seq 1) — seq 4" in result.stdout
    result = cli("ack", str(seed_campaign), "lot-window")
    assert result.returncode == 0, result.stderr
    acks = [e for e in log_events(seed_campaign)["events"] if e["type"] == "ack"]
    assert [(a["rule"], a["run"], a["key"], a["alert_seq"], a["source"]) for a in acks] == [
        ("truncated-input", "v-r16", "truncated-input|v-r16", 1, "cli"), ("lot-window", None, "lot-window:6h", 3, "cli")
    ]
    assert acks[0]["note"] == "looked: a title, not essential" and "note" not in acks[1]
    assert [a.event["run"] for a in log.replay().active_alerts] == ["v-r64"]
    # the one left open is the only one: no --run needed
    assert cli("ack", str(seed_campaign), "truncated-input").returncode == 0
    assert log.replay().active_alerts == []
