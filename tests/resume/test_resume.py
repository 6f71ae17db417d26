"""verify-resume: what a checkpoint holds, whether it reloads in a new process, and save advice.

Tests marked by `torch` build real checkpoints with torch on the CPU and skip where it is absent;
the rest make their files by hand (zip, .npy and safetensors bytes) and run everywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shlex
import shutil
import struct
import subprocess
import sys
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from cockpit.cli import UsageError
from cockpit.live import cadence
from cockpit.resume import verify as resume
from cockpit.checkpoints import CheckpointUnreadable
from cockpit.checkpoints import scan as resume_scan
from cockpit.resume import report as resume_report

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_campaigns" / "sentiment-lora"


# ---------------------------------------------------------------- files made by hand


def npy_bytes(value) -> bytes:
    """One .npy member (format 1.0) for an int (int64 0-d), a str (<U 0-d) or a list of floats (float32)."""
    if isinstance(value, int):
        descr, shape, data = "<i8", (), struct.pack("<q", value)
    elif isinstance(value, str):
        descr, shape, data = f"<U{max(len(value), 1)}", (), value.encode("utf-32-le") or b"\0\0\0\0"
    else:
        descr, shape, data = "<f4", (len(value),), struct.pack(f"<{len(value)}f", *value)
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode("latin1")
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + data


def write_npz(path: Path, members: dict) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for key, value in members.items():
            archive.writestr(f"{key}.npy", npy_bytes(value))
    return path


def demo_members(**drop) -> dict:
    members = {
        "model/w1": [0.1, 0.2, 0.3], "model/b1": [0.0],
        "optimizer/m/w1": [0.0, 0.0, 0.0], "optimizer/v/w1": [0.0, 0.0, 0.0], "optimizer/t": 120,
        "step": 120, "scheduler/last_step": 120, "scheduler/base_lr": [0.001],
        "rng_state": json.dumps({"bit_generator": "PCG64", "state": {"state": 1, "inc": 3}}),
        "data_position": 7680, "precision": "fp32",
    }
    for key in drop:
        members = {k: v for k, v in members.items() if k != key and not k.startswith(key + "/")}
    return members


def write_safetensors(path: Path, tensors: dict[str, list[float]]) -> Path:
    header, data = {}, b""
    for name, values in tensors.items():
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": [len(values)], "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def _fake_rebuild(*args):  # stands for torch._utils._rebuild_tensor_v2 in hand-made pickles
    raise AssertionError("never called: the scanner must not run what it reads")


class FakeTensor:
    def __reduce__(self):
        return (_fake_rebuild, ("storage", 0, (2,), (1,), False, {}))


TENSOR_BYTES = bytes(range(7, 71))  # the bytes of one stored tensor, easy to find in the file


def torch_like_file(path: Path, obj, storages: int = 0) -> Path:
    """A torch.save-shaped zip (archive/data.pkl, then archive/data/0 … stored, as torch.save
    writes them) whose tensors name torch's rebuild function."""
    data = pickle.dumps(obj, protocol=2)
    ours = f"{_fake_rebuild.__module__}\n{_fake_rebuild.__qualname__}\n".encode()
    data = data.replace(ours, b"torch._utils\n_rebuild_tensor_v2\n")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data)
        for index in range(storages):
            archive.writestr(f"archive/data/{index}", TENSOR_BYTES)
        archive.writestr("archive/version", "3\n")
    return path


def flip_byte(path: Path, inside: bytes, at: int = 5) -> Path:
    """Flip one byte of `inside` where it lies in the file (a bit rot, a bad copy)."""
    data = bytearray(path.read_bytes())
    data[data.index(inside) + at] ^= 0x40
    path.write_bytes(bytes(data))
    return path


