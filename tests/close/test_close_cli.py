"""`cockpit close DIR [--json]` run as a user types it: SPEC §3's JSON fields, exit codes, and the
closing folder. COCKPIT_TEMP_ROOTS names a fake temporary folder, so these tests do not depend on
where pytest's tmp_path lives."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import SAMPLES, run_cli
from tests.close.test_closing import IDS, deliverable, make_campaign, metrics, predictions, write


def close(directory: Path, *extra: str, temp: Path) -> subprocess.CompletedProcess:
    return run_cli("close", str(directory), *extra, env={"COCKPIT_TEMP_ROOTS": str(temp)})


def test_close_json_carries_the_spec_fields(tmp_path):
    temp = tmp_path / "volatile"
    camp = make_campaign(
        tmp_path,
        deliverable("ctrl/predictions", "out/ctrl.jsonl", run="ctrl-r1", expect_ids="data/test_ids.txt"),
        deliverable("v/predictions", "out/v.jsonl", run="v-r16", expect_ids="data/test_ids.txt"),
        deliverable("scratch/predictions", "out/scratch.jsonl"),
    )
    write(camp, "out/ctrl.jsonl", predictions(IDS, "pos"))
    write(camp, "out/v.jsonl", predictions(IDS, "neg"))
    (camp / "out" / "scratch.jsonl").symlink_to(write(temp, "scratch.jsonl", predictions(IDS, "mixed")))
    metrics(camp, "ctrl-r1", 2, 13, 0.78)
    metrics(camp, "v-r16", 13, 24, 0.79)
    assert run_cli("stop", str(camp), "v-r16", "--reason", "plateau, frees the GPU", "--force").returncode == 0

    # the stop keeps v-r16's predictions out; the link into the fake temporary folder is rejected
    result = close(camp, "--json", temp=temp)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    out = json.loads(result.stdout)
    assert out == json.loads((camp / "closing" / "summary.json").read_text())
    assert out["lot_price_usd"] == "47.14"
    assert out["other_expenses_usd"] == "3.10"
    assert out["accepted"] == 1 and out["cost_per_accepted_usd"] == "47.14"
    assert [r["deliverable"] for r in out["rejections"]] == ["v/predictions", "scratch/predictions"]
    assert "was stopped (reason: plateau, frees the GPU)" in out["rejections"][0]["cause"]
    assert "is in a temporary folder" in out["rejections"][1]["cause"]
    assert {k: out["stops"][0][k] for k in ("run", "rule", "reason")} == {
        "run": "v-r16", "rule": None, "reason": "plateau, frees the GPU"
    }
    rows = {row["id"]: row for row in out["planned_vs_actual"]}
    assert rows["ctrl-r1"]["planned_hours"] == 10.0 and rows["ctrl-r1"]["measured_hours"] == 11.0
    assert rows["ctrl-r1"]["deviation_hours"] == 1.0
    assert rows["setup"]["state"] == "not measured"
    assert out["conclusion"]["text"].startswith("no variant reached 0.80")
    assert isinstance(out["closed_before_lot_end"], bool) and out["lot"]["start"] == "2026-11-30T08:00:00.000Z"

    log = json.loads(run_cli("log", str(camp), "--json").stdout)
    closed = [e for e in log["events"] if e["type"] == "closed"]
    assert len(closed) == 1 and closed[0]["accepted"] == 1 and closed[0]["cost_per_accepted_usd"] == "47.14"


def test_close_exits_0_when_every_deliverable_is_accepted(tmp_path):
    temp = tmp_path / "volatile"
    camp = make_campaign(
        tmp_path,
        deliverable("ctrl/predictions", "out/ctrl.jsonl", run="ctrl-r1", expect_ids="data/test_ids.txt"),
        deliverable("v/predictions", "out/v.jsonl", run="v-r16", expect_ids="data/test_ids.txt",
                    reload=f"{sys.executable} -c \"import json; [json.loads(l) for l in open('out/v.jsonl')]\""),
    )
    write(camp, "out/ctrl.jsonl", predictions(IDS, "pos"))
    write(camp, "out/v.jsonl", predictions(IDS, "neg"))
    result = close(camp, temp=temp)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "deliverables: 2 of 2 accepted" in result.stdout
    assert "23.57 USD  (47.14 / 2)" in result.stdout
    assert result.stderr == ""
    assert sorted(p.name for p in (camp / "closing").iterdir() if not p.name.startswith("chart-")) == [  # chart-*.svg: issue 20
        "RELOAD.md", "manifest.json", "plan.toml", "report.md", "runlog.jsonl", "summary.json"
    ]


def test_close_with_nothing_accepted_shows_the_cost_and_the_causes(seed_campaign, tmp_path):
    result = close(seed_campaign, temp=tmp_path / "volatile")
    assert result.returncode == 1
    assert "undefined: 0 deliverables accepted; the lot cost 47.14 USD" in result.stdout
    assert "missing: out/ctrl-r1/predictions.jsonl does not exist" in result.stdout
    assert "3.10 USD  object storage" in result.stdout
    assert "inconclusive: no variant reported eval/macro_f1" in result.stdout  # nothing measured is no negative result
    assert "4 of 4 deliverables rejected" in result.stderr
    report = (seed_campaign / "closing" / "report.md").read_text()
    assert "undefined: 0 deliverables accepted; the lot cost 47.14 USD" in report
    assert "no plan was frozen" in report


def test_close_on_every_sample_campaign_writes_a_readable_folder(tmp_path):
    for sample in sorted(p for p in SAMPLES.iterdir() if (p / "campaign.toml").is_file()):
        target = tmp_path / sample.name
        shutil.copytree(sample, target)
        result = close(target, "--json", temp=tmp_path / "volatile")
        assert result.returncode in (0, 1), result.stderr
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
        summary = json.loads(result.stdout)
        assert summary["campaign"] and summary["lot_price_usd"]
        assert (target / "closing" / "report.md").read_text().startswith("# Closing report — ")


def test_close_refuses_a_bad_folder_without_a_traceback(tmp_path):
    missing = run_cli("close", str(tmp_path / "nope"))
    assert missing.returncode == 1 and "no such folder" in missing.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "campaign.toml").write_text("schema = 1\nid = 'x'\n")
    invalid = run_cli("close", str(bad), "--json")
    assert invalid.returncode == 1 and "[lot]" in invalid.stderr
    assert "Traceback" not in invalid.stderr and invalid.stdout == ""
    assert not (bad / "closing").exists()


def test_a_voided_stop_of_the_finished_control_lets_close_accept_it_again(tmp_path):
    temp = tmp_path / "volatile"
    camp = make_campaign(
        tmp_path,
        deliverable("ctrl/predictions", "out/ctrl.jsonl", run="ctrl-r1", expect_ids="data/test_ids.txt"),
        deliverable("v/predictions", "out/v.jsonl", run="v-r16", expect_ids="data/test_ids.txt"),
    )
    write(camp, "out/ctrl.jsonl", predictions(IDS, "pos"))
    write(camp, "out/v.jsonl", predictions(IDS, "neg"))
    metrics(camp, "ctrl-r1", 2, 13, 0.78123456789012345)
    metrics(camp, "v-r16", 13, 24, 0.79)

    refused = run_cli("stop", str(camp), "ctrl-r1", "--reason", "wrong key")
    assert refused.returncode == 2 and "finished cleanly" in refused.stderr and "--force" in refused.stderr
    assert run_cli("stop", str(camp), "ctrl-r1", "--reason", "wrong key", "--force").returncode == 0
    events = json.loads(run_cli("log", str(camp), "--json").stdout)["events"]
    (stop,) = [e for e in events if e["type"] == "stop"]
    assert stop["after_finish"] is True

    first = close(camp, "--json", temp=temp)
    out = json.loads(first.stdout)
    assert out["accepted"] == 1 and [r["deliverable"] for r in out["rejections"]] == ["ctrl/predictions"]

    voided = run_cli("void", str(camp), str(stop["seq"]), "--reason", "the control had finished; s was a slip")
    assert voided.returncode == 0, voided.stderr
    again = close(camp, "--json", temp=temp)
    assert again.returncode == 0, again.stderr
    out = json.loads(again.stdout)
    assert out["accepted"] == 2 and out["cost_per_accepted_usd"] == "23.57" and out["rejections"] == []
    assert out["stops"] == []
    (entry,) = out["voided"]
    assert (entry["seq"], entry["type"], entry["run"]) == (stop["seq"], "stop", "ctrl-r1")
    assert entry["reason"] == "the control had finished; s was a slip" and "@" in entry["voided_by"]
    report = (camp / "closing" / "report.md").read_text()
    assert "## Voided decisions" in report and "the control had finished; s was a slip" in report
    assert "0.7812 " in report and "0.78123456789" not in report, "4 significant digits in the report"
    assert "0.781235" not in report and "0.781235" not in first.stdout, "the conclusion too: 4 significant digits"
    assert out["conclusion"]["runs"][0]["value"] == 0.78123456789012345, "full precision in JSON"


def test_close_warns_for_a_deliverable_outside_the_campaign_folder(tmp_path):
    temp = tmp_path / "volatile"
    scratch = tmp_path / "scratch"
    camp = make_campaign(
        tmp_path,
        deliverable("ctrl/predictions", str(scratch / "ctrl.jsonl"), run="ctrl-r1", expect_ids="data/test_ids.txt"),
        deliverable("v/predictions", "out/v.jsonl", run="v-r16", expect_ids="data/test_ids.txt"),
    )
    write(scratch, "ctrl.jsonl", predictions(IDS, "pos"))
    write(camp, "out/v.jsonl", predictions(IDS, "neg"))
    result = close(camp, temp=temp)
    said = "".join(result.stdout.split())  # wrapped at 80 columns, long paths broken at their hyphens
    assert "".join(f"note: deliverable ctrl/predictions: {scratch / 'ctrl.jsonl'} is outside the campaign folder".split()) in said
    assert said.count("outsidethecampaignfolder") == 1
    as_json = close(camp, "--json", temp=temp)
    json.loads(as_json.stdout)
    assert f"deliverable ctrl/predictions: {scratch / 'ctrl.jsonl'} is outside the campaign folder" in as_json.stderr


def test_closing_again_with_nothing_new_says_the_campaign_is_closed_and_records_nothing(tmp_path):
    temp = tmp_path / "volatile"
    camp = make_campaign(tmp_path, deliverable("preds", "out/preds.jsonl"))
    first = close(camp, temp=temp)
    assert first.returncode == 1 and "recorded: closed — seq" in first.stdout
    before = (camp / "runlog.jsonl").read_bytes()
    second = close(camp, temp=temp)
    assert second.returncode == 1
    assert "the campaign is closed already with the same content" in second.stdout
    assert "nothing new was recorded" in second.stdout
    assert (camp / "runlog.jsonl").read_bytes() == before


def test_close_rejects_a_deliverable_of_a_run_with_an_open_alert_until_cockpit_ack(tmp_path):
    from cockpit.record.runlog import RunLog

    temp = tmp_path / "volatile"
    camp = make_campaign(tmp_path, deliverable("v/predictions", "out/v.jsonl", run="v-r16", expect_ids="data/test_ids.txt"))
    write(camp, "out/v.jsonl", predictions(IDS, "neg"))
    metrics(camp, "v-r16", 13, 24, 0.83)
    RunLog(camp).append("alert", rule="truncated-input", run="v-r16", message="essential input doc-991 was truncated")

    result = close(camp, temp=temp)
    assert result.returncode == 1
    assert "open alert: truncated-input: essential input doc-991 was truncated" in result.stdout
    assert f"cockpit ack {camp} truncated-input --run v-r16" in result.stdout
    assert "reached eval/macro_f1" not in result.stdout.replace("\n", " ")
    report = (camp / "closing" / "report.md").read_text()
    assert "## Alerts" in report and "**not acknowledged**" in report

    assert run_cli("ack", str(camp), "truncated-input", "--note", "a title; not essential").returncode == 0
    result = close(camp, "--json", temp=temp)
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout)
    assert out["rejections"] == [] and out["conclusion"]["variants_reached"] == ["v-r16"]
    assert out["alerts"][0]["acknowledged"] is True and out["alerts"][0]["note"] == "a title; not essential"
