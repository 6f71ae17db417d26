"""Framework callbacks that feed the cockpit: Hugging Face `Trainer` and PyTorch Lightning.

Both frameworks are imported only when a callback class is first used, so the cockpit itself
depends on neither. The classes are built on first access:

    from cockpit.feed.callbacks import attach_to_trainer  # Hugging Face (recommended)
    trainer = Trainer(model=model, args=args, train_dataset=train)
    attach_to_trainer(trainer, "/srv/campaign", "ctrl-r1")
    trainer.train()

    from cockpit.feed.callbacks import CockpitLightningCallback  # PyTorch Lightning
    trainer = L.Trainer(callbacks=[CockpitLightningCallback("/srv/campaign", "ctrl-r1")])

Why Hugging Face needs `attach_to_trainer` for the raw loss: a `TrainerCallback` never sees the
per-step loss. Its hooks receive args, state and control; the loss reaches callbacks only through
`on_log`, averaged over `logging_steps`, and with the default `logging_nan_inf_filter=True`
the Trainer replaces a NaN or infinite step loss by the running average before anything is
logged: `on_log` then shows a finite number while the model is already broken. So
`attach_to_trainer` also wraps the trainer's `training_step` (an instance attribute, which the
training loop calls in place of the method; subclasses that override it are wrapped too) and
reads the loss it returns, before the filter. Those micro-batch losses (already divided for
gradient accumulation, exactly what the Trainer adds up) are summed per optimizer step and
reported at `on_step_end` as `loss`, NaN included. The callback also wraps `train()` so an
exception ends the stream with `finished` status "failed" and its type name.

Limits, honestly:
- Reading the loss costs one device synchronisation per optimizer step (`.item()`).
- Under distributed training only the main process reports, and it reports its own loss; the
  Trainer's logged loss is the mean over processes.
- Added without `attach_to_trainer` (`callbacks=[CockpitTrainerCallback(...)]`), the callback
  can only forward `on_log`'s loss: set `logging_nan_inf_filter=False` and `logging_steps=1` in
  your TrainingArguments so a NaN reaches it (the callback warns once when the filter is on).
  Without `attach_to_trainer` an exception is recorded only at interpreter exit, as "failed"
  with error "ExitedBeforeTrainEnd" (the exception's type is not known there).
- Checkpoint events: the path is `output_dir/checkpoint-<step>`, its size the sum of its files;
  the seconds run from the last hook before the save (step end, log or evaluation) to `on_save`.

Lightning: `on_train_batch_end` reads `outputs["loss"]` (Lightning divides it by
`accumulate_grad_batches` under automatic optimisation; the callback multiplies it back), one
line per batch at `trainer.global_step`. Checkpoint events come from `ModelCheckpoint` saves:
`on_save_checkpoint` marks when the checkpoint dict was built and the file's modification time
when it was complete; a checkpoint saved by hand with `trainer.save_checkpoint` is not reported.
"""

from __future__ import annotations

import atexit
import functools
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cockpit.feed.reporter import RUN_ID_ENV, ReporterWarning, RunReporter, metric_value

# CockpitTrainerCallback and CockpitLightningCallback are built on first access (see __getattr__),
# so they stay out of __all__: `import *` must not import a framework.
__all__ = ["attach_to_trainer", "TrainerReporting", "LightningReporting"]

_CONFIG_NOISE = ("logging_dir",)  # Hugging Face stamps it with the time: it would change every start


def _run_id(run_id: str | None) -> str:
    run_id = run_id or os.environ.get(RUN_ID_ENV)
    if not run_id:
        raise ValueError(f"give the run's id from campaign.toml (or set {RUN_ID_ENV})")
    return run_id


def _folder_bytes(path: Path) -> int | None:
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        return None
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:  # removed while we counted (rotation of old checkpoints)
                pass
    return total


def _rename_metric(key: str) -> str:
    """Hugging Face's `eval_macro_f1` → `eval/macro_f1`, as its W&B integration names them."""
    for prefix in ("eval", "test"):
        if key.startswith(prefix + "_"):
            return f"{prefix}/{key[len(prefix) + 1:]}"
    return key


# ---------------------------------------------------------------- Hugging Face


