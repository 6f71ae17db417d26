"""`cockpit demo`: without a terminal it refuses before making anything; with --no-tui it makes the
campaign, starts three real toy runs, and the NaN variant's rule fires for real."""

from __future__ import annotations

import json
import os
import signal
import time

from tests.conftest import run_cli


def test_demo_without_a_terminal_refuses_and_makes_nothing(tmp_path):
    result = run_cli("demo", str(tmp_path / "demo"))
    assert result.returncode == 2 and "--no-tui" in result.stderr
    assert not (tmp_path / "demo").exists()


def test_demo_no_tui_runs_three_live_runs_and_the_nan_rule_fires(tmp_path):
    target = tmp_path / "demo"
    result = run_cli("demo", str(target), "--no-tui")
    assert result.returncode == 0, result.stderr
    pids = [int(p) for p in result.stdout.split("(pids ")[1].split(")")[0].split(", ")]
    assert len(pids) == 3
    try:
        deadline = time.time() + 90
        body = {}
        while time.time() < deadline:
            status = run_cli("status", str(target), "--json")
            body = json.loads(status.stdout)
            if any(a["rule"] == "nan-loss" for a in body["alerts"]):
                break
            time.sleep(2)
        assert any(a["rule"] == "nan-loss" and a["run"] == "v-hot-lr" for a in body["alerts"]), body["alerts"]
        assert {r["id"] for r in body["runs"]} == {"ctrl-r1", "v-hot-lr", "v-short-context"}
        assert any(r["state"] == "running" and r["step"] for r in body["runs"])
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def test_demo_without_a_folder_goes_to_the_user_data_folder_and_says_where(tmp_path):
    data_home = tmp_path / "data"
    here = tmp_path / "here"
    here.mkdir()
    result = run_cli("demo", "--no-tui", cwd=here, env={"HOME": str(tmp_path / "home"), "XDG_DATA_HOME": str(data_home)})
    assert result.returncode == 0, result.stderr
    pids = [int(p) for p in result.stdout.split("(pids ")[1].split(")")[0].split(", ")]
    try:
        made = list((data_home / "cockpit").glob("demo-*"))
        assert len(made) == 1 and (made[0] / "campaign.toml").is_file()
        assert str(made[0]) in result.stdout and "data folder" in result.stdout
        assert list(here.iterdir()) == []  # nothing in the current directory
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
