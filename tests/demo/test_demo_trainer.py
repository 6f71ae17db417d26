"""The demo's toy trainer trains for real, checkpoints completely and proves its resume in a fresh
process; the demo campaign is shipped in the wheel and set up by `prepare_demo`/`launch_runs`."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from cockpit.demo import model as demo_model
from cockpit.demo import setup as demo_setup
from cockpit.demo.model import CheckpointError, Settings, State, Trainer, load_checkpoint, make_corpus, save_checkpoint
from cockpit.demo.setup import launch_runs, prepare_demo, stop_runs
from cockpit.demo.trainer import continuation, verify_in_fresh_process
from cockpit.plan.load import load_campaign

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "cockpit" / "demo" / "template"
SAMPLE = ROOT / "sample_campaigns" / "demo"
NOW = datetime(2026, 12, 1, 9, 30, 15, 123456, tzinfo=timezone.utc)


def metrics(campaign: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (campaign / "runs" / run / "metrics.jsonl").read_text().splitlines()]


def trainer_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "cockpit.demo.trainer", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.fixture
def demo(tmp_path) -> Path:
    return prepare_demo(tmp_path / "demo", NOW)


# ---------------------------------------------------------------- the campaign template


def test_the_sample_campaign_is_the_shipped_template():
    shipped = {p.relative_to(TEMPLATE): p.read_bytes() for p in TEMPLATE.rglob("*") if p.is_file()}
    sample = {p.relative_to(SAMPLE): p.read_bytes() for p in SAMPLE.rglob("*") if p.is_file()}
    assert Path("campaign.toml") in shipped and shipped == sample


def test_the_template_is_a_valid_campaign_with_the_demo_rules():
    campaign = load_campaign(TEMPLATE)
    assert campaign.lot.gpu_model == "RTX 4090" and campaign.lot.days == 3
    assert campaign.lot.price_usd is None and str(campaign.price) == "47.14"  # from the catalogue
    assert [r.role.value for r in campaign.runs] == ["control", "variant", "variant"]
    kinds = {rule.kind.value for rule in campaign.model.stop_rules}
    assert kinds == {"non_finite", "below", "truncated", "no_resume", "stalled"}
    assert set(demo_setup.demo_run_arguments(TEMPLATE)) == {r.id for r in campaign.runs}


def test_the_expected_test_ids_are_the_corpus_test_documents():
    _, test = make_corpus()
    assert (TEMPLATE / "data" / "test_ids.txt").read_text().split() == [d.id for d in test]


def test_prepare_demo_starts_the_lot_now(demo):
    campaign = load_campaign(demo)
    assert campaign.lot.start == NOW.replace(microsecond=0)
    original = (TEMPLATE / "campaign.toml").read_text().splitlines()
    changed = (demo / "campaign.toml").read_text().splitlines()
    assert [i for i, (a, b) in enumerate(zip(original, changed)) if a != b] == [
        next(i for i, line in enumerate(original) if line.startswith("start"))]  # that one line
    assert (demo / "runs.toml").is_file() and (demo / "data" / "test_ids.txt").is_file()


def test_prepare_demo_refuses_a_used_folder_and_a_naive_time(demo, tmp_path):
    with pytest.raises(FileExistsError, match="not an empty folder"):
        prepare_demo(demo, NOW)
    with pytest.raises(ValueError, match="time zone"):
        prepare_demo(tmp_path / "other", datetime(2026, 12, 1, 9, 30))
    local = datetime(2026, 12, 1, 10, 30, tzinfo=timezone(timedelta(hours=1)))
    assert load_campaign(prepare_demo(tmp_path / "third", local)).lot.start == datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)


# ---------------------------------------------------------------- training for real


def test_a_short_run_reports_checkpoints_and_verifies_its_resume(demo):
    result = trainer_cli("--campaign", str(demo), "--run", "ctrl-r1", "--steps", "60",
                         "--checkpoint-every", "20", "--eval-every", "20")
    assert result.returncode == 0, result.stderr
    lines = metrics(demo, "ctrl-r1")
    events = [line["event"] for line in lines if "event" in line]
    assert events[0] == "started" and events[-1] == "finished" and events.count("checkpoint") == 3
    assert events.count("resume_verified") == 1  # as soon as the fresh process answers, at the latest at the end
    assert lines[0]["pid"] > 0 and len(lines[0]["config_sha256"]) == 64
    losses = [line["loss"] for line in lines if "loss" in line]
    assert len(losses) == 60 and all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    f1 = [line["eval/macro_f1"] for line in lines if "eval/macro_f1" in line]
    assert len(f1) == 3 and f1[-1] > 0.5
    checkpoint = next(line for line in lines if line.get("event") == "checkpoint")
    assert checkpoint["path"] == "runs/ctrl-r1/checkpoints/step-20.npz"
    assert checkpoint["bytes"] == (demo / checkpoint["path"]).stat().st_size
    verified = next(line for line in lines if line.get("event") == "resume_verified")
    assert verified["path"] == checkpoint["path"] and verified["seconds"] > 0
    assert lines[-1]["status"] == "ok"
    predictions = [json.loads(row) for row in (demo / "out" / "ctrl-r1" / "predictions.jsonl").read_text().splitlines()]
    assert [p["id"] for p in predictions] == (demo / "data" / "test_ids.txt").read_text().split()


def test_a_first_checkpoint_at_the_last_step_is_still_verified(demo):
    result = trainer_cli("--campaign", str(demo), "--run", "ctrl-r1", "--steps", "10", "--checkpoint-every", "10")
    assert result.returncode == 0, result.stderr
    verified = [e for e in metrics(demo, "ctrl-r1") if e.get("event") == "resume_verified"]
    assert [e["path"] for e in verified] == ["runs/ctrl-r1/checkpoints/step-10.npz"]  # reload, zero steps


def test_a_checkpoint_holds_every_part_of_a_resume_point(tmp_path):
    state = State.fresh(Settings(), 0.003)
    trainer = Trainer(state)
    for _ in range(7):
        trainer.step()
    path = tmp_path / "step-7.npz"
    size = save_checkpoint(state, path)
    assert size == path.stat().st_size and not path.with_name("step-7.npz.tmp").exists()
    with zipfile.ZipFile(path) as archive:
        names = {n.removesuffix(".npy") for n in archive.namelist()}
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())
    assert {"model/weights", "optimizer/m/weights", "optimizer/t", "step", "scheduler/last_step",
            "scheduler/base_lr", "rng_state", "data_position", "precision"} <= names
    restored = load_checkpoint(path)
    assert restored.digest() == state.digest() and restored.step == 7 and restored.data_position == 7 * 16


def test_numpy_reads_the_checkpoint_as_the_documented_arrays(tmp_path):
    numpy = pytest.importorskip("numpy")
    state = State.fresh(Settings(), 0.003)
    Trainer(state).step()
    save_checkpoint(state, tmp_path / "c.npz")
    with numpy.load(tmp_path / "c.npz", allow_pickle=False) as archive:
        assert archive["model/weights"].dtype == numpy.float32 and archive["model/weights"].shape == (3, 24)
        assert archive["step"].dtype == numpy.int64 and int(archive["step"]) == 1
        assert json.loads(str(archive["rng_state"]))[0] == 3 and str(archive["precision"]) == "fp32"


def test_a_tampered_checkpoint_fails_the_fresh_process_check(tmp_path):
    state = State.fresh(Settings(), 0.003)
    trainer = Trainer(state)
    for _ in range(10):
        trainer.step()
    path = tmp_path / "step-10.npz"
    save_checkpoint(state, path)
    expected = continuation(load_checkpoint(path), 4)  # what the run that kept going does next
    ok, seconds, why = verify_in_fresh_process(path, expected)
    assert ok and seconds is not None and seconds > 0, why

    tampered = load_checkpoint(path)
    tampered.data_position += 1  # one sample off: every later batch differs
    save_checkpoint(tampered, path)
    ok, _, why = verify_in_fresh_process(path, expected)
    assert not ok and "differs" in why

    rng_reset = load_checkpoint(tmp_path / "step-10.npz")
    rng_reset.data_position -= 1
    rng_reset.rng.seed(7)  # the RNG restarted: dropout draws differ
    save_checkpoint(rng_reset, path)
    ok, _, why = verify_in_fresh_process(path, expected)
    assert not ok and "losses" in why


def test_a_damaged_checkpoint_is_refused_in_words(tmp_path):
    path = tmp_path / "step-1.npz"
    state = State.fresh(Settings(), 0.003)
    save_checkpoint(state, path)
    path.write_bytes(path.read_bytes()[:200])  # a copy cut short
    with pytest.raises(CheckpointError, match="not an npz archive|damaged"):
        load_checkpoint(path)
    result = trainer_cli("--verify-resume", str(path), "--steps", "2")
    assert result.returncode == 1 and "cannot resume" in result.stderr and "Traceback" not in result.stderr


def test_diverge_drives_the_loss_to_nan(demo):
    result = trainer_cli("--campaign", str(demo), "--run", "v-hot-lr", "--diverge", "--steps", "60",
                         "--checkpoint-every", "1000")
    assert result.returncode == 0, result.stderr
    losses = [line["loss"] for line in metrics(demo, "v-hot-lr") if "loss" in line]
    first = next(i for i, v in enumerate(losses) if not math.isfinite(v))
    assert 20 < first < 55  # normal for a while, then gone: within ~30 s at 0.5 s a step
    assert all(math.isfinite(v) for v in losses[:first]) and math.isnan(losses[-1])


def test_truncate_essential_reports_the_cut_inputs(demo):
    result = trainer_cli("--campaign", str(demo), "--run", "v-short-context", "--truncate-essential",
                         "--steps", "3", "--checkpoint-every", "1000")
    assert result.returncode == 0, result.stderr
    cut = [(e["input"], e["essential"]) for e in metrics(demo, "v-short-context") if e.get("event") == "truncated"]
    assert ("doc-0007", True) in cut and all(not essential for doc, essential in cut if doc != "doc-0007")
    plain = trainer_cli("--campaign", str(demo), "--run", "ctrl-r1", "--steps", "3", "--checkpoint-every", "1000")
    assert plain.returncode == 0 and not [e for e in metrics(demo, "ctrl-r1") if e.get("event") == "truncated"]



def test_a_short_context_changes_the_predictions_so_close_sees_two_deliverables(demo):
    """The long test reviews carry their verdict past the short context: the variant's predictions
    are its own, not a copy of the control's that `close` would reject as a duplicate."""
    _, test = make_corpus()
    reviews = [d for d in test if len(d.tokens) > demo_model.SHORT_CONTEXT]
    assert len(reviews) == 5
    for run, extra in (("ctrl-r1", ()), ("v-short-context", ("--truncate-essential",))):
        result = trainer_cli("--campaign", str(demo), "--run", run, *extra, "--steps", "1200", "--step-seconds", "0",
                             "--checkpoint-every", "1000", timeout=120)
        assert result.returncode == 0, result.stderr
    control = (demo / "out" / "ctrl-r1" / "predictions.jsonl").read_text().splitlines()
    variant = (demo / "out" / "v-short-context" / "predictions.jsonl").read_text().splitlines()
    assert len(control) == len(variant) == len(test)
    differing = {json.loads(a)["id"] for a, b in zip(control, variant) if a != b}
    assert differing and differing <= {d.id for d in reviews}

