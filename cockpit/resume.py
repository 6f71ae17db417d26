"""Resume verification : is a checkpoint a resume point, does it reload in a new process,
and how often should a run save given what a save costs.

Neither torch nor numpy is a cockpit dependency: the contents of a torch file are read by a
pickle scanner that imports nothing from the file (every class becomes an inert stand-in), and
the reload runs in a fresh interpreter (the training environment's, with `--python`), where
torch is imported if it is there.

Nothing is handed to an unpickler before it is vetted: the CRC-32 of every zip member (torch's own
zip reader checks none), a safetensors header against the file's sizes, and the globals each pickle
names, read with pickletools. A global outside a short allowlist would run code and is never loaded;
a file that torch.load(weights_only=True) refuses is loaded only with --trust-checkpoint, by an
unpickler that admits nothing but the allowlisted globals found in it.

Demo checkpoint format
----------------------
The demo's toy trainer saves one uncompressed zip of `.npy` members per save, exactly what
`numpy.savez` writes (it may be written without numpy), named `step-<step>.npz` in the run's
checkpoints folder (`runs/<run-id>/checkpoints/` unless `campaign.toml` says otherwise). It
writes `step-<step>.npz.tmp` first and then `os.replace`s it, so a half-written save never
carries the final name; nothing in it needs `allow_pickle`. Keys (member names without `.npy`),
all little-endian:

- `model/<param>`            float32 arrays, one per parameter (e.g. `model/weights`, `model/bias`)
- `optimizer/<slot>/<param>` float32 arrays, the optimizer's per-parameter state (Adam:
                             `optimizer/m/<param>`, `optimizer/v/<param>`)
- `optimizer/t`              int64 0-d, the optimizer's own step count (Adam's bias correction);
                             other `optimizer/*` hyper-parameters as float64 (`optimizer/eps`, …)
- `step`                     int64 0-d, optimizer steps done; training resumes at `step + 1`
- `scheduler/last_step`      int64 0-d, the learning-rate schedule's position
- `scheduler/base_lr`        float64 0-d, the schedule's base learning rate (more `scheduler/*`
                             scalars as the schedule needs: `step_size` int64, `gamma` float64)
- `rng_state`                0-d unicode string (dtype `<U…`): the JSON of the generator's state
                             (Python's `random.getstate()` as `[version, [internal…], gauss]`, or
                             numpy's `Generator.bit_generator.state`)
- `data_position`            int64 0-d, training examples consumed since the start, across epochs
                             (each epoch's order is a permutation seeded from the seed and the
                             epoch, so the offset resumes exactly)
- `precision`                0-d unicode string `"fp32"`: no loss scaler exists or is needed

A resume point needs `model/*`, `optimizer/*` and `step`; the others are checked and their
absence explained like any other format's. Other keys (e.g. `config`) are allowed and ignored.
"""

from __future__ import annotations

import ast
import codecs
import collections
import json
import math
import os
import pickle
import pickletools
import re
import statistics
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterable

PARTS = ("model", "optimizer", "progress", "scheduler", "scaler", "rng", "data_position")

COSTS = {
    "model": "model missing: nothing to resume from; the run starts again from its initial weights",
    "optimizer": "optimizer missing: momentum and Adam's moments restart from zero, the loss jumps and "
    "the continuation is a different run (no resume point)",
    "progress": "progress missing: the step and epoch are unknown, so the schedule, the logs and the "
    "stop at total_steps start again from 0 (no resume point)",
    "scheduler": "scheduler missing: the learning-rate schedule restarts from its first step "
    "(warm-up again, decay from the top)",
    "scaler": "scaler missing: mixed-precision loss scaling restarts from its initial scale "
    "(only matters with fp16: a few skipped steps while it settles)",
    "rng": "RNG missing: dropout, augmentation and shuffling draw new random numbers; the resumed run "
    "is not the one that stopped, bit for bit",
    "data_position": "data position missing: the epoch's data order starts again from its beginning, "
    "so this epoch sees some samples twice and skips others",
}

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".npz", ".safetensors", ".tar")
DEFAULT_TIMEOUT_S = 600.0
_RESULT_MARK = "@@cockpit-reload@@"


class CheckpointUnreadable(Exception):
    """The file cannot be read as a checkpoint; the message is the plain cause."""


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
    format: str
    parts: dict[str, Part] = field(default_factory=lambda: {p: Part(False) for p in PARTS})
    not_needed: dict[str, str] = field(default_factory=dict)  # part → why its absence costs nothing
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
        return not self.damaged and all(self.parts[p].present for p in ("model", "optimizer", "progress"))

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


# ---------------------------------------------------------------- reading torch files without torch


class _Opaque:
    """An object of a class the scan does not import: it keeps what the pickle hands it."""

    qualname = "object"

    def __new__(cls, *args: Any, **kwargs: Any) -> "_Opaque":
        self = object.__new__(cls)
        self.args = args
        self.state = None
        self.items = {}
        self.elements = []
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items[key] = value

    def append(self, value: Any) -> None:
        self.elements.append(value)

    def extend(self, values: Iterable[Any]) -> None:
        self.elements.extend(values)

    def fields(self) -> dict[str, Any]:
        """Attributes as pickled (a dataclass, an argparse.Namespace …), else nothing."""
        state = self.state
        if isinstance(state, tuple) and state and isinstance(state[0], dict):
            state = state[0]
        return state if isinstance(state, dict) else {}


class _Tensor(_Opaque):
    qualname = "torch.Tensor"


class _Storage:
    pass


def _real_encode(text: Any, encoding: str = "utf-8", errors: str = "strict") -> Any:
    # numpy and old protocols pickle bytes as _codecs.encode(str, "latin1"); nothing else is run
    if encoding in ("latin1", "latin-1") and isinstance(text, str):
        return codecs.encode(text, encoding, errors)
    return _Opaque(text, encoding)


# constructors that cannot allocate more than the pickle already holds (bytes(10**12) could)
_REAL_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("builtins", "int"): int,
    ("builtins", "float"): float,
    ("builtins", "str"): str,
    ("builtins", "bool"): bool,
    ("builtins", "tuple"): tuple,
    ("builtins", "list"): list,
    ("builtins", "dict"): dict,
    ("_codecs", "encode"): _real_encode,
}
# torch internals that torch.load(weights_only=True) allows: they say nothing about the file's needs
_TORCH_SAFE_MODULES = {"torch", "torch._utils", "torch._tensor", "torch.serialization", "torch.nn.parameter"}


class _ScanUnpickler(pickle.Unpickler):
    def __init__(self, file: Any):
        super().__init__(file)
        self.globals_seen: set[str] = set()
        self._stubs: dict[tuple[str, str], type] = {}

    def find_class(self, module: str, name: str) -> Any:
        real = _REAL_GLOBALS.get((module, name))
        if real is not None:
            return real
        if module.startswith("torch") and name.startswith("_rebuild"):
            return _Tensor
        if not (module in _TORCH_SAFE_MODULES and (name.endswith("Storage") or name in _TORCH_PLAIN)):
            self.globals_seen.add(f"{module}.{name}")
        stub = self._stubs.get((module, name))
        if stub is None:
            stub = type(name, (_Opaque,), {"qualname": f"{module}.{name}"})
            self._stubs[(module, name)] = stub
        return stub

    def persistent_load(self, pid: Any) -> Any:
        return _Storage()


_TORCH_PLAIN = {
    "Size", "device", "dtype", "layout", "memory_format", "float32", "float16", "bfloat16", "float64",
    "int64", "int32", "int16", "int8", "uint8", "bool", "complex64", "complex128", "_get_layout",
    "Tensor", "Parameter", "strided", "sparse_coo", "contiguous_format", "preserve_format",
}

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_CHUNK = 1 << 20  # bytes read at a time when a whole member is checked: the memory stays flat


# ---------------------------------------------------------------- what a pickle would run

