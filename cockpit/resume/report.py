"""What verify-resume reports: the parts of a resumable checkpoint, the reload's outcome, the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cockpit.checkpoints.scan import Vetting


class PartName(StrEnum):
    """The parts of a resumable checkpoint, in the order the report lists them."""

    model = "model"
    optimizer = "optimizer"
    progress = "progress"
    scheduler = "scheduler"
    scaler = "scaler"
    rng = "rng"
    data_position = "data_position"


class CheckpointFormat(StrEnum):
    """What a checkpoint was read as (the report's `format`)."""

    unknown = "unknown"
    pytorch = "pytorch"
    lightning = "lightning"
    huggingface = "huggingface"
    safetensors = "safetensors"
    demo = "demo"  # the demo trainer's npz (see cockpit/resume/verify.py)
    npz = "npz"


PARTS = tuple(PartName)

COSTS = {
    PartName.model: "model missing: nothing to resume from; the run starts again from its initial weights",
    PartName.optimizer: "optimizer missing: momentum and Adam's moments restart from zero, the loss jumps and "
    "the continuation is a different run (no resume point)",
    PartName.progress: "progress missing: the step and epoch are unknown, so the schedule, the logs and the "
    "stop at total_steps start again from 0 (no resume point)",
    PartName.scheduler: "scheduler missing: the learning-rate schedule restarts from its first step "
    "(warm-up again, decay from the top)",
    PartName.scaler: "scaler missing: mixed-precision loss scaling restarts from its initial scale "
    "(only matters with fp16: a few skipped steps while it settles)",
    PartName.rng: "RNG missing: dropout, augmentation and shuffling draw new random numbers; the resumed run "
    "is not the one that stopped, bit for bit",
    PartName.data_position: "data position missing: the epoch's data order starts again from its beginning, "
    "so this epoch sees some samples twice and skips others",
}

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".npz", ".safetensors", ".tar")
DEFAULT_TIMEOUT_S = 600.0


# ---------------------------------------------------------------- the report


@dataclass
class Part:
    present: bool
    where: str | None = None  # the key or file it was found in
    detail: str | None = None  # e.g. "epoch 5, step 1200"


@dataclass
class FileReload:
    path: str
    ok: bool
    seconds: float | None = None
    weights_only: bool | None = None
    tensor_count: int | None = None
    error: str | None = None
    unsafe_globals: list[str] = field(default_factory=list)
    reader: str | None = None  # for npz and safetensors: what read it
    needs_trust: bool = False  # torch refused it with weights_only=True and --trust-checkpoint was not given
    would_run_code: list[str] = field(default_factory=list)  # globals outside the allowlist: never loaded


@dataclass
class Reload:
    tried: bool = False
    ok: bool = False
    seconds: float | None = None  # the loads themselves, not the interpreter start
    process_seconds: float | None = None  # the whole fresh process, torch import included
    weights_only: bool | None = None  # True when every file loaded with weights_only=True
    python: str | None = None
    torch_version: str | None = None
    tensor_count: int | None = None
    error: str | None = None
    files: list[FileReload] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "tried": self.tried,
            "ok": self.ok,
            "seconds": _round(self.seconds),
            "process_seconds": _round(self.process_seconds),
            "weights_only": self.weights_only,
            "python": self.python,
            "torch": self.torch_version,
            "error": self.error,
            "files": [
                {
                    "path": f.path, "ok": f.ok, "seconds": _round(f.seconds), "weights_only": f.weights_only,
                    "tensor_count": f.tensor_count, "error": f.error, "unsafe_globals": f.unsafe_globals,
                    "reader": f.reader, "needs_trust_checkpoint": f.needs_trust, "would_run_code": f.would_run_code,
                }
                for f in self.files
            ],
        }


@dataclass
class ResumeReport:
    path: str  # as given
    checkpoint: str | None  # what was checked (the newest one when PATH is a folder of them)
    format: CheckpointFormat
    parts: dict[PartName, Part] = field(default_factory=lambda: {p: Part(False) for p in PARTS})
    not_needed: dict[PartName, str] = field(default_factory=dict)  # part → why its absence costs nothing
    size_bytes: int | None = None
    tensor_count: int | None = None
    reload: Reload = field(default_factory=Reload)
    notes: list[str] = field(default_factory=list)
    problem: str | None = None  # why the contents could not be read at all
    foreign_globals: list[str] = field(default_factory=list)  # what weights_only=True would refuse
    damaged: list[str] = field(default_factory=list)  # "<file>: damaged: member … fails its CRC-32", …
    trusted: bool = False  # --trust-checkpoint was given
    vetting: dict[str, "Vetting"] = field(default_factory=dict, repr=False)  # per file, before any reload

    @property
    def would_run_code(self) -> list[str]:
        return list(dict.fromkeys(g for f in self.reload.files for g in f.would_run_code))

    @property
    def needs_trust(self) -> list[str]:
        return list(dict.fromkeys(g for f in self.reload.files if f.needs_trust for g in (f.unsafe_globals or ["objects beyond tensors"])))

    @property
    def has(self) -> dict[str, bool]:
        return {p: self.parts[p].present for p in PARTS}

    @property
    def missing(self) -> list[str]:
        return [p for p in PARTS if not self.parts[p].present and p not in self.not_needed]

    @property
    def costs(self) -> dict[str, str]:
        return {p: COSTS[p] for p in self.missing}

    @property
    def resume_point(self) -> bool:
        return not self.damaged and all(self.parts[p].present for p in (PartName.model, PartName.optimizer, PartName.progress))

    @property
    def reload_ok(self) -> bool:
        return self.reload.ok

    @property
    def ok(self) -> bool:
        return self.resume_point and self.reload_ok

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "checkpoint": self.checkpoint,
            "format": self.format,
            "has": self.has,
            "missing": self.missing,
            "reload_ok": self.reload_ok,
            "reload_seconds": _round(self.reload.seconds) if self.reload.ok else None,
            "size_bytes": self.size_bytes,
            "tensor_count": self.tensor_count,
            "costs": self.costs,
            "not_needed": dict(self.not_needed),
            "found": {p: part.where for p, part in self.parts.items() if part.present},
            "details": {p: part.detail for p, part in self.parts.items() if part.detail},
            "resume_point": self.resume_point,
            "reload": self.reload.to_json(),
            "problem": self.problem,
            "damaged": list(self.damaged),
            "would_run_code": self.would_run_code,
            "needs_trust_checkpoint": self.needs_trust,
            "trust_checkpoint": self.trusted,
            "notes": list(self.notes),
        }


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