class TrainerReporting:
    """The Hugging Face callback's logic, free of `transformers` (the real class adds the base)."""

    def __init__(self, campaign_dir: str | os.PathLike[str], run_id: str | None = None, config: Any = None):
        self.campaign_dir = Path(campaign_dir)
        self.run_id = _run_id(run_id)
        self.config = config
        self.reporter: RunReporter | None = None
        self.raw_loss = False  # True once attach() wrapped training_step
        self._pending: Any = None  # the current optimizer step's summed micro-batch losses
        self._mark = time.monotonic()  # the last hook before a save: its start, as near as hooks tell
        self._warned_filter = False
        self._atexit = False

    # -- wiring

    def attach(self, trainer: Any) -> Any:
        """Wrap `trainer.training_step` (raw loss) and `trainer.train` (failure status)."""
        step_function = trainer.training_step
        train_function = trainer.train

        @functools.wraps(step_function)
        def training_step(*args: Any, **kwargs: Any) -> Any:
            loss = step_function(*args, **kwargs)
            try:
                self._pending = loss if self._pending is None else self._pending + loss
            except Exception:  # an odd return type: keep the last one rather than break training
                self._pending = loss
            return loss

        @functools.wraps(train_function)
        def train(*args: Any, **kwargs: Any) -> Any:
            try:
                return train_function(*args, **kwargs)
            except BaseException as error:
                self._end("failed", type(error).__name__)
                raise

        trainer.training_step = training_step
        trainer.train = train
        self.raw_loss = True
        return trainer

    # -- hooks (the names and arguments of transformers.TrainerCallback)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._pending = None
        self._mark = time.monotonic()
        if not getattr(state, "is_world_process_zero", True):
            return
        if self.reporter is None:
            config = self.config if self.config is not None else self._args_config(args)
            self.reporter = RunReporter(self.campaign_dir, self.run_id, config)
            self.reporter.start()
            if not self._atexit:
                atexit.register(self._at_exit)
                self._atexit = True
        if not self.raw_loss and getattr(args, "logging_nan_inf_filter", False) and not self._warned_filter:
            self._warned_filter = True
            warnings.warn(
                "cockpit: logging_nan_inf_filter=True hides NaN losses from callbacks; use "
                "cockpit.feed.callbacks.attach_to_trainer(trainer, ...) or set logging_nan_inf_filter=False",
                ReporterWarning, stacklevel=2,
            )

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        loss, self._pending = self._pending, None
        if self.reporter is not None and loss is not None:
            self.reporter.log(state.global_step, loss=metric_value(loss))
        self._mark = time.monotonic()

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        if self.reporter is not None and logs:
            values = {
                _rename_metric(k): v for k, v in logs.items()
                if not (k == "loss" and self.raw_loss)  # the filtered average would mask the raw loss
            }
            if values:
                self.reporter.log(state.global_step, values)
        self._mark = time.monotonic()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._mark = time.monotonic()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        seconds = time.monotonic() - self._mark
        if self.reporter is not None:
            path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            self.reporter.checkpoint(path, seconds, _folder_bytes(path))
        self._mark = time.monotonic()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._end("ok")

    # -- helpers

    def _end(self, status: str, error: str | None = None) -> None:
        if self.reporter is not None:
            self.reporter.finish(status, error=error)
            self.reporter = None

    def _at_exit(self) -> None:
        if self.reporter is not None:  # training never reached on_train_end
            self._end("failed", "ExitedBeforeTrainEnd")

    @staticmethod
    def _args_config(args: Any) -> Any:
        to_dict = getattr(args, "to_dict", None)
        if not callable(to_dict):
            return None
        config = dict(to_dict())
        for key in _CONFIG_NOISE:
            config.pop(key, None)
        return config


def attach_to_trainer(trainer: Any, campaign_dir: str | os.PathLike[str], run_id: str | None = None,
                      config: Any = None) -> Any:
    """Add a `CockpitTrainerCallback` to a Hugging Face `Trainer`, reporting the raw loss."""
    callback = _trainer_callback_class()(campaign_dir, run_id, config)
    callback.attach(trainer)
    trainer.add_callback(callback)
    return callback


# ---------------------------------------------------------------- PyTorch Lightning