def test_bad_arguments_are_usage_errors(demo):
    unknown = trainer_cli("--campaign", str(demo), "--run", "nope", "--steps", "3")
    assert unknown.returncode == 2 and "no run 'nope'" in unknown.stderr and "ctrl-r1" in unknown.stderr
    negative = trainer_cli("--campaign", str(demo), "--run", "ctrl-r1", "--steps", "0")
    assert negative.returncode == 2 and "positive" in negative.stderr


# ---------------------------------------------------------------- launching the demo's runs


def test_launch_runs_starts_each_run_in_its_own_session_and_sigterm_stops_it(demo):
    (demo / "runs.toml").write_text(
        '[run.ctrl-r1]\nargs = ["--steps", "30", "--step-seconds", "0.02", "--checkpoint-every", "10"]\n'
        '[run.v-hot-lr]\nargs = ["--steps", "2000", "--step-seconds", "0.02", "--diverge"]\n'
    )
    processes = launch_runs(demo)
    try:
        assert len(processes) == 2
        for process in processes:
            assert os.getsid(process.pid) == process.pid  # its own session: a closed terminal spares it
        environ = Path(f"/proc/{processes[1].pid}/environ")
        if environ.exists():  # Linux: read it once the new interpreter has it mapped
            deadline = time.monotonic() + 5
            while not environ.read_bytes() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert b"COCKPIT_RUN_ID=v-hot-lr" in environ.read_bytes().split(b"\0")
        assert processes[0].wait(timeout=30) == 0
        deadline = time.monotonic() + 20
        while not any(line.get("step", 0) >= 3 for line in metrics(demo, "v-hot-lr")):
            assert time.monotonic() < deadline, "the run never reported"
            time.sleep(0.05)
        stop_runs([processes[1]], timeout=20)  # SIGTERM, as an action = "stop" rule sends it
        assert processes[1].returncode == 128 + signal.SIGTERM
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert metrics(demo, "ctrl-r1")[-1]["status"] == "ok"
    assert any(line.get("event") == "resume_verified" for line in metrics(demo, "ctrl-r1"))
    assert metrics(demo, "v-hot-lr")[-1] | {"ts": 0} == {"ts": 0, "event": "finished", "status": "stopped"}
    assert "stopped by SIGTERM" in (demo / "runs" / "v-hot-lr" / "stdout.log").read_text()


def test_launch_runs_refuses_a_run_the_campaign_does_not_have(demo):
    (demo / "runs.toml").write_text('[run.ghost]\nargs = []\n')
    with pytest.raises(ValueError, match="ghost is no \\[\\[run\\]\\]"):
        launch_runs(demo)
    assert not (demo / "runs" / "ghost").exists()
