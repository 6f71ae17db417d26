"""The expected-ids check of `cockpit close`: the ids a file lists (JSON Lines, CSV/TSV, a JSON
list, a plain list), streamed a chunk at a time, reduced to hashes and compared in bounded memory.

Longer than the project's ~600 lines a module on purpose: it is the hot path of a 10-million-id
check (bench/expect_ids.py), and the helper processes at its end run the very same chunking and
hashing functions as the single-process path above them, so both stay in one module, side by side."""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import json
import os
import secrets
import subprocess
import struct
import sys
import tempfile
import traceback
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IDS_SHOWN = 5  # missing ids named in a cause

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
    for _, ids in _located_batches(path):
        yield ids


# Where a batch of a plain list or of JSON Lines starts: (file position, offset after the BOM,
# lines before it), so that a second reading can start there; None for CSV and JSON documents.
Resume = tuple[int, int, int]


def _located_batches(path: Path, resume: Resume | None = None, stop: int | None = None) -> Iterator[tuple[Resume | None, list[str]]]:
    suffix = path.suffix.lower()
    if suffix == ".json":
        yield None, _json_document_ids(path)
        return
    try:
        if suffix in (".jsonl", ".ndjson"):
            yield from _jsonl_batches(path, resume, stop)
        elif suffix in (".csv", ".tsv"):
            for ids in _csv_batches(path, "\t" if suffix == ".tsv" else ","):
                yield None, ids
        else:
            for at, offset, text in _located_chunks(path, resume, stop):
                if text.isascii() and not any(mark in text for mark in _PLAIN_SPECIAL):  # nothing to strip: split in C
                    ids = list(filter(None, text.split("\n")))
                else:
                    ids = [line for line in map(str.strip, text.splitlines()) if line and line[0] != "#"]
                if ids:
                    yield (at, offset, 0), ids
    except _ContentError as error:
        raise _utf8_problem(path) or IdsError(str(error)) from None


