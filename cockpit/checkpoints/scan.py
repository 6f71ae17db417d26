"""Reading torch checkpoints without running them: a pickle reader that imports nothing (every
class an inert stand-in), what a pickle would run, CRC-32 damage, and the vetting of a file before
anything unpickles it. The only place pickle is used: to read checkpoints, never to store anything."""

from __future__ import annotations

import codecs
import collections
import pickle
import pickletools
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from cockpit.checkpoints import CheckpointUnreadable
from cockpit.checkpoints.headers import read_safetensors_header
from cockpit.checkpoints.kinds import FileKind


# ---------------------------------------------------------------- reading torch files without torch


class Opaque:
    """An object of a class the scan does not import: it keeps what the pickle hands it."""

    qualname = "object"

    def __new__(cls, *args: Any, **kwargs: Any) -> "Opaque":
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


class TensorStub(Opaque):
    qualname = "torch.Tensor"


class _Storage:
    pass


def _real_encode(text: Any, encoding: str = "utf-8", errors: str = "strict") -> Any:
    # numpy and old protocols pickle bytes as _codecs.encode(str, "latin1"); nothing else is run
    if encoding in ("latin1", "latin-1") and isinstance(text, str):
        return codecs.encode(text, encoding, errors)
    return Opaque(text, encoding)


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
            return TensorStub
        if not (module in _TORCH_SAFE_MODULES and (name.endswith("Storage") or name in _TORCH_PLAIN)):
            self.globals_seen.add(f"{module}.{name}")
        stub = self._stubs.get((module, name))
        if stub is None:
            stub = type(name, (Opaque,), {"qualname": f"{module}.{name}"})
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
    shown = ", ".join(dict.fromkeys(plain_global(n) for n in names[:6])) + (" …" if len(names) > 6 else "")
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
            damaged.append(f"member {info.filename} cannot be read ({short_error(error)})")
            continue
        if crc != info.CRC:
            damaged.append(f"member {info.filename} fails its CRC-32")
    return damaged


def damaged_text(damaged: list[str]) -> str:
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


def vet_file(path: Path, kind: FileKind | str) -> Vetting:
    """CRC-32 of every zip member, a safetensors header's sizes, a torch pickle's globals."""
    if kind == FileKind.torch:
        try:
            scan = scan_torch_file(path, structure=False)
        except CheckpointUnreadable as error:
            return Vetting(damaged=str(error))
        return Vetting(damaged=damaged_text(scan.damaged) if scan.damaged else None, globals=scan.all_globals)
    if kind == FileKind.safetensors:
        try:
            read_safetensors_header(path)
        except CheckpointUnreadable as error:
            return Vetting(damaged=str(error))
    if kind == FileKind.npz:
        try:
            with zipfile.ZipFile(path) as archive:
                damaged = zip_damage(archive)
        except zipfile.BadZipFile as error:
            return Vetting(damaged=f"damaged archive: {error}")
        except OSError as error:
            return Vetting(damaged=f"cannot read it: {error.strerror or error}")
        return Vetting(damaged=damaged_text(damaged) if damaged else None)
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
        vetting = vet_file(path, FileKind.torch)
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
                    raise CheckpointUnreadable(damaged_text(damaged))
                with archive.open(pickled) as member:
                    try:
                        found = pickle_globals(member)
                    except Exception as error:  # pickletools raises ValueError, but a torn pickle anything
                        raise CheckpointUnreadable(
                            f"damaged: the object record inside does not parse ({short_error(error)})"
                        ) from None
                if structure:
                    with archive.open(pickled) as member:
                        try:
                            obj = _ScanUnpickler(member).load()
                        except Exception as error:
                            structure_error = f"the object record inside cannot be read without torch ({short_error(error)})"
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
        obj=obj, tensor_count=count_tensors(obj) if structure_error is None else 0, globals=beyond,
        all_globals=all_globals, damaged=damaged, structure_error=structure_error,
    )


def count_tensors(obj: Any) -> int:
    count, stack, seen = 0, [obj], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, TensorStub):
            count += 1
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, Opaque):
            stack.extend(item.args)
            stack.append(item.state)
            stack.extend(item.items.values())
            stack.extend(item.elements)
    return count


def short_error(error: BaseException, limit: int = 200) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_damage(cause: str) -> bool:
    return cause.startswith(("damaged", "truncated", "the file is empty"))


def plain_global(name: str) -> str:
    return "numpy.ndarray" if name.endswith("multiarray._reconstruct") else name