class LightningReporting:
    """The Lightning callback's logic, free of `lightning` (the real class adds the base)."""

    def __init__(self, campaign_dir: str | os.PathLike[str], run_id: str | None = None, config: Any = None):
        self.campaign_dir = Path(campaign_dir)
        self.run_id = _run_id(run_id)
        self.config = config
        self.reporter: RunReporter | None = None
        self._save_started: float | None = None  # wall clock, compared with the file's mtime
        self._reported: set[tuple[str, float]] = set()  # (path, mtime): `last.ckpt` is rewritten

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if not getattr(trainer, "is_global_zero", True) or self.reporter is not None:
            return
        config = self.config
        if config is None:
            hparams = getattr(pl_module, "hparams", None)
            config = dict(hparams) if isinstance(hparams, Mapping) and hparams else None
        self.reporter = RunReporter(self.campaign_dir, self.run_id, config)
        self.reporter.start()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._settle_checkpoint(trainer)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._settle_checkpoint(trainer)
        if self.reporter is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if loss is None:
            return
        value = metric_value(loss)
        accumulate = getattr(trainer, "accumulate_grad_batches", 1)
        if (isinstance(value, float) and isinstance(accumulate, int) and accumulate > 1
                and getattr(pl_module, "automatic_optimization", True)):
            value *= accumulate  # undo Lightning's division so steps compare with and without accumulation
        self.reporter.log(trainer.global_step, loss=value)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._settle_checkpoint(trainer)
        if self.reporter is None or getattr(trainer, "sanity_checking", False):
            return
        metrics = {k: v for k, v in dict(getattr(trainer, "callback_metrics", {}) or {}).items() if k != "loss"}
        if metrics:
            self.reporter.log(trainer.global_step, metrics)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._settle_checkpoint(trainer)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self._save_started = time.time()  # the dict is built now; the file is written right after

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._settle_checkpoint(trainer)
        self._end("ok")

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._settle_checkpoint(trainer)
        self._end("failed", type(exception).__name__)

    def _end(self, status: str, error: str | None = None) -> None:
        if self.reporter is not None:
            self.reporter.finish(status, error=error)
            self.reporter = None

    def _settle_checkpoint(self, trainer: Any) -> None:
        """Report the checkpoint whose dict was built since the last hook, once its file exists."""
        if self._save_started is None or self.reporter is None:
            return
        started, self._save_started = self._save_started, None
        newest: tuple[float, Path] | None = None
        for callback in getattr(trainer, "checkpoint_callbacks", None) or []:
            for attribute in ("_last_checkpoint_saved", "last_model_path", "best_model_path"):
                name = getattr(callback, attribute, None)
                if not name:
                    continue
                path = Path(name)
                try:
                    modified = path.stat().st_mtime
                except OSError:
                    continue
                if modified >= started - 1.0 and (newest is None or modified > newest[0]):
                    newest = (modified, path)
        if newest is None or (str(newest[1]), newest[0]) in self._reported:
            return
        modified, path = newest
        self._reported.add((str(path), modified))
        self.reporter.checkpoint(path, max(0.0, modified - started), _folder_bytes(path))


# ---------------------------------------------------------------- the framework classes, built lazily


@functools.cache
def _trainer_callback_class() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError as error:
        raise ImportError("CockpitTrainerCallback needs Hugging Face transformers: pip install transformers") from error

    return type("CockpitTrainerCallback", (TrainerReporting, TrainerCallback), {
        "__module__": __name__,
        "__doc__": "A `transformers.TrainerCallback` writing the run's metrics stream (see cockpit.feed.callbacks).",
    })


@functools.cache
def _lightning_callback_class() -> type:
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback
        except ImportError as error:
            raise ImportError("CockpitLightningCallback needs PyTorch Lightning: pip install lightning") from error

    return type("CockpitLightningCallback", (LightningReporting, Callback), {
        "__module__": __name__,
        "__doc__": "A Lightning `Callback` writing the run's metrics stream (see cockpit.feed.callbacks).",
    })


def __getattr__(name: str) -> Any:
    """`from cockpit.feed.callbacks import CockpitTrainerCallback` imports the framework only then."""
    if name == "CockpitTrainerCallback":
        return _trainer_callback_class()
    if name == "CockpitLightningCallback":
        return _lightning_callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