# Unpickling calls every global a pickle names (a class, a function): that is how a checkpoint runs
# code (os.system is "posix.system" inside a pickle). The globals are read by walking the opcodes
# with pickletools, which unpickles nothing; only a file whose globals are all in this short list is
# ever handed to an unpickler, and with --trust-checkpoint the reload's unpickler admits no others.
_TORCH_MODULES = {"torch", "torch._utils", "torch._tensor", "torch.tensor", "torch.serialization", "torch.nn.parameter", "torch.storage"}
_PLAIN_GLOBALS = {
    "collections.OrderedDict", "builtins.set", "builtins.frozenset", "builtins.complex", "builtins.slice",
    "builtins.int", "builtins.float", "builtins.str", "builtins.bool", "builtins.tuple", "builtins.list",
    "builtins.dict", "builtins.bytearray", "_codecs.encode",
    "__builtin__.set", "__builtin__.frozenset", "__builtin__.complex", "__builtin__.slice",
}
_TRUSTED_GLOBALS = {
    "collections.defaultdict", "collections.Counter", "collections.deque", "argparse.Namespace", "decimal.Decimal",
    "datetime.datetime", "datetime.date", "datetime.time", "datetime.timedelta", "datetime.timezone",
    "pathlib.PosixPath", "pathlib.PurePosixPath", "pathlib.WindowsPath", "pathlib.PureWindowsPath",
    "lightning.fabric.utilities.data.AttributeDict", "lightning_fabric.utilities.data.AttributeDict",
    "pytorch_lightning.utilities.parsing.AttributeDict",
}
_NUMPY_ARRAY_GLOBALS = {
    f"{module}.{name}"
    for module in ("numpy.core.multiarray", "numpy._core.multiarray")
    for name in ("_reconstruct", "scalar")
} | {"numpy.ndarray", "numpy.dtype"}
_NUMPY_RANDOM = re.compile(
    r"^numpy\.random\.(_pickle\.__(randomstate|generator|bit_generator)_ctor|"
    r"(_mt19937\.MT19937|_pcg64\.PCG64|_pcg64\.PCG64DXSM|_philox\.Philox|_sfc64\.SFC64|mtrand\.RandomState|"
    r"_generator\.Generator|bit_generator\.SeedSequence))$"
)
_NUMPY_DTYPE = re.compile(r"^numpy\.dtypes\.[A-Za-z0-9]+DType$")
ALLOWLIST_WORDS = "torch's tensors, numpy arrays and RNG states, collections, argparse.Namespace, dates, paths and plain values"
TRUST_FLAG = "--trust-checkpoint"


def _torch_plain(name: str) -> bool:
    module, _, attr = name.rpartition(".")
    return module in _TORCH_MODULES and (attr.startswith("_rebuild") or attr.endswith("Storage") or attr in _TORCH_PLAIN or attr == "_get_layout")


def weights_only_global(name: str) -> bool:
    """What torch.load(weights_only=True) loads without being told: tensors and plain values."""
    return name in _PLAIN_GLOBALS or _torch_plain(name)


def allowlisted_global(name: str) -> bool:
    """A global that builds data, never runs code of its own: the only ones ever unpickled."""
    return (
        weights_only_global(name) or name in _TRUSTED_GLOBALS or name in _NUMPY_ARRAY_GLOBALS
        or bool(_NUMPY_RANDOM.match(name)) or bool(_NUMPY_DTYPE.match(name))
    )


def numpy_array_global(name: str) -> bool:
    return name in _NUMPY_ARRAY_GLOBALS or bool(_NUMPY_DTYPE.match(name))


_STRING_OPS = {
    "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING",
}
_UNRESOLVED = "a global named at run time (STACK_GLOBAL of computed strings)"


def pickle_globals(handle: Any) -> list[str]:
    """Every global (`module.name`) one pickle names, in order, read opcode by opcode with
    pickletools: nothing is unpickled, nothing imported. Reads up to the pickle's STOP.

    Raises ValueError (or another exception of pickletools') when the pickle does not parse."""
    mark = object()
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    found: list[str] = []
    for op, arg, _pos in pickletools.genops(handle):
        name = op.name
        before = op.stack_before
        if pickletools.markobject in before:
            while True:  # everything down to the mark, and the mark
                if not stack:
                    raise ValueError(f"{name} without a mark")
                if stack.pop() is mark:
                    break
            count = before.index(pickletools.markobject)  # what lies below the mark (APPENDS' list)
        else:
            count = len(before)
        if count > len(stack):
            raise ValueError(f"{name} on a stack of {len(stack)}")
        popped = stack[len(stack) - count:] if count else []
        del stack[len(stack) - count:]
        if name in ("GLOBAL", "INST"):
            module, _, attr = str(arg).partition(" ")
            found.append(f"{module}.{attr}")
        elif name == "STACK_GLOBAL":
            module, attr = popped
            found.append(f"{module}.{attr}" if isinstance(module, str) and isinstance(attr, str) else _UNRESOLVED)
        elif name in ("EXT1", "EXT2", "EXT4"):
            found.append(f"copyreg extension {arg}")
        if name == "MARK":
            stack.append(mark)
        elif name in _STRING_OPS:
            stack.append(arg)
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            if arg not in memo:
                raise ValueError(f"{name} of memo {arg}, never stored")
            stack.append(memo[arg])
        elif name == "MEMOIZE":
            memo[len(memo)] = popped[-1]
            stack.extend(popped)
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            if not stack:
                raise ValueError(f"{name} on an empty stack")
            memo[arg] = stack[-1]
        elif name == "DUP":
            stack.extend(popped * 2)
        else:
            stack.extend(None for _ in op.stack_after)
    return found


def would_run_code(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(n for n in names if not allowlisted_global(n)))


def needs_trust(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(n for n in names if allowlisted_global(n) and not weights_only_global(n)))


def would_run_code_message(names: list[str], *, flag: bool = True) -> str:
    shown = ", ".join(names[:6]) + (" …" if len(names) > 6 else "")
    text = f"would run code: {shown} (unpickling calls {'it' if len(names) == 1 else 'them'}); not loaded"
    return text + (f", not even with {TRUST_FLAG}, which admits only {ALLOWLIST_WORDS}" if flag else "")


def needs_trust_message(names: list[str]) -> str:
    shown = ", ".join(dict.fromkeys(_plain_global(n) for n in names[:6])) + (" …" if len(names) > 6 else "")
    return (
        f"torch.load(weights_only=True) refuses it (it holds {shown or 'objects beyond tensors and plain values'}), "
        f"and nothing else unpickles it without {TRUST_FLAG}: pass {TRUST_FLAG} to load it with only those "
        "globals admitted (for a file you trust)"
    )


# ---------------------------------------------------------------- damage: CRC-32 and sizes


def zip_damage(archive: zipfile.ZipFile) -> list[str]:
    """Each member whose bytes do not match the CRC-32 of the central directory, read in chunks.

    torch's own zip reader checks no CRC, so flipped bytes in a tensor load as garbage weights."""
    damaged: list[str] = []
    for info in archive.infolist():
        if info.is_dir():
            continue
        crc = 0
        try:
            with archive.open(info) as member:
                while True:
                    chunk = member.read(_CHUNK)
                    if not chunk:
                        break
                    crc = zlib.crc32(chunk, crc)
        except zipfile.BadZipFile as error:
            text = str(error)
            if "CRC" in text:
                damaged.append(f"member {info.filename} fails its CRC-32")
            else:
                damaged.append(f"member {info.filename} cannot be read ({text})")
            continue
        except (EOFError, zlib.error, ValueError, NotImplementedError) as error:
            damaged.append(f"member {info.filename} cannot be read ({_short(error)})")
            continue
        if crc != info.CRC:
            damaged.append(f"member {info.filename} fails its CRC-32")
    return damaged


def _damaged_text(damaged: list[str]) -> str:
    more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
    return f"damaged: {damaged[0]}{more}"


@dataclass
class TorchScan:
    obj: Any
    tensor_count: int
    globals: list[str]  # classes and functions beyond what torch.load(weights_only=True) allows
    all_globals: list[str] = field(default_factory=list)  # every global the pickle names
    damaged: list[str] = field(default_factory=list)  # members whose CRC-32 fails (not data.pkl)
    structure_error: str | None = None  # the globals are known, the object tree could not be read

    @property
    def would_run_code(self) -> list[str]:
        return would_run_code(self.all_globals)

    @property
    def needs_trust(self) -> list[str]:
        return needs_trust(self.all_globals)


@dataclass
class Vetting:
    """What a file is before anything unpickles it: damaged or not, and the globals it names."""

    damaged: str | None = None
    globals: list[str] = field(default_factory=list)

    @property
    def would_run_code(self) -> list[str]:
        return would_run_code(self.globals)

    @property
    def needs_trust(self) -> list[str]:
        return needs_trust(self.globals)


