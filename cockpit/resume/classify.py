"""What a checkpoint holds: its parts (model, optimizer, progress, …) from names and values,
Hugging Face checkpoint folders, and which checkpoint of a folder to check."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from cockpit.checkpoints import CheckpointUnreadable
from cockpit.checkpoints.headers import read_safetensors_header
from cockpit.checkpoints.kinds import FileKind
from cockpit.checkpoints.scan import Opaque, TensorStub, Vetting, count_tensors, is_damage, scan_torch_file, short_error, vet_file
from cockpit.resume.report import CHECKPOINT_SUFFIXES, PARTS, CheckpointFormat, Part, PartName, ResumeReport


# ---------------------------------------------------------------- what a checkpoint holds

_NAMES = {
    PartName.model: {
        "model", "model_state_dict", "state_dict", "net", "network", "weights", "model_state",
        "model_weights", "module", "params", "parameters", "net_state_dict", "model_state_dicts",
    },
    PartName.optimizer: {
        "optimizer", "optimizer_state_dict", "optim", "opt", "optimizer_state", "optimizers",
        "optim_state", "optim_state_dict", "opt_state", "opt_state_dict", "optimizer_states",
    },
    PartName.progress: {
        "epoch", "epochs", "step", "steps", "global_step", "iteration", "iterations", "iter", "it",
        "num_updates", "train_step", "num_steps", "current_step", "completed_steps", "global_steps",
        "n_iter", "cur_iter", "curr_step", "current_epoch", "optimizer_step", "update", "updates",
    },
    PartName.scheduler: {
        "scheduler", "lr_scheduler", "scheduler_state_dict", "sched", "lr_schedulers", "schedulers",
        "scheduler_state", "lr_scheduler_state_dict", "lr_sched", "lr_scheduler_state",
    },
    PartName.scaler: {
        "scaler", "grad_scaler", "amp", "scaler_state_dict", "amp_scaler", "loss_scaler", "amp_state",
        "grad_scaler_state_dict", "scaler_state", "amp_state_dict",
    },
    PartName.rng: {
        "rng", "rng_state", "rng_states", "torch_rng_state", "cuda_rng_state", "numpy_rng_state",
        "np_rng_state", "random_state", "python_rng_state", "py_rng_state", "cpu_rng_state",
        "rng_state_dict", "torch_rng", "numpy_rng", "cuda_rng", "python_rng", "random_states",
        "generator_state", "rng_generator", "torch_random_state", "numpy_random_state",
    },
    PartName.data_position: {
        "sampler", "sampler_state", "sampler_state_dict", "dataloader", "dataloader_state",
        "dataloader_state_dict", "data_loader", "data_position", "data_state", "data_pos",
        "batch_idx", "batch_index", "sample_index", "samples_seen", "consumed_samples",
        "consumed_train_samples", "data_offset", "data_iter", "dataset_state", "train_iter",
        "data_iterator", "batches_seen", "data_loader_state", "train_sampler", "sampler_position",
    },
}
_PART_OF_NAME = {name: part for part, names in _NAMES.items() for name in names}
_CONTAINER_HINTS = ("precision", "fp16", "bf16", "use_amp", "amp_dtype", "mixed_precision")


def _part_for_key(key: str) -> PartName | None:
    return _PART_OF_NAME.get(key.strip().lower().replace("-", "_"))


def _is_tensor_mapping(value: Any) -> bool:
    if not isinstance(value, dict) or not value:
        return False
    tensors = sum(1 for v in value.values() if isinstance(v, TensorStub))
    return tensors * 5 >= len(value) * 4  # a state_dict is tensors, give or take a buffer or two


def _is_optimizer_state(value: Any) -> bool:
    if isinstance(value, dict):
        return "param_groups" in value and "state" in value
    if isinstance(value, (list, tuple)) and value:
        return all(_is_optimizer_state(v) for v in value)
    return False


def _progress_value(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, TensorStub):
        return -1  # a 0-d tensor: present, value only visible to torch
    return None


def _plausible(part: PartName, value: Any) -> bool:
    if value is None:
        return False
    if part == PartName.progress:
        return _progress_value(value) is not None
    if part == PartName.model and isinstance(value, (dict, list, tuple)):
        return count_tensors(value) > 0  # {"model": {"name": "bert"}} is a config, not weights
    if part in (PartName.model, PartName.optimizer, PartName.scheduler, PartName.scaler):
        if isinstance(value, (dict, list, tuple)):
            return len(value) > 0
        return isinstance(value, Opaque)  # a pickled nn.Module or optimizer object
    return True


def _describe_progress(found: list[tuple[str, Any]]) -> str | None:
    shown = []
    for key, value in found:
        number = _progress_value(value)
        if number is None:
            continue
        shown.append(f"{key} (a tensor)" if number == -1 and isinstance(value, TensorStub) else f"{key} {number:g}")
    return ", ".join(shown) or None


def _walk_named_parts(mapping: dict, parts: dict[PartName, Part], progress: list[tuple[str, Any]], prefix: str = "", depth: int = 0) -> None:
    """Match keys by name (and a few by shape), looking one or two levels into plain dicts."""
    for key, value in mapping.items():
        if not isinstance(key, str):
            continue
        part = _part_for_key(key)
        if part is None and _is_optimizer_state(value):
            part = PartName.optimizer
        if part is not None and _plausible(part, value):
            if part == PartName.progress:
                progress.append((prefix + key, value))
            if not parts[part].present:
                parts[part] = Part(True, prefix + key, _detail(part, value))
            continue
        if depth < 2 and isinstance(value, dict) and not _is_tensor_mapping(value) and not _is_optimizer_state(value):
            _walk_named_parts(value, parts, progress, f"{prefix}{key}.", depth + 1)


def _detail(part: PartName, value: Any) -> str | None:
    if part == PartName.model and isinstance(value, dict):
        tensors = count_tensors(value)
        return f"{tensors} tensor{'s' if tensors != 1 else ''}" if tensors else None
    if part == PartName.model and isinstance(value, Opaque):
        return f"a pickled {value.qualname} object"
    if part == PartName.optimizer and isinstance(value, dict) and isinstance(value.get("param_groups"), list):
        groups = value["param_groups"]
        return f"{len(groups)} param group{'s' if len(groups) != 1 else ''}"
    return None


def _precision_hint(obj: Any, depth: int = 0) -> str | None:
    """'fp16' when loss scaling is in use, 'no-scaler' when the file says it trains without one."""
    if isinstance(obj, Opaque):
        obj = obj.fields()
    if not isinstance(obj, dict) or depth > 2:
        return None
    for key, value in obj.items():
        name = str(key).lower()
        if name in ("fp16", "half") and isinstance(value, bool) and value:
            return "fp16"
        if name == "precision" and isinstance(value, (str, int)) and not isinstance(value, bool):
            text = str(value).lower()
            if text in ("16", "16-mixed", "fp16", "float16", "half", "16-true"):
                return "fp16"
            if text in ("32", "32-true", "fp32", "float32", "bf16", "bf16-mixed", "bf16-true", "bfloat16", "64", "64-true", "tf32"):
                return "no-scaler"
        if name == "use_amp" and value is False:
            return "no-scaler"
    nested = [v for k, v in obj.items() if str(k).lower() in ("args", "config", "hparams", "hyper_parameters", "cfg", "training_args", "train_config")]
    for value in nested:
        hint = _precision_hint(value, depth + 1)
        if hint:
            return hint
    fp16, bf16 = obj.get("fp16"), obj.get("bf16")
    if fp16 is False and bf16 in (True, False):  # Hugging Face TrainingArguments' pair
        return "no-scaler"
    return None


def classify_object(obj: Any, report: ResumeReport) -> None:
    """Fill `report` from the object tree of a torch.save file (plain dict or Lightning)."""
    if isinstance(obj, Opaque) and not isinstance(obj, TensorStub):
        report.format = CheckpointFormat.pytorch
        report.parts[PartName.model] = Part(True, "(the whole file)", f"a pickled {obj.qualname} object")
        report.notes.append(
            f"the file is a whole pickled {obj.qualname} (torch.save(model)): it holds no optimizer "
            "or progress, and reloading it needs the same code at the same import path"
        )
        return
    if not isinstance(obj, dict):
        report.format = CheckpointFormat.pytorch
        report.notes.append(f"the file holds a {type(obj).__name__}, not a dict of states")
        return
    if _is_tensor_mapping(obj) and not any(isinstance(k, str) and _part_for_key(k) for k in obj):
        report.format = CheckpointFormat.pytorch
        report.parts[PartName.model] = Part(True, "(the whole file)", _detail(PartName.model, obj))
        report.notes.append("a bare state_dict: weights only (torch.save(model.state_dict()))")
        return
    if "pytorch-lightning_version" in obj or (
        "state_dict" in obj and any(k in obj for k in ("optimizer_states", "loops", "lr_schedulers"))
    ):
        _classify_lightning(obj, report)
        return
    report.format = CheckpointFormat.pytorch
    progress: list[tuple[str, Any]] = []
    _walk_named_parts(obj, report.parts, progress)
    if report.parts[PartName.progress].present:
        report.parts[PartName.progress].detail = _describe_progress(progress)
    if not report.parts[PartName.model].present:
        # a model saved under a name of its own ("encoder", "ema") still counts as weights
        for key, value in obj.items():
            if _is_tensor_mapping(value):
                report.parts[PartName.model] = Part(True, str(key), _detail(PartName.model, value))
                break
    _scaler_need(obj, report)


def _scaler_need(obj: Any, report: ResumeReport) -> None:
    if report.parts[PartName.scaler].present:
        return
    hint = _precision_hint(obj)
    if hint == "no-scaler":
        report.not_needed[PartName.scaler] = "the checkpoint records training without fp16 loss scaling"


_LIGHTNING_PRECISION = re.compile(r"precision", re.IGNORECASE)


def _classify_lightning(obj: dict, report: ResumeReport) -> None:
    report.format = CheckpointFormat.lightning
    parts = report.parts
    state = obj.get("state_dict")
    if isinstance(state, dict) and state:
        parts[PartName.model] = Part(True, "state_dict", _detail(PartName.model, state))
    optimizers = obj.get("optimizer_states")
    if isinstance(optimizers, list) and optimizers:
        parts[PartName.optimizer] = Part(True, "optimizer_states", f"{len(optimizers)} optimizer{'s' if len(optimizers) != 1 else ''}")
    elif "optimizer_states" not in obj:
        report.notes.append("no optimizer_states: saved with save_weights_only=True, which makes no resume point")
    shown = [(k, obj[k]) for k in ("global_step", "epoch") if _progress_value(obj.get(k)) is not None]
    if shown:
        parts[PartName.progress] = Part(True, shown[0][0], _describe_progress(shown))
    schedulers = obj.get("lr_schedulers")
    if isinstance(schedulers, list) and schedulers:
        parts[PartName.scheduler] = Part(True, "lr_schedulers", f"{len(schedulers)} scheduler{'s' if len(schedulers) != 1 else ''}")
    elif isinstance(schedulers, list) and parts[PartName.optimizer].present:
        report.not_needed[PartName.scheduler] = "lr_schedulers is empty: the LightningModule configures no scheduler"
    for key, value in obj.items():
        is_plugin = isinstance(key, str) and (_LIGHTNING_PRECISION.search(key) or key == "native_amp_scaling_state")
        if is_plugin and isinstance(value, dict):
            if "scale" in value:
                parts[PartName.scaler] = Part(True, key, f"loss scale {value['scale']:g}" if isinstance(value["scale"], (int, float)) else None)
            elif not value:
                report.not_needed[PartName.scaler] = f"{key} holds no scaler: the precision plugin scales no loss (bf16 or fp32)"
    if not parts[PartName.scaler].present and PartName.scaler not in report.not_needed:
        _scaler_need(obj, report)
    loops = obj.get("loops")
    fit = loops.get("fit_loop") if isinstance(loops, dict) else None
    if isinstance(fit, dict):
        batch = fit.get("epoch_loop.batch_progress")
        detail = None
        if isinstance(batch, dict) and isinstance(batch.get("current"), dict):
            completed = batch["current"].get("completed")
            if isinstance(completed, int):
                detail = f"batch {completed} of the epoch"
        parts[PartName.data_position] = Part(True, "loops.fit_loop", detail)
        if not _mentions(fit, ("combined_loader", "dataloader", "sampler")):
            report.notes.append(
                "Lightning records the batch within the epoch, but the dataloader keeps no state: after a "
                "mid-epoch resume Lightning warns and replays the epoch's order from its start; a save at an "
                "epoch's end, or a dataloader with state_dict/load_state_dict, resumes exactly"
            )
    # a callback may have added RNG or data state under a plain name
    progress: list[tuple[str, Any]] = []
    extras = {k: v for k, v in obj.items() if k not in ("state_dict", "optimizer_states", "lr_schedulers", "loops", "callbacks")}
    found = {p: Part(False) for p in PARTS}
    _walk_named_parts(extras, found, progress)
    for part in (PartName.rng, PartName.data_position, PartName.scaler):
        if found[part].present and not parts[part].present:
            parts[part] = found[part]
            report.not_needed.pop(part, None)
    if not parts[PartName.rng].present:
        report.notes.append(
            "Lightning saves no RNG state: after a resume, dropout and shuffling draw new random numbers "
            "(seed_everything only makes the start repeatable)"
        )


def _mentions(obj: Any, words: tuple[str, ...], depth: int = 0) -> bool:
    if not isinstance(obj, dict) or depth > 4:
        return False
    for key, value in obj.items():
        if isinstance(key, str) and any(w in key.lower() for w in words):
            return True
        if _mentions(value, words, depth + 1):
            return True
    return False


def classify_npz_keys(keys: list[str], scalars: dict[str, Any], report: ResumeReport) -> None:
    """The demo trainer's archive (see the module docstring), or any npz named the same way."""
    report.format = CheckpointFormat.demo if any(k.startswith("model/") for k in keys) else CheckpointFormat.npz
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(key.split("/", 1)[0], []).append(key)
    for head, members in groups.items():
        part = _part_for_key(head)
        if part is None or report.parts[part].present:
            continue
        detail = None
        if part == PartName.progress and isinstance(scalars.get(head), (int, float)):
            detail = f"{head} {scalars[head]:g}"
        elif part == PartName.data_position and isinstance(scalars.get(head), (int, float)):
            detail = f"{scalars[head]:g} samples consumed"
        elif len(members) > 1 or members[0] != head:
            detail = f"{len(members)} array{'s' if len(members) != 1 else ''}"
        report.parts[part] = Part(True, head if members == [head] else f"{head}/*", detail)
    precision = scalars.get("precision")
    if not report.parts[PartName.scaler].present and isinstance(precision, str):
        if precision.lower() in ("fp32", "float32", "bf16", "bfloat16", "32", "bf16-mixed"):
            report.not_needed[PartName.scaler] = f"precision is {precision}: no loss scaling"


