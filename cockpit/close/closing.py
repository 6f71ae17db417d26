"""Closing a campaign : verify each deliverable, set the lot price against the ones
accepted, state what the campaign concluded, and set the frozen plan beside what was measured.

`close_campaign` writes `DIR/closing/` (report.md, summary.json, manifest.json, plan.toml,
runlog.jsonl, RELOAD.md) and records `closed` in the run log; `evaluate` does the same work
without writing anything. No Textual here: `cockpit close` and the TUI share this module.
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import io
import itertools
import json
import math
import os
import re
import shlex
import shutil
import struct
import sys
import tomllib
import zipfile
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from cockpit.common.layout import CLOSING_DIR, DIR_MODE, FILE_MODE, FROZEN_PLAN, RUNLOG_FILE, STATE_DIR
from cockpit.common.subprocesses import run_bounded
from cockpit.common.text import escape_control, json_safe
from cockpit.common.times import iso, parse_ts, utc_now
from cockpit.errors import Finding
from cockpit.live.metrics import (
    MetricsStream,
    SavedState,
    format_value,
    load_state,
    seconds_to_datetime,
    state_file,
)
from cockpit.plan.campaign import Campaign, CampaignError, Deliverable
from cockpit.plan.load import load_campaign, read_campaign_text
from cockpit.plan.schedule import schedule
from cockpit.record.runlog import AlertRecord, RecordedState, RunLog
from cockpit.record.start import frozen_plan_text

CLOSE_SOURCE = "close"  # the source of the `rejected` events a closing records
SUMMARY_SCHEMA = 1
CENT = Decimal("0.01")

# Folders a rented box loses when the lot ends. COCKPIT_TEMP_ROOTS (paths joined by ':')
# replaces this list and $TMPDIR entirely, e.g. to add a scratch disk the provider wipes.
TEMP_ROOTS_ENV = "COCKPIT_TEMP_ROOTS"
DEFAULT_TEMP_ROOTS = ("/tmp", "/var/tmp", "/dev/shm", "/run/user")

RELOAD_TIMEOUT_S = 120.0
OUTPUT_TAIL_CHARS = 400  # of a failed reload's stderr, kept in the cause
STDOUT_KEPT = 1 << 20
IDS_SHOWN = 5  # missing ids named in a cause
CONFIG_SCAN_MAX_BYTES = 1 << 20  # config-like files larger than this are data, not manifests
FOLDER_FILES_CHECKED = 500  # files of a folder deliverable reloaded one by one, at most
HASH_CHUNK = 1 << 20

# Config-like files scanned for paths into temporary folders: inside a folder deliverable, and
# the deliverable itself when it is one of these (a small manifest).
CONFIG_SUFFIXES = frozenset({".json", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".conf"})
FOLDER_CONFIG_SUFFIXES = CONFIG_SUFFIXES | {".txt"}

# A branch or alias moves: only a fixed revision (a commit hash, a tag) lets the base be fetched
# again as it was: an adapter without its exact base revision cannot be reloaded later.
MOVING_REVISIONS = frozenset({"main", "master", "head", "latest"})
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin", "adapter_model.pt")

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

CHECK_ORDER = (
    "run_not_stopped",
    "no_open_alert",
    "not_rejected_by_person",
    "present",
    "not_empty",
    "not_temporary",
    "expected_ids",
    "base_revision",
    "reloads",
    "distinct",
)


# ---------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Check:
    """One announced check on a deliverable: passed (True), failed (False), or not applicable (None)."""

    name: str
    ok: bool | None
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class FileEntry:
    """A file of a deliverable: where it is, how big, its sha256."""

    path: str  # relative to the campaign folder when inside it, else absolute
    size_bytes: int
    sha256: str


@dataclass
class DeliverableVerdict:
    deliverable: Deliverable
    format: str | None = None
    real_path: str | None = None
    checks: list[Check] = field(default_factory=list)
    sha256: str | None = None  # of the file, or of a folder's sorted relative paths and contents
    size_bytes: int | None = None
    files: list[FileEntry] = field(default_factory=list)
    accepted_by_person: dict[str, Any] | None = None
    adapter: dict[str, Any] | None = None  # base, revision, task type: for RELOAD.md

    @property
    def id(self) -> str:
        return self.deliverable.id

    @property
    def accepted(self) -> bool:
        return all(check.ok is not False for check in self.checks)

    @property
    def cause(self) -> str | None:
        failed = [check.detail for check in self.checks if check.ok is False]
        return "; ".join(failed) if failed else None

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def set(self, name: str, ok: bool | None, detail: str) -> None:
        self.checks = [c for c in self.checks if c.name != name]
        self.checks.append(Check(name, ok, detail))
        self.checks.sort(key=lambda c: CHECK_ORDER.index(c.name))


# ---------------------------------------------------------------- small helpers


def money(amount: Decimal) -> str:
    return f"{amount.quantize(CENT, rounding=ROUND_HALF_UP):.2f}"


def cost_per_accepted(price: Decimal, accepted: int) -> Decimal | None:
    """The lot price per accepted deliverable, to the cent (half up); None when none was accepted."""
    if accepted <= 0:
        return None
    return (price / accepted).quantize(CENT, rounding=ROUND_HALF_UP)


def _hours(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _threshold_text(value: float) -> str:
    """0.8 → "0.80" (as the seed writes it), 0.825 → "0.825"."""
    two = f"{value:.2f}"
    return two if float(two) == value else f"{value:g}"


def _plain_number(value: Any) -> Any:
    """A metric value for strict JSON: finite numbers as they are, NaN/Infinity as their names."""
    if isinstance(value, float) and not math.isfinite(value):
        return format_value(value)
    return value


def _display(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return str(path)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# Alerts that ask for a decision about the campaign, not about what a run produced: listed among
# the closing's alerts, but they hold no deliverable back (the pilot decision falls due on the
# pilot run, whose output it says nothing about).
NOT_ABOUT_OUTPUT = frozenset({"pilot-due"})


def _about_output(alert: Mapping[str, Any]) -> bool:
    return alert.get("rule") not in NOT_ABOUT_OUTPUT


def open_alert_text(alert: Mapping[str, Any]) -> str:
    """"open alert: RULE: message", as a rejection cause says it."""
    message = str(alert.get("message") or "").strip()
    return f"open alert: {alert.get('rule')}" + (f": {message}" if message else "")


def _plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else (plural or word + 's')}"


# ---------------------------------------------------------------- temporary folders


def temp_roots_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The folders the box loses: $COCKPIT_TEMP_ROOTS when set (':'-separated, replacing all
    defaults), else /tmp, /var/tmp, /dev/shm, /run/user and $TMPDIR."""
    env = os.environ if environ is None else environ
    if TEMP_ROOTS_ENV in env:
        return tuple(p for p in env[TEMP_ROOTS_ENV].split(os.pathsep) if p.strip())
    roots = list(DEFAULT_TEMP_ROOTS)
    tmpdir = env.get("TMPDIR", "").strip()
    if tmpdir and tmpdir not in roots:
        roots.append(tmpdir)
    return tuple(roots)


class TempFolders:
    """Tells whether a real path lies in a folder the box loses at the end of the lot.

    A root that holds the campaign folder itself does not condemn the paths inside the campaign:
    they depend on nothing but the campaign (which the report then warns about once); a link or a
    written path that leads out of the campaign into such a folder is what the seed means by a
    path that depends on a temporary folder.
    """

    def __init__(self, roots: Iterable[str | Path], campaign_dir: Path):
        self.campaign = Path(os.path.realpath(campaign_dir))
        resolved: list[Path] = []
        for root in roots:
            text = str(root).strip()
            if not text:
                continue
            for form in (Path(os.path.abspath(text)), Path(os.path.realpath(text))):
                if form not in resolved:
                    resolved.append(form)
        self.roots = tuple(resolved)
        texts = sorted({str(r) for r in self.roots if str(r) != "/"}, key=len, reverse=True)
        self._pattern = (
            re.compile(
                r"(?:(?<=file://)|(?<![\w.\-~/]))(" + "|".join(re.escape(t) for t in texts)
                + r")(?=$|[/\s\"'`,;:)\]}>])(/[^\s\"'`,;)\]}>]*)?"
            )
            if texts
            else None
        )

    def campaign_root(self) -> Path | None:
        """The temporary folder that holds the campaign itself, if any."""
        return next((r for r in self.roots if _inside(self.campaign, r)), None)

    def root_of(self, real: Path) -> Path | None:
        """The temporary folder `real` (already resolved) is in, or None."""
        for root in self.roots:
            if _inside(real, root):
                if _inside(root, self.campaign) or not (_inside(self.campaign, root) and _inside(real, self.campaign)):
                    return root
        return None

    def mentions(self, text: str) -> list[str]:
        """Paths into temporary folders written in `text` (each once, in order)."""
        if self._pattern is None:
            return []
        found: list[str] = []
        for match in self._pattern.finditer(text):
            written = match.group(1) + (match.group(2) or "")
            if self.root_of(Path(os.path.realpath(written))) is None and self.root_of(Path(written)) is None:
                continue
            if written not in found:
                found.append(written)
        return found


# ---------------------------------------------------------------- ids


class IdsError(Exception):
    """The ids of a file could not be read; the message says why."""


class _ContentError(IdsError):
    """A problem of the file's content (not JSON, no `id`): a file that is not UTF-8 says that first."""


ID_CHUNK_BYTES = 1 << 22  # a file's ids are read 4 MiB at a time, cut at a line feed
ID_BATCH_ROWS = 100_000  # rows of a CSV handed on at once
MISSING_SET_MAX = 2_000_000  # missing ids looked up through one set (else through sorted arrays)

try:  # a C parser for the common JSON Lines record; any line it refuses is parsed again by `json`
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a dependency
    _orjson = None


def read_ids(path: Path) -> list[str]:
    """The ids a file lists: JSON Lines objects with `id`, a CSV/TSV with an `id` column, a JSON
    list (of ids or of objects with `id`), or a plain list, one id a line (blank lines and
    `#` comments skipped)."""
    return [identifier for batch in iter_id_batches(path) for identifier in batch]