def vet_file(path: Path, kind: str) -> Vetting:
    """CRC-32 of every zip member, a safetensors header's sizes, a torch pickle's globals."""
    if kind == "torch":
        try:
            scan = scan_torch_file(path, structure=False)
        except CheckpointUnreadable as error:
            return Vetting(damaged=str(error))
        return Vetting(damaged=_damaged_text(scan.damaged) if scan.damaged else None, globals=scan.all_globals)
    if kind == "safetensors":
        try:
            read_safetensors_header(path)
        except CheckpointUnreadable as error:
            return Vetting(damaged=str(error))
    if kind == "npz":
        try:
            with zipfile.ZipFile(path) as archive:
                damaged = zip_damage(archive)
        except zipfile.BadZipFile as error:
            return Vetting(damaged=f"damaged archive: {error}")
        except OSError as error:
            return Vetting(damaged=f"cannot read it: {error.strerror or error}")
        return Vetting(damaged=_damaged_text(damaged) if damaged else None)
    return Vetting()


_TORCH_VETTED: dict[tuple[str, int, int], str | None] = {}


def torch_file_refusal(path: Path) -> str | None:
    """Why a torch file must not be handed to torch.load at all (damaged, or it would run code),
    else None; for callers that load with weights_only=True only (the closing's reload)."""
    try:
        stat = path.stat()
    except OSError:
        return None  # the caller reports the unreadable file its own way
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _TORCH_VETTED:
        vetting = vet_file(path, "torch")
        refusal = None
        if vetting.damaged and not vetting.damaged.startswith("not a torch.save file"):
            refusal = f"{path.name}: {vetting.damaged}"
        elif vetting.would_run_code:
            refusal = f"{path.name}: {would_run_code_message(vetting.would_run_code, flag=False)}"
        if len(_TORCH_VETTED) > 1000:
            _TORCH_VETTED.clear()
        _TORCH_VETTED[key] = refusal
    return _TORCH_VETTED[key]


def scan_torch_file(path: Path, *, structure: bool = True) -> TorchScan:
    """Read a `torch.save` file without torch and without running anything in it: every zip
    member's CRC-32, the globals its pickle names (pickletools), then the object tree, every class
    an inert stand-in. Raises CheckpointUnreadable when the pickle itself cannot be trusted."""
    try:
        with path.open("rb") as handle:
            head = handle.read(4)
    except OSError as error:
        raise CheckpointUnreadable(f"cannot read it: {error.strerror or error}") from None
    if not head:
        raise CheckpointUnreadable("the file is empty (a save that never wrote anything)")
    damaged: list[str] = []
    obj: Any = None
    structure_error = None
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if n.endswith("data.pkl")]
                if not names:
                    raise CheckpointUnreadable("a zip archive without data.pkl: not a torch.save file")
                pickled = min(names, key=len)
                damaged = zip_damage(archive)
                if any(d.startswith(f"member {pickled} ") for d in damaged):
                    raise CheckpointUnreadable(_damaged_text(damaged))
                with archive.open(pickled) as member:
                    try:
                        found = pickle_globals(member)
                    except Exception as error:  # pickletools raises ValueError, but a torn pickle anything
                        raise CheckpointUnreadable(
                            f"damaged: the object record inside does not parse ({_short(error)})"
                        ) from None
                if structure:
                    with archive.open(pickled) as member:
                        try:
                            obj = _ScanUnpickler(member).load()
                        except Exception as error:
                            structure_error = f"the object record inside cannot be read without torch ({_short(error)})"
        except CheckpointUnreadable:
            raise
        except zipfile.BadZipFile as error:
            raise CheckpointUnreadable(f"damaged archive: {error}") from None
        except OSError as error:
            raise CheckpointUnreadable(f"cannot read it: {error.strerror or error}") from None
    elif head.startswith(b"PK"):
        raise CheckpointUnreadable(
            "truncated or half-written: it starts like a torch zip archive but has no end record "
            "(the save did not finish, or the copy was cut)"
        )
    else:
        # the legacy format: five pickles (magic, protocol, system info, the object, the storage
        # keys), then the storages' bytes
        found = []
        try:
            with path.open("rb") as handle:
                for _ in range(5):
                    found.extend(pickle_globals(handle))
                handle.seek(0)
                unpickler = _ScanUnpickler(handle)
                magic = unpickler.load()
                if magic != _LEGACY_MAGIC:
                    raise CheckpointUnreadable("not a torch.save file (no torch zip archive, no legacy torch header)")
                unpickler.load()  # protocol version
                unpickler.load()  # system info
                obj = unpickler.load() if structure else None
        except CheckpointUnreadable:
            raise
        except Exception:
            raise CheckpointUnreadable("not a torch.save file (no torch zip archive, no legacy torch header)") from None
    all_globals = list(dict.fromkeys(found))
    beyond = sorted(g for g in all_globals if not weights_only_global(g))
    return TorchScan(
        obj=obj, tensor_count=_count_tensors(obj) if structure_error is None else 0, globals=beyond,
        all_globals=all_globals, damaged=damaged, structure_error=structure_error,
    )


def _count_tensors(obj: Any) -> int:
    count, stack, seen = 0, [obj], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, _Tensor):
            count += 1
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, _Opaque):
            stack.extend(item.args)
            stack.append(item.state)
            stack.extend(item.items.values())
            stack.extend(item.elements)
    return count


def _short(error: BaseException, limit: int = 200) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------- safetensors and npz by hand


@dataclass
class SafetensorsHeader:
    tensor_count: int
    data_bytes: int
    metadata: dict[str, Any]


