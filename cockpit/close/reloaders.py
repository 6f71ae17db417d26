"""Reloading a deliverable by its type, as a person would open it later: JSON, CSV and TOML
parsed, safetensors headers checked against the file, numpy and torch files loaded (torch in a
fresh process, never a file that is damaged or would run code), and a deliverable's own `reload`
command run, bounded in time.

Each reloader returns (ok, detail): ok None means "cannot be checked here" (not a failure on its
own inside a folder; a deliverable with nothing checkable needs its own `reload` command).
"""

from __future__ import annotations

import csv
import io
import json
import shlex
import shutil
import sys
import tomllib
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cockpit.checkpoints import CheckpointUnreadable
from cockpit.checkpoints.headers import read_safetensors_header
from cockpit.checkpoints.scan import torch_file_refusal
from cockpit.close.figures import plural
from cockpit.common.subprocesses import run_bounded

RELOAD_TIMEOUT_S = 120.0
OUTPUT_TAIL_CHARS = 400  # of a failed reload's stderr, kept in the cause
STDOUT_KEPT = 1 << 20
ADAPTER_CONFIG = "adapter_config.json"

FORMATS_BY_SUFFIX = {
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".safetensors": "safetensors",
    ".npy": "npy",
    ".npz": "npz",
    ".pt": "torch",
    ".pth": "torch",
    ".bin": "torch",
    ".ckpt": "torch",
    ".md": "text",
    ".markdown": "text",
    ".txt": "text",
    ".rst": "text",
    ".html": "text",
    ".yaml": "text",
    ".yml": "text",
    ".toml": "toml",
    ".parquet": "parquet",
    ".gguf": "gguf",
    ".zip": "zip",
}



# ---------------------------------------------------------------- by type


def detect_format(path: Path) -> str:
    """The format a deliverable is checked as: adapter, folder, or a file format by suffix."""
    if path.is_dir():
        return "adapter" if (path / ADAPTER_CONFIG).is_file() else "folder"
    return FORMATS_BY_SUFFIX.get(path.suffix.lower(), "unknown")



def _not_utf8(path: Path, error: UnicodeDecodeError) -> str:
    """The cause every text reloader gives for a file that is not UTF-8: where its first bad byte is."""
    return f"{path.name} is not UTF-8 text (byte {error.start})"


def _reload_json(path: Path, timeout: float) -> tuple[bool | None, str]:
    try:
        json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        return False, _not_utf8(path, error)
    except json.JSONDecodeError as error:
        return False, f"{path.name} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
    except (ValueError, RecursionError) as error:
        return False, f"{path.name} is not valid JSON: {error}"
    return True, "parses as JSON"


def _reload_jsonl(path: Path, timeout: float) -> tuple[bool | None, str]:
    records = 0
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                json.loads(line.decode("utf-8-sig" if number == 1 else "utf-8"))
            except UnicodeDecodeError:
                return False, f"{path.name} line {number} is not UTF-8 text"
            except json.JSONDecodeError as error:
                return False, f"{path.name} line {number} is not valid JSON: {error.msg} at column {error.colno}"
            except (ValueError, RecursionError) as error:
                return False, f"{path.name} line {number} is not valid JSON: {error}"
            records += 1
    if records == 0:
        return False, f"{path.name} holds no JSON record"
    return True, f"{plural(records, 'JSON line')} parse"


def _reload_csv(path: Path, timeout: float, delimiter: str = ",") -> tuple[bool | None, str]:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return False, _not_utf8(path, error)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    header: list[str] | None = None
    rows = 0
    try:
        for row in reader:
            if not row or all(not cell.strip() for cell in row):
                continue
            if header is None:
                header = row
                continue
            if len(row) != len(header):
                return False, (
                    f"{path.name} line {reader.line_num} has {len(row)} fields, the header {len(header)}"
                )
            rows += 1
    except csv.Error as error:
        return False, f"{path.name} is not valid CSV at line {reader.line_num}: {error}"
    if header is None:
        return False, f"{path.name} holds no CSV header"
    return True, f"CSV with {len(header)} columns and {plural(rows, 'row')} parses"


def _reload_tsv(path: Path, timeout: float) -> tuple[bool | None, str]:
    return _reload_csv(path, timeout, delimiter="\t")


def _reload_text(path: Path, timeout: float) -> tuple[bool | None, str]:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return False, _not_utf8(path, error)
    if not text.strip():
        return False, f"{path.name} holds only blank space"
    return True, f"readable UTF-8 text ({plural(len(text.splitlines()), 'line')})"


def _reload_toml(path: Path, timeout: float) -> tuple[bool | None, str]:
    try:
        tomllib.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        return False, _not_utf8(path, error)
    except tomllib.TOMLDecodeError as error:
        return False, f"{path.name} is not valid TOML: {error}"
    return True, "parses as TOML"