# ---------------------------------------------------------------- Hugging Face checkpoint folders

_HF_WEIGHTS = re.compile(
    r"^(model|pytorch_model|adapter_model|diffusion_pytorch_model)(-\d{5}-of-\d{5})?\.(safetensors|bin)$"
)
_HF_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")


def is_hf_checkpoint(folder: Path) -> bool:
    if _HF_CHECKPOINT_DIR.match(folder.name):
        return True
    try:
        names = {p.name for p in folder.iterdir()}
    except OSError:
        return False
    if "trainer_state.json" in names or "optimizer.pt" in names:
        return True
    has_weights = any(_HF_WEIGHTS.match(n) for n in names)
    has_subcheckpoints = any(_HF_CHECKPOINT_DIR.match(n) for n in names)
    return has_weights and not has_subcheckpoints


def classify_hf_folder(folder: Path, report: ResumeReport) -> list[tuple[Path, FileKind]]:
    """Fill `report` from the folder's files; return the files to reload (path, kind)."""
    report.format = CheckpointFormat.huggingface
    parts = report.parts
    try:
        entries = sorted(folder.iterdir())
    except OSError as error:
        report.problem = f"cannot list the folder: {error.strerror or error}"
        return []
    names = {p.name: p for p in entries}
    to_reload: list[tuple[Path, FileKind]] = []
    size = 0
    tensors = 0
    weights = [p for p in entries if _HF_WEIGHTS.match(p.name) and p.is_file()]
    if weights:
        parts[PartName.model] = Part(True, ", ".join(p.name for p in weights[:3]) + (" …" if len(weights) > 3 else ""))
        if any(p.name.startswith("adapter_model") for p in weights):
            report.notes.append("an adapter checkpoint: the base model's weights come from its own files, not from here")
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if index in names:
            _check_shards(names[index], folder, report)
    for path in weights:
        kind = FileKind.safetensors if path.suffix == ".safetensors" else FileKind.torch
        to_reload.append((path, kind))
        if kind == FileKind.safetensors:
            try:
                header = read_safetensors_header(path)
                tensors += header.tensor_count
                report.vetting[str(path)] = Vetting()
            except CheckpointUnreadable as error:
                report.vetting[str(path)] = Vetting(damaged=str(error))
    if "optimizer.pt" in names:
        parts[PartName.optimizer] = Part(True, "optimizer.pt")
        to_reload.append((names["optimizer.pt"], FileKind.torch))
    else:
        deepspeed = [p for p in entries if p.is_dir() and re.match(r"^global_step\d+$", p.name)]
        fsdp = [p for p in entries if p.is_dir() and p.name.startswith("optimizer_")]
        if deepspeed or fsdp:
            where = (deepspeed or fsdp)[0].name
            parts[PartName.optimizer] = Part(True, f"{where}/", "sharded (DeepSpeed/FSDP); not reloaded here")
            report.notes.append(f"the optimizer is sharded in {where}/: it reloads only under the same sharding setup, not checked here")
    if "scheduler.pt" in names:
        parts[PartName.scheduler] = Part(True, "scheduler.pt")
        to_reload.append((names["scheduler.pt"], FileKind.torch))
    if "scaler.pt" in names:
        parts[PartName.scaler] = Part(True, "scaler.pt")
        to_reload.append((names["scaler.pt"], FileKind.torch))
    rng_files = [p for p in entries if re.match(r"^rng_state(_\d+)?\.pth$", p.name)]
    if rng_files:
        parts[PartName.rng] = Part(True, rng_files[0].name if len(rng_files) == 1 else f"{len(rng_files)} rng_state_*.pth files")
        to_reload.extend((p, FileKind.torch) for p in rng_files)
    state_file = names.get("trainer_state.json")
    folder_step = _HF_CHECKPOINT_DIR.match(folder.name)
    if state_file is not None:
        try:
            state = json.loads(state_file.read_text(encoding="utf-8"))
            if not isinstance(state, dict):
                raise ValueError("not an object")
        except (OSError, UnicodeDecodeError, ValueError) as error:
            report.notes.append(f"trainer_state.json does not parse ({error}): the Trainer would start again from step 0")
            state = {}
        step = state.get("global_step")
        if isinstance(step, int) and not isinstance(step, bool):
            epoch = state.get("epoch")
            detail = f"global_step {step}" + (f", epoch {epoch:g}" if isinstance(epoch, (int, float)) and not isinstance(epoch, bool) else "")
            parts[PartName.progress] = Part(True, "trainer_state.json", detail)
            parts[PartName.data_position] = Part(True, "trainer_state.json", f"skips the first {step} batches")
            report.notes.append(
                "the Trainer derives the data position from global_step: on resume it skips that many batches "
                "(unless ignore_data_skip is set), which takes time with a slow dataloader"
            )
            if folder_step and int(folder_step.group(1)) != step:
                report.notes.append(f"the folder says step {folder_step.group(1)}, trainer_state.json says {step}")
    elif folder_step:
        report.notes.append("no trainer_state.json: the Trainer would resume from step 0 despite the folder's name")
    args_file = names.get("training_args.bin")
    if args_file is not None and not parts[PartName.scaler].present:
        try:
            scan = scan_torch_file(args_file)
            fields = scan.obj.fields() if isinstance(scan.obj, Opaque) else {}
            if fields.get("fp16") is False:
                report.not_needed[PartName.scaler] = "training_args.bin: fp16 is off, so there is no loss scaler to save"
        except CheckpointUnreadable:
            pass
    for path in entries:
        if path.is_file():
            try:
                size += path.stat().st_size
            except OSError:
                pass
    _vet_hf_files(entries, to_reload, report)
    report.size_bytes = size
    report.tensor_count = tensors or None
    return to_reload


