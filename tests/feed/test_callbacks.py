"""The framework callbacks, driven by fakes of each framework's hook sequence; the real frameworks
only where they are installed."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from cockpit.feed.callbacks import LightningReporting, TrainerReporting
from cockpit.feed.reporter import ReporterWarning


class FakeLoss:
    """A detached 0-d tensor as far as the callbacks care: it adds up and has `.item()`."""

    def __init__(self, value: float):
        self.value = value

    def __add__(self, other: "FakeLoss") -> "FakeLoss":
        return FakeLoss(self.value + other.value)

    def item(self) -> float:
        return self.value


def lines(campaign: Path, run: str = "r1") -> list[dict]:
    return [json.loads(line) for line in (campaign / "runs" / run / "metrics.jsonl").read_text().splitlines()]


def steps(campaign: Path, run: str = "r1") -> list[dict]:
    return [line for line in lines(campaign, run) if "step" in line]


# ---------------------------------------------------------------- Hugging Face, faked


class FakeHFTrainer:
    """The parts of `transformers.Trainer._inner_training_loop` that matter here, in its order:
    micro-batch training_step calls, the NaN/Inf filter, on_step_end, on_log with the windowed
    average, save + on_save, on_train_end."""

    def __init__(self, losses, output_dir: Path, accumulation=1, logging_steps=2, save_steps=3,
                 nan_filter=True, fail_at=None):
        self.losses = list(losses)
        self.args = SimpleNamespace(output_dir=str(output_dir), logging_nan_inf_filter=nan_filter,
                                    to_dict=lambda: {"learning_rate": 5e-5, "logging_dir": f"runs/{time.time()}"})
        self.state = SimpleNamespace(global_step=0, is_world_process_zero=True)
        self.accumulation, self.logging_steps, self.save_steps = accumulation, logging_steps, save_steps
        self.callbacks = []
        self.logged = []  # what Trainer itself logs (its log_history)
        self.fail_at = fail_at

    def add_callback(self, callback):
        self.callbacks.append(callback)

    def _call(self, event, **kwargs):
        for callback in self.callbacks:
            getattr(callback, event)(self.args, self.state, None, **kwargs)

    def training_step(self, model, inputs, num_items_in_batch=None):
        return FakeLoss(self.losses.pop(0) / self.accumulation)

    def train(self):
        self._call("on_train_begin")
        window, last_logged = 0.0, 0
        while self.losses:
            for _ in range(self.accumulation):
                step_loss = self.training_step(None, {})
                if self.args.logging_nan_inf_filter and not math.isfinite(step_loss.item()):
                    window += window / (1 + self.state.global_step - last_logged)  # Trainer hides it
                else:
                    window += step_loss.item()
            self.state.global_step += 1
            if self.state.global_step == self.fail_at:
                raise RuntimeError("CUDA error: device-side assert triggered")
            self._call("on_step_end")
            if self.state.global_step % self.logging_steps == 0:
                logs = {"loss": window / (self.state.global_step - last_logged), "learning_rate": 5e-5}
                window, last_logged = window - window, self.state.global_step  # `tr_loss -= tr_loss`
                self.logged.append(logs)
                self._call("on_log", logs=logs)
            if self.state.global_step % self.save_steps == 0:
                folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
                folder.mkdir(parents=True)
                (folder / "model.safetensors").write_bytes(b"x" * 1000)
                (folder / "optimizer.pt").write_bytes(b"y" * 500)
                self._call("on_save")
        self._call("on_log", logs={"train_runtime": 1.5, "train_loss": 0.9})
        self._call("on_train_end")


def attached(trainer, campaign, run="r1"):
    callback = TrainerReporting(campaign, run)
    callback.attach(trainer)
    trainer.add_callback(callback)
    return callback


def test_hf_reports_the_raw_nan_loss_that_the_trainer_filter_hides(tmp_path):
    trainer = FakeHFTrainer([1.0, 0.8, float("nan"), 0.6, 0.5, 0.4], tmp_path / "out")
    attached(trainer, tmp_path)
    trainer.train()
    assert all(math.isfinite(logs["loss"]) for logs in trainer.logged)  # what on_log alone would see
    reported = [(line["step"], line["loss"]) for line in steps(tmp_path) if "loss" in line]
    assert [s for s, _ in reported] == [1, 2, 3, 4, 5, 6]
    assert math.isnan(reported[2][1]) and reported[0][1] == 1.0
    logged = [line for line in steps(tmp_path) if "learning_rate" in line]
    assert [line["step"] for line in logged] == [2, 4, 6] and all("loss" not in line for line in logged)
    assert lines(tmp_path)[-1]["event"] == "finished" and lines(tmp_path)[-1]["status"] == "ok"


def test_hf_started_names_the_host_and_pid_namespace_of_its_pid(tmp_path):
    from cockpit.feed.reporter import process_identity

    trainer = FakeHFTrainer([1.0, 0.9], tmp_path / "out")
    attached(trainer, tmp_path)
    trainer.train()
    (started,) = [line for line in lines(tmp_path) if line.get("event") == "started"]
    assert started["pid"] == os.getpid() and started["host"] == process_identity()["host"]
    assert started["pid_ns"] == process_identity()["pid_ns"]


def test_hf_sums_micro_batches_into_one_line_per_optimizer_step(tmp_path):
    trainer = FakeHFTrainer([1.0, 3.0, 2.0, 2.0], tmp_path / "out", accumulation=2, save_steps=100)
    attached(trainer, tmp_path)
    trainer.train()
    assert [(line["step"], line["loss"]) for line in steps(tmp_path) if "loss" in line] == [(1, 2.0), (2, 2.0)]


def test_hf_checkpoints_carry_path_size_and_time(tmp_path):
    trainer = FakeHFTrainer([1.0] * 6, tmp_path / "out")
    attached(trainer, tmp_path)
    trainer.train()
    saves = [line for line in lines(tmp_path) if line.get("event") == "checkpoint"]
    assert [s["path"] for s in saves] == ["out/checkpoint-3", "out/checkpoint-6"]
    assert all(s["bytes"] == 1500 and 0 <= s["seconds"] < 5 for s in saves)


def test_hf_renames_eval_metrics_and_hashes_the_arguments_without_the_timestamped_log_dir(tmp_path):
    trainer = FakeHFTrainer([1.0, 1.0], tmp_path / "out")
    callback = attached(trainer, tmp_path)
    trainer.train()
    callback.on_train_begin(trainer.args, trainer.state, None)
    callback.on_log(trainer.args, trainer.state, None, logs={"eval_macro_f1": 0.61, "eval_loss": 0.7})
    callback.on_train_end(trainer.args, trainer.state, None)
    evals = [line for line in steps(tmp_path) if "eval/macro_f1" in line]
    assert evals and evals[0]["eval/loss"] == 0.7
    starts = [line["config_sha256"] for line in lines(tmp_path) if line.get("event") == "started"]
    assert len(starts) == 2 and starts[0] == starts[1] is not None  # same config, different log dir


def test_hf_exception_ends_the_stream_as_failed_and_propagates(tmp_path):
    trainer = FakeHFTrainer([1.0] * 6, tmp_path / "out", fail_at=4)
    attached(trainer, tmp_path)
    with pytest.raises(RuntimeError, match="device-side assert"):
        trainer.train()
    last = lines(tmp_path)[-1]
    assert (last["event"], last["status"], last["error"]) == ("finished", "failed", "RuntimeError")


def test_hf_callback_alone_warns_that_the_filter_hides_nan(tmp_path):
    trainer = FakeHFTrainer([1.0, float("nan"), 1.0, 1.0], tmp_path / "out", save_steps=100)
    trainer.add_callback(TrainerReporting(tmp_path, "r1"))
    with pytest.warns(ReporterWarning, match="logging_nan_inf_filter"):
        trainer.train()
    losses = [line["loss"] for line in steps(tmp_path) if "loss" in line]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses)  # the limit the warning names


def test_hf_callback_alone_with_the_filter_off_sees_nan(tmp_path):
    trainer = FakeHFTrainer([1.0, float("nan"), 1.0, 1.0], tmp_path / "out", nan_filter=False, save_steps=100)
    trainer.add_callback(TrainerReporting(tmp_path, "r1"))
    trainer.train()
    losses = [line["loss"] for line in steps(tmp_path) if "loss" in line]
    assert math.isnan(losses[0]) and math.isnan(losses[1])  # `tr_loss -= tr_loss` keeps a NaN: every later window shows it


def test_hf_only_the_main_process_reports(tmp_path):
    trainer = FakeHFTrainer([1.0, 1.0], tmp_path / "out")
    trainer.state.is_world_process_zero = False
    attached(trainer, tmp_path)
    trainer.train()
    assert not (tmp_path / "runs").exists()


def test_callbacks_module_imports_without_any_framework():
    code = (
        "import sys, cockpit.feed.callbacks\n"
        "assert not {'transformers', 'lightning', 'pytorch_lightning', 'torch'} & set(sys.modules)\n"
        "try:\n    cockpit.feed.callbacks.CockpitTrainerCallback\nexcept ImportError as e:\n    print('IE', e)\n"
        "else:\n    print('OK')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK") or "pip install transformers" in result.stdout


# ---------------------------------------------------------------- Lightning, faked


class FakeCheckpointCallback:
    def __init__(self):
        self._last_checkpoint_saved = ""
        self.last_model_path = ""
        self.best_model_path = ""


class FakeLightningTrainer:
    def __init__(self, tmp_path: Path, accumulate=1):
        self.is_global_zero = True
        self.global_step = 0
        self.sanity_checking = False
        self.accumulate_grad_batches = accumulate
        self.callback_metrics = {}
        self.checkpoint_callbacks = [FakeCheckpointCallback()]
        self.dirpath = tmp_path / "ckpt"


def lightning_fit(callback, trainer, module, losses, fail_at=None, save_every=2):
    """Lightning's order: fit start, per batch start/end (ModelCheckpoint saves after ours),
    validation end with callback_metrics, fit end, or on_exception."""
    callback.on_fit_start(trainer, module)
    try:
        for index, loss in enumerate(losses):
            callback.on_train_batch_start(trainer, module, None, index)
            if index == fail_at:
                raise FloatingPointError("loss exploded")
            trainer.global_step += 1
            callback.on_train_batch_end(trainer, module, {"loss": FakeLoss(loss)}, None, index)
            if trainer.global_step % save_every == 0:  # ModelCheckpoint.on_train_batch_end, after ours
                callback.on_save_checkpoint(trainer, module, {})
                path = trainer.dirpath / f"step={trainer.global_step}.ckpt"
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(b"z" * 2048)
                trainer.checkpoint_callbacks[0]._last_checkpoint_saved = str(path)
        trainer.callback_metrics = {"val/f1": FakeLoss(0.7), "loss": FakeLoss(9.9)}
        callback.on_validation_end(trainer, module)
        callback.on_fit_end(trainer, module)
    except BaseException as error:
        callback.on_exception(trainer, module, error)
        raise


def test_lightning_reports_each_batch_loss_nan_included(tmp_path):
    callback = LightningReporting(tmp_path, "r1")
    trainer = FakeLightningTrainer(tmp_path)
    module = SimpleNamespace(hparams={"lr": 0.1}, automatic_optimization=True)
    lightning_fit(callback, trainer, module, [1.0, float("nan"), 0.5], save_every=100)
    reported = [(line["step"], line["loss"]) for line in steps(tmp_path) if "loss" in line]
    assert [s for s, _ in reported] == [1, 2, 3] and math.isnan(reported[1][1])
    assert [line for line in steps(tmp_path) if "val/f1" in line][0]["val/f1"] == 0.7
    assert lines(tmp_path)[0]["config_sha256"] is not None
    assert lines(tmp_path)[-1]["status"] == "ok"


def test_lightning_undoes_the_accumulation_division(tmp_path):
    callback = LightningReporting(tmp_path, "r1")
    trainer = FakeLightningTrainer(tmp_path, accumulate=4)
    lightning_fit(callback, trainer, SimpleNamespace(automatic_optimization=True), [0.25], save_every=100)
    assert [line["loss"] for line in steps(tmp_path) if "loss" in line] == [1.0]


def test_lightning_checkpoint_events_once_the_file_is_written(tmp_path):
    callback = LightningReporting(tmp_path, "r1")
    trainer = FakeLightningTrainer(tmp_path)
    lightning_fit(callback, trainer, SimpleNamespace(), [1.0, 1.0, 1.0, 1.0, 1.0], save_every=2)
    saves = [line for line in lines(tmp_path) if line.get("event") == "checkpoint"]
    assert [s["path"] for s in saves] == ["ckpt/step=2.ckpt", "ckpt/step=4.ckpt"]
    assert all(s["bytes"] == 2048 and 0 <= s["seconds"] < 5 for s in saves)


def test_lightning_exception_is_recorded_as_failed(tmp_path):
    callback = LightningReporting(tmp_path, "r1")
    with pytest.raises(FloatingPointError):
        lightning_fit(callback, FakeLightningTrainer(tmp_path), SimpleNamespace(), [1.0, 1.0, 1.0], fail_at=2)
    last = lines(tmp_path)[-1]
    assert (last["status"], last["error"]) == ("failed", "FloatingPointError")


def test_lightning_sanity_check_metrics_are_not_reported(tmp_path):
    callback = LightningReporting(tmp_path, "r1")
    trainer = FakeLightningTrainer(tmp_path)
    callback.on_fit_start(trainer, SimpleNamespace())
    trainer.sanity_checking, trainer.callback_metrics = True, {"val/f1": 0.1}
    callback.on_validation_end(trainer, SimpleNamespace())
    callback.on_fit_end(trainer, SimpleNamespace())
    assert not steps(tmp_path)


# ---------------------------------------------------------------- the real frameworks, where installed


def test_real_hf_trainer_nan_reaches_the_cockpit(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from cockpit.feed.callbacks import CockpitTrainerCallback, attach_to_trainer

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)
            self.calls = 0

        def forward(self, x, y):
            self.calls += 1
            loss = ((self.linear(x).squeeze(-1) - y) ** 2).mean()
            return {"loss": loss * float("nan") if self.calls == 3 else loss}

    data = [{"x": torch.tensor([float(i), 1.0]), "y": torch.tensor(float(i % 3))} for i in range(12)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=2, logging_steps=2,
        save_strategy="steps", save_steps=3, report_to=[], use_cpu=True, disable_tqdm=True,
        remove_unused_columns=False,
    )
    trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=data)
    callback = attach_to_trainer(trainer, tmp_path, "r1")
    assert isinstance(callback, CockpitTrainerCallback) and isinstance(callback, transformers.TrainerCallback)
    trainer.train()
    assert all(math.isfinite(e["loss"]) for e in trainer.state.log_history if "loss" in e)  # hidden there
    losses = [line["loss"] for line in steps(tmp_path) if "loss" in line]
    assert len(losses) == 6 and math.isnan(losses[2])
    saves = [line for line in lines(tmp_path) if line.get("event") == "checkpoint"]
    assert [s["path"] for s in saves] == ["out/checkpoint-3", "out/checkpoint-6"] and all(s["bytes"] > 0 for s in saves)
    assert lines(tmp_path)[-1]["status"] == "ok"


def test_real_lightning_nan_and_checkpoints_reach_the_cockpit(tmp_path):
    torch = pytest.importorskip("torch")
    try:
        import lightning.pytorch as pl
    except ImportError:
        pl = pytest.importorskip("pytorch_lightning")
    from cockpit.feed.callbacks import CockpitLightningCallback

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = ((self.linear(x).squeeze(-1) - y) ** 2).mean()
            return loss * float("nan") if batch_idx == 1 else loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8))
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1)
    trainer = pl.Trainer(max_steps=4, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False,
                         callbacks=[CockpitLightningCallback(tmp_path, "r1"), checkpoints])
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=2))
    losses = [line["loss"] for line in steps(tmp_path) if "loss" in line]
    assert len(losses) == 4 and math.isnan(losses[1]) and math.isfinite(losses[0])
    saves = [line for line in lines(tmp_path) if line.get("event") == "checkpoint"]
    assert len(saves) >= 2 and all(s["path"].startswith("ckpt/") and s["bytes"] > 0 for s in saves)
    assert lines(tmp_path)[-1]["status"] == "ok"