# In ASCII text, the blank space other than the line feed (what str.strip and str.splitlines act
# on) and the comment mark: a chunk without any is split on line feeds and kept as it is.
_PLAIN_SPECIAL = (" ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "#")


def _decoded_chunks(path: Path) -> Iterator[str]:
    """The file as UTF-8 text (a leading BOM dropped), in pieces that end at a line feed; a bad byte
    is named by its offset as decoding the whole file would name it."""
    for _, _, text in _located_chunks(path):
        yield text


def _located_chunks(path: Path, resume: Resume | None = None, stop: int | None = None) -> Iterator[tuple[int, int, str]]:
    """The pieces of `_decoded_chunks`, each with its file position and its offset after the BOM;
    from `resume` on if given (a position a piece started at), up to the piece that starts at
    `stop` or after it."""
    position, offset = (resume[0], resume[1]) if resume else (0, 0)  # of the next piece
    first = not resume
    try:
        with open(path, "rb") as handle:
            handle.seek(position)
            pending: list[bytes] = []
            while True:
                block = handle.read(ID_CHUNK_BYTES)
                cut = block.rfind(b"\n") + 1 if block else len(block)
                if block and cut == 0:
                    pending.append(block)  # one line longer than a chunk: keep it whole
                    continue
                piece = b"".join(pending) + block[:cut] if block else b"".join(pending)
                pending = [block[cut:]] if block and cut < len(block) else []
                at = position
                if stop is not None and at >= stop:
                    return
                position += len(piece)
                if first and piece.startswith(b"\xef\xbb\xbf"):
                    piece = piece[3:]
                    at += 3
                first = False
                if piece:
                    try:
                        yield at, offset, piece.decode("utf-8")
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


def _jsonl_batches(path: Path, resume: Resume | None = None, stop: int | None = None) -> Iterator[tuple[Resume, list[str]]]:
    number = resume[2] if resume else 0  # lines before the chunk, as str.splitlines() counts them
    for at, offset, text in _located_chunks(path, resume, stop):
        lines = text.splitlines()
        ids = _jsonl_fast(lines)
        if ids is None:
            ids = _jsonl_exact(lines, number, path.name)
        if ids:
            yield (at, offset, number), ids
        number += len(lines)


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


# An id is kept as its 64-bit hash (8 bytes in an array, not a 60-byte str in a set), in 1,024
# buckets by the hash's low 10 bits, so that one bucket at a time becomes a set (about 10,000
# hashes for 10 million ids: small sets stay in the CPU's cache, which makes them several times
# faster to build than large ones), and every step runs in C (sort by bucket, slices, sets). Two
# different ids are taken for one only if their hashes collide (odds about n² / 2⁶⁴: 5 in a
# million for 10 million ids).
BUCKETS = 1024
_bucket_of = (BUCKETS - 1).__and__


class HashedIds:
    """A multiset of ids reduced to their hashes, partitioned by the hash's low bits. Each bucket
    is a list of small arrays, one a batch: nothing is copied to grow, nothing over-allocated.
    Each piece remembers its batch (`batch_of`), each batch where it starts in the file (`where`),
    so that a second reading for the missing ids' names reads only the batches that hold one."""

    def __init__(self) -> None:
        self.buckets: list[list[array]] = [[] for _ in range(BUCKETS)]
        self.batch_of: list[list[int]] = [[] for _ in range(BUCKETS)]
        self.where: list[Resume | None] = []
        self.count = 0

    def add(self, ids: Iterable[str], where: Resume | None = None) -> None:
        packed, bounds = _hash_batch(ids)
        batch = len(self.where)
        self.where.append(where)
        self.count += len(packed)
        for bucket in range(BUCKETS):
            if bounds[bucket + 1] > bounds[bucket]:
                self.buckets[bucket].append(packed[bounds[bucket]:bounds[bucket + 1]])
                self.batch_of[bucket].append(batch)


def _hash_batch(ids: Iterable[str]) -> tuple[array, list[int]]:
    """The ids' hashes, sorted by bucket, and where each bucket starts (BUCKETS + 1 bounds)."""
    hashes = list(map(hash, ids))
    hashes.sort(key=_bucket_of)  # a stable sort on a small-int key
    bounds = [0]
    for bucket in range(BUCKETS):
        bounds.append(bisect.bisect_right(hashes, bucket, lo=bounds[-1], key=_bucket_of))
    packed = array("q")
    packed.frombytes(struct.pack(f"{len(hashes)}q", *hashes))  # faster than array("q", hashes)
    return packed, bounds


def _compare_bucket(expected: Sequence[array], present: Iterable[array]) -> tuple[int, array, list[int]]:
    """(distinct expected hashes, the missing ones sorted, the indexes of the expected pieces
    holding one) of one bucket."""
    wanted = set(itertools.chain.from_iterable(expected))
    unique = len(wanted)
    for piece in present:
        wanted.difference_update(piece)
    holding = [i for i, piece in enumerate(expected) if not wanted.isdisjoint(piece)] if wanted else []
    return unique, array("q", sorted(wanted)), holding


def compare_hashed(expected: HashedIds, present: HashedIds) -> tuple[int, list[array]]:
    """(distinct expected ids, the hashes of the distinct missing ones by bucket), emptying both."""
    unique, missing, _ = _compare_hashed(expected, present)
    return unique, missing


def _compare_hashed(expected: HashedIds, present: HashedIds) -> tuple[int, list[array], list[Span] | None]:
    """`compare_hashed`, and the parts of the expected file a second reading needs (None: all)."""
    unique = 0
    missing: list[array] = []
    holding: set[int] = set()
    for bucket in range(BUCKETS):
        count, lost, pieces = _compare_bucket(expected.buckets[bucket], present.buckets[bucket])
        holding.update(expected.batch_of[bucket][piece] for piece in pieces)
        expected.buckets[bucket] = []
        present.buckets[bucket] = []
        unique += count
        missing.append(lost)
    return unique, missing, _spans(expected.where, holding)


# The part of a file one batch came from: where it starts, and the file position it ends before
# (None: the end of the file).
Span = tuple[Resume, int | None]


def _spans(where: Sequence[Resume | None], holding: Iterable[int]) -> list[Span] | None:
    """The parts of the file that hold the batches holding a missing id, in order, next ones
    joined: the rest holds none. None if batches cannot be found again (CSV, a JSON document):
    the whole file is read."""
    spans: list[Span] = []
    previous = -2
    for batch in sorted(holding):
        start = where[batch]
        if start is None:
            return None
        following = where[batch + 1] if batch + 1 < len(where) else None
        stop = following[0] if following is not None else None
        if batch == previous + 1:
            spans[-1] = (spans[-1][0], stop)
        else:
            spans.append((start, stop))
        previous = batch
    return spans


def first_missing(path: Path, missing: list[array], limit: int = IDS_SHOWN, spans: Sequence[Span] | None = None) -> list[str]:
    """The first `limit` distinct missing ids in the expected file's order (a second reading: of
    the parts `spans` names, in order, when the rest holds none of the first `limit`)."""
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
    if spans is None:
        batches = (batch for _, batch in _located_batches(path))
    else:
        batches = (batch for start, stop in spans for _, batch in _located_batches(path, start, stop))
    for batch in batches:
        for identifier in itertools.compress(batch, map(hit, map(hash, batch))):
            if identifier not in found:
                found.append(identifier)
                if len(found) >= limit:
                    return found
    return found


# ---------------------------------------------------------------- the check of two files


class IdsFileError(IdsError):
    """`IdsError` of one of the two files compared: `side` is "expected" or "present"."""

    def __init__(self, message: str, side: str) -> None:
        super().__init__(message)
        self.side = side


@dataclass(frozen=True)
class IdsComparison:
    unique: int  # distinct expected ids
    missing: int  # distinct expected ids not present
    first: list[str]  # the first IDS_SHOWN of them in the expected file's order


def compare_id_files(expected: Path, present: Path) -> IdsComparison:
    """The expected ids of one file looked up in another. Large files (PARALLEL_MIN_BYTES together)
    are hashed in two helper processes at once, one file each, which then compare half the buckets
    each; small ones, or where helpers cannot run, in this process. Same answers, same messages."""
    if _parallel_worthwhile(expected, present):
        try:
            return _compare_in_workers(expected, present)
        except _WorkersFailed:
            pass  # the helpers could not do it: this process can, more slowly
    hashed = []
    for path, side in ((expected, "expected"), (present, "present")):
        ids = HashedIds()
        try:
            for where, batch in _located_batches(path):
                ids.add(batch, where)
        except IdsError as error:
            raise IdsFileError(str(error), side) from None
        hashed.append(ids)
    unique, missing, spans = _compare_hashed(*hashed)
    count = sum(map(len, missing))
    try:
        names = first_missing(expected, missing, spans=spans) if count else []
    except IdsError as error:  # changed since it was read a moment ago
        raise IdsFileError(str(error), "expected") from None
    return IdsComparison(unique, count, names)


# ---------------------------------------------------------------- helper processes
#
# Each helper is a fresh interpreter (never a fork: the caller may run threads), started with the
# same PYTHONHASHSEED so that both hash an id alike, fed requests on its stdin and answering on its
# stdout, one JSON document a line (plain data: nothing a helper reads can run code). A helper
# writes a file's hashes to a temporary file (batch after batch, each sorted by bucket) and an
# index of where each piece lies, so no process holds both files' hashes: the other helper reads
# the pieces of its buckets back with pread(2).

PARALLEL_MIN_BYTES = 32 << 20  # below this (both files together), no process is started
WORKERS = 2
_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds the `cockpit` package
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from cockpit.close.ids import _serve; _serve()"
_PYTHON = sys.executable


class _WorkersFailed(Exception):
    """The helpers did not answer (could not start, died, hit a bug): the caller does it alone."""


def _parallel_worthwhile(expected: Path, present: Path) -> bool:
    try:
        size = expected.stat().st_size + present.stat().st_size
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    except OSError:
        return False  # the reading names the problem
    return size >= PARALLEL_MIN_BYTES and cpus >= 2 and bool(_PYTHON)


class _Worker:
    def __init__(self, seed: int, folder: Path, number: int) -> None:
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        self.stderr = open(folder / f"helper-{number}.err", "wb")
        try:
            self.process = subprocess.Popen(
                [_PYTHON, "-c", _BOOT, _ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self.stderr, env=env, close_fds=True,
            )
        except OSError as error:
            self.stderr.close()
            raise _WorkersFailed(f"cannot start a helper: {error}") from None

    def send(self, *request: Any) -> None:
        try:
            _write_message(self.process.stdin, request)
        except OSError as error:
            raise _WorkersFailed(f"a helper stopped: {error}") from None

    def answer(self, side: str) -> Any:
        try:
            kind, value = _read_message(self.process.stdout)
        except (EOFError, OSError, ValueError) as error:
            raise _WorkersFailed(f"a helper stopped: {error}") from None
        if kind == "ids":
            raise IdsFileError(value, side)
        if kind != "ok":
            raise _WorkersFailed(value)
        return value

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stderr.close()


def _compare_in_workers(expected: Path, present: Path) -> IdsComparison:
    seed = secrets.randbelow(2**32 - 1) + 1  # 0 would turn hash randomization off
    try:
        folder_context = tempfile.TemporaryDirectory(prefix="cockpit-ids-")
        tmp = folder_context.__enter__()
    except OSError as error:
        raise _WorkersFailed(f"no temporary folder: {error}") from None
    workers: list[_Worker] = []
    try:
        folder = Path(tmp)
        for number in range(WORKERS):
            workers.append(_Worker(seed, folder, number))
        return _run_workers(workers, folder, expected, present)
    except OSError as error:
        raise _WorkersFailed(f"the helpers' files: {error}") from None
    finally:
        for worker in workers:
            worker.close()
        try:
            folder_context.__exit__(None, None, None)
        except OSError:
            pass


def _run_workers(workers: list[_Worker], folder: Path, expected: Path, present: Path) -> IdsComparison:
    settings = (ID_CHUNK_BYTES, MISSING_SET_MAX)
    hashed = [folder / "expected.hashes", folder / "present.hashes"]
    for worker, source, target in zip(workers, (expected, present), hashed):
        worker.send("hash", str(source), str(target), settings)
    # Both answers are awaited before an error is raised; the expected file's comes first.
    answers, errors = [], []
    for worker, side in zip(workers, ("expected", "present")):
        try:
            answers.append(worker.answer(side))
        except IdsFileError as error:
            errors.append(error)
    if errors:
        raise errors[0]
    expected_where = answers[0][0]
    missing_files = [str(folder / f"missing-{number}") for number in range(len(workers))]
    for number, worker in enumerate(workers):
        worker.send("compare", [str(path) for path in hashed], number, len(workers), missing_files[number])
    unique = missing = 0
    holding: set[int] = set()
    for worker in workers:
        count, lost, batches = worker.answer("expected")
        unique += count
        missing += lost
        holding.update(batches)
    names: list[str] = []
    if missing:
        workers[0].send("names", str(expected), missing_files, _spans(expected_where, holding), settings)
        names = workers[0].answer("expected")
    return IdsComparison(unique, missing, names)


def _write_message(stream: Any, message: Any) -> None:
    stream.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
    stream.flush()


def _read_message(stream: Any) -> Any:
    """One message; EOFError when the other side closed, ValueError when the line is not JSON.
    Tuples come back as lists, which the readers unpack alike."""
    line = stream.readline()
    if not line:
        raise EOFError("no answer")
    return json.loads(line)


def _serve() -> None:
    """A helper's loop: one request in, one (kind, value) answer out, a JSON line each."""
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    handlers = {"hash": _serve_hash, "compare": _serve_compare, "names": _serve_names}
    while True:
        try:
            name, *arguments = _read_message(requests)
        except EOFError:
            return
        try:
            answer: tuple[str, Any] = ("ok", handlers[name](*arguments))
        except IdsError as error:
            answer = ("ids", str(error))
        except BaseException:  # noqa: BLE001 - a bug is reported to the caller, which does the work itself
            answer = ("bug", traceback.format_exc())
        _write_message(answers, answer)


def _apply(settings: tuple[int, int]) -> None:
    global ID_CHUNK_BYTES, MISSING_SET_MAX
    ID_CHUNK_BYTES, MISSING_SET_MAX = settings


def _serve_hash(source: str, target: str, settings: tuple[int, int]) -> tuple[list[Resume | None], int]:
    """The file's hashes, batch after batch (each sorted by bucket), into `target`; the pieces'
    bounds (in hashes) into `target`.index; answers where each batch starts and the count."""
    _apply(settings)
    where: list[Resume | None] = []
    index = array("q", [0])
    with open(target, "wb") as out:
        for located, batch in _located_batches(Path(source)):
            packed, bounds = _hash_batch(batch)
            out.write(packed)
            base = index[-1]
            index.extend(base + bound for bound in bounds[1:])
            where.append(located)
    with open(target + ".index", "wb") as out:
        out.write(index)
    return where, index[-1]


def _read_index(path: str) -> array:
    index = array("q")
    with open(path + ".index", "rb") as handle:
        index.frombytes(handle.read())
    return index


def _pieces(handle: Any, index: array, bucket: int) -> tuple[list[array], list[int]]:
    """A bucket's pieces of one hashes file, batch by batch, and the batch of each."""
    pieces, batches = [], []
    for batch in range((len(index) - 1) // BUCKETS):
        start, end = index[batch * BUCKETS + bucket], index[batch * BUCKETS + bucket + 1]
        if end > start:
            piece = array("q")
            piece.frombytes(os.pread(handle.fileno(), (end - start) * 8, start * 8))
            pieces.append(piece)
            batches.append(batch)
    return pieces, batches


def _serve_compare(hashed: list[str], first_bucket: int, step: int, target: str) -> tuple[int, int, list[int]]:
    """Buckets first_bucket, first_bucket + step, …: (distinct expected, missing, the first batches
    holding a missing one); the missing hashes into `target` (by bucket) and `target`.index."""
    indexes = [_read_index(path) for path in hashed]
    unique = count = 0
    holding: set[int] = set()
    index = array("q", [0] * (BUCKETS + 1))
    with open(hashed[0], "rb") as expected, open(hashed[1], "rb") as present, open(target, "wb") as out:
        for bucket in range(BUCKETS):
            if bucket % step == first_bucket:
                pieces, batches = _pieces(expected, indexes[0], bucket)
                distinct, lost, firsts = _compare_bucket(pieces, _pieces(present, indexes[1], bucket)[0])
                del pieces
                unique += distinct
                count += len(lost)
                out.write(lost)
                holding.update(batches[first] for first in firsts)
            index[bucket + 1] = count
    with open(target + ".index", "wb") as out:
        out.write(index)
    return unique, count, sorted(holding)


def _serve_names(source: str, missing_files: list[str], spans: list[Span] | None, settings: tuple[int, int]) -> list[str]:
    _apply(settings)
    missing = [array("q") for _ in range(BUCKETS)]
    for path in missing_files:
        index = _read_index(path)
        with open(path, "rb") as handle:
            for bucket in range(BUCKETS):
                if index[bucket + 1] > index[bucket]:
                    missing[bucket].frombytes(os.pread(handle.fileno(), (index[bucket + 1] - index[bucket]) * 8, index[bucket] * 8))
    return first_missing(Path(source), missing, spans=spans)