def iter_id_batches(path: Path) -> Iterator[list[str]]:
    """The ids of `read_ids`, streamed in batches: JSON Lines, CSV and plain lists are read a chunk
    at a time (memory stays flat for 10 million ids); a JSON document is read whole. The errors are
    those of reading the whole file first: one that is not UTF-8 says so, wherever the first bad
    byte is."""
    suffix = path.suffix.lower()
    if suffix == ".json":
        yield _json_document_ids(path)
        return
    try:
        if suffix in (".jsonl", ".ndjson"):
            yield from _jsonl_batches(path)
        elif suffix in (".csv", ".tsv"):
            yield from _csv_batches(path, "\t" if suffix == ".tsv" else ",")
        else:
            for text in _decoded_chunks(path):
                if text.isascii() and not any(mark in text for mark in _PLAIN_SPECIAL):  # nothing to strip: split in C
                    ids = list(filter(None, text.split("\n")))
                else:
                    ids = [line for line in map(str.strip, text.splitlines()) if line and line[0] != "#"]
                if ids:
                    yield ids
    except _ContentError as error:
        raise _utf8_problem(path) or IdsError(str(error)) from None


# In ASCII text, the blank space other than the line feed (what str.strip and str.splitlines act
# on) and the comment mark: a chunk without any is split on line feeds and kept as it is.
_PLAIN_SPECIAL = (" ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "#")


def _decoded_chunks(path: Path) -> Iterator[str]:
    """The file as UTF-8 text (a leading BOM dropped), in pieces that end at a line feed; a bad byte
    is named by its offset as decoding the whole file would name it."""
    offset = 0  # of the next piece, after the BOM
    first = True
    try:
        with open(path, "rb") as handle:
            pending: list[bytes] = []
            while True:
                block = handle.read(ID_CHUNK_BYTES)
                cut = block.rfind(b"\n") + 1 if block else len(block)
                if block and cut == 0:
                    pending.append(block)  # one line longer than a chunk: keep it whole
                    continue
                piece = b"".join(pending) + block[:cut] if block else b"".join(pending)
                pending = [block[cut:]] if block and cut < len(block) else []
                if first and piece.startswith(b"\xef\xbb\xbf"):
                    piece = piece[3:]
                first = False
                if piece:
                    try:
                        yield piece.decode("utf-8")
                    except UnicodeDecodeError as error:
                        raise IdsError(f"{path.name} is not UTF-8 text (byte {offset + error.start})") from None
                    offset += len(piece)
                if not block:
                    return
    except OSError as error:
        raise IdsError(f"{path.name} cannot be read: {error.strerror}") from None


def _utf8_problem(path: Path) -> IdsError | None:
    """The error decoding the whole file would give, if any (read once more, a chunk at a time)."""
    try:
        for _ in _decoded_chunks(path):
            pass
    except IdsError as error:
        return error
    return None


def _jsonl_batches(path: Path) -> Iterator[list[str]]:
    number = 0  # lines before the chunk, as str.splitlines() counts them
    for text in _decoded_chunks(path):
        lines = text.splitlines()
        ids = _jsonl_fast(lines)
        if ids is None:
            ids = _jsonl_exact(lines, number, path.name)
        number += len(lines)
        if ids:
            yield ids


def _jsonl_fast(lines: list[str]) -> list[str] | None:
    """The ids of plain `{"id": …}` lines through orjson, or None: then `json` decides, line by line."""
    if _orjson is None:
        return None
    try:
        ids = [record["id"] for record in map(_orjson.loads, filter(str.strip, lines))]
    except (ValueError, TypeError, KeyError):  # orjson.JSONDecodeError is a ValueError
        return None
    kinds = set(map(type, ids))
    if kinds <= {str}:
        return ids
    if kinds <= {str, int}:
        return [i if type(i) is str else str(i) for i in ids]
    return None


def _jsonl_exact(lines: list[str], before: int, name: str) -> list[str]:
    ids = []
    for number, line in enumerate(lines, start=before + 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            raise _ContentError(f"{name} line {number} is not JSON") from None
        try:
            ids.append(_id_of(record, f"{name} line {number}"))
        except IdsError as error:
            raise _ContentError(str(error)) from None
    return ids


def _csv_batches(path: Path, delimiter: str) -> Iterator[list[str]]:
    """The `id` column, as csv.DictReader gives it: the last column of that exact name, a short row
    without it skipped, like an empty value."""
    lines = itertools.chain.from_iterable(io.StringIO(text, newline="") for text in _decoded_chunks(path))
    reader = csv.reader(lines, delimiter=delimiter)
    try:
        header = next(reader, None)
        if not header or "id" not in [f.strip() for f in header]:
            raise _ContentError(f"{path.name} has no `id` column (columns: {', '.join(header or []) or 'none'})")
        column = next(f for f in header if f.strip() == "id")
        index = max(i for i, f in enumerate(header) if f == column)
        batch: list[str] = []
        for row in reader:
            if index < len(row) and row[index] != "":
                batch.append(row[index].strip())
                if len(batch) >= ID_BATCH_ROWS:
                    yield batch
                    batch = []
        if batch:
            yield batch
    except csv.Error as error:
        raise _ContentError(f"{path.name} is not valid CSV: {error}") from None


def _json_document_ids(path: Path) -> list[str]:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise IdsError(f"{path.name} is not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise IdsError(f"{path.name} cannot be read: {error.strerror}") from None
    try:
        document = json.loads(text)
    except ValueError:
        raise IdsError(f"{path.name} is not JSON") from None
    if isinstance(document, dict):
        rows = document.get("predictions", document.get("ids"))
        if not isinstance(rows, list):
            raise IdsError(f"{path.name} holds an object without a list of `predictions` or `ids`")
        document = rows
    if not isinstance(document, list):
        raise IdsError(f"{path.name} holds no list of ids")
    return [_id_of(item, path.name) for item in document]


def _id_of(record: Any, where: str) -> str:
    if isinstance(record, (str, int)) and not isinstance(record, bool):
        return str(record)
    if isinstance(record, dict) and isinstance(record.get("id"), (str, int)) and not isinstance(record.get("id"), bool):
        return str(record["id"])
    raise IdsError(f"{where} has no `id`")


def missing_ids(expected: Sequence[str], present: Iterable[str]) -> list[str]:
    """The expected ids not present, in the expected file's order."""
    have = set(present)
    seen: set[str] = set()
    missing = []
    for identifier in expected:
        if identifier not in have and identifier not in seen:
            missing.append(identifier)
        seen.add(identifier)
    return missing


# An id is kept as its 64-bit hash (8 bytes in an array, not a 60-byte str in a set), in 256
# buckets by the hash's low byte, so that one bucket at a time becomes a set: 10 million ids on
# each side fit in about 200 MB, and every step runs in C (sort by bucket, slices, sets). Two
# different ids are taken for one only if their hashes collide (odds about n² / 2⁶⁴: 5 in a
# million for 10 million ids).
BUCKETS = 256
_bucket_of = (BUCKETS - 1).__and__


class HashedIds:
    """A multiset of ids reduced to their hashes, partitioned by the hash's low byte. Each bucket
    is a list of small arrays, one a batch: nothing is copied to grow, nothing over-allocated."""

    def __init__(self) -> None:
        self.buckets: list[list[array]] = [[] for _ in range(BUCKETS)]
        self.count = 0

    def add(self, ids: Iterable[str]) -> None:
        hashes = sorted(map(hash, ids), key=_bucket_of)  # a stable sort on a one-byte key: cheap
        packed = array("q", hashes)
        self.count += len(hashes)
        start = 0
        for bucket in range(BUCKETS):
            end = bisect.bisect_right(hashes, bucket, lo=start, key=_bucket_of)
            if end > start:
                self.buckets[bucket].append(packed[start:end])
                start = end


def compare_hashed(expected: HashedIds, present: HashedIds) -> tuple[int, list[array]]:
    """(distinct expected ids, the hashes of the distinct missing ones by bucket), emptying both."""
    unique = 0
    missing: list[array] = []
    for bucket in range(BUCKETS):
        wanted = set(itertools.chain.from_iterable(expected.buckets[bucket]))
        expected.buckets[bucket] = []
        unique += len(wanted)
        for piece in present.buckets[bucket]:
            wanted.difference_update(piece)
        present.buckets[bucket] = []
        missing.append(array("q", sorted(wanted)))
    return unique, missing


def first_missing(path: Path, missing: list[array], limit: int = IDS_SHOWN) -> list[str]:
    """The first `limit` distinct missing ids in the expected file's order (a second reading)."""
    total = sum(len(b) for b in missing)
    found: list[str] = []
    limit = min(limit, total)  # all of them found: the rest of the file need not be read
    if total == 0:
        return found
    if total <= MISSING_SET_MAX:
        wanted = set(itertools.chain.from_iterable(missing))
        hit = wanted.__contains__
    else:
        def hit(value: int) -> bool:
            bucket = missing[_bucket_of(value)]
            at = bisect.bisect_left(bucket, value)
            return at < len(bucket) and bucket[at] == value
    for batch in iter_id_batches(path):
        for identifier in itertools.compress(batch, map(hit, map(hash, batch))):
            if identifier not in found:
                found.append(identifier)
                if len(found) >= limit:
                    return found
    return found


# ---------------------------------------------------------------- reloading by type


def detect_format(path: Path) -> str:
    """The format a deliverable is checked as: adapter, folder, or a file format by suffix."""
    if path.is_dir():
        return "adapter" if (path / ADAPTER_CONFIG).is_file() else "folder"
    return FORMATS_BY_SUFFIX.get(path.suffix.lower(), "unknown")


# Each reloader returns (ok, detail): ok None means "cannot be checked here" (not a failure on
# its own inside a folder; a deliverable with nothing checkable needs its own `reload` command).


def _reload_json(path: Path, timeout: float) -> tuple[bool | None, str]:
    try:
        json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        return False, f"{path.name} is not UTF-8 text (byte {error.start})"
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
    return True, f"{_plural(records, 'JSON line')} parse"


def _reload_csv(path: Path, timeout: float, delimiter: str = ",") -> tuple[bool | None, str]:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return False, f"{path.name} is not UTF-8 text (byte {error.start})"
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
    return True, f"CSV with {len(header)} columns and {_plural(rows, 'row')} parses"


def _reload_tsv(path: Path, timeout: float) -> tuple[bool | None, str]:
    return _reload_csv(path, timeout, delimiter="\t")


def _reload_text(path: Path, timeout: float) -> tuple[bool | None, str]:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return False, f"{path.name} is not UTF-8 text (byte {error.start})"
    if not text.strip():
        return False, f"{path.name} holds only blank space"
    return True, f"readable UTF-8 text ({_plural(len(text.splitlines()), 'line')})"


def _reload_toml(path: Path, timeout: float) -> tuple[bool | None, str]:
    try:
        tomllib.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        return False, f"{path.name} is not UTF-8 text (byte {error.start})"
    except tomllib.TOMLDecodeError as error:
        return False, f"{path.name} is not valid TOML: {error}"
    return True, "parses as TOML"


SAFETENSORS_HEADER_MAX = 100 * 1024 * 1024


def safetensors_problem(path: Path) -> str | None:
    """Why a file is not a safetensors file (8-byte little-endian header length, a JSON header,
    tensors whose byte ranges tile the data exactly), or None when it is one."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"{path.name} is shorter than a safetensors header ({size} bytes)"
        (length,) = struct.unpack("<Q", head)
        if length == 0 or length > SAFETENSORS_HEADER_MAX or 8 + length > size:
            return f"{path.name}: the safetensors header length ({length}) does not fit the file ({size} bytes)"
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return f"{path.name}: the safetensors header is not JSON"
    if not isinstance(header, dict):
        return f"{path.name}: the safetensors header is not a JSON object"
    data_size = size - 8 - length
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("dtype"), str)
            or not isinstance(entry.get("shape"), list)
            or not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets))
        ):
            return f"{path.name}: tensor '{name}' has no dtype, shape and data_offsets"
        begin, end = offsets
        if not 0 <= begin <= end <= data_size:
            return f"{path.name}: tensor '{name}' points past the end of the file"
        spans.append((begin, end))
    spans.sort()
    position = 0
    for begin, end in spans:
        if begin != position:
            return f"{path.name}: the tensors' bytes overlap or leave a gap at byte {position}"
        position = end
    if position != data_size:
        return f"{path.name}: {data_size - position} bytes after the last tensor belong to none"
    return None


def _reload_safetensors(path: Path, timeout: float) -> tuple[bool | None, str]:
    problem = safetensors_problem(path)
    if problem:
        return False, problem
    return True, "safetensors header and tensor offsets are consistent"


def _have(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _reload_npy(path: Path, timeout: float) -> tuple[bool | None, str]:
    if not _have("numpy"):
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
    if not _have("numpy"):
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
    return True, f"numpy archive of {_plural(len(names), 'array')} loads"


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


_TORCH_SCRIPT = """
import json, sys, time
try:
    import torch
except Exception as error:
    print(json.dumps({"fatal": f"{type(error).__name__}: {error}"}), flush=True)
    sys.exit(3)
for path in sys.argv[1:]:
    started = time.monotonic()
    try:
        torch.load(path, map_location="cpu", weights_only=True)
        result = {"path": path, "ok": True}
    except Exception as error:
        lines = str(error).strip().splitlines()
        result = {"path": path, "ok": False, "error": f"{type(error).__name__}: {lines[0] if lines else ''}"}
    result["seconds"] = round(time.monotonic() - started, 3)
    print(json.dumps(result), flush=True)
"""

Preloaded = Mapping[str, tuple[bool | None, str]]


def torch_reload_many(paths: Sequence[Path], timeout: float) -> dict[str, tuple[bool | None, str]]:
    """torch.load(weights_only=True) of each path in one fresh process (torch loads once).

    Each result is printed as soon as it is known, so a timeout still keeps the finished ones.
    """
    paths = [p for p in paths if _torch_refusal(Path(p)) is None]  # never hand torch a damaged or code-running file
    if not paths:
        return {}
    outcome = run_command([sys.executable, "-c", _TORCH_SCRIPT, *map(str, paths)], cwd=Path(paths[0]).parent, timeout=timeout)
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
    from cockpit.resume.scan import torch_file_refusal  # CRC-32 of every member, the pickle's globals (no unpickling)

    return torch_file_refusal(path)


def _reload_torch(path: Path, timeout: float, preloaded: Preloaded | None = None) -> tuple[bool | None, str]:
    refusal = _torch_refusal(path)
    if refusal is not None:
        return False, refusal
    if preloaded is not None and str(path) in preloaded:
        return preloaded[str(path)]
    if not _have("torch"):
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


# ---------------------------------------------------------------- running a command


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


# ---------------------------------------------------------------- one deliverable


def _walk_files(folder: Path) -> list[Path]:
    """Every file under `folder`, following links to folders once, sorted by relative path."""
    files: list[Path] = []
    seen: set[str] = set()
    for current, dirs, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(current)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        for name in names:
            files.append(Path(current) / name)
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())


def _content(path: Path, base: Path) -> tuple[str, int, list[FileEntry]]:
    """sha256 and size of a file, or of a folder (its sorted relative paths and their contents)."""
    if path.is_file():
        digest, size = _sha256_file(path), path.stat().st_size
        return digest, size, [FileEntry(_display(path, base), size, digest)]
    digest = hashlib.sha256()
    entries: list[FileEntry] = []
    total = 0
    for file in _walk_files(path):
        if not file.is_file():
            continue
        relative = file.relative_to(path).as_posix()
        file_digest = _sha256_file(file)
        size = file.stat().st_size
        digest.update(relative.encode("utf-8") + b"\0" + file_digest.encode("ascii") + b"\n")
        entries.append(FileEntry(_display(file, base), size, file_digest))
        total += size
    return digest.hexdigest(), total, entries


def verify_deliverable(
    campaign: Campaign,
    deliverable: Deliverable,
    *,
    state: RecordedState,
    temp: TempFolders,
    reload_timeout: float = RELOAD_TIMEOUT_S,
    preloaded: Preloaded | None = None,
) -> DeliverableVerdict:
    """Every announced check on one deliverable (all but `distinct`, which needs the others)."""
    base = campaign.directory
    verdict = DeliverableVerdict(deliverable)
    verdict.accepted_by_person = next(
        (e for e in reversed(state.accepted) if e.get("deliverable") == deliverable.id), None
    )

    if deliverable.run is not None:
        stop = state.stop_of(deliverable.run)
        if stop is not None:
            why = stop_cause(stop, label_reason=True)
            verdict.set(
                "run_not_stopped", False,
                f"run '{deliverable.run}' was stopped ({why}); an interrupted run does not become an accepted deliverable",
            )
        else:
            verdict.set("run_not_stopped", True, f"run '{deliverable.run}' was not stopped")
        # An alert no person looked at may be the reason the output is wrong (a truncated essential
        # input, a run that died): it stands against the run's deliverables until acknowledged.
        open_alerts = [a.event for a in state.active_alerts if a.event.get("run") == deliverable.run and _about_output(a.event)]
        if open_alerts:
            verdict.set("no_open_alert", False, "; ".join(open_alert_text(e) for e in open_alerts))
        else:
            verdict.set("no_open_alert", True, f"no open alert on run '{deliverable.run}'")
    person_rejection = next(
        (
            e for e in reversed(state.rejected)
            # a closing's own record of its verdict is not a person's rejection: a fixed file passes the next closing
            if e.get("deliverable") == deliverable.id and e.get("source") != CLOSE_SOURCE
        ),
        None,
    )
    if person_rejection is not None:
        reason = person_rejection.get("reason") or person_rejection.get("text") or "no reason given"
        verdict.set("not_rejected_by_person", False, f"rejected by {person_rejection.get('who', 'a person')}: {reason}")

    path = base / deliverable.path
    shown = deliverable.path
    if not path.exists():
        if path.is_symlink():
            target = os.readlink(path)
            verdict.set("present", False, f"missing: {shown} is a link to {target}, which does not exist")
        else:
            verdict.set("present", False, f"missing: {shown} does not exist")
        return verdict
    real = Path(os.path.realpath(path))
    verdict.real_path = str(real)
    verdict.set("present", True, f"{shown} is there")
    verdict.format = detect_format(path)

    # not empty
    try:
        verdict.sha256, verdict.size_bytes, verdict.files = _content(path, base)
    except OSError as error:
        verdict.set("not_empty", False, f"{shown} cannot be read: {error.strerror}")
        return verdict
    if path.is_dir() and not verdict.files:
        verdict.set("not_empty", False, f"empty: the folder {shown} holds no file")
        return verdict
    if verdict.size_bytes == 0:
        verdict.set("not_empty", False, f"empty: {shown} is 0 bytes")
        return verdict
    empty_inside = [f.path for f in verdict.files if f.size_bytes == 0]
    if path.is_dir() and empty_inside:
        verdict.set("not_empty", False, f"empty file{'s' if len(empty_inside) > 1 else ''} inside {shown}: {', '.join(empty_inside[:IDS_SHOWN])}")
    else:
        verdict.set("not_empty", True, f"{verdict.size_bytes} bytes" + (f" in {_plural(len(verdict.files), 'file')}" if path.is_dir() else ""))

    _check_temporary(verdict, path, real, temp)
    if deliverable.expect_ids:
        _check_ids(verdict, campaign, path)
    if verdict.format == "adapter" or deliverable.kind.value == "adapter":
        _check_adapter_revision(verdict, path)
    _check_reload(verdict, campaign, path, reload_timeout, preloaded)
    return verdict


def _check_temporary(verdict: DeliverableVerdict, path: Path, real: Path, temp: TempFolders) -> None:
    shown = verdict.deliverable.path
    root = temp.root_of(real)
    if root is not None:
        how = f" (a link to {real})" if real != Path(os.path.abspath(path)) else f" ({real})"
        verdict.set(
            "not_temporary", False,
            f"{shown} is in a temporary folder{how}, under {root}: the box loses it when the lot ends; move it to a lasting folder",
        )
        return
    problems: list[str] = []
    if path.is_dir():
        for file in _walk_files(path)[: FOLDER_FILES_CHECKED * 4]:
            file_real = Path(os.path.realpath(file))
            inner_root = temp.root_of(file_real)
            if inner_root is not None:
                problems.append(f"{_display(file, path)} is a link into {inner_root} ({file_real})")
                continue
            if file.suffix.lower() in FOLDER_CONFIG_SUFFIXES or file.name.upper().startswith("MANIFEST"):
                problems.extend(_config_mentions(file, path, temp))
    elif path.suffix.lower() in CONFIG_SUFFIXES or path.name.upper().startswith("MANIFEST"):
        problems.extend(_config_mentions(path, path.parent, temp))
    if problems:
        verdict.set(
            "not_temporary", False,
            "paths into a temporary folder: " + "; ".join(problems[:3])
            + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
            + "; write lasting paths (or hub ids) instead",
        )
    else:
        verdict.set("not_temporary", True, "no path into a temporary folder")


def _config_mentions(file: Path, relative_to: Path, temp: TempFolders) -> list[str]:
    try:
        if file.stat().st_size > CONFIG_SCAN_MAX_BYTES:
            return []
        text = file.read_bytes().decode("utf-8", "replace")
    except OSError:
        return []
    name = _display(file, relative_to) if file != relative_to else file.name
    return [f"{name} mentions {written}" for written in temp.mentions(text)]


def _check_ids(verdict: DeliverableVerdict, campaign: Campaign, path: Path) -> None:
    expect_path = campaign.directory / verdict.deliverable.expect_ids
    shown = verdict.deliverable.expect_ids
    if not expect_path.is_file():
        verdict.set("expected_ids", False, f"the expected-ids file {shown} does not exist")
        return
    expected = HashedIds()
    try:
        for batch in iter_id_batches(expect_path):
            expected.add(batch)
    except IdsError as error:
        verdict.set("expected_ids", False, f"the expected-ids file cannot be read: {error}")
        return
    if path.is_dir():
        verdict.set("expected_ids", False, "expected ids cannot be checked in a folder: point the deliverable at its predictions file")
        return
    if path.suffix.lower() not in (".jsonl", ".ndjson", ".csv", ".tsv", ".json", ".txt", ".ids", ""):
        verdict.set("expected_ids", False, f"expected ids cannot be checked in a '{path.suffix}' file (JSON Lines, CSV or a plain id list)")
        return
    present = HashedIds()
    try:
        for batch in iter_id_batches(path):
            present.add(batch)
    except IdsError as error:
        verdict.set("expected_ids", False, f"ids cannot be read from the deliverable: {error}")
        return
    unique_expected, missing = compare_hashed(expected, present)
    missing_count = sum(len(bucket) for bucket in missing)
    if missing_count:
        try:
            names = first_missing(expect_path, missing)
        except IdsError as error:  # changed since it was read a moment ago
            verdict.set("expected_ids", False, f"the expected-ids file cannot be read: {error}")
            return
        shown_ids = ", ".join(names) + (", …" if missing_count > IDS_SHOWN else "")
        verdict.set(
            "expected_ids", False,
            f"{missing_count} of {unique_expected} expected ids are missing (e.g. {shown_ids})",
        )
    else:
        verdict.set("expected_ids", True, f"all {unique_expected} expected ids are present")


def _check_adapter_revision(verdict: DeliverableVerdict, path: Path) -> None:
    config_path = path / ADAPTER_CONFIG if path.is_dir() else path.parent / ADAPTER_CONFIG
    if not config_path.is_file():
        verdict.set(
            "base_revision", False,
            f"no {ADAPTER_CONFIG} beside the adapter: record base_model_name_or_path and the exact revision of the base",
        )
        return
    try:
        config = json.loads(config_path.read_bytes().decode("utf-8-sig"))
    except OSError as error:
        verdict.set("base_revision", False, f"{ADAPTER_CONFIG} cannot be read: {error.strerror or error}")
        return
    except (UnicodeDecodeError, ValueError, RecursionError):
        verdict.set("base_revision", False, f"{ADAPTER_CONFIG} is not valid JSON")
        return
    if not isinstance(config, dict):
        verdict.set("base_revision", False, f"{ADAPTER_CONFIG} is not a JSON object")
        return
    base = config.get("base_model_name_or_path")
    revision = config.get("revision")
    verdict.adapter = {
        "base": base if isinstance(base, str) else None,
        "revision": revision if isinstance(revision, str) else None,
        "task_type": config.get("task_type") if isinstance(config.get("task_type"), str) else None,
    }
    if not isinstance(base, str) or not base.strip():
        verdict.set("base_revision", False, f"{ADAPTER_CONFIG} does not record base_model_name_or_path: record the base model")
    elif not isinstance(revision, str) or not revision.strip():
        verdict.set(
            "base_revision", False,
            f"{ADAPTER_CONFIG} records the base {base} but no revision: keep the exact revision of the base (a commit hash)",
        )
    elif revision.strip().lower() in MOVING_REVISIONS:
        verdict.set(
            "base_revision", False,
            f"{ADAPTER_CONFIG} records revision '{revision}', a branch that moves: keep the exact revision of the base (a commit hash)",
        )
    else:
        verdict.set("base_revision", True, f"base {base} at revision {revision}")


def _check_reload(
    verdict: DeliverableVerdict, campaign: Campaign, path: Path, timeout: float, preloaded: Preloaded | None
) -> None:
    deliverable = verdict.deliverable
    if deliverable.reload:
        ok, detail = run_reload_command(deliverable.reload, campaign.directory, timeout)
        verdict.set("reloads", ok, detail)
        return
    hint = f"; add reload = \"...\" to [[deliverable]] '{deliverable.id}', a command that exits 0 when it reloads"
    if verdict.format == "adapter":
        weights = [path / name for name in ADAPTER_WEIGHTS if (path / name).is_file()]
        config_ok, config_detail = reload_file(path / ADAPTER_CONFIG, timeout)  # an unreadable file is a cause, not a crash
        if not config_ok:
            verdict.set("reloads", False, config_detail)
            return
        if not weights:
            verdict.set("reloads", False, f"no adapter weights in {deliverable.path} ({' or '.join(ADAPTER_WEIGHTS[:2])})")
            return
        ok, detail = reload_file(weights[0], timeout, preloaded)
        if ok is False:
            verdict.set("reloads", False, detail)
        elif ok is None:
            verdict.set("reloads", False, f"the adapter weights cannot be checked here: {detail}{hint}")
        else:
            verdict.set("reloads", True, f"{ADAPTER_CONFIG} parses; {weights[0].name}: {detail}")
        return
    if verdict.format == "folder":
        checked, unchecked, failures = 0, [], []
        for file in _walk_files(path):
            if not file.is_file() or file.name.startswith("."):
                continue
            if checked + len(failures) >= FOLDER_FILES_CHECKED:
                break
            ok, detail = reload_file(file, timeout, preloaded)
            if ok is True:
                checked += 1
            elif ok is False:
                failures.append(detail)
            else:
                unchecked.append(file.name)
        if failures:
            verdict.set("reloads", False, "; ".join(failures[:3]) + (f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""))
        elif checked == 0:
            verdict.set("reloads", False, f"nothing in {deliverable.path} could be reloaded here ({_plural(len(unchecked), 'file')} of types without a reader){hint}")
        else:
            extra = f"; not checked here: {', '.join(unchecked[:IDS_SHOWN])}" if unchecked else ""
            verdict.set("reloads", True, f"{_plural(checked, 'file')} reload by type{extra}")
        return
    ok, detail = reload_file(path, timeout, preloaded)
    if ok is None:
        verdict.set("reloads", False, f"not reloaded: {detail}{hint}")
    else:
        verdict.set("reloads", ok, detail)


def _torch_files(campaign: Campaign) -> list[Path]:
    """The torch files the deliverables' type checks will load, to load them in one process."""
    found: list[Path] = []
    for d in campaign.model.deliverables:
        if d.reload:
            continue
        path = campaign.directory / d.path
        if path.is_file() and FORMATS_BY_SUFFIX.get(path.suffix.lower()) == "torch":
            found.append(path)
        elif path.is_dir():
            inside = [f for f in _walk_files(path) if f.is_file() and FORMATS_BY_SUFFIX.get(f.suffix.lower()) == "torch"]
            found.extend(inside[:FOLDER_FILES_CHECKED])
    return list(dict.fromkeys(found))


def verify_deliverables(
    campaign: Campaign,
    *,
    state: RecordedState,
    temp: TempFolders,
    reload_timeout: float = RELOAD_TIMEOUT_S,
) -> list[DeliverableVerdict]:
    """Every deliverable in file order; identical content counts once (the first one keeps it)."""
    preloaded = torch_reload_many(_torch_files(campaign), reload_timeout) if _have("torch") else None
    verdicts = [
        verify_deliverable(campaign, d, state=state, temp=temp, reload_timeout=reload_timeout, preloaded=preloaded)
        for d in campaign.model.deliverables
    ]
    first_with: dict[str, str] = {}
    for verdict in verdicts:
        if not verdict.accepted or verdict.sha256 is None:
            continue
        earlier = first_with.get(verdict.sha256)
        if earlier is not None:
            verdict.set("distinct", False, f"same content as {earlier}: identical content counts once")
        else:
            first_with[verdict.sha256] = verdict.id
            verdict.set("distinct", True, "no other accepted deliverable has the same content")
    return verdicts


# ---------------------------------------------------------------- measured runs


@dataclass(frozen=True)
class RunMeasure:
    """What a run's metrics file says about its time and its last values."""

    run: str
    metrics_path: str
    found: bool
    error: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    finished_status: str | None = None
    last_values: dict[str, Any] = field(default_factory=dict)
    lines: int = 0
    bad_lines: int = 0

    @property
    def hours(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return (self.end - self.start).total_seconds() / 3600.0

    @property
    def state(self) -> str:
        if not self.found:
            return "no metrics file"
        if self.error:
            return "metrics unreadable"
        if self.start is None:
            return "no timed line"
        if self.finished_status:
            return f"finished ({self.finished_status})"
        return "no finished event"


def measure_run(run_id: str, path: Path, base: Path, saved: SavedState | None = None) -> RunMeasure:
    """Read the metrics file to its end: start = `started` event (else first line), end =
    `finished` event (else last line). With the engine's `saved` state, reading resumes where
    the engine left it (the same file, checked by inode and first bytes), else from the start."""
    shown = _display(path, base)
    stream = saved.stream(run_id, path) if saved is not None else MetricsStream(run_id, path)
    while True:
        result = stream.poll()
        if result.missing:
            return RunMeasure(run_id, shown, found=False)
        if result.error:
            return RunMeasure(run_id, shown, found=True, error=result.error)
        if not result.more:
            break
    track = stream.track
    start_seconds = track.first_started_ts if track.first_started_ts is not None else track.first_ts
    finished = track.finished
    end_seconds = finished.get("ts") if finished and finished.get("ts") is not None else track.last_ts
    return RunMeasure(
        run_id,
        shown,
        found=True,
        start=seconds_to_datetime(start_seconds),
        end=seconds_to_datetime(end_seconds),
        finished_status=finished.get("status") if finished else None,
        last_values=dict(track.metric_values),
        lines=track.lines,
        bad_lines=track.bad_lines,
    )


# ---------------------------------------------------------------- the plan, frozen or not


@dataclass(frozen=True)
class PlanSource:
    campaign: Campaign
    frozen: bool
    text: str
    label: str  # where it came from, in words
    problem: str | None = None  # why the frozen plan was not used, when it exists


def plan_source(campaign: Campaign) -> PlanSource:
    """The plan frozen at the start; else today's campaign.toml, flagged."""
    frozen = frozen_plan_text(campaign.directory)
    if frozen is None:
        return PlanSource(
            campaign, False, campaign.text,
            "campaign.toml as it is today — no plan was frozen (the campaign never started in the cockpit)",
        )
    try:
        plan = read_campaign_text(frozen, campaign.directory, f"{STATE_DIR}/{FROZEN_PLAN}")
    except CampaignError as error:
        return PlanSource(
            campaign, False, campaign.text,
            f"campaign.toml as it is today — the frozen plan {STATE_DIR}/{FROZEN_PLAN} does not load",
            problem=str(error.findings[0]) if error.findings else "invalid",
        )
    return PlanSource(plan, True, frozen, f"the plan frozen at the start ({STATE_DIR}/{FROZEN_PLAN})")


def planned_vs_actual(
    plan: Campaign, today: Campaign, measures: Mapping[str, RunMeasure], state: RecordedState
) -> list[dict[str, Any]]:
    """Each planned item with its planned start/end/hours beside the measured ones (runs only)."""
    lot_start = plan.lot.start or today.lot.start
    placed = schedule(plan.items, plan.lot.gpu_count, plan.model.calendar.retrieval_hours)
    notes_by_run: dict[str, list[str]] = {}
    for note in state.notes:
        if note.get("run"):
            notes_by_run.setdefault(note["run"], []).append(str(note.get("text", "")))
    rows: list[dict[str, Any]] = []

    def at(hours: float | None) -> str | None:
        if lot_start is None or hours is None:
            return None
        return iso(lot_start + timedelta(hours=hours))

    def since_start(moment: datetime | None) -> float | None:
        if lot_start is None or moment is None:
            return None
        return _hours((moment - lot_start).total_seconds() / 3600.0)

    planned_ids = set()
    for slot in placed.slots:
        item = next(i for i in plan.items if i.id == slot.id)
        is_run = plan.run(slot.id) is not None
        planned_ids.add(slot.id)
        row: dict[str, Any] = {
            "id": slot.id,
            "type": "run" if is_run else "task",
            "kind": slot.kind,
            "tier": slot.tier,
            "role": item.role.value if is_run else None,
            "gpus": list(slot.gpus),
            "planned_start": at(slot.start_hours),
            "planned_end": at(slot.end_hours),
            "planned_start_hours": _hours(slot.start_hours),
            "planned_end_hours": _hours(slot.end_hours),
            "planned_hours": _hours(slot.hours),
        }
        row.update(_measured_fields(measures.get(slot.id) if is_run else None, since_start, slot.hours))
        row["stopped"] = state.stop_of(slot.id) is not None if is_run else False
        row["notes"] = notes_by_run.get(slot.id, [])
        rows.append(row)
    for run in today.runs:  # runs added after the plan was frozen: measured, never planned
        if run.id in planned_ids:
            continue
        row = {
            "id": run.id, "type": "run", "kind": "machine", "tier": run.tier.value, "role": run.role.value,
            "gpus": run.gpu_list, "planned_start": None, "planned_end": None, "planned_start_hours": None,
            "planned_end_hours": None, "planned_hours": None,
        }
        row.update(_measured_fields(measures.get(run.id), since_start, None))
        row["state"] = "not in the frozen plan; " + row["state"]
        row["stopped"] = state.stop_of(run.id) is not None
        row["notes"] = notes_by_run.get(run.id, [])
        rows.append(row)
    return rows


def _measured_fields(measure: RunMeasure | None, since_start, planned_hours: float | None) -> dict[str, Any]:
    if measure is None or measure.hours is None:
        state = "not measured" if measure is None else f"not measured ({measure.state})"
        return {
            "measured": False, "measured_start": None, "measured_end": None, "measured_start_hours": None,
            "measured_end_hours": None, "measured_hours": None, "deviation_hours": None, "state": state,
        }
    hours = measure.hours
    return {
        "measured": True,
        "measured_start": iso(measure.start),
        "measured_end": iso(measure.end),
        "measured_start_hours": since_start(measure.start),
        "measured_end_hours": since_start(measure.end),
        "measured_hours": _hours(hours),
        "deviation_hours": _hours(hours - planned_hours) if planned_hours is not None else None,
        "state": measure.state,
    }


# ---------------------------------------------------------------- the conclusion


def conclude(plan: Campaign, today: Campaign, measures: Mapping[str, RunMeasure], state: RecordedState) -> dict[str, Any]:
    """Each run's closing metric (its last value) against the threshold written before the trials."""
    closing = plan.model.closing or today.model.closing
    if closing is None:
        return {
            "metric": None, "direction": None, "threshold": None, "runs": [], "reached": [],
            "variants_reached": [], "negative": None,
            "text": "no [closing] table: the campaign did not say what lets it close, so no conclusion is computed",
        }
    metric, direction, threshold = closing.metric, closing.direction.value, closing.threshold
    sign = "≥" if direction == "max" else "≤"
    limit = _threshold_text(threshold)
    runs = []
    open_by_run: dict[str, list[str]] = {}
    for alert in state.active_alerts:
        if alert.event.get("run") and _about_output(alert.event):
            open_by_run.setdefault(str(alert.event["run"]), []).append(str(alert.event.get("rule")))
    every_run = [*today.runs, *(r for r in plan.runs if today.run(r.id) is None)]
    for run in every_run:
        measure = measures.get(run.id)
        value = measure.last_values.get(metric) if measure else None
        reached = None
        if isinstance(value, (int, float)):
            reached = math.isfinite(value) and (value >= threshold if direction == "max" else value <= threshold)
        runs.append({
            "run": run.id, "role": run.role.value, "value": _plain_number(value), "reached": reached,
            "stopped": state.stop_of(run.id) is not None, "open_alerts": open_by_run.get(run.id, []),
        })
    reached = [r["run"] for r in runs if r["reached"]]
    variants = [r for r in runs if r["role"] == "variant"]
    # A value no person has looked at behind an open alert (a truncated essential input, a run
    # that died) is not a result yet: it is named, unconfirmed, until the alert is acknowledged.
    variants_reached = [r["run"] for r in variants if r["reached"] and not r["open_alerts"]]
    unconfirmed = [r for r in variants if r["reached"] and r["open_alerts"]]

    def shown(row: dict[str, Any]) -> str:
        value = row["value"]
        text = _significant(value) if value is not None else "not reported"  # 4 digits; summary.json's runs keep them all
        alerts = f" (open alert {', '.join(row['open_alerts'])})" if row["open_alerts"] else ""
        return f"{row['run']} {text}" + (" (stopped)" if row["stopped"] else "") + alerts

    def unconfirmed_text() -> str:
        values = "; ".join(shown({**r, "open_alerts": []}) for r in unconfirmed)
        alerts = "; ".join(f"{', '.join(r['open_alerts'])} on {r['run']}" for r in unconfirmed)
        return (
            f"{', '.join(r['run'] for r in unconfirmed)} report{'s' if len(unconfirmed) == 1 else ''} "
            f"{metric} {sign} {limit} ({values}) with open alert {alerts} that no person acknowledged: "
            "look at it and acknowledge it (`cockpit ack DIR RULE --run RUN`, or `a` in the cockpit) "
            "before the result stands"
        )

    if variants_reached:
        text = (
            f"{', '.join(variants_reached)} reached {metric} {sign} {limit} "
            f"({'; '.join(shown(r) for r in variants if r['run'] in variants_reached)})"
        )
        if unconfirmed:
            text += ". Unconfirmed: " + unconfirmed_text()
    elif unconfirmed:
        text = "unconfirmed: " + unconfirmed_text()
    elif variants and not any(r["reached"] is not None for r in variants):
        # nothing measured is not a negative result: the campaign cannot say either way
        text = f"inconclusive: no variant reported {metric} ({'; '.join(shown(r) for r in variants)})"
    elif variants:
        text = (
            f"no variant reached {limit} ({metric} {sign} {limit}: "
            f"{'; '.join(shown(r) for r in variants)}) — a negative result, and a valid conclusion"
        )
    else:
        text = f"no variant in the campaign; {metric} {sign} {limit} is the closing criterion"
    controls = [r for r in runs if r["role"] == "control"]
    if controls:
        text += ". Control: " + "; ".join(
            shown(r) + (f", reached {limit}" if r["reached"] else "") for r in controls
        )
    warning = None
    if today.model.closing is not None and plan.model.closing is not None and today.model.closing != plan.model.closing:
        warning = (
            f"[closing] changed since the start (now {today.model.closing.metric} {today.model.closing.direction.value} "
            f"{_threshold_text(today.model.closing.threshold)}); the criterion written before the trials stands"
        )
    return {
        "metric": metric, "direction": direction, "threshold": threshold, "runs": runs, "reached": reached,
        "variants_reached": variants_reached,
        "unconfirmed": [r["run"] for r in unconfirmed],
        "negative": (
            False if variants_reached
            else None if unconfirmed or not any(r["reached"] is not None for r in variants)
            else True
        ),
        "text": text, "warning": warning,
    }


# ---------------------------------------------------------------- the whole closing


@dataclass
class Closing:
    """What `cockpit close` found and wrote."""

    campaign: Campaign
    summary: dict[str, Any]
    verdicts: list[DeliverableVerdict]
    report_markdown: str
    reload_markdown: str
    manifest: dict[str, Any]
    plan_text: str
    folder: Path
    closed_event: dict[str, Any] | None = None  # the `closed` event this closing stands on
    recorded: bool = False  # a new `closed` event was appended (False: the same content was already closed)

    @property
    def all_accepted(self) -> bool:
        return all(v.accepted for v in self.verdicts)

    @property
    def exit_code(self) -> int:
        return 0 if self.all_accepted else 1


def _campaign_of(directory: str | Path | Campaign) -> Campaign:
    return directory if isinstance(directory, Campaign) else load_campaign(directory)


def _utc(now: datetime | None) -> datetime:
    if now is None:
        return utc_now()
    return now if now.tzinfo is not None else now.replace(tzinfo=timezone.utc)  # naive means UTC


def evaluate(
    directory: str | Path | Campaign,
    *,
    now: datetime | None = None,
    temp_roots: Iterable[str | Path] | None = None,
    reload_timeout: float = RELOAD_TIMEOUT_S,
) -> Closing:
    """Everything a closing finds, without writing anything (closed_at = `now`)."""
    campaign = _campaign_of(directory)
    now = _utc(now)
    log = RunLog(campaign.directory)
    read = log.read()
    state = RecordedState.from_events(read.events)
    body, verdicts, source = _body(campaign, state, read.bad_lines, temp_roots, reload_timeout)
    summary = _with_times(body, campaign, closed_at=now, generated_at=now)
    return _assemble(campaign, summary, verdicts, source, manifest_files=None)


def close_campaign(
    directory: str | Path | Campaign,
    *,
    now: datetime | None = None,
    temp_roots: Iterable[str | Path] | None = None,
    reload_timeout: float = RELOAD_TIMEOUT_S,
) -> Closing:
    """Verify, record `closed` in the run log, and write DIR/closing/.

    Closing again with nothing changed writes the same files except `generated_at`: the content
    is hashed without its timestamps, and when the last `closed` event carries the same hash it
    stands (its time stays the closing time) and no new event is appended.
    """
    campaign = _campaign_of(directory)
    now = _utc(now)
    log = RunLog(campaign.directory, clock=lambda: now)
    read = log.read()
    state = RecordedState.from_events(read.events)
    body, verdicts, source = _body(campaign, state, read.bad_lines, temp_roots, reload_timeout)
    content_sha = _canonical_sha(body)
    folder = campaign.directory / CLOSING_DIR
    _check_writable(folder)  # before anything is recorded: `closed` never points at a folder that cannot be written
    with log.transaction() as tx:  # two closings at once record one event for one content
        closed = [e for e in tx.read().events if e["type"] == "closed"]
        event = closed[-1] if closed and closed[-1].get("summary_sha256") == content_sha else None
        recorded = event is None
        if event is None:
            # Each verdict in the register, then the closing, as one write and one fsync: a disk
            # that refuses the last line keeps none of them, so a retry records them once.
            events: list[tuple[str, dict[str, Any]]] = [
                ("rejected", {"deliverable": r["deliverable"], "cause": r["cause"], "source": CLOSE_SOURCE})
                for r in body["rejections"]
            ]
            events.append((
                "closed",
                {
                    "accepted": body["accepted"],
                    "deliverables": body["deliverables_total"],
                    "lot_price_usd": body["lot_price_usd"],
                    "cost_per_accepted_usd": body["cost_per_accepted_usd"],
                    "summary_sha256": content_sha,
                    "folder": f"{CLOSING_DIR}/",
                },
            ))
            event = tx.append_many(events)[-1]
    closed_at = parse_ts(event["ts"]) or now
    summary = _with_times(body, campaign, closed_at=closed_at, generated_at=now)
    summary["summary_sha256"] = content_sha
    runlog_bytes = _read_bytes(log.path)
    closing = _assemble(campaign, summary, verdicts, source, manifest_files=runlog_bytes)
    closing.closed_event = event
    closing.recorded = recorded
    try:
        _write_folder(folder, closing, runlog_bytes)
    except OSError as error:
        raise Finding(
            f"the closing is recorded (seq {event['seq']}) but {folder} could not be written: "
            f"{error.strerror or error}; free the space or fix the folder and run `cockpit close` again"
        ) from None
    return closing


def _check_writable(folder: Path) -> None:
    probe = folder / ".write-test"
    try:
        folder.mkdir(mode=DIR_MODE, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise Finding(f"cannot write the closing folder {folder}: {error.strerror or error}; nothing was recorded") from None


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _canonical_sha(body: Mapping[str, Any]) -> str:
    data = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def _body(
    campaign: Campaign,
    state: RecordedState,
    bad_lines: int,
    temp_roots: Iterable[str | Path] | None,
    reload_timeout: float,
) -> tuple[dict[str, Any], list[DeliverableVerdict], PlanSource]:
    """The summary without its timestamps: what the content hash covers."""
    roots = tuple(temp_roots) if temp_roots is not None else temp_roots_from_env()
    temp = TempFolders(roots, campaign.directory)
    verdicts = verify_deliverables(campaign, state=state, temp=temp, reload_timeout=reload_timeout)
    source = plan_source(campaign)
    plan = source.campaign

    run_paths: dict[str, Path] = {}
    for run in plan.runs:
        run_paths[run.id] = run.metrics_path(campaign.directory)
    for run in campaign.runs:  # today's path wins: a metrics path fixed after the start
        run_paths[run.id] = run.metrics_path(campaign.directory)
    saved = load_state(state_file(campaign.directory))
    measures = {rid: measure_run(rid, path, campaign.directory, saved) for rid, path in run_paths.items()}

    price = campaign.price
    accepted = [v for v in verdicts if v.accepted]
    ratio = cost_per_accepted(price, len(accepted))
    expenses = campaign.model.expenses
    expenses_total = sum((e.usd for e in expenses), Decimal("0.00"))
    rejections = [{"deliverable": v.id, "cause": v.cause} for v in verdicts if not v.accepted]
    if ratio is not None:
        ratio_text = f"{money(ratio)} USD per accepted deliverable ({money(price)} / {len(accepted)})"
    else:
        # Never 0: the cost stands, and the rejections (listed beside it) say why nothing counts.
        ratio_text = f"undefined: 0 deliverables accepted; the lot cost {money(price)} USD"
        if not verdicts:
            ratio_text += " (the campaign declares no deliverable)"

    warnings: list[str] = []
    inside = temp.campaign_root()
    if inside is not None:
        warnings.append(
            f"the campaign folder {campaign.directory} is itself under {inside}, which the box loses when "
            "the lot ends: copy closing/ and the deliverables off the box before then"
        )
    if not source.frozen:
        warnings.append(f"planned times come from {source.label}" + (f": {source.problem}" if source.problem else ""))
    elif source.text != campaign.text:
        warnings.append(
            "campaign.toml has changed since the campaign started; planned vs actual uses the frozen plan"
        )
    if bad_lines:
        warnings.append(f"the run log has {_plural(bad_lines, 'unreadable line')} (skipped)")
    for measure in measures.values():
        if measure.error:
            warnings.append(f"run {measure.run}: {measure.error}")
        elif measure.bad_lines:
            warnings.append(f"run {measure.run}: {_plural(measure.bad_lines, 'metrics line')} did not parse (skipped)")
    conclusion = conclude(plan, campaign, measures, state)
    if conclusion.get("warning"):
        warnings.append(conclusion["warning"])

    lot = campaign.lot
    placed = schedule(plan.items, plan.lot.gpu_count, plan.model.calendar.retrieval_hours)
    body: dict[str, Any] = {
        "schema": SUMMARY_SCHEMA,
        "campaign": campaign.id,
        "question": campaign.model.question,
        "corpus": campaign.model.corpus,
        "lot": {
            "order_ref": lot.order_ref,
            "gpu_model": lot.gpu_model,
            "gpus": lot.gpu_count,
            "days": lot.days,
            "window_hours": lot.window_hours,
            "start": iso(lot.start) if lot.start else None,
            "end": iso(lot.end) if lot.end else None,
        },
        "lot_price_usd": money(price),
        "other_expenses_usd": money(expenses_total),
        "other_expenses": [{"label": e.label, "usd": money(e.usd)} for e in expenses],
        "accepted": len(accepted),
        "deliverables_total": len(verdicts),
        "cost_per_accepted_usd": money(ratio) if ratio is not None else None,
        "cost_per_accepted": ratio_text,
        "rejections": rejections,
        "deliverables": [_verdict_json(v) for v in verdicts],
        "conclusion": conclusion,
        "plan": {
            "source": "frozen" if source.frozen else "campaign.toml",
            "label": source.label,
            "sha256": hashlib.sha256(source.text.encode("utf-8")).hexdigest(),
            "committed_hours": placed.committed_hours,
            "retrieval_hours": placed.retrieval_hours,
            "window_hours": plan.lot.window_hours,
        },
        "planned_vs_actual": planned_vs_actual(plan, campaign, measures, state),
        "decisions": [
            {
                "decision": d.get("decision"), "note": d.get("note"), "run": d.get("run"), "ts": d.get("ts"),
                "lot_hours": d.get("lot_hours"), "who": d.get("who"), "source": d.get("source"),
            }
            for d in state.decisions
        ],
        "stops": [
            {
                "run": s.get("run"), "rule": s.get("rule"), "reason": s.get("reason"), "source": s.get("source"),
                "ts": s.get("ts"), "who": s.get("who"),
                "signal_sent": bool((s.get("signal") or {}).get("sent")) if isinstance(s.get("signal"), dict) else False,
            }
            for s in state.stops
        ],
        "notes": [{"run": n.get("run"), "text": n.get("text"), "ts": n.get("ts"), "who": n.get("who")} for n in state.notes],
        "alerts": [_alert_json(a) for a in state.alerts],
        "accepted_by_person": [
            {"deliverable": e.get("deliverable"), "ts": e.get("ts"), "who": e.get("who"), "verified": _verified(verdicts, e.get("deliverable"))}
            for e in state.accepted
        ],
        "voided": [  # decisions taken back by a `void` event: absent from everything above
            {
                "seq": taken.get("seq"), "type": taken.get("type"), "run": taken.get("run"), "ts": taken.get("ts"),
                "void_seq": void.get("seq"), "voided_by": void.get("who"), "voided_at": void.get("ts"), "reason": void.get("reason"),
            }
            for void, taken in state.voided
        ],
        "runlog_bad_lines": bad_lines,
        "all_accepted": all(v.accepted for v in verdicts),
        "warnings": warnings,
    }
    return body, verdicts, source


def _alert_json(alert: AlertRecord) -> dict[str, Any]:
    """An alert of the run log for the report: what, when, and who acknowledged it (if anyone)."""
    event, ack = alert.event, alert.acknowledged or {}
    return {
        "rule": event.get("rule"), "run": event.get("run"), "key": alert.key, "message": event.get("message"),
        "ts": event.get("ts"), "seq": event.get("seq"),
        "acknowledged": alert.acknowledged is not None,
        "acknowledged_at": ack.get("ts"), "acknowledged_by": ack.get("who"),
        "acknowledged_source": ack.get("source"), "note": ack.get("note"),
    }


def _verified(verdicts: list[DeliverableVerdict], deliverable_id: Any) -> bool | None:
    verdict = next((v for v in verdicts if v.id == deliverable_id), None)
    return verdict.accepted if verdict else None


def _verdict_json(verdict: DeliverableVerdict) -> dict[str, Any]:
    d = verdict.deliverable
    return {
        "id": d.id,
        "run": d.run,
        "kind": d.kind.value,
        "path": d.path,
        "format": verdict.format,
        "verdict": "accepted" if verdict.accepted else "rejected",
        "cause": verdict.cause,
        "checks": [c.as_json() for c in verdict.checks],
        "size_bytes": verdict.size_bytes,
        "sha256": verdict.sha256,
        "accepted_by_person": verdict.accepted_by_person is not None,
    }


def _with_times(body: dict[str, Any], campaign: Campaign, *, closed_at: datetime, generated_at: datetime) -> dict[str, Any]:
    """The summary in its final order: the content plus when it was closed and generated."""
    end = campaign.lot.end
    before = None if end is None else closed_at < end
    left = None if end is None else _hours(max(0.0, (end - closed_at).total_seconds() / 3600.0))
    after = None if end is None else _hours(max(0.0, (closed_at - end).total_seconds() / 3600.0))
    if end is None:
        timing = "the lot has no start time, so whether it closed before the lot ended is unknown"
    elif before:
        timing = (
            f"closed {left:g} h before the lot ends ({_short_ts(iso(end))} UTC); those hours were "
            "left unused, a margin and not a debt"
        )
    else:
        timing = f"closed {after:g} h after the lot ended ({_short_ts(iso(end))} UTC)"
    summary: dict[str, Any] = {}
    for key, value in body.items():
        summary[key] = value
        if key == "lot":
            summary["closed_at"] = iso(closed_at)
            summary["generated_at"] = iso(generated_at)
            summary["closed_before_lot_end"] = before
            summary["lot_hours_left"] = left
            summary["hours_after_lot_end"] = after
            summary["timing"] = timing
    return summary


def _assemble(
    campaign: Campaign,
    summary: dict[str, Any],
    verdicts: list[DeliverableVerdict],
    source: PlanSource,
    manifest_files: bytes | None,
) -> Closing:
    folder = campaign.directory / CLOSING_DIR
    manifest = build_manifest(campaign, summary, verdicts, source, manifest_files)
    return Closing(
        campaign=campaign,
        summary=summary,
        verdicts=verdicts,
        report_markdown=render_report(summary),
        reload_markdown=render_reload(summary, verdicts),
        manifest=manifest,
        plan_text=source.text,
        folder=folder,
    )


# ---------------------------------------------------------------- manifest


def build_manifest(
    campaign: Campaign,
    summary: Mapping[str, Any],
    verdicts: list[DeliverableVerdict],
    source: PlanSource,
    runlog_bytes: bytes | None,
) -> dict[str, Any]:
    """Every deliverable file and log file with its size and sha256, and the closing's copies."""
    base = campaign.directory
    files: list[dict[str, Any]] = []
    for verdict in verdicts:
        if not verdict.files:
            files.append({"path": verdict.deliverable.path, "role": "deliverable", "deliverable": verdict.id,
                          "present": False, "size_bytes": None, "sha256": None})
        for entry in verdict.files:
            files.append({"path": entry.path, "role": "deliverable", "deliverable": verdict.id, "present": True,
                          "size_bytes": entry.size_bytes, "sha256": entry.sha256})
    if runlog_bytes is None:
        runlog_bytes = _read_bytes(base / RUNLOG_FILE)
    files.append({"path": RUNLOG_FILE, "role": "run log", "present": bool(runlog_bytes), "size_bytes": len(runlog_bytes),
                  "sha256": hashlib.sha256(runlog_bytes).hexdigest(), "copy": f"{CLOSING_DIR}/{RUNLOG_FILE}"})
    plan_bytes = source.text.encode("utf-8")
    files.append({"path": f"{STATE_DIR}/{FROZEN_PLAN}" if source.frozen else "campaign.toml",
                  "role": "frozen plan" if source.frozen else "plan (not frozen)", "present": True,
                  "size_bytes": len(plan_bytes), "sha256": hashlib.sha256(plan_bytes).hexdigest(),
                  "copy": f"{CLOSING_DIR}/plan.toml"})
    if source.frozen:
        today = campaign.text.encode("utf-8")
        files.append({"path": "campaign.toml", "role": "campaign file", "present": True, "size_bytes": len(today),
                      "sha256": hashlib.sha256(today).hexdigest()})
    seen_metrics: set[str] = set()
    for run in [*source.campaign.runs, *campaign.runs]:
        path = (campaign.run(run.id) or run).metrics_path(base)
        shown = _display(path, base)
        if shown in seen_metrics:
            continue
        seen_metrics.add(shown)
        if path.is_file():
            files.append({"path": shown, "role": "metrics", "run": run.id, "present": True,
                          "size_bytes": path.stat().st_size, "sha256": _sha256_file(path)})
        else:
            files.append({"path": shown, "role": "metrics", "run": run.id, "present": False, "size_bytes": None, "sha256": None})
    return {
        "campaign": campaign.id,
        "generated_at": summary["generated_at"],
        "closed_at": summary["closed_at"],
        "base": "paths are relative to the campaign folder (the one holding campaign.toml)",
        "files": files,
        "closing_files": ["report.md", "summary.json", "manifest.json", "plan.toml", RUNLOG_FILE, "RELOAD.md"],
    }


# ---------------------------------------------------------------- writing


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            temporary.unlink()
        except OSError:
            pass
        raise


def summary_json(summary: Mapping[str, Any]) -> str:
    return json_safe(json.dumps(summary, ensure_ascii=False, indent=2, allow_nan=False)) + "\n"


def stop_cause(stop: Mapping[str, Any], *, label_reason: bool = False) -> str:
    """Why a run was stopped, as the report says it: "rule nan-loss, reason: …"."""
    reason = stop.get("reason")
    parts = (
        f"rule {stop['rule']}" if stop.get("rule") else None,
        (f"reason: {reason}" if label_reason else reason) if reason else None,
    )
    return ", ".join(part for part in parts if part) or "no reason recorded"


def _write_folder(folder: Path, closing: Closing, runlog_bytes: bytes) -> None:
    folder.mkdir(mode=DIR_MODE, exist_ok=True)
    _write_atomic(folder / "summary.json", summary_json(closing.summary).encode("utf-8"))
    from cockpit.close.charts import with_charts  # charts (issue 20): closing/chart-*.svg, linked from report.md

    _write_atomic(folder / "report.md", with_charts(folder, closing.campaign, closing.report_markdown).encode("utf-8"))
    _write_atomic(folder / "RELOAD.md", closing.reload_markdown.encode("utf-8"))
    _write_atomic(folder / "plan.toml", closing.plan_text.encode("utf-8"))
    _write_atomic(folder / RUNLOG_FILE, runlog_bytes)
    _write_atomic(folder / "manifest.json", (json.dumps(closing.manifest, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))


# ---------------------------------------------------------------- report.md


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _short_ts(text: str | None) -> str:
    if not text:
        return "—"
    moment = parse_ts(text)
    return moment.strftime("%Y-%m-%d %H:%M") if moment else text


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def render_report(summary: Mapping[str, Any]) -> str:
    """The whole story on one page, readable without the cockpit."""
    lot = summary["lot"]
    lines = [f"# Closing report — {summary['campaign']}", ""]
    if summary.get("question"):
        lines.append(f"**Question:** {summary['question']}  ")
    if summary.get("corpus"):
        lines.append(f"**Corpus:** {summary['corpus']}  ")
    lines.append(
        f"**Lot:** {lot['gpu_model']} × {lot['gpus']}, {lot['days']} days"
        + (f", order {lot['order_ref']}" if lot.get("order_ref") else "")
        + (f", {_short_ts(lot['start'])} → {_short_ts(lot['end'])} UTC" if lot.get("start") else "")
        + "  "
    )
    lines.append(f"**Closed:** {_short_ts(summary['closed_at'])} UTC — {summary['timing']}  ")
    lines.append(f"**Plan:** {summary['plan']['label']}, sha256 {summary['plan']['sha256'][:12]}…")
    lines.append("")
    for warning in summary.get("warnings", []):
        lines.append(f"> **Note:** {warning}")
    if summary.get("warnings"):
        lines.append("")

    lines += ["## Budget", "", "| | |", "|---|---|", f"| Lot price | {summary['lot_price_usd']} USD |"]
    for expense in summary["other_expenses"]:
        lines.append(f"| Other expense, kept apart: {_cell(expense['label'])} | {expense['usd']} USD |")
    if not summary["other_expenses"]:
        lines.append("| Other expenses | none recorded |")
    lines.append(f"| Deliverables accepted | {summary['accepted']} of {summary['deliverables_total']} |")
    lines.append(f"| Lot price per accepted deliverable | {_cell(summary['cost_per_accepted'])} |")
    if summary["cost_per_accepted_usd"] is None and summary["rejections"]:
        lines += ["", "Why nothing was accepted:", ""]
        lines += [f"- {r['deliverable']}: {r['cause']}" for r in summary["rejections"]]
    lines += [
        "",
        "Other expenses are listed apart and never added into the lot price; no tax or transfer cost is "
        "assumed. A negative result does not cancel the cost of the campaign.",
        "",
        "## Conclusion",
        "",
        summary["conclusion"]["text"] + ".",
        "",
    ]
    runs = summary["conclusion"].get("runs") or []
    if runs and summary["conclusion"].get("metric"):
        c = summary["conclusion"]
        lines += [f"| run | role | {c['metric']} (last) | reached {_threshold_text(c['threshold'])} |", "|---|---|---|---|"]
        for row in runs:
            value = _significant(row["value"]) if row["value"] is not None else "not reported"
            reached = {True: "yes", False: "no", None: "—"}[row["reached"]]
            if row.get("open_alerts"):
                reached += f" (open alert {', '.join(row['open_alerts'])})"
            lines.append(f"| {row['run']} | {row['role']} | {value} | {reached}{' (stopped)' if row['stopped'] else ''} |")
        lines.append("")

    lines += ["## Deliverables", "", "| deliverable | run | verdict | why |", "|---|---|---|---|"]
    for item in summary["deliverables"]:
        why = item["cause"] or "; ".join(c["detail"] for c in item["checks"] if c["name"] in ("reloads", "expected_ids", "base_revision") and c["ok"])
        person = " (also accepted by a person)" if item["accepted_by_person"] else ""
        lines.append(f"| {_cell(item['id'])} | {_cell(item['run'])} | **{item['verdict']}**{person} | {_cell(why)} |")
    if not summary["deliverables"]:
        lines.append("| — | — | — | the campaign declares no deliverable |")
    lines += [
        "",
        "Accepted means every announced check passed: present, not empty, no path into a temporary "
        "folder, expected ids present, base revision recorded (adapters), reloads, run not stopped, "
        "no alert on the run that no person acknowledged, content distinct. The checks decide; an acceptance recorded by a person is shown beside "
        "them but is not required. Reload instructions: RELOAD.md; sizes and sha256: manifest.json.",
        "",
        "## Planned vs actual",
        "",
        f"Planned: {summary['plan']['committed_hours']:g} h committed of a {summary['plan']['window_hours']:g} h "
        f"window, retrieval {summary['plan']['retrieval_hours']:g} h included. Hours from the lot start.",
        "",
        "| item | tier | planned (h) | planned hours | measured (h) | measured hours | deviation | state |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["planned_vs_actual"]:
        planned_span = (
            f"{_num(row['planned_start_hours'])}–{_num(row['planned_end_hours'])}"
            if row["planned_hours"] is not None else "not planned"
        )
        measured_span = (
            f"{_num(row['measured_start_hours'])}–{_num(row['measured_end_hours'])}"
            if row["measured"] and row["measured_start_hours"] is not None
            else (f"{_short_ts(row['measured_start'])}–{_short_ts(row['measured_end'])}" if row["measured"] else "not measured")
        )
        deviation = row["deviation_hours"]
        deviation_text = "—" if deviation is None else f"{deviation:+g} h"
        state = row["state"] + (" · stopped" if row["stopped"] else "")
        lines.append(
            f"| {row['id']} ({row['type']}) | {row['tier']} | {planned_span} | {_num(row['planned_hours'])} | "
            f"{measured_span} | {_num(row['measured_hours'])} | {deviation_text} | {_cell(state)} |"
        )
    lines += ["", "## Decisions", ""]
    if summary["decisions"]:
        for d in summary["decisions"]:
            at = f" at lot hour {d['lot_hours']:g}" if isinstance(d.get("lot_hours"), (int, float)) else ""
            lines.append(f"- Pilot decision **{d['decision']}**{at} ({_short_ts(d['ts'])}, {d.get('who') or '?'})" + (f": {d['note']}" if d.get("note") else ""))
    else:
        lines.append("- No pilot decision was recorded.")
    for a in summary["accepted_by_person"]:
        verified = {True: "verified", False: "but the checks failed", None: "no such deliverable today"}[a["verified"]]
        lines.append(f"- {a['deliverable']} accepted by {a.get('who') or '?'} ({_short_ts(a['ts'])}), {verified}")
    lines += ["", "## Stops", ""]
    if summary["stops"]:
        for s in summary["stops"]:
            lines.append(
                f"- {s['run']}: {stop_cause(s)} — {s.get('source') or '?'}, {_short_ts(s['ts'])}"
                + (", SIGTERM sent" if s.get("signal_sent") else "")
                + ". The stopped run stays an expense; its deliverables are not accepted."
            )
    else:
        lines.append("- No run was stopped.")
    lines += ["", "## Alerts", ""]
    for a in summary.get("alerts", []):
        where = f" [{a['run']}]" if a.get("run") else ""
        message = f": {a['message']}" if a.get("message") else ""
        if a["acknowledged"]:
            by = f"acknowledged by {a.get('acknowledged_by') or '?'} ({a.get('acknowledged_source') or '?'}, {_short_ts(a.get('acknowledged_at'))})"
            by += f": {a['note']}" if a.get("note") else ""
        else:
            by = "**not acknowledged**" + (": its run's deliverables are not accepted" if a.get("run") else "")
        lines.append(f"- {_short_ts(a.get('ts'))}{where} {a['rule']}{message} — {by}")
    if not summary.get("alerts"):
        lines.append("- No alert was raised.")
    lines += ["", "## Notes (explained deviations)", ""]
    if summary["notes"]:
        for n in summary["notes"]:
            lines.append(f"- {_short_ts(n['ts'])}" + (f" [{n['run']}]" if n.get("run") else "") + f": {n['text']}")
    else:
        lines.append("- No note was recorded.")
    if summary.get("voided"):
        lines += ["", "## Voided decisions (taken back, left out of everything above)", ""]
        for v in summary["voided"]:
            lines.append(
                f"- seq {v['seq']} {v['type']}" + (f" [{v['run']}]" if v.get("run") else "")
                + f", voided by {v.get('voided_by') or '?'} ({_short_ts(v['voided_at'])}, seq {v['void_seq']}): {v.get('reason')}"
            )
    lines += [
        "",
        "---",
        f"Generated {summary['generated_at']} by `cockpit close`. Files in this folder: report.md, "
        "summary.json (the same figures as JSON), manifest.json, plan.toml (the plan as frozen), "
        "runlog.jsonl (the run log), RELOAD.md.",
        "",
    ]
    return "\n".join(escape_control(line) for line in lines)  # names, causes, notes: data strings


def _significant(value: Any) -> str:
    """A metric value in the report: 4 significant digits (summary.json keeps full precision)."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    return str(value)


# ---------------------------------------------------------------- RELOAD.md


_PEFT_CLASSES = {
    "CAUSAL_LM": "AutoModelForCausalLM",
    "SEQ_CLS": "AutoModelForSequenceClassification",
    "SEQ_2_SEQ_LM": "AutoModelForSeq2SeqLM",
    "TOKEN_CLS": "AutoModelForTokenClassification",
    "QUESTION_ANS": "AutoModelForQuestionAnswering",
    "FEATURE_EXTRACTION": "AutoModel",
}


def _reload_snippet(verdict: DeliverableVerdict) -> list[str]:
    d = verdict.deliverable
    path = d.path
    if d.reload:
        return [
            "The campaign's own check, run from the campaign folder (exit 0 = it reloads):",
            "", "```sh", d.reload, "```",
        ]
    fmt = verdict.format
    if fmt == "adapter":
        adapter = verdict.adapter or {}
        model_class = _PEFT_CLASSES.get(str(adapter.get("task_type") or "").upper(), "AutoModel")
        return [
            f"A PEFT adapter on base `{adapter.get('base')}` at revision `{adapter.get('revision')}`:",
            "", "```python",
            f"from transformers import {model_class}",
            "from peft import PeftModel",
            f"base = {model_class}.from_pretrained({adapter.get('base')!r}, revision={adapter.get('revision')!r})",
            f"model = PeftModel.from_pretrained(base, {path!r})",
            "```",
        ]
    code = {
        "json": ["import json", f"data = json.load(open({path!r}, encoding='utf-8'))"],
        "jsonl": ["import json", f"rows = [json.loads(line) for line in open({path!r}, encoding='utf-8') if line.strip()]"],
        "csv": ["import csv", f"rows = list(csv.DictReader(open({path!r}, newline='', encoding='utf-8')))"],
        "tsv": ["import csv", f"rows = list(csv.DictReader(open({path!r}, newline='', encoding='utf-8'), delimiter='\\t'))"],
        "toml": ["import tomllib", f"data = tomllib.load(open({path!r}, 'rb'))"],
        "safetensors": ["from safetensors.torch import load_file", f"tensors = load_file({path!r})"],
        "npy": ["import numpy", f"array = numpy.load({path!r}, allow_pickle=False)"],
        "npz": ["import numpy", f"arrays = dict(numpy.load({path!r}, allow_pickle=False))"],
        "torch": ["import torch", f"state = torch.load({path!r}, map_location='cpu', weights_only=True)"],
        "parquet": ["import pandas", f"frame = pandas.read_parquet({path!r})"],
        "zip": ["import zipfile", f"zipfile.ZipFile({path!r}).extractall('restored')"],
    }.get(fmt or "")
    if fmt == "text":
        return [f"Plain UTF-8 text: open `{path}` in any editor or `less {path}`."]
    if fmt == "folder":
        listed = ", ".join(f"`{Path(f.path).name}`" for f in verdict.files[:8])
        return [f"A folder of {_plural(len(verdict.files), 'file')} ({listed}{', …' if len(verdict.files) > 8 else ''}); each reloads by its type as above."]
    if code is None:
        return [f"`{path}`: no reader known to the cockpit; see the campaign's notes."]
    return ["```python", *code, "```"]


def render_reload(summary: Mapping[str, Any], verdicts: list[DeliverableVerdict]) -> str:
    """How to reload each accepted artifact, by its type, and how to check it is the same file."""
    lines = [
        f"# Reloading the outputs of {summary['campaign']}",
        "",
        "Paths are relative to the campaign folder (the one holding campaign.toml). Check a file is "
        "the one closed with `sha256sum PATH` against manifest.json.",
        "",
    ]
    accepted = [v for v in verdicts if v.accepted]
    if not accepted:
        lines += ["No deliverable was accepted, so there is nothing verified to reload. Causes:", ""]
        lines += [f"- {v.id}: {v.cause}" for v in verdicts]
        if not verdicts:
            lines.append("- the campaign declares no deliverable")
        lines.append("")
        return "\n".join(escape_control(line, keep_newlines=True) for line in lines)
    for verdict in accepted:
        d = verdict.deliverable
        lines += [f"## {d.id}", "", f"`{d.path}` — {d.kind.value}, {verdict.format}, sha256 `{verdict.sha256}`", ""]
        lines += _reload_snippet(verdict)
        lines.append("")
    return "\n".join(escape_control(line, keep_newlines=True) for line in lines)  # a reload command may hold lines


__all__ = [
    "CLOSING_DIR",
    "TEMP_ROOTS_ENV",
    "DEFAULT_TEMP_ROOTS",
    "RELOAD_TIMEOUT_S",
    "Check",
    "DeliverableVerdict",
    "RunMeasure",
    "Closing",
    "TempFolders",
    "temp_roots_from_env",
    "cost_per_accepted",
    "money",
    "read_ids",
    "iter_id_batches",
    "missing_ids",
    "HashedIds",
    "compare_hashed",
    "first_missing",
    "open_alert_text",
    "detect_format",
    "reload_file",
    "safetensors_problem",
    "run_reload_command",
    "verify_deliverable",
    "verify_deliverables",
    "measure_run",
    "plan_source",
    "planned_vs_actual",
    "conclude",
    "evaluate",
    "close_campaign",
    "render_report",
    "render_reload",
    "build_manifest",
    "summary_json",
]