_HF_TORCH_SUFFIXES = (".pt", ".pth", ".bin")


def _vet_hf_files(entries: list[Path], to_reload: list[tuple[Path, FileKind]], report: ResumeReport) -> None:
    """Each file of the folder: CRC-32 of a torch file's members, a safetensors file's sizes, a
    JSON file's syntax; the files to reload are vetted again in verify_resume (from the cache)."""
    reloading = {str(p) for p, _kind in to_reload}
    for path in entries:
        if not path.is_file() or str(path) in reloading:
            continue
        if path.suffix == ".json":
            try:
                json.loads(path.read_bytes().decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as error:
                report.damaged.append(f"{path.name}: damaged: it does not parse as JSON ({short_error(error)})")
            except OSError as error:
                report.damaged.append(f"{path.name}: cannot read it: {error.strerror or error}")
            continue
        kind = FileKind.safetensors if path.suffix == ".safetensors" else FileKind.torch if path.suffix in _HF_TORCH_SUFFIXES else None
        if kind is None:
            continue
        cause = vet_file(path, kind).damaged
        if cause and is_damage(cause):
            report.damaged.append(f"{path.name}: {cause}")


def _check_shards(index: Path, folder: Path, report: ResumeReport) -> None:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        report.notes.append(f"{index.name} does not parse")
        return
    shards = sorted(set(weight_map.values())) if isinstance(weight_map, dict) else []
    absent = [s for s in shards if not (folder / s).is_file()]
    if absent:
        report.notes.append(f"{index.name} names {len(absent)} shard(s) that are not here: {', '.join(absent[:3])}")


# ---------------------------------------------------------------- choosing what to check


def _number_in(name: str) -> int:
    match = re.search(r"step[=_-]?(\d+)", name) or re.search(r"(\d+)(?!.*\d)", name)
    return int(match.group(1)) if match else -1


def newest_checkpoint(folder: Path) -> tuple[Path | None, int]:
    """In a folder of checkpoints: the newest one, and how many there are."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return None, 0
    hf = [p for p in entries if p.is_dir() and _HF_CHECKPOINT_DIR.match(p.name)]
    if hf:
        return max(hf, key=lambda p: int(_HF_CHECKPOINT_DIR.match(p.name).group(1))), len(hf)
    files = [
        p for p in entries
        if p.is_file() and p.suffix in CHECKPOINT_SUFFIXES and not p.name.startswith(".")
        and not p.name.endswith((".tmp", ".partial"))
    ]
    if not files:
        return None, 0

    def newest(p: Path) -> tuple[int, int]:
        try:
            mtime = p.stat().st_mtime_ns
        except OSError:
            mtime = 0
        return (mtime, _number_in(p.name))

    return max(files, key=newest), len(files)