_SAFETENSORS_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E4M3FN": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_safetensors_header(path: Path) -> SafetensorsHeader:
    """8-byte little-endian header length, a JSON header, then the data; sizes must agree."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise CheckpointUnreadable("truncated: shorter than a safetensors header")
            (length,) = struct.unpack("<Q", prefix)
            if length > min(size - 8, 100_000_000):
                raise CheckpointUnreadable(
                    f"truncated or not safetensors: the header claims {length} bytes, the file holds {size}"
                )
            raw = handle.read(length)
    except OSError as error:
        raise CheckpointUnreadable(f"cannot read it: {error.strerror or error}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise CheckpointUnreadable("damaged: the safetensors header is not JSON") from None
    if not isinstance(header, dict):
        raise CheckpointUnreadable("damaged: the safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_size = size - 8 - length
    spans = []
    for name, entry in header.items():
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
            raise CheckpointUnreadable(f"damaged: tensor {name!r} has no data_offsets in the header")
        begin, end = offsets
        if not 0 <= begin <= end:
            raise CheckpointUnreadable(f"damaged: tensor {name!r} has data_offsets [{begin}, {end}], not a byte range")
        if end > data_size:
            raise CheckpointUnreadable(
                f"truncated: tensor {name!r} ends at byte {end} of the data, which holds {data_size} "
                "(the save did not finish, or the copy was cut)"
            )
        dtype, shape = entry.get("dtype"), entry.get("shape")
        if not (isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape)):
            raise CheckpointUnreadable(f"damaged: tensor {name!r} has no shape in the header")
        bits = _SAFETENSORS_BITS.get(dtype) if isinstance(dtype, str) else None
        if bits is None:
            raise CheckpointUnreadable(f"damaged: tensor {name!r} has an unknown dtype {dtype!r}")
        expected = (math.prod(shape) * bits + 7) // 8
        if expected != end - begin:
            raise CheckpointUnreadable(
                f"damaged: tensor {name!r} is {dtype} {shape}, {expected} bytes, but its data_offsets span {end - begin}"
            )
        spans.append((begin, end, name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise CheckpointUnreadable(
                f"damaged: tensor {name!r} starts at byte {begin} of the data, not {position}: the tensors overlap or leave a gap"
            )
        position = end
    if position < data_size:
        raise CheckpointUnreadable(f"damaged: {data_size - position} bytes past the end the header describes")
    end = position
    return SafetensorsHeader(tensor_count=len(header), data_bytes=end, metadata=metadata if isinstance(metadata, dict) else {})


def _npy_scalar(archive: zipfile.ZipFile, member: str) -> Any:
    """The value of a 0-d .npy member (int, float or str) read by hand; None if it is not one."""
    try:
        with archive.open(member) as handle:
            if handle.read(6) != b"\x93NUMPY":
                return None
            major = handle.read(2)[0]
            header_len = struct.unpack("<H" if major == 1 else "<I", handle.read(2 if major == 1 else 4))[0]
            header = ast.literal_eval(handle.read(header_len).decode("latin1"))
            if header.get("shape") != ():
                return None
            descr = header.get("descr", "")
            data = handle.read(4096)
    except (OSError, KeyError, ValueError, SyntaxError, IndexError, struct.error, zipfile.BadZipFile):
        return None
    formats = {"<i8": "<q", "<i4": "<i", "<u8": "<Q", "<u4": "<I", "<f8": "<d", "<f4": "<f", "|b1": "?"}
    if descr in formats:
        try:
            return struct.unpack(formats[descr], data[: struct.calcsize(formats[descr])])[0]
        except struct.error:
            return None
    if isinstance(descr, str) and descr.startswith("<U"):
        return data[: 4 * int(descr[2:])].decode("utf-32-le", "replace").rstrip("\x00")
    return None


# ---------------------------------------------------------------- what a checkpoint holds

_NAMES = {
    "model": {
        "model", "model_state_dict", "state_dict", "net", "network", "weights", "model_state",
        "model_weights", "module", "params", "parameters", "net_state_dict", "model_state_dicts",
    },
    "optimizer": {
        "optimizer", "optimizer_state_dict", "optim", "opt", "optimizer_state", "optimizers",
        "optim_state", "optim_state_dict", "opt_state", "opt_state_dict", "optimizer_states",
    },
    "progress": {
        "epoch", "epochs", "step", "steps", "global_step", "iteration", "iterations", "iter", "it",
        "num_updates", "train_step", "num_steps", "current_step", "completed_steps", "global_steps",
        "n_iter", "cur_iter", "curr_step", "current_epoch", "optimizer_step", "update", "updates",
    },
    "scheduler": {
        "scheduler", "lr_scheduler", "scheduler_state_dict", "sched", "lr_schedulers", "schedulers",
        "scheduler_state", "lr_scheduler_state_dict", "lr_sched", "lr_scheduler_state",
    },
    "scaler": {
        "scaler", "grad_scaler", "amp", "scaler_state_dict", "amp_scaler", "loss_scaler", "amp_state",
        "grad_scaler_state_dict", "scaler_state", "amp_state_dict",
    },
    "rng": {
        "rng", "rng_state", "rng_states", "torch_rng_state", "cuda_rng_state", "numpy_rng_state",
        "np_rng_state", "random_state", "python_rng_state", "py_rng_state", "cpu_rng_state",
        "rng_state_dict", "torch_rng", "numpy_rng", "cuda_rng", "python_rng", "random_states",
        "generator_state", "rng_generator", "torch_random_state", "numpy_random_state",
    },
    "data_position": {
        "sampler", "sampler_state", "sampler_state_dict", "dataloader", "dataloader_state",
        "dataloader_state_dict", "data_loader", "data_position", "data_state", "data_pos",
        "batch_idx", "batch_index", "sample_index", "samples_seen", "consumed_samples",
        "consumed_train_samples", "data_offset", "data_iter", "dataset_state", "train_iter",
        "data_iterator", "batches_seen", "data_loader_state", "train_sampler", "sampler_position",
    },
}
_PART_OF_NAME = {name: part for part, names in _NAMES.items() for name in names}
_CONTAINER_HINTS = ("precision", "fp16", "bf16", "use_amp", "amp_dtype", "mixed_precision")


def _part_for_key(key: str) -> str | None:
    return _PART_OF_NAME.get(key.strip().lower().replace("-", "_"))


def _is_tensor_mapping(value: Any) -> bool:
    if not isinstance(value, dict) or not value:
        return False
    tensors = sum(1 for v in value.values() if isinstance(v, _Tensor))
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
    if isinstance(value, _Tensor):
        return -1  # a 0-d tensor: present, value only visible to torch
    return None


def _plausible(part: str, value: Any) -> bool:
    if value is None:
        return False
    if part == "progress":
        return _progress_value(value) is not None
    if part == "model" and isinstance(value, (dict, list, tuple)):
        return _count_tensors(value) > 0  # {"model": {"name": "bert"}} is a config, not weights
    if part in ("model", "optimizer", "scheduler", "scaler"):
        if isinstance(value, (dict, list, tuple)):
            return len(value) > 0
        return isinstance(value, _Opaque)  # a pickled nn.Module or optimizer object
    return True


def _describe_progress(found: list[tuple[str, Any]]) -> str | None:
    shown = []
    for key, value in found:
        number = _progress_value(value)
        if number is None:
            continue
        shown.append(f"{key} (a tensor)" if number == -1 and isinstance(value, _Tensor) else f"{key} {number:g}")
    return ", ".join(shown) or None


def _walk_named_parts(mapping: dict, parts: dict[str, Part], progress: list[tuple[str, Any]], prefix: str = "", depth: int = 0) -> None:
    """Match keys by name (and a few by shape), looking one or two levels into plain dicts."""
    for key, value in mapping.items():
        if not isinstance(key, str):
            continue
        part = _part_for_key(key)
        if part is None and _is_optimizer_state(value):
            part = "optimizer"
        if part is not None and _plausible(part, value):
            if part == "progress":
                progress.append((prefix + key, value))
            if not parts[part].present:
                parts[part] = Part(True, prefix + key, _detail(part, value))
            continue
        if depth < 2 and isinstance(value, dict) and not _is_tensor_mapping(value) and not _is_optimizer_state(value):
            _walk_named_parts(value, parts, progress, f"{prefix}{key}.", depth + 1)


def _detail(part: str, value: Any) -> str | None:
    if part == "model" and isinstance(value, dict):
        tensors = _count_tensors(value)
        return f"{tensors} tensor{'s' if tensors != 1 else ''}" if tensors else None
    if part == "model" and isinstance(value, _Opaque):
        return f"a pickled {value.qualname} object"
    if part == "optimizer" and isinstance(value, dict) and isinstance(value.get("param_groups"), list):
        groups = value["param_groups"]
        return f"{len(groups)} param group{'s' if len(groups) != 1 else ''}"
    return None


def _precision_hint(obj: Any, depth: int = 0) -> str | None:
    """'fp16' when loss scaling is in use, 'no-scaler' when the file says it trains without one."""
    if isinstance(obj, _Opaque):
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
    if isinstance(obj, _Opaque) and not isinstance(obj, _Tensor):
        report.format = "pytorch"
        report.parts["model"] = Part(True, "(the whole file)", f"a pickled {obj.qualname} object")
        report.notes.append(
            f"the file is a whole pickled {obj.qualname} (torch.save(model)): it holds no optimizer "
            "or progress, and reloading it needs the same code at the same import path"
        )
        return
    if not isinstance(obj, dict):
        report.format = "pytorch"
        report.notes.append(f"the file holds a {type(obj).__name__}, not a dict of states")
        return
    if _is_tensor_mapping(obj) and not any(isinstance(k, str) and _part_for_key(k) for k in obj):
        report.format = "pytorch"
        report.parts["model"] = Part(True, "(the whole file)", _detail("model", obj))
        report.notes.append("a bare state_dict: weights only (torch.save(model.state_dict()))")
        return
    if "pytorch-lightning_version" in obj or (
        "state_dict" in obj and any(k in obj for k in ("optimizer_states", "loops", "lr_schedulers"))
    ):
        _classify_lightning(obj, report)
        return
    report.format = "pytorch"
    progress: list[tuple[str, Any]] = []
    _walk_named_parts(obj, report.parts, progress)
    if report.parts["progress"].present:
        report.parts["progress"].detail = _describe_progress(progress)
    if not report.parts["model"].present:
        # a model saved under a name of its own ("encoder", "ema") still counts as weights
        for key, value in obj.items():
            if _is_tensor_mapping(value):
                report.parts["model"] = Part(True, str(key), _detail("model", value))
                break
    _scaler_need(obj, report)


def _scaler_need(obj: Any, report: ResumeReport) -> None:
    if report.parts["scaler"].present:
        return
    hint = _precision_hint(obj)
    if hint == "no-scaler":
        report.not_needed["scaler"] = "the checkpoint records training without fp16 loss scaling"


_LIGHTNING_PRECISION = re.compile(r"precision", re.IGNORECASE)


def _classify_lightning(obj: dict, report: ResumeReport) -> None:
    report.format = "lightning"
    parts = report.parts
    state = obj.get("state_dict")
    if isinstance(state, dict) and state:
        parts["model"] = Part(True, "state_dict", _detail("model", state))
    optimizers = obj.get("optimizer_states")
    if isinstance(optimizers, list) and optimizers:
        parts["optimizer"] = Part(True, "optimizer_states", f"{len(optimizers)} optimizer{'s' if len(optimizers) != 1 else ''}")
    elif "optimizer_states" not in obj:
        report.notes.append("no optimizer_states: saved with save_weights_only=True, which makes no resume point")
    shown = [(k, obj[k]) for k in ("global_step", "epoch") if _progress_value(obj.get(k)) is not None]
    if shown:
        parts["progress"] = Part(True, shown[0][0], _describe_progress(shown))
    schedulers = obj.get("lr_schedulers")
    if isinstance(schedulers, list) and schedulers:
        parts["scheduler"] = Part(True, "lr_schedulers", f"{len(schedulers)} scheduler{'s' if len(schedulers) != 1 else ''}")
    elif isinstance(schedulers, list) and parts["optimizer"].present:
        report.not_needed["scheduler"] = "lr_schedulers is empty: the LightningModule configures no scheduler"
    for key, value in obj.items():
        is_plugin = isinstance(key, str) and (_LIGHTNING_PRECISION.search(key) or key == "native_amp_scaling_state")
        if is_plugin and isinstance(value, dict):
            if "scale" in value:
                parts["scaler"] = Part(True, key, f"loss scale {value['scale']:g}" if isinstance(value["scale"], (int, float)) else None)
            elif not value:
                report.not_needed["scaler"] = f"{key} holds no scaler: the precision plugin scales no loss (bf16 or fp32)"
    if not parts["scaler"].present and "scaler" not in report.not_needed:
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
        parts["data_position"] = Part(True, "loops.fit_loop", detail)
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
    for part in ("rng", "data_position", "scaler"):
        if found[part].present and not parts[part].present:
            parts[part] = found[part]
            report.not_needed.pop(part, None)
    if not parts["rng"].present:
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
    report.format = "demo" if any(k.startswith("model/") for k in keys) else "npz"
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(key.split("/", 1)[0], []).append(key)
    for head, members in groups.items():
        part = _part_for_key(head)
        if part is None or report.parts[part].present:
            continue
        detail = None
        if part == "progress" and isinstance(scalars.get(head), (int, float)):
            detail = f"{head} {scalars[head]:g}"
        elif part == "data_position" and isinstance(scalars.get(head), (int, float)):
            detail = f"{scalars[head]:g} samples consumed"
        elif len(members) > 1 or members[0] != head:
            detail = f"{len(members)} array{'s' if len(members) != 1 else ''}"
        report.parts[part] = Part(True, head if members == [head] else f"{head}/*", detail)
    precision = scalars.get("precision")
    if not report.parts["scaler"].present and isinstance(precision, str):
        if precision.lower() in ("fp32", "float32", "bf16", "bfloat16", "32", "bf16-mixed"):
            report.not_needed["scaler"] = f"precision is {precision}: no loss scaling"


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


def classify_hf_folder(folder: Path, report: ResumeReport) -> list[tuple[Path, str]]:
    """Fill `report` from the folder's files; return the files to reload (path, kind)."""
    report.format = "huggingface"
    parts = report.parts
    try:
        entries = sorted(folder.iterdir())
    except OSError as error:
        report.problem = f"cannot list the folder: {error.strerror or error}"
        return []
    names = {p.name: p for p in entries}
    to_reload: list[tuple[Path, str]] = []
    size = 0
    tensors = 0
    weights = [p for p in entries if _HF_WEIGHTS.match(p.name) and p.is_file()]
    if weights:
        parts["model"] = Part(True, ", ".join(p.name for p in weights[:3]) + (" …" if len(weights) > 3 else ""))
        if any(p.name.startswith("adapter_model") for p in weights):
            report.notes.append("an adapter checkpoint: the base model's weights come from its own files, not from here")
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if index in names:
            _check_shards(names[index], folder, report)
    for path in weights:
        kind = "safetensors" if path.suffix == ".safetensors" else "torch"
        to_reload.append((path, kind))
        if kind == "safetensors":
            try:
                header = read_safetensors_header(path)
                tensors += header.tensor_count
                report.vetting[str(path)] = Vetting()
            except CheckpointUnreadable as error:
                report.vetting[str(path)] = Vetting(damaged=str(error))
    if "optimizer.pt" in names:
        parts["optimizer"] = Part(True, "optimizer.pt")
        to_reload.append((names["optimizer.pt"], "torch"))
    else:
        deepspeed = [p for p in entries if p.is_dir() and re.match(r"^global_step\d+$", p.name)]
        fsdp = [p for p in entries if p.is_dir() and p.name.startswith("optimizer_")]
        if deepspeed or fsdp:
            where = (deepspeed or fsdp)[0].name
            parts["optimizer"] = Part(True, f"{where}/", "sharded (DeepSpeed/FSDP); not reloaded here")
            report.notes.append(f"the optimizer is sharded in {where}/: it reloads only under the same sharding setup, not checked here")
    if "scheduler.pt" in names:
        parts["scheduler"] = Part(True, "scheduler.pt")
        to_reload.append((names["scheduler.pt"], "torch"))
    if "scaler.pt" in names:
        parts["scaler"] = Part(True, "scaler.pt")
        to_reload.append((names["scaler.pt"], "torch"))
    rng_files = [p for p in entries if re.match(r"^rng_state(_\d+)?\.pth$", p.name)]
    if rng_files:
        parts["rng"] = Part(True, rng_files[0].name if len(rng_files) == 1 else f"{len(rng_files)} rng_state_*.pth files")
        to_reload.extend((p, "torch") for p in rng_files)
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
            parts["progress"] = Part(True, "trainer_state.json", detail)
            parts["data_position"] = Part(True, "trainer_state.json", f"skips the first {step} batches")
            report.notes.append(
                "the Trainer derives the data position from global_step: on resume it skips that many batches "
                "(unless ignore_data_skip is set), which takes time with a slow dataloader"
            )
            if folder_step and int(folder_step.group(1)) != step:
                report.notes.append(f"the folder says step {folder_step.group(1)}, trainer_state.json says {step}")
    elif folder_step:
        report.notes.append("no trainer_state.json: the Trainer would resume from step 0 despite the folder's name")
    args_file = names.get("training_args.bin")
    if args_file is not None and not parts["scaler"].present:
        try:
            scan = scan_torch_file(args_file)
            fields = scan.obj.fields() if isinstance(scan.obj, _Opaque) else {}
            if fields.get("fp16") is False:
                report.not_needed["scaler"] = "training_args.bin: fp16 is off, so there is no loss scaler to save"
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