def safetensors_problem(path: Path) -> str | None:
    """Why a file is not a safetensors file (its header against the file's sizes), or None."""
    try:
        read_safetensors_header(path)
    except CheckpointUnreadable as error:
        return f"{path.name}: {error}"
    return None


def _reload_safetensors(path: Path, timeout: float) -> tuple[bool | None, str]:
    problem = safetensors_problem(path)
    if problem:
        return False, problem
    return True, "safetensors header and tensor offsets are consistent"


def have_module(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _reload_npy(path: Path, timeout: float) -> tuple[bool | None, str]:
    if not have_module("numpy"):
        with open(path, "rb") as handle:
            if handle.read(6) != b"\x93NUMPY":
                return False, f"{path.name} is not a .npy file (no NUMPY magic)"
        return None, f"{path.name}: numpy is not installed here; only the .npy magic was checked"
    import numpy

    try:
        array = numpy.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as error:  # numpy raises ValueError, OSError, EOFError… for a bad file
        return False, f"{path.name} does not load with numpy: {error}"
    return True, f"numpy array {array.dtype} {tuple(array.shape)} loads"


def _reload_npz(path: Path, timeout: float) -> tuple[bool | None, str]:
    if not have_module("numpy"):
        problem = _zip_problem(path)
        if problem:
            return False, problem
        return None, f"{path.name}: numpy is not installed here; only the zip archive was checked"
    import numpy

    try:
        with numpy.load(path, allow_pickle=False) as archive:
            names = list(archive.files)
            for name in names:
                archive[name]
    except Exception as error:
        return False, f"{path.name} does not load with numpy: {error}"
    return True, f"numpy archive of {plural(len(names), 'array')} loads"


def _zip_problem(path: Path) -> str | None:
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        return f"{path.name} is not a readable zip archive: {error}"
    if bad is not None:
        return f"{path.name}: member {bad} is damaged"
    return None


def _reload_zip(path: Path, timeout: float) -> tuple[bool | None, str]:
    problem = _zip_problem(path)
    return (False, problem) if problem else (True, "zip archive reads back (CRC checked)")


# -P: the deliverable's folder (the child's working folder) is not put on sys.path, so a file
# there named like a module (torch.py) is never imported in its place.
_TORCH_CHILD = ("-P", "-m", "cockpit.close.torch_child")


Preloaded = Mapping[str, tuple[bool | None, str]]


def torch_reload_many(paths: Sequence[Path], timeout: float) -> dict[str, tuple[bool | None, str]]:
    """torch.load(weights_only=True) of each path in one fresh process (torch loads once).

    Each result is printed as soon as it is known, so a timeout still keeps the finished ones.
    """
    paths = [p for p in paths if _torch_refusal(Path(p)) is None]  # never hand torch a damaged or code-running file
    if not paths:
        return {}
    outcome = run_command([sys.executable, *_TORCH_CHILD, *map(str, paths)], cwd=Path(paths[0]).parent, timeout=timeout)
    results: dict[str, tuple[bool | None, str]] = {}
    for line in outcome.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "fatal" in record:
            return {str(p): (None, f"{Path(p).name}: torch does not import here ({record['fatal']})") for p in paths}
        name = Path(record.get("path", "")).name
        if record.get("ok"):
            results[record["path"]] = (True, f"torch.load(weights_only=True) succeeds in a fresh process ({record.get('seconds', 0):.1f} s)")
        else:
            results[record["path"]] = (False, f"{name} does not load with torch.load(weights_only=True): {record.get('error')}")
    for path in paths:
        if str(path) not in results:
            if outcome.status == "timeout":
                results[str(path)] = (False, f"{Path(path).name}: torch.load did not finish within {timeout:g} s")
            else:
                last = outcome.tail.strip().splitlines()[-1] if outcome.tail.strip() else f"exit {outcome.returncode}"
                results[str(path)] = (False, f"{Path(path).name}: the torch reload process failed: {last}")
    return results


def _torch_refusal(path: Path) -> str | None:
    return torch_file_refusal(path)  # CRC-32 of every member, the pickle's globals (no unpickling)


def _reload_torch(path: Path, timeout: float, preloaded: Preloaded | None = None) -> tuple[bool | None, str]:
    refusal = _torch_refusal(path)
    if refusal is not None:
        return False, refusal
    if preloaded is not None and str(path) in preloaded:
        return preloaded[str(path)]
    if not have_module("torch"):
        try:
            with zipfile.ZipFile(path) as archive:
                pickled = any(name.endswith("/data.pkl") or name == "data.pkl" for name in archive.namelist())
        except (zipfile.BadZipFile, OSError):
            pickled = False
        if pickled:
            return None, f"{path.name}: torch is not installed here; only its zip archive was checked"
        return None, f"{path.name}: torch is not installed here and it is no torch zip archive"
    return torch_reload_many([path], timeout)[str(path)]


def _reload_parquet(path: Path, timeout: float) -> tuple[bool | None, str]:
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(4)
        handle.seek(max(0, size - 4))
        tail = handle.read(4)
    if size < 12 or head != b"PAR1" or tail != b"PAR1":
        return False, f"{path.name} is not a Parquet file (no PAR1 marks at both ends)"
    return None, f"{path.name}: Parquet marks checked; no Parquet reader here"


def _reload_gguf(path: Path, timeout: float) -> tuple[bool | None, str]:
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            return False, f"{path.name} is not a GGUF file (no GGUF magic)"
    return None, f"{path.name}: GGUF magic checked; no GGUF reader here"


RELOADERS = {
    "json": _reload_json,
    "jsonl": _reload_jsonl,
    "csv": _reload_csv,
    "tsv": _reload_tsv,
    "text": _reload_text,
    "toml": _reload_toml,
    "safetensors": _reload_safetensors,
    "npy": _reload_npy,
    "npz": _reload_npz,
    "torch": _reload_torch,
    "parquet": _reload_parquet,
    "gguf": _reload_gguf,
    "zip": _reload_zip,
}


def reload_file(
    path: Path, timeout: float = RELOAD_TIMEOUT_S, preloaded: Preloaded | None = None
) -> tuple[bool | None, str]:
    """Reload one file by its type: (True, how), (False, why not), or (None, why it cannot be
    tried). `preloaded` holds torch results already computed in one batch (`torch_reload_many`)."""
    kind = FORMATS_BY_SUFFIX.get(path.suffix.lower())
    if kind is None:
        return None, f"{path.name}: no reader for '{path.suffix or 'no suffix'}' files"
    try:
        if kind == "torch":
            return _reload_torch(path, timeout, preloaded)
        return RELOADERS[kind](path, timeout)
    except OSError as error:
        return False, f"{path.name} cannot be read: {error.strerror}"



# ---------------------------------------------------------------- a deliverable's own command


@dataclass(frozen=True)
class CommandOutcome:
    status: str  # ok | failed | not_found | not_executable | timeout | invalid
    returncode: int | None
    seconds: float
    tail: str  # the end of stderr (else stdout)
    stdout: str = ""  # at most STDOUT_KEPT characters


def run_command(argv: Sequence[str], *, cwd: Path, timeout: float) -> CommandOutcome:
    """Run argv (no shell) with a timeout. When it exits or its time runs out, everything it
    started is ended (its session, its group, every descendant, a `setsid` daemon included), and
    its output is read through bounded buffers: the first STDOUT_KEPT bytes of stdout, the end of
    each stream (however much it prints, the cockpit's memory stays small)."""
    try:
        finished = run_bounded(argv, cwd=cwd, timeout=timeout, stdout_head=STDOUT_KEPT)
    except FileNotFoundError:
        return CommandOutcome("not_found", None, 0.0, "")
    except PermissionError:
        return CommandOutcome("not_executable", None, 0.0, "")
    except OSError as error:
        return CommandOutcome("invalid", None, 0.0, error.strerror or str(error))
    stdout = bytes(finished.stdout.head).decode("utf-8", "replace")
    if finished.timed_out:
        return CommandOutcome("timeout", None, finished.seconds, "", stdout)
    end = finished.stderr.tail if finished.stderr.total else finished.stdout.tail
    tail = bytes(end[-OUTPUT_TAIL_CHARS * 4:]).decode("utf-8", "replace")[-OUTPUT_TAIL_CHARS:]
    status = "ok" if finished.returncode == 0 else "failed"
    return CommandOutcome(status, finished.returncode, finished.seconds, tail, stdout)


def run_reload_command(command: str, cwd: Path, timeout: float) -> tuple[bool, str]:
    """A deliverable's own `reload` command: split like a shell would, run without one, in the
    campaign folder. `python`/`python3` missing from PATH means the cockpit's own interpreter."""
    try:
        argv = shlex.split(command)
    except ValueError as error:
        return False, f"reload command cannot be read ({error}): {command!r}"
    if not argv:
        return False, "reload command is empty"
    if argv[0] in ("python", "python3") and shutil.which(argv[0]) is None:
        argv[0] = sys.executable
    outcome = run_command(argv, cwd=cwd, timeout=timeout)
    if outcome.status == "ok":
        return True, f"reload command exited 0 ({outcome.seconds:.1f} s)"
    if outcome.status == "not_found":
        return False, f"reload command not found: {argv[0]!r} (no such program on PATH or in the campaign folder)"
    if outcome.status == "not_executable":
        return False, f"reload command cannot be run: {argv[0]!r} is not executable"
    if outcome.status == "timeout":
        return False, f"reload command did not finish within {timeout:g} s: {command}"
    if outcome.status == "invalid":
        return False, f"reload command cannot be started: {outcome.tail}"
    last = outcome.tail.strip().splitlines()[-1] if outcome.tail.strip() else ""
    return False, f"reload command exited {outcome.returncode}: {command}" + (f" ({last})" if last else "")

