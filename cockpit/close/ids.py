"""The expected-ids check of `cockpit close`: the ids a file lists (JSON Lines, CSV/TSV, a JSON
list, a plain list), streamed a chunk at a time, reduced to hashes and compared in bounded memory."""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import json
from array import array
from collections.abc import Iterable, Iterator, Sequence
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