def _vet_hf_files(entries: list[Path], to_reload: list[tuple[Path, str]], report: ResumeReport) -> None:
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
                report.damaged.append(f"{path.name}: damaged: it does not parse as JSON ({_short(error)})")
            except OSError as error:
                report.damaged.append(f"{path.name}: cannot read it: {error.strerror or error}")
            continue
        kind = "safetensors" if path.suffix == ".safetensors" else "torch" if path.suffix in _HF_TORCH_SUFFIXES else None
        if kind is None:
            continue
        cause = vet_file(path, kind).damaged
        if cause and _is_damage(cause):
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


# ---------------------------------------------------------------- the reload in a fresh process

_RELOAD_SCRIPT = r"""
import json, os, struct, sys, time, zipfile
jobs = json.loads(sys.argv[1])
try:
    os.nice(10)
except Exception:
    pass
out = {"torch": None, "torch_error": None, "results": []}
torch = None
if any(j["kind"] == "torch" for j in jobs):
    try:
        import torch
        out["torch"] = torch.__version__
    except Exception as e:
        out["torch_error"] = type(e).__name__ + ": " + str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__

def short(e):
    text = str(e).strip()
    line = text.splitlines()[0] if text else ""
    for l in text.splitlines():
        if "WeightsUnpickler error:" in l:
            cause = l.split("WeightsUnpickler error:", 1)[1].strip()
            line = cause or "the object record inside does not parse"
            break
    line = line.split(". ")[0][:300]
    return type(e).__name__ + (": " + line if line else "")

def count_tensors(obj):
    n, stack, seen = 0, [obj], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if torch is not None and torch.is_tensor(x):
            n += 1
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple, set)):
            stack.extend(x)
        elif hasattr(x, "__dict__") and not isinstance(x, type):
            stack.extend(vars(x).values())  # a pickled module or optimizer object
    return n

def load_safetensors_by_hand(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        size = 0
        while True:  # read every byte, in chunks: the memory stays flat whatever the file's size
            chunk = f.read(1 << 24)
            if not chunk:
                break
            size += len(chunk)
    for name, e in header.items():
        a, b = e["data_offsets"]
        if not (0 <= a <= b <= size):
            raise ValueError("tensor %r lies past the end of the data" % name)
    return len(header)

def allowlist_pickle(admit):
    # a pickle module whose Unpickler resolves only the globals the cockpit vetted in the file
    import pickle as std, types
    admit = set(admit)

    class Unpickler(std.Unpickler):
        def find_class(self, module, name):
            full = module + "." + name
            if full not in admit and not (module == "torch._tensor" and "torch.tensor." + name in admit):
                raise std.UnpicklingError("would run code: " + full + " is not in the allowlist")
            return super().find_class(module, name)

    module = types.ModuleType("cockpit_allowlist_pickle")
    module.Unpickler = Unpickler
    module.UnpicklingError = std.UnpicklingError
    module.load = lambda f, **kw: Unpickler(f, **kw).load()
    return module

def resolve(names):
    import importlib
    found = []
    for full in names:
        module, _, attr = full.rpartition(".")
        try:
            found.append(getattr(importlib.import_module(module), attr))
        except Exception:
            pass
    return found

def refused(e):
    text = str(e)
    return "Unsupported global" in text or "Weights only load failed" in text

for job in jobs:
    path, kind = job["path"], job["kind"]
    r = {"path": path, "ok": False}
    try:
        if kind == "torch":
            if torch is None:
                r["error"] = "torch is not installed"
            else:
                mmap = job.get("mmap", False)
                t = time.perf_counter()
                try:
                    numpy_names = job.get("numpy_safe") or []
                    safe_globals = getattr(getattr(torch, "serialization", None), "safe_globals", None)
                    if numpy_names and safe_globals is not None:
                        # what the Hugging Face Trainer does for its rng_state files: numpy's arrays only
                        with safe_globals(resolve(numpy_names)):
                            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
                    else:
                        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
                    r.update(ok=True, weights_only=True, seconds=time.perf_counter() - t, tensor_count=count_tensors(obj))
                except Exception as e:
                    r["weights_only_error"] = short(e)
                    if not refused(e):
                        r["error"] = short(e)
                    elif not job.get("trust"):
                        r["refused"] = True  # never retried without --trust-checkpoint
                        r["error"] = short(e)
                    else:
                        r["refused"] = r["retried"] = True
                        t = time.perf_counter()
                        try:
                            obj = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap,
                                             pickle_module=allowlist_pickle(job.get("admit") or []))
                            r.update(ok=True, weights_only=False, seconds=time.perf_counter() - t, tensor_count=count_tensors(obj))
                        except Exception as e2:
                            r["error"] = short(e2)
                obj = None
        elif kind == "npz":
            try:
                import numpy
            except Exception:
                numpy = None
            t = time.perf_counter()
            if numpy is not None:
                with numpy.load(path, allow_pickle=False) as z:
                    count = 0
                    for key in z.files:
                        z[key]
                        count += 1
                r["reader"] = "numpy " + numpy.__version__
            else:
                with zipfile.ZipFile(path) as z:
                    count = 0
                    for name in z.namelist():
                        with z.open(name) as m:
                            while m.read(1 << 20):
                                pass
                        count += 1
                r["reader"] = "zipfile (numpy is not installed: every array read and CRC-checked)"
            r.update(ok=True, seconds=time.perf_counter() - t, tensor_count=count)
        elif kind == "safetensors":
            t = time.perf_counter()
            reader = None
            if torch is not None:
                try:
                    from safetensors.torch import load_file
                    r["tensor_count"] = len(load_file(path, device="cpu"))
                    reader = "safetensors"
                except ImportError:
                    pass
            if reader is None:
                r["tensor_count"] = load_safetensors_by_hand(path)
                reader = "by hand (header checked, every byte read)"
            r.update(ok=True, seconds=time.perf_counter() - t, reader=reader)
    except Exception as e:
        r["error"] = short(e)
    out["results"].append(r)
sys.stdout.write("\n@@cockpit-reload@@" + json.dumps(out) + "\n")
"""