def hf_folder(base: Path, step: int = 500, optimizer: bool = True) -> Path:
    folder = base / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    write_safetensors(folder / "model.safetensors", {"lin.weight": [1.0, 2.0, 3.0, 4.0], "lin.bias": [0.5, 0.5]})
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": 1.25, "log_history": []}))
    if optimizer:
        torch_like_file(folder / "optimizer.pt", {"state": {}, "param_groups": [{"lr": 0.001, "params": [0, 1]}]})
        torch_like_file(folder / "scheduler.pt", {"last_epoch": step, "_step_count": step + 1})
    return folder


def cockpit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit.cli", *args], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, **(env or {})}, timeout=120,
    )


@pytest.fixture
def no_torch_env(tmp_path, monkeypatch):
    """The reload's fresh interpreter finds a `torch` (and `numpy`) that cannot be imported."""
    shadow = tmp_path / "shadow"
    for name in ("torch", "numpy"):
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(f"raise ImportError('No module named {name!r}')\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    return shadow


# ---------------------------------------------------------------- save advice (Daly)


def test_daly_interval_matches_the_published_figure():
    # Daly (2006): δ = 5 min, M = 24 h → about 117 min between saves
    interval = cadence.daly_interval(5 * 60, 24 * 3600)
    assert interval / 60 == pytest.approx(116.69, abs=0.01)
    assert round(interval / 60) == 117


def test_daly_interval_is_the_mtbf_once_a_save_takes_two_of_them():
    assert cadence.daly_interval(3 * 3600, 1 * 3600) == 3600


def test_daly_interval_minimises_the_expected_overhead():
    save, mtbf = 300.0, 86400.0
    best = cadence.daly_interval(save, mtbf)
    at_best = cadence.expected_overhead(best, save, mtbf)
    assert at_best == pytest.approx(0.0882, abs=0.001)
    for other in (best * 0.5, best * 0.8, best * 1.25, best * 2):
        assert cadence.expected_overhead(other, save, mtbf) > at_best
    # a restart cost makes every failure dearer
    assert cadence.expected_overhead(best, save, mtbf, restart_seconds=600) > at_best


def test_latest_final_save_leaves_room_for_the_save_and_the_copy_off():
    end = datetime(2026, 12, 3, 8, 0, tzinfo=timezone.utc)
    latest = cadence.latest_final_save(end, retrieval_hours=1, save_seconds=300)
    assert latest == datetime(2026, 12, 3, 6, 55, tzinfo=timezone.utc)
    advice = cadence.save_advice(300, lot_end=end, retrieval_hours=1, now=latest + timedelta(seconds=1))
    assert advice.too_late is True
    assert advice.to_json()["latest_final_save"] == "2026-12-03T06:55:00.000Z"
    assert cadence.save_advice(300, lot_end=end, retrieval_hours=1, now=latest).too_late is False
    assert round(advice.to_json()["interval_minutes"]) == 117


@pytest.mark.parametrize("save, mtbf", [(0, 24), (-1, 24), (float("nan"), 24), (60, 0), (60, float("inf"))])
def test_save_advice_refuses_meaningless_inputs(save, mtbf):
    with pytest.raises(ValueError):
        cadence.save_advice(save, mtbf_hours=mtbf)


def test_save_time_comes_from_the_runs_checkpoint_events(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    lines = [
        {"ts": 1.0, "step": 10, "loss": 2.0},
        {"ts": 2.0, "event": "checkpoint", "path": "a.pt", "seconds": 10.0},
        {"ts": 3.0, "event": "checkpoint", "path": "b.pt", "seconds": 30.0},
        {"ts": 4.0, "event": "checkpoint", "path": "c.pt", "seconds": 12.0},
        {"ts": 5.0, "event": "checkpoint", "path": "d.pt", "seconds": "slow"},
    ]
    metrics.write_text("\n".join(json.dumps(line) for line in lines) + '\n{"event": "checkpoint", "seco')
    assert resume.save_seconds_from_metrics(metrics) == 12.0
    assert resume.save_seconds_from_metrics(tmp_path / "absent.jsonl") is None


# ---------------------------------------------------------------- reading files without torch


def test_the_reload_runs_under_an_interpreter_without_the_cockpit_installed(tmp_path):
    """--python names the training environment's interpreter, where cockpit is not installed: the
    child (`-m cockpit.resume.reload_child`) still starts, and sees none of the cockpit's packages."""
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')  # -S: no site-packages
    bare.chmod(0o755)
    path = write_safetensors(tmp_path / "m.safetensors", {"a": [1.0, 2.0], "b": [3.0]})
    report = resume.verify_resume(path, python=str(bare))
    assert report.reload.ok, report.reload.error
    assert report.reload.files[0].reader == "by hand (header checked, every byte read)"


def test_safetensors_header_is_read_by_hand(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors", {"a": [1.0, 2.0], "b": [3.0]})
    header = resume_scan.read_safetensors_header(path)
    assert (header.tensor_count, header.data_bytes, header.metadata) == (2, 12, {"format": "pt"})
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(CheckpointUnreadable, match="truncated"):
        resume_scan.read_safetensors_header(cut)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(struct.pack("<Q", 5) + b"{oops")
    with pytest.raises(CheckpointUnreadable, match="not JSON"):
        resume_scan.read_safetensors_header(junk)


def test_scanner_reads_a_torch_file_without_running_it(tmp_path):
    path = torch_like_file(tmp_path / "tut.pt", {
        "epoch": 5,
        "model_state_dict": {"fc.weight": FakeTensor(), "fc.bias": FakeTensor()},
        "optimizer_state_dict": {"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]},
        "loss": 0.31,
    })
    scan = resume_scan.scan_torch_file(path)
    assert scan.tensor_count == 2 and scan.globals == []
    report = resume.verify_resume(path, reload=False)
    assert report.format == "pytorch"
    assert report.has == {
        "model": True, "optimizer": True, "progress": True, "scheduler": False,
        "scaler": False, "rng": False, "data_position": False,
    }
    assert report.parts["progress"].detail == "epoch 5"
    assert {"scheduler", "rng", "data_position"} <= set(report.missing)
    assert report.resume_point
    assert report.costs["scheduler"].startswith("scheduler missing: the learning-rate schedule restarts")


def test_nested_state_and_declared_precision(tmp_path):
    path = torch_like_file(tmp_path / "nested.pt", {
        "net": {"w": FakeTensor()},
        "opt": {"state": {}, "param_groups": []},
        "meta": {"global_step": 900, "sampler_state": {"offset": 12}, "torch_rng_state": FakeTensor()},
        "args": {"precision": "bf16-mixed"},
    })
    report = resume.verify_resume(path, reload=False)
    assert report.parts["progress"].where == "meta.global_step"
    assert report.has["data_position"] and report.has["rng"]
    assert "scaler" in report.not_needed and "scaler" not in report.missing


def test_a_bare_state_dict_is_weights_only(tmp_path):
    path = torch_like_file(tmp_path / "weights.pt", {"fc.weight": FakeTensor(), "fc.bias": FakeTensor()})
    report = resume.verify_resume(path, reload=False)
    assert report.has["model"] and not report.resume_point
    assert set(report.missing) == set(resume_report.PARTS) - {"model"}


def test_numpy_objects_are_named_as_what_weights_only_refuses(tmp_path):
    data = pickle.dumps({"model": {"w": FakeTensor()}, "step": 1}, protocol=2)
    ours = f"{_fake_rebuild.__module__}\n{_fake_rebuild.__qualname__}\n".encode()
    data = data.replace(ours, b"torch._utils\n_rebuild_tensor_v2\n")
    # splice a numpy-looking global in as the value of "rng"
    data = data[:-2] + b"X\x03\x00\x00\x00rngcnumpy._core.multiarray\n_reconstruct\n)R" + data[-2:]
    path = tmp_path / "np.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data)
    scan = resume_scan.scan_torch_file(path)
    assert scan.globals == ["numpy._core.multiarray._reconstruct"]


@pytest.mark.parametrize("content, cause", [
    (b"", "empty"),
    (b"PK\x03\x04" + b"\0" * 200, "truncated or half-written"),
    (b"\x00\x01garbage" * 50, "not a torch.save file"),
])
def test_unreadable_files_get_a_plain_cause(tmp_path, content, cause):
    path = tmp_path / "bad.pt"
    path.write_bytes(content)
    report = resume.verify_resume(path, reload=False)
    assert cause in report.problem
    assert not report.resume_point


def test_hf_folder_without_torch(tmp_path):
    folder = hf_folder(tmp_path, step=500, optimizer=False)
    report = resume.verify_resume(folder, reload=False)
    assert report.format == "huggingface"
    assert report.has["model"] and report.has["progress"] and report.has["data_position"]
    assert report.parts["progress"].detail == "global_step 500, epoch 1.25"
    assert not report.has["optimizer"] and not report.resume_point
    assert report.tensor_count == 2
    assert report.size_bytes == sum(p.stat().st_size for p in folder.iterdir())


def test_hf_output_dir_resolves_to_the_highest_checkpoint(tmp_path):
    hf_folder(tmp_path, step=500)
    hf_folder(tmp_path, step=1000)
    report = resume.verify_resume(tmp_path, reload=False)
    assert report.checkpoint.endswith("checkpoint-1000")
    assert report.resume_point
    assert any("newest of 2" in note for note in report.notes)


def test_hf_folder_reload_says_torch_is_missing(tmp_path, no_torch_env):
    folder = hf_folder(tmp_path)
    report = resume.verify_resume(folder)
    assert report.resume_point  # read without torch
    assert report.reload.tried and not report.reload_ok
    assert report.reload.error.startswith("torch is not installed")
    # the safetensors file was still read and checked by hand in the fresh process
    weights = next(f for f in report.reload.files if f.path.endswith("model.safetensors"))
    assert weights.ok and weights.tensor_count == 2


def test_demo_npz_is_a_full_resume_point(tmp_path):
    path = write_npz(tmp_path / "step-120.npz", demo_members())
    report = resume.verify_resume(path)
    assert report.format == "demo"
    assert all(report.has[p] for p in resume_report.PARTS if p != "scaler")
    assert report.not_needed == {"scaler": "precision is fp32: no loss scaling"}
    assert report.missing == []
    assert report.parts["progress"].detail == "step 120"
    assert report.reload_ok and report.reload.seconds is not None and report.ok
    assert report.tensor_count == len(demo_members())


def test_demo_npz_reloads_without_numpy(tmp_path, no_torch_env):
    path = write_npz(tmp_path / "step-120.npz", demo_members())
    report = resume.verify_resume(path)
    assert report.reload_ok and report.reload.files[0].tensor_count == len(demo_members())


def test_demo_npz_without_rng_and_position_says_what_it_costs(tmp_path):
    path = write_npz(tmp_path / "step-120.npz", demo_members(rng_state=1, data_position=1))
    report = resume.verify_resume(path, reload=False)
    assert report.missing == ["rng", "data_position"]
    assert report.costs["data_position"].startswith("data position missing:")
    assert report.resume_point


def test_truncated_npz_is_not_reloadable(tmp_path):
    good = write_npz(tmp_path / "good.npz", demo_members())
    cut = tmp_path / "step-9.npz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    report = resume.verify_resume(cut)
    assert not report.reload_ok and "truncated" in report.problem


def test_a_folder_of_checkpoints_checks_the_newest_and_skips_partial_saves(tmp_path):
    old = write_npz(tmp_path / "step-100.npz", demo_members())
    new = write_npz(tmp_path / "step-200.npz", demo_members())
    (tmp_path / "step-300.npz.tmp").write_bytes(b"PK\x03\x04half")
    os.utime(old, (1_000_000, 1_000_000))
    report = resume.verify_resume(tmp_path, reload=False)
    assert report.checkpoint == str(new)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no checkpoint in" in resume.verify_resume(empty).problem


def test_core_imports_neither_torch_nor_numpy_nor_textual():
    code = "import sys, cockpit.resume.verify; print(sorted(m for m in ('torch', 'numpy', 'textual') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- the command


def test_cli_json_on_a_demo_checkpoint(tmp_path):
    path = write_npz(tmp_path / "step-120.npz", demo_members())
    done = cockpit("verify-resume", str(path), "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["format"] == "demo"
    assert set(payload["has"]) == set(resume_report.PARTS)
    assert payload["missing"] == [] and payload["reload_ok"] is True
    assert isinstance(payload["reload_seconds"], float)
    assert payload["resume_point"] is True
    assert payload["advice"]["save_seconds_source"] == "reload"


def test_cli_weights_only_is_exit_1(tmp_path):
    path = write_npz(tmp_path / "weights.npz", {"model/w": [1.0, 2.0]})
    done = cockpit("verify-resume", str(path))
    assert done.returncode == 1
    assert "NOT a resume point: no optimizer, progress" in done.stdout
    assert "momentum and Adam's moments restart from zero" in done.stdout


def test_cli_missing_path_is_a_finding(tmp_path):
    done = cockpit("verify-resume", str(tmp_path / "nope.pt"))
    assert done.returncode == 1
    assert f"no such file or folder: {tmp_path / 'nope.pt'}" in done.stderr
    assert "Traceback" not in done.stderr
    done = cockpit("verify-resume", str(tmp_path / "nope.pt"), "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["reload_ok"] is False


def _args(path, **extra) -> argparse.Namespace:
    return argparse.Namespace(path=str(path), json=True, **extra)


def test_record_appends_resume_verified_to_the_runs_metrics(tmp_path, capsys):
    from cockpit.commands import verify_resume

    campaign = shutil.copytree(SAMPLE, tmp_path / "campaign")
    checkpoint = write_npz(tmp_path / "step-120.npz", demo_members())
    metrics = campaign / "runs" / "ctrl-r1" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text('{"ts": 1.0, "step": 1, "loss": 2.0}\n{"ts": 2.0, "event": "checkpoint", "path": "x", "seconds": 300}\n{"ts": 3.0, "st')
    assert verify_resume.run(_args(checkpoint, record=(str(campaign), "ctrl-r1"), mtbf_hours=24.0)) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["recorded"] is True
    # the save time is the run's measured one, and the lot end is the campaign's
    assert payload["advice"]["save_seconds_source"] == "checkpoint events"
    assert round(payload["advice"]["interval_minutes"]) == 117
    assert payload["advice"]["latest_final_save"] == "2026-12-03T06:55:00.000Z"
    lines = metrics.read_text().splitlines()
    assert lines[2] == '{"ts": 3.0, "st'  # the torn line was ended, not joined to ours
    event = json.loads(lines[3])
    assert event["event"] == "resume_verified" and event["path"] == str(checkpoint)
    assert event["seconds"] == payload["reload_seconds"] and event["ts"].endswith("Z")


def test_record_refuses_an_unknown_run_and_a_checkpoint_that_is_no_resume_point(tmp_path, capsys):
    from cockpit.commands import verify_resume

    campaign = shutil.copytree(SAMPLE, tmp_path / "campaign")
    checkpoint = write_npz(tmp_path / "step-120.npz", demo_members())
    with pytest.raises(UsageError, match="no run 'nope'"):
        verify_resume.run(_args(checkpoint, record=(str(campaign), "nope")))
    weights = write_npz(tmp_path / "weights.npz", {"model/w": [1.0]})
    assert verify_resume.run(_args(weights, record=(str(campaign), "ctrl-r1"))) == 1
    assert json.loads(capsys.readouterr().out)["recorded"] is False
    assert not (campaign / "runs" / "ctrl-r1" / "metrics.jsonl").exists()
    with pytest.raises(UsageError, match="mtbf"):
        verify_resume.run(_args(checkpoint, mtbf_hours=0))


# ---------------------------------------------------------------- real torch checkpoints


@pytest.fixture(scope="module")
def trained():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return torch, model, optimizer, scheduler


def test_torch_full_checkpoint(tmp_path, trained):
    torch, model, optimizer, scheduler = trained
    import random

    path = tmp_path / "full.pt"
    torch.save({
        "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
        "scaler": torch.amp.GradScaler("cpu", init_scale=1024.0).state_dict(),
        "step": 1, "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        "sampler": {"epoch": 0, "index": 3},
    }, path)
    report = resume.verify_resume(path)
    assert report.format == "pytorch" and report.missing == [] and report.ok
    assert report.reload.weights_only is True
    # 4 weights, Adam's step/exp_avg/exp_avg_sq for each, the RNG state
    assert report.tensor_count == 4 + 3 * 4 + 1
    assert report.size_bytes == path.stat().st_size


def test_torch_tutorial_checkpoint_misses_scheduler_rng_and_data_position(tmp_path, trained):
    torch, model, optimizer, _ = trained
    path = tmp_path / "tutorial.pt"
    torch.save({"epoch": 5, "model_state_dict": model.state_dict(),
                "optimizer_state_dict": optimizer.state_dict(), "loss": 0.42}, path)
    done = cockpit("verify-resume", str(path), "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert {"scheduler", "rng", "data_position"} <= set(payload["missing"])
    assert payload["has"]["model"] and payload["has"]["optimizer"] and payload["has"]["progress"]
    assert payload["reload_ok"] is True and payload["reload_seconds"] >= 0
    assert payload["tensor_count"] == 16


def test_torch_weights_only_is_no_resume_point(tmp_path, trained):
    torch, model, _, _ = trained
    path = tmp_path / "weights.pt"
    torch.save(model.state_dict(), path)
    done = cockpit("verify-resume", str(path))
    assert done.returncode == 1
    assert "NOT a resume point: no optimizer, progress" in done.stdout


def test_lightning_shaped_checkpoint(tmp_path, trained):
    torch, model, optimizer, scheduler = trained
    path = tmp_path / "epoch=0-step=40.ckpt"
    torch.save({
        "epoch": 0, "global_step": 40, "pytorch-lightning_version": "2.5.1",
        "state_dict": model.state_dict(),
        "loops": {"fit_loop": {"state_dict": {}, "epoch_loop.batch_progress": {
            "total": {"ready": 40, "completed": 40}, "current": {"ready": 40, "completed": 40}}}},
        "callbacks": {}, "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [scheduler.state_dict()],
        "MixedPrecision": torch.amp.GradScaler("cpu", init_scale=65536.0).state_dict(),
        "hparams_name": "kwargs", "hyper_parameters": {"lr": 1e-3},
    }, path)
    report = resume.verify_resume(path)
    assert report.format == "lightning"
    assert report.missing == ["rng"]
    assert report.parts["scaler"].where == "MixedPrecision"
    assert report.parts["progress"].detail == "global_step 40, epoch 0"
    assert any(note.startswith("Lightning saves no RNG state") for note in report.notes)
    assert report.ok


def test_hf_folder_with_torch_files(tmp_path, trained):
    torch, model, optimizer, scheduler = trained
    folder = tmp_path / "checkpoint-40"
    folder.mkdir()
    write_safetensors(folder / "model.safetensors", {"w": [1.0, 2.0], "b": [0.0]})
    torch.save(optimizer.state_dict(), folder / "optimizer.pt")
    torch.save(scheduler.state_dict(), folder / "scheduler.pt")
    torch.save({"cpu": torch.get_rng_state()}, folder / "rng_state.pth")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 40, "epoch": 0.5}))
    report = resume.verify_resume(folder)
    assert report.format == "huggingface"
    assert report.missing == ["scaler"] and report.ok
    assert len(report.reload.files) == 4 and all(f.ok for f in report.reload.files)


def test_corrupt_and_truncated_torch_files_are_not_reloadable(tmp_path, trained):
    torch, model, optimizer, _ = trained
    good = tmp_path / "good.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1}, good)
    data = good.read_bytes()
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(data[:100] + bytes(200) + data[300:])
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) * 2 // 3])
    for path in (corrupt, truncated):
        done = cockpit("verify-resume", str(path), "--json")
        assert done.returncode == 1, done.stderr
        payload = json.loads(done.stdout)
        assert payload["reload_ok"] is False and payload["reload_seconds"] is None
        assert payload["problem"] and "Traceback" not in done.stderr
    assert "truncated" in payload["problem"]


def test_numpy_rng_state_fails_weights_only_and_says_what_to_change(tmp_path, trained):
    torch, model, optimizer, _ = trained
    numpy = pytest.importorskip("numpy")
    path = tmp_path / "np-rng.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1,
                "numpy_rng_state": numpy.random.get_state()}, path)
    # never retried with weights_only=False on its own (issue 13 item 8): the flag says to
    refused = resume.verify_resume(path)
    assert not refused.ok and refused.has["rng"]
    assert "--trust-checkpoint" in refused.reload.error and "numpy" in refused.reload.error
    report = resume.verify_resume(path, trust=True)
    assert report.ok and report.has["rng"]
    assert report.reload.weights_only is False
    note = next(n for n in report.notes if "weights_only=True" in n)
    assert "numpy.ndarray" in note and "add_safe_globals" in note and "weights_only=False" in note


# ---------------------------------------------------------------- damage: CRC-32, sizes (issue 13 item 9)

TUTORIAL = {
    "epoch": 5,
    "model_state_dict": {"fc.weight": FakeTensor()},
    "optimizer_state_dict": {"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]},
}
LIGHTNING = {
    "epoch": 0, "global_step": 40, "pytorch-lightning_version": "2.5.1", "state_dict": {"w": FakeTensor()},
    "optimizer_states": [{"state": {}, "param_groups": []}], "lr_schedulers": [], "loops": {},
}


@pytest.mark.parametrize("name, obj, fmt", [("full.pt", TUTORIAL, "pytorch"), ("epoch=0-step=40.ckpt", LIGHTNING, "lightning")],
                         ids=["torch", "lightning"])
def test_a_flipped_byte_in_a_tensor_is_damage_not_a_resume_point(tmp_path, name, obj, fmt):
    path = torch_like_file(tmp_path / name, obj, storages=2)
    intact = resume.verify_resume(path, reload=False)
    assert intact.resume_point and intact.damaged == []
    flip_byte(path, TENSOR_BYTES)  # archive/data/0: torch's zip reader checks no CRC and loads garbage
    report = resume.verify_resume(path)
    assert report.format == fmt
    assert report.damaged == ["damaged: member archive/data/0 fails its CRC-32"]
    assert not report.resume_point and not report.ok
    assert report.reload.tried is False  # damaged bytes are not handed to any loader
    done = cockpit("verify-resume", str(path))
    assert done.returncode == 1
    assert "NOT a resume point: damaged: member archive/data/0 fails its CRC-32" in " ".join(done.stdout.split())
    payload = json.loads(cockpit("verify-resume", str(path), "--json").stdout)
    assert payload["damaged"] == ["damaged: member archive/data/0 fails its CRC-32"]
    assert payload["resume_point"] is False and payload["reload_ok"] is False and payload["reload_seconds"] is None
    assert payload["has"]["model"] and payload["format"] == fmt and "missing" in payload


def test_a_flipped_byte_in_the_pickle_is_named_too(tmp_path):
    path = torch_like_file(tmp_path / "full.pt", TUTORIAL, storages=1)
    flip_byte(path, b"optimizer_state_dict", at=3)
    report = resume.verify_resume(path)
    assert "damaged: member archive/data.pkl fails its CRC-32" in report.problem
    assert report.damaged and not report.resume_point and report.reload.tried is False


def test_the_crc_check_streams_a_large_member(tmp_path):
    import tracemalloc

    path = tmp_path / "big.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"step": 1}, protocol=2))
        archive.writestr("archive/data/0", os.urandom(1024) * (24 * 1024))  # 24 MiB
    tracemalloc.start()
    try:
        with zipfile.ZipFile(path) as archive:
            assert resume_scan.zip_damage(archive) == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, f"{peak} bytes held to check a 24 MiB member"


def raw_safetensors(path: Path, header: dict, data: bytes, length: int | None = None) -> Path:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


@pytest.mark.parametrize("header, data, length, cause", [
    ({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, None,
     "tensor 'w' is F32 [3], 12 bytes, but its data_offsets span 8"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
     b"\0" * 12, None, "the tensors overlap or leave a gap"),
    ({"w": {"dtype": "F32", "shape": [100], "data_offsets": [0, 400]}}, b"\0" * 8, None, "truncated: tensor 'w' ends at byte 400"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 12, None, "4 bytes past the end the header describes"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, 10_000, "the header claims 10000 bytes"),
    ({"w": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, None, "unknown dtype 'Q7'"),
    ({"w": {"dtype": "BF16", "shape": [2, "x"], "data_offsets": [0, 8]}}, b"\0" * 8, None, "tensor 'w' has no shape"),
], ids=["dtype-times-shape", "overlap", "past-the-data", "trailing-bytes", "header-length", "unknown-dtype", "bad-shape"])
def test_safetensors_sizes_must_agree_with_the_header(tmp_path, header, data, length, cause):
    path = raw_safetensors(tmp_path / "model.safetensors", header, data, length)
    report = resume.verify_resume(path)
    assert cause in report.problem
    assert not report.reload_ok and not report.resume_point
    fine = raw_safetensors(tmp_path / "fine.safetensors", {
        "h": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}, "b": {"dtype": "BOOL", "shape": [], "data_offsets": [12, 13]},
        "e": {"dtype": "F32", "shape": [0], "data_offsets": [13, 13]}, "__metadata__": {"format": "pt"}}, b"\1" * 13)
    assert resume_scan.read_safetensors_header(fine).tensor_count == 3


def test_each_file_of_a_hugging_face_checkpoint_is_checked(tmp_path):
    folder = tmp_path / "checkpoint-500"
    folder.mkdir()
    write_safetensors(folder / "model.safetensors", {"lin.weight": [1.0, 2.0]})
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 500, "epoch": 1.0}))
    torch_like_file(folder / "optimizer.pt", {"state": {0: {"exp_avg": FakeTensor()}}, "param_groups": [{"params": [0]}]}, storages=1)
    torch_like_file(folder / "scheduler.pt", {"last_epoch": 500})
    (folder / "config.json").write_text('{"model_type": "bert"}')
    assert resume.verify_resume(folder, reload=False).resume_point
    flip_byte(folder / "optimizer.pt", TENSOR_BYTES)
    report = resume.verify_resume(folder)
    assert report.damaged == ["optimizer.pt: damaged: member archive/data/0 fails its CRC-32"]
    assert not report.resume_point and report.reload.tried is False
    assert "optimizer.pt: damaged: member archive/data/0 fails its CRC-32" in report.reload.error
    # a weights file whose header does not add up, and a config that does not parse, are named too
    raw_safetensors(folder / "model.safetensors", {"lin.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, b"\0" * 8)
    (folder / "config.json").write_text('{"model_type": ')
    report = resume.verify_resume(folder, reload=False)
    named = {entry.split(":")[0] for entry in report.damaged}
    assert named == {"model.safetensors", "optimizer.pt", "config.json"}
    done = cockpit("verify-resume", str(folder))
    assert done.returncode == 1 and "NOT a resume point:" in done.stdout and "damaged" in done.stdout


def test_a_flipped_byte_in_a_demo_checkpoint_is_damage(tmp_path):
    path = write_npz(tmp_path / "step-120.npz", demo_members())
    flip_byte(path, struct.pack("<3f", 0.1, 0.2, 0.3), at=2)  # model/w1's float32 data
    report = resume.verify_resume(path)
    assert report.damaged == ["damaged: member model/w1.npy fails its CRC-32"]
    assert not report.resume_point and not report.ok and report.reload.tried is False
