"""`cockpit plan` as a user runs it: SPEC §3's JSON fields, exit codes, and text that fits 80 columns."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_campaigns"
COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-9]|9[0-7]|38;)")


def plan(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "COLUMNS")}
    environment.update({"COCKPIT_NVML": "off", "COLUMNS": "80", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "cockpit.cli", "plan", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def gantt_block(out: str) -> list[str]:
    """The Gantt's lines: from its title to the first blank line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Gantt:"))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_json_carries_every_spec_field_and_the_seed_figures():
    result = plan(str(SAMPLES / "sentiment-lora"), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    for key in ("window_hours", "committed_hours", "uncommitted_hours", "fits", "over_by_hours", "schedule", "options", "reduced"):
        assert key in data
    assert (data["window_hours"], data["committed_hours"], data["uncommitted_hours"]) == (72, 48, 24)
    assert data["fits"] is True and data["over_by_hours"] == 0
    for item in data["schedule"]:
        assert {"id", "start_hours", "end_hours", "kind", "tier", "gpus"} <= item.keys()
    assert [i["id"] for i in data["schedule"]][:3] == ["setup", "data-check", "ctrl-r1"]
    for option in data["options"]:
        assert {"label", "days", "lots", "price_usd", "fits"} <= option.keys()
        assert isinstance(option["price_usd"], str) and re.fullmatch(r"\d+\.\d\d", option["price_usd"])
    prices = {(o["days"], o["lots"]): o["price_usd"] for o in data["options"]}
    assert prices[(3, 1)] == "47.14" and prices[(3, 2)] == "94.28"
    assert prices[(7, 1)] == "110.00" and prices[(30, 1)] == "390.00"
    for protocol in data["reduced"]:
        assert {"tiers", "committed_hours", "fits"} <= protocol.keys()
    assert [p["tiers"] for p in data["reduced"]] == [["indispensable"], ["indispensable", "useful"]]
    assert data["busy_hours_per_gpu"] == {"0": 39}
    assert data["human_hours"] == 8
    assert data["lot_price_usd"] == "47.14"


def test_extra_hours_that_break_the_window_exit_1():
    result = plan(str(SAMPLES / "sentiment-lora"), "--json", "--extra-hours", "30")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert (data["committed_hours"], data["over_by_hours"], data["fits"]) == (78, 6, False)
    assert data["extra_hours"] == 30
    seven = next(o for o in data["options"] if o["days"] == 7 and o["lots"] == 1)
    assert seven["fits"] is True


def test_text_output_says_the_verdict_and_fits_80_columns():
    result = plan(str(SAMPLES / "sentiment-lora"), "--extra-hours", "30")
    assert result.returncode == 1
    out = result.stdout
    assert "Traceback" not in out + result.stderr
    assert "does not fit" in out and "over by 6 h" in result.stderr
    assert "94.28" in out and "47.14" in out and "390.00" in out
    for line in out.splitlines():
        assert len(line) <= 80, line
    lanes = [line[:10].strip() for line in gantt_block(out)[2:5]]
    assert lanes == ["GPU 0", "human", "retrieval"]


def test_b200_gantt_shows_both_gpu_lanes_busy_at_once():
    result = plan(str(SAMPLES / "b200-week"))
    assert result.returncode == 0, result.stderr
    lines = gantt_block(result.stdout)
    gpu0 = next(line for line in lines if line.startswith("GPU 0"))
    gpu1 = next(line for line in lines if line.startswith("GPU 1"))
    legend = " ".join(lines[lines.index(next(line for line in lines if line.startswith("retrieval"))) + 1:])
    lora = re.search(r"(?:^| )(\w) lora-r64(?: |$)", legend).group(1)
    full = re.search(r"(?:^| )(\w) full-ft(?: |$)", legend).group(1)
    both = [i for i, (a, b) in enumerate(zip(gpu0, gpu1)) if a == lora and b == full]
    assert both, "lora-r64 and full-ft share no column"
    assert "1450.00" in result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines())


def test_no_hourly_rate_anywhere():
    for args in ((), ("--json",)):
        result = plan(str(SAMPLES / "sentiment-lora"), *args)
        text = result.stdout.lower()
        assert not re.search(r"usd ?/ ?h|/ ?hour|per hour|hourly|\$/h", text)


def test_no_color_is_honoured():
    coloured = plan(str(SAMPLES / "sentiment-lora"), env={"FORCE_COLOR": "1", "TERM": "xterm-256color"})
    assert COLOUR.search(coloured.stdout)  # the check below can fail
    plain = plan(str(SAMPLES / "sentiment-lora"), env={"FORCE_COLOR": "1", "TERM": "xterm-256color", "NO_COLOR": "1"})
    assert plain.returncode == 0
    assert not COLOUR.search(plain.stdout)


def test_an_invalid_campaign_is_a_finding_not_a_traceback(tmp_path):
    target = tmp_path / "broken"
    shutil.copytree(SAMPLES / "sentiment-lora", target)
    text = (target / "campaign.toml").read_text()
    assert "hours = 12 " in text
    (target / "campaign.toml").write_text(text.replace("hours = 12 ", "hours = -12 ", 1))
    result = plan(str(target))
    assert result.returncode == 1
    assert "hours" in result.stderr and "Traceback" not in result.stderr
    missing = plan(str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "no such folder" in missing.stderr


def test_negative_extra_hours_is_a_usage_error():
    result = plan(str(SAMPLES / "sentiment-lora"), "--extra-hours", "-3")
    assert result.returncode == 2
    assert "negative" in result.stderr


@pytest.mark.parametrize("sample", ["sentiment-lora", "b200-week"])
def test_json_is_one_object_and_agrees_with_itself(sample):
    data = json.loads(plan(str(SAMPLES / sample), "--json").stdout)
    assert data["uncommitted_hours"] == data["window_hours"] - data["committed_hours"]
    assert data["committed_hours"] == max(s["end_hours"] for s in data["schedule"]) + data["retrieval"]["hours"] + data["extra_hours"]