def reload_in_new_process(
    files: list[tuple[Path, str]], python: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, *,
    trust: bool = False, vetting: dict[str, Vetting] | None = None,
) -> Reload:
    """Load each file in a fresh interpreter (CPU only, niced) and time the loads.

    A torch file is first loaded with weights_only=True; only with `trust` is one that torch refuses
    loaded again, by an unpickler that admits nothing but the globals vetted in the file. A file
    that names a global outside the allowlist (see `vetting`) is never sent to the process."""
    python = python or sys.executable
    result = Reload(tried=True, python=python)
    if not files:
        result.error = "nothing to reload"
        return result
    vetting = vetting or {}
    jobs = []
    kept: list[FileReload] = []  # refused here, before any process
    for path, kind in files:
        vet = vetting.get(str(path)) or (vet_file(path, kind) if kind == "torch" else Vetting())
        if kind == "torch" and vet.would_run_code:
            kept.append(FileReload(
                path=str(path), ok=False, error=would_run_code_message(vet.would_run_code),
                unsafe_globals=vet.would_run_code, would_run_code=vet.would_run_code,
            ))
            continue
        job = {"path": str(path), "kind": kind, "mmap": kind == "torch" and _needs_mmap(path)}
        if kind == "torch":
            job.update(trust=trust, admit=[g for g in vet.globals if allowlisted_global(g)], needs_trust=vet.needs_trust)
            if Path(path).name.startswith("rng_state") and vet.needs_trust and all(numpy_array_global(g) for g in vet.needs_trust):
                job["numpy_safe"] = vet.needs_trust
        jobs.append(job)
    if not jobs:
        return _gather(result, kept, files)
    env = dict(os.environ)
    env.update({"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
    started = time.perf_counter()
    try:
        completed = subprocess.run(
            [python, "-c", _RELOAD_SCRIPT, json.dumps(jobs)],
            capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        result.process_seconds = time.perf_counter() - started
        result.files = kept
        result.error = f"the reload did not finish within {timeout:g} s (stopped); a larger timeout or a faster disk is needed"
        return result
    except OSError as error:
        result.files = kept
        result.error = f"cannot start {python}: {error.strerror or error}"
        return result
    result.process_seconds = time.perf_counter() - started
    marker = completed.stdout.rfind(_RESULT_MARK)
    result.files = kept
    if marker < 0:
        if completed.returncode < 0:
            result.error = f"the reload process was killed by signal {-completed.returncode} (out of memory is the usual cause)"
        else:
            tail = (completed.stderr or completed.stdout).strip().splitlines()
            result.error = f"the reload process failed (exit {completed.returncode})" + (f": {tail[-1][:300]}" if tail else "")
        return result
    try:
        payload = json.loads(completed.stdout[marker + len(_RESULT_MARK):].strip().splitlines()[0])
    except (ValueError, IndexError):
        result.error = "the reload process gave an unreadable answer"
        return result
    result.torch_version = payload.get("torch")
    sent = {job["path"]: job for job in jobs}
    for raw in payload.get("results", []):
        entry = FileReload(
            path=raw.get("path", ""), ok=bool(raw.get("ok")), seconds=raw.get("seconds"),
            weights_only=raw.get("weights_only"), tensor_count=raw.get("tensor_count"),
            error=raw.get("error"), unsafe_globals=list(raw.get("unsafe_globals") or []), reader=raw.get("reader"),
        )
        job = sent.get(entry.path, {})
        if raw.get("refused"):
            entry.unsafe_globals = list(job.get("needs_trust") or [])
        if raw.get("refused") and not raw.get("retried"):
            entry.needs_trust = True
            entry.error = needs_trust_message(entry.unsafe_globals)
        elif raw.get("retried") and not entry.ok:
            named = ", ".join(dict.fromkeys(_plain_global(g) for g in entry.unsafe_globals[:6])) or "objects beyond tensors"
            entry.error = (
                f"torch.load(weights_only=True) refuses it (it holds {named}), and loaded with only those "
                f"globals admitted ({TRUST_FLAG}) it fails too: {entry.error}"
            )
            if "would run code: " in (raw.get("error") or ""):
                entry.would_run_code = [raw["error"].split("would run code: ", 1)[1].split(" ")[0]]
        if entry.error == "torch is not installed":
            entry.error = f"torch is not installed for {python}"
        if raw.get("weights_only_error") and entry.ok:
            entry.error = None
        kept.append(entry)
    return _gather(result, kept, files)


def _gather(result: Reload, entries: list[FileReload], files: list[tuple[Path, str]]) -> Reload:
    order = {str(path): index for index, (path, _kind) in enumerate(files)}
    result.files = sorted(entries, key=lambda f: order.get(f.path, len(order)))
    total, tensors, all_weights_only = 0.0, 0, True
    for entry in result.files:
        if entry.ok:
            total += entry.seconds or 0.0
            tensors += entry.tensor_count or 0
            if entry.weights_only is False:
                all_weights_only = False
    result.ok = bool(result.files) and len(result.files) == len(files) and all(f.ok for f in result.files)
    result.seconds = total if result.ok else None
    result.tensor_count = tensors if result.ok else None
    result.weights_only = all_weights_only if result.ok and any(f.weights_only is not None for f in result.files) else None
    failed = [f for f in result.files if not f.ok]
    if failed:
        first = failed[0]
        result.error = (f"{Path(first.path).name}: " if len(files) > 1 else "") + (first.error or "did not load")
    return result


def _needs_mmap(path: Path) -> bool:
    """Memory-map files larger than half the free memory, so the check cannot starve the run."""
    try:
        import psutil

        return zipfile.is_zipfile(path) and path.stat().st_size > psutil.virtual_memory().available // 2
    except Exception:
        return False


# ---------------------------------------------------------------- the whole check


def verify_resume(
    path: str | Path, *, python: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, reload: bool = True,
    trust: bool = False,
) -> ResumeReport:
    """Inspect a checkpoint (file or folder) and reload it in a fresh process.

    Nothing is unpickled before every file is vetted (CRC-32, sizes, the globals its pickles name);
    a damaged file is no resume point and is not reloaded. `trust` (--trust-checkpoint) lets a file
    that torch.load(weights_only=True) refuses load with only allowlisted globals admitted."""
    given = str(path)
    target = Path(path)
    if not target.exists():
        report = ResumeReport(path=given, checkpoint=None, format="unknown")
        report.problem = f"no such file or folder: {given}"
        return report
    notes: list[str] = []
    if target.is_dir() and not is_hf_checkpoint(target):
        chosen, count = newest_checkpoint(target)
        if chosen is None:
            report = ResumeReport(path=given, checkpoint=None, format="unknown")
            report.problem = (
                f"no checkpoint in {given}: looked for checkpoint-N/ folders and "
                + ", ".join(f"*{s}" for s in CHECKPOINT_SUFFIXES) + " files"
            )
            return report
        if count > 1:
            notes.append(f"the newest of {count} checkpoints in {given}: {chosen.name}")
        target = chosen
    before = _fingerprint(target)
    report = ResumeReport(path=given, checkpoint=str(target), format="unknown", trusted=trust)
    report.notes.extend(notes)
    if target.is_dir():
        files = classify_hf_folder(target, report)
    elif target.suffix == ".npz" or _looks_like_npz(target):
        files = _inspect_npz(target, report)
    elif target.suffix == ".safetensors":
        files = _inspect_safetensors(target, report)
    else:
        files = _inspect_torch(target, report)
    unreadable = []
    for file, kind in files:
        vetting = report.vetting.get(str(file))
        if vetting is None:
            vetting = report.vetting[str(file)] = vet_file(file, kind)
        if vetting.damaged:
            unreadable.append(vetting.damaged if len(files) == 1 else f"{Path(file).name}: {vetting.damaged}")
    for cause in unreadable:
        if _is_damage(cause.split(": ", 1)[1] if len(files) > 1 else cause) and cause not in report.damaged:
            report.damaged.append(cause)
    if reload and files and unreadable:
        # nothing is unpickled that could not be vetted, and damaged bytes would load as garbage
        report.reload = Reload(tried=False, error=unreadable[0])
    elif reload and files:
        report.reload = reload_in_new_process(files, python=python, timeout=timeout, trust=trust, vetting=report.vetting)
        _explain_reload(report)
    elif reload:
        report.reload = Reload(tried=False, error=report.problem or "nothing here to reload")
    if report.reload.ok and report.reload.tensor_count is not None and report.format != "huggingface":
        report.tensor_count = report.reload.tensor_count
    told = any(f.unsafe_globals for f in report.reload.files)
    if report.foreign_globals and not told and not report.reload.ok:
        shown = report.foreign_globals
        report.notes.append(
            "it holds objects beyond tensors and plain values (" + ", ".join(shown[:6]) + (" …" if len(shown) > 6 else "")
            + f"): torch.load(weights_only=True), the default since torch 2.6, will refuse it, and the cockpit "
            f"loads it otherwise only with {TRUST_FLAG}"
        )
    if not report.reload.ok and before is not None and _fingerprint(target) != before:
        report.notes.append("the checkpoint changed while it was checked: a save is under way; check again when it ends")
    return report


def _is_damage(cause: str) -> bool:
    return cause.startswith(("damaged", "truncated", "the file is empty"))


def _fingerprint(path: Path) -> tuple[int, int] | None:
    try:
        if path.is_dir():
            stats = [p.stat() for p in path.iterdir() if p.is_file()]
            return (sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0))
        stat = path.stat()
        return (stat.st_size, stat.st_mtime_ns)
    except OSError:
        return None


def _looks_like_npz(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        return bool(names) and all(n.endswith(".npy") for n in names)
    except (OSError, zipfile.BadZipFile):
        return False


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _inspect_torch(path: Path, report: ResumeReport) -> list[tuple[Path, str]]:
    report.size_bytes = _size(path)
    report.format = "pytorch" if path.suffix != ".ckpt" else "lightning"
    try:
        scan = scan_torch_file(path)
    except CheckpointUnreadable as error:
        report.problem = str(error)
        report.vetting[str(path)] = Vetting(damaged=str(error))
        return [(path, "torch")]
    report.vetting[str(path)] = Vetting(damaged=_damaged_text(scan.damaged) if scan.damaged else None, globals=scan.all_globals)
    report.foreign_globals = list(dict.fromkeys(_plain_global(g) for g in scan.globals if not g.startswith("torch.")))
    if scan.structure_error:
        report.problem = scan.structure_error  # the globals are vetted: torch may still read it
        return [(path, "torch")]
    report.tensor_count = scan.tensor_count
    classify_object(scan.obj, report)
    return [(path, "torch")]


def _plain_global(name: str) -> str:
    return "numpy.ndarray" if name.endswith("multiarray._reconstruct") else name


def _inspect_npz(path: Path, report: ResumeReport) -> list[tuple[Path, str]]:
    report.size_bytes = _size(path)
    report.format = "demo"
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = zip_damage(archive)
            report.vetting[str(path)] = Vetting(damaged=_damaged_text(damaged) if damaged else None)
            members = [n for n in archive.namelist() if n.endswith(".npy")]
            keys = [n[:-4] for n in members]
            scalars = {
                k: _npy_scalar(archive, f"{k}.npy")
                for k in keys if k in ("step", "epoch", "global_step", "data_position", "precision", "iteration")
            }
    except zipfile.BadZipFile:
        report.problem = "truncated or half-written: the archive has no end record (the save did not finish, or the copy was cut)"
        return []
    except OSError as error:
        report.problem = f"cannot read it: {error.strerror or error}"
        return []
    report.tensor_count = len(keys)
    classify_npz_keys(keys, scalars, report)
    return [(path, "npz")]


def _inspect_safetensors(path: Path, report: ResumeReport) -> list[tuple[Path, str]]:
    report.format = "safetensors"
    report.size_bytes = _size(path)
    try:
        header = read_safetensors_header(path)
    except CheckpointUnreadable as error:
        report.problem = str(error)
        if _is_damage(str(error)):
            report.damaged.append(str(error))
        return []
    report.vetting[str(path)] = Vetting()
    report.tensor_count = header.tensor_count
    report.parts["model"] = Part(True, "(the whole file)", f"{header.tensor_count} tensors")
    report.notes.append("a safetensors file holds tensors only: weights, never an optimizer or progress")
    return [(path, "safetensors")]


def _explain_reload(report: ResumeReport) -> None:
    reload = report.reload
    if report.problem is not None and reload.ok:
        report.notes.append(f"torch loads it, but its contents could not be read without torch ({report.problem})")
        report.problem = None
    refused = [f for f in reload.files if f.weights_only is False and f.ok]
    for entry in refused:
        plain = list(dict.fromkeys(_plain_global(g) for g in entry.unsafe_globals))
        names = ", ".join(plain[:6]) or "non-tensor objects"
        is_hf_rng = report.format == "huggingface" and Path(entry.path).name.startswith("rng_state")
        if is_hf_rng:
            report.notes.append(
                f"{Path(entry.path).name} holds numpy RNG state ({names}): plain torch.load(weights_only=True) "
                "refuses it; the Trainer allows numpy's globals when it loads it, so the resume is not affected"
            )
            continue
        if any(g.startswith("numpy") for g in entry.unsafe_globals):
            change = (
                "save RNG states as tensors (torch.get_rng_state() already is one; numpy's via "
                "torch.from_numpy on the state array, or the Generator's state as plain ints)"
            )
        else:
            change = "save state_dict()s and plain values instead of whole objects"
        report.notes.append(
            f"{Path(entry.path).name}: torch.load(weights_only=True), the default since torch 2.6, refuses it because "
            f"it holds {names}; it loaded here with weights_only=False because of {TRUST_FLAG}, only those globals "
            "admitted. To resume with the "
            f"default, {change}, or allow them before loading: "
            "torch.serialization.add_safe_globals([...the globals named...])"
        )
    for entry in reload.files:
        if entry.ok and entry.reader and ("not installed" in entry.reader or "by hand" in entry.reader):
            report.notes.append(f"{Path(entry.path).name} was read {entry.reader.replace('zipfile (', 'with zipfile (')}")
    if reload.ok:
        return
    torch_missing = any((f.error or "").startswith("torch is not installed") for f in reload.files)
    if torch_missing:
        reload.error = (
            f"torch is not installed: {reload.python} cannot import it, so the reload could not be tried (the "
            "contents were read without torch); give the training environment's interpreter with --python"
        )
        return
    if report.problem is not None and reload.error:
        reload.error = f"torch agrees: {reload.error.split('. ')[0][:200]}"


# ---------------------------------------------------------------- how often to save (Daly)


def daly_interval(save_seconds: float, mtbf_seconds: float) -> float:
    """Daly's higher-order optimum checkpoint interval (2006), in seconds of compute between saves.

    τ = sqrt(2δM)·[1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ  for δ < 2M, else M.
    """
    if not (save_seconds > 0 and mtbf_seconds > 0):
        raise ValueError("save time and MTBF must be positive")
    delta, m = float(save_seconds), float(mtbf_seconds)
    if delta >= 2 * m:
        return m
    ratio = delta / (2 * m)
    return math.sqrt(2 * delta * m) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - delta


def expected_overhead(interval_seconds: float, save_seconds: float, mtbf_seconds: float, restart_seconds: float = 0.0) -> float:
    """Daly's expected wall time over pure compute, minus one: saves plus work redone after failures.

    T_wall / T_solve = (M/τ) · e^(R/M) · (e^((τ+δ)/M) − 1)
    """
    m = float(mtbf_seconds)
    tau = float(interval_seconds)
    return (m / tau) * math.exp(restart_seconds / m) * math.expm1((tau + save_seconds) / m) - 1.0


def latest_final_save(lot_end: datetime, retrieval_hours: float, save_seconds: float) -> datetime:
    """The last moment a final save can start so that save + copy-off ends by the lot's end."""
    return lot_end - timedelta(hours=retrieval_hours) - timedelta(seconds=save_seconds)


@dataclass(frozen=True)
class SaveAdvice:
    save_seconds: float
    source: str  # "checkpoint events", "reload" or "given"
    mtbf_hours: float
    interval_seconds: float
    overhead_fraction: float
    restart_seconds: float
    latest_final_save: datetime | None = None
    lot_end: datetime | None = None
    retrieval_hours: float | None = None
    too_late: bool | None = None

    def to_json(self) -> dict[str, Any]:
        from cockpit.runlog import iso

        return {
            "save_seconds": round(self.save_seconds, 3),
            "save_seconds_source": self.source,
            "mtbf_hours": self.mtbf_hours,
            "interval_minutes": round(self.interval_seconds / 60, 2),
            "interval_hours": round(self.interval_seconds / 3600, 4),
            "overhead_fraction": round(self.overhead_fraction, 5),
            "restart_seconds": round(self.restart_seconds, 3),
            "latest_final_save": iso(self.latest_final_save) if self.latest_final_save else None,
            "lot_end": iso(self.lot_end) if self.lot_end else None,
            "retrieval_hours": self.retrieval_hours,
            "too_late": self.too_late,
        }


def save_advice(
    save_seconds: float, *, mtbf_hours: float = 24.0, source: str = "given", restart_seconds: float = 0.0,
    lot_end: datetime | None = None, retrieval_hours: float = 0.0, now: datetime | None = None,
) -> SaveAdvice:
    if not (math.isfinite(mtbf_hours) and mtbf_hours > 0):
        raise ValueError(f"the MTBF must be a positive number of hours (got {mtbf_hours})")
    if not (math.isfinite(save_seconds) and save_seconds > 0):
        raise ValueError(f"the save time must be a positive number of seconds (got {save_seconds})")
    mtbf = mtbf_hours * 3600.0
    interval = daly_interval(save_seconds, mtbf)
    latest = latest_final_save(lot_end, retrieval_hours, save_seconds) if lot_end is not None else None
    return SaveAdvice(
        save_seconds=save_seconds, source=source, mtbf_hours=mtbf_hours, interval_seconds=interval,
        overhead_fraction=expected_overhead(interval, save_seconds, mtbf, restart_seconds),
        restart_seconds=restart_seconds, latest_final_save=latest, lot_end=lot_end,
        retrieval_hours=retrieval_hours if lot_end is not None else None,
        too_late=(now > latest) if (latest is not None and now is not None) else None,
    )


def save_seconds_from_metrics(metrics_path: Path, last: int = 20) -> float | None:
    """Median `seconds` of the last `checkpoint` events a run reported in its metrics stream, if any."""
    seconds: collections.deque[float] = collections.deque(maxlen=last)
    try:
        with metrics_path.open("rb") as handle:
            for line in handle:
                if b'"checkpoint"' not in line:
                    continue
                try:
                    event = json.loads(line)
                except (ValueError, UnicodeDecodeError):
                    continue
                value = event.get("seconds") if isinstance(event, dict) and event.get("event") == "checkpoint" else None
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
                    seconds.append(float(value))
    except OSError:
        return None
    return statistics.median(seconds) if seconds else None


# ---------------------------------------------------------------- recording the verdict


def record_resume_verified(metrics_path: Path, checkpoint: str, seconds: float, ts: str) -> dict[str, Any]:
    """Append a `resume_verified` line to a run's metrics stream in one O_APPEND write."""
    event = {"ts": ts, "event": "resume_verified", "path": checkpoint, "seconds": round(seconds, 4)}
    data = json.dumps(event, ensure_ascii=False).encode("utf-8") + b"\n"
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size:
            # a writer that died mid-line left a torn line: end it, so ours stays whole
            with open(metrics_path, "rb") as reader:
                reader.seek(size - 1)
                if reader.read(1) != b"\n":
                    data = b"\n" + data
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"short write to {metrics_path} ({written} of {len(data)} bytes)")
        os.fsync(fd)
    finally:
        os.close(fd)
    return event
