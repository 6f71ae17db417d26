"""The expected-ids check streams its files (10 million ids in bounded memory: bench/expect_ids.py)
and keeps the whole-file reader's results and messages exactly: the reader it replaced is kept
here as the reference, and both read the same generated files, cut into tiny chunks."""

from __future__ import annotations

import csv
import io
import json
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cockpit.close import closing
from cockpit.close import ids as id_reading
from cockpit.close.ids import IdsError, read_ids
from tests.close.test_closing import IDS, check, deliverable, make_campaign, write


# ---------------------------------------------------------------- the whole-file reader it replaced


def reference_read_ids(path: Path) -> list[str]:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise IdsError(f"{path.name} is not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise IdsError(f"{path.name} cannot be read: {error.strerror}") from None
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        ids = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise IdsError(f"{path.name} line {number} is not JSON") from None
            ids.append(reference_id_of(record, f"{path.name} line {number}"))
        return ids
    if suffix in (".csv", ".tsv"):
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if suffix == ".tsv" else ",")
        try:
            if not reader.fieldnames or "id" not in [f.strip() for f in reader.fieldnames]:
                raise IdsError(f"{path.name} has no `id` column (columns: {', '.join(reader.fieldnames or []) or 'none'})")
            column = next(f for f in reader.fieldnames if f.strip() == "id")
            return [row[column].strip() for row in reader if row.get(column) not in (None, "")]
        except csv.Error as error:
            raise IdsError(f"{path.name} is not valid CSV: {error}") from None
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def reference_id_of(record, where: str) -> str:
    if isinstance(record, (str, int)) and not isinstance(record, bool):
        return str(record)
    if isinstance(record, dict) and isinstance(record.get("id"), (str, int)) and not isinstance(record.get("id"), bool):
        return str(record["id"])
    raise IdsError(f"{where} has no `id`")


def outcome(reader, path: Path):
    try:
        return ("ids", reader(path))
    except IdsError as error:
        return ("error", str(error))


@contextmanager
def chunks_of(size: int):
    saved = id_reading.ID_CHUNK_BYTES
    id_reading.ID_CHUNK_BYTES = size
    try:
        yield
    finally:
        id_reading.ID_CHUNK_BYTES = saved


# ---------------------------------------------------------------- the same answers, streamed

FRAGMENTS = [
    '{"id": "a"}', '{"id": "b", "label": 1}', '{"id": 7}', '{"id": true}', '{"x": 1}', '"bare"', "42", "[1, 2]",
    '{"id": NaN}', '{"id": "n", "v": NaN}', '{"id": "big", "n": 1e400}', '{"id": "\\ud800"}', "{", "not json",
    "", "  ", "# comment", "  spaced  ", "id", "id,label", " id ,x", "id,id", 'a,"b', '"q\nr",s', "x,y,z", "α,β",
    "\ufeff", "\u2028", "\x85", "\x0b", "\r", "\t", '{"id": "a\u2028b"}', '{"id":"dup","id":"last"}',
    "\x00", '{"id": 123456789012345678901234567890}', '{"id": "tab\there"}',
]
SEPARATORS = ["\n", "\r\n", "\r", "\n\n"]


@st.composite
def id_files(draw):
    parts = draw(st.lists(st.tuples(st.sampled_from(FRAGMENTS), st.sampled_from(SEPARATORS)), max_size=12))
    data = "".join(a + b for a, b in parts).encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    if draw(st.integers(0, 5)) == 0:  # a byte that is not UTF-8, somewhere
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xe2\x80", b"\xed\xa0\x80"])) + data[at:]
    return data


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=id_files(), suffix=st.sampled_from([".jsonl", ".csv", ".tsv", ".txt", ""]), chunk=st.sampled_from([1, 3, 8, 64, 1 << 22]))
def test_streamed_reading_gives_what_the_whole_file_reader_gave(tmp_path, data, suffix, chunk):
    path = tmp_path / f"ids{suffix}"
    path.write_bytes(data)
    with chunks_of(chunk):
        assert outcome(read_ids, path) == outcome(reference_read_ids, path)


def test_a_bad_byte_after_a_bad_line_is_named_first_as_before(tmp_path):
    path = tmp_path / "preds.jsonl"
    path.write_bytes(b'{"id": "a"}\nnot json\n' + b'{"id": "b"}\n' * 1000 + b'{"id": "\xff"}\n')
    with chunks_of(64):
        assert outcome(read_ids, path) == ("error", "preds.jsonl is not UTF-8 text (byte 12029)")
        assert outcome(read_ids, path) == outcome(reference_read_ids, path)


@pytest.mark.parametrize("chunk", [5, 1 << 22])
def test_the_check_counts_and_names_missing_ids_as_before(tmp_path, chunk):
    expected = IDS + ["t-001", "t-100", "t-101", "t-100"] + [f"x-{n}" for n in range(8)]
    camp = make_campaign(tmp_path, deliverable("p", "out/p.jsonl", expect_ids="data/expected.txt"))
    write(camp, "data/expected.txt", "# header comment\n" + "\n".join(expected) + "\n")
    write(camp, "out/p.jsonl", "".join(json.dumps({"id": i}) + "\n" for i in reversed(IDS[2:])))
    with chunks_of(chunk):
        detail = closing.evaluate(camp, temp_roots=[]).verdicts[0].check("expected_ids").detail
    assert detail == "12 of 20 expected ids are missing (e.g. t-000, t-001, t-100, t-101, x-0, …)"
    write(camp, "out/p.jsonl", "".join(json.dumps({"id": i}) + "\n" for i in set(expected)))
    assert check(tmp_path, camp).verdicts[0].check("expected_ids").detail == "all 20 expected ids are present"


def test_many_missing_ids_are_found_through_the_sorted_arrays_too(tmp_path, monkeypatch):
    camp = make_campaign(tmp_path, deliverable("p", "out/p.txt", expect_ids="data/expected.txt"))
    write(camp, "data/expected.txt", "\n".join(f"e-{n}" for n in range(3000)) + "\n")
    write(camp, "out/p.txt", "\n".join(f"e-{n}" for n in range(0, 3000, 2)) + "\n")
    monkeypatch.setattr(id_reading, "MISSING_SET_MAX", 10)
    detail = check(tmp_path, camp).verdicts[0].check("expected_ids").detail
    assert detail == "1500 of 3000 expected ids are missing (e.g. e-1, e-3, e-5, e-7, e-9, …)"


# ---------------------------------------------------------------- in two helper processes


def compare_outcome(expected: Path, present: Path):
    try:
        result = id_reading.compare_id_files(expected, present)
    except IdsError as error:
        return ("error", getattr(error, "side", None), str(error))
    return ("ids", result.unique, result.missing, result.first)


def both_ways(monkeypatch, expected: Path, present: Path):
    """The outcome in this process and in the helpers: they must agree."""
    monkeypatch.setattr(id_reading, "PARALLEL_MIN_BYTES", 1 << 62)
    here = compare_outcome(expected, present)
    monkeypatch.setattr(id_reading, "PARALLEL_MIN_BYTES", 0)
    started = []
    real_popen = id_reading.subprocess.Popen
    monkeypatch.setattr(id_reading.subprocess, "Popen", lambda *a, **k: started.append(1) or real_popen(*a, **k))
    helpers = compare_outcome(expected, present)
    assert started == [1, 1]  # the helpers did run (no silent fallback to this process)
    monkeypatch.setattr(id_reading.subprocess, "Popen", real_popen)
    return here, helpers


EXPECTED_TEXT = "# header\n" + "".join(f"e-{n}\n" for n in range(400)) + "e-7\ne-399\n  e-3  \n\n"
PRESENT_CASES = {
    "all.txt": "".join(f"e-{n}\n" for n in reversed(range(400))),
    "some.jsonl": "".join(f'{{"id": "e-{n}"}}\n' for n in range(0, 400, 3)),
    "none.csv": "label,id\n" + "".join(f"x,f-{n}\n" for n in range(50)),
    "dups.tsv": "id\tx\n" + "".join(f"e-{n % 7}\t1\n" for n in range(300)),
    "doc.json": json.dumps([{"id": f"e-{n}"} for n in range(1, 400, 2)]),
    "empty.txt": "",
    "bad-line.jsonl": '{"id": "e-1"}\nnot json\n',
    "bad-byte.txt": "e-1\ne-2\n\udcff\n",
    "no-column.csv": "a,b\n1,2\n",
}


@pytest.mark.parametrize("chunk", [7, 1 << 22])
@pytest.mark.parametrize("name", sorted(PRESENT_CASES))
def test_the_helpers_give_what_this_process_gives(tmp_path, monkeypatch, name, chunk):
    expected = tmp_path / "expected.txt"
    expected.write_text(EXPECTED_TEXT)
    present = tmp_path / name
    present.write_bytes(PRESENT_CASES[name].encode("utf-8", "surrogateescape"))
    with chunks_of(chunk):
        here, helpers = both_ways(monkeypatch, expected, present)
    assert helpers == here
    if name == "some.jsonl":
        assert here == ("ids", 400, 266, ["e-1", "e-2", "e-4", "e-5", "e-7"])
    if name == "bad-line.jsonl":
        assert here == ("error", "present", "bad-line.jsonl line 2 is not JSON")


@pytest.mark.parametrize("expected_name, data", [
    ("expected.jsonl", b'{"id": "a"}\n{"no": 1}\n'),
    ("expected.txt", b"a\n\xff\n"),
    ("expected.csv", b"x\n1\n"),
    ("expected.json", b'{"ids": 3}'),
])
def test_an_unreadable_expected_file_is_named_first_by_the_helpers_too(tmp_path, monkeypatch, expected_name, data):
    expected = tmp_path / expected_name
    expected.write_bytes(data)
    present = tmp_path / "p.jsonl"
    present.write_bytes(b"not json\n")  # unreadable too: the expected file's error comes first
    here, helpers = both_ways(monkeypatch, expected, present)
    assert helpers == here
    assert here[:2] == ("error", "expected")


def test_the_missing_ids_are_named_in_the_expected_order_across_many_batches(tmp_path, monkeypatch):
    expected = tmp_path / "expected.jsonl"
    expected.write_text("".join(json.dumps({"id": f"i-{n}"}) + "\n" for n in range(3000)) + '{"id": "i-5"}\n')
    present = tmp_path / "p.txt"
    present.write_text("".join(f"i-{n}\n" for n in range(3000) if n not in (5, 1700, 1701, 2999)))
    for chunk, set_max in [(64, 2_000_000), (64, 1), (1 << 22, 1)]:
        monkeypatch.setattr(id_reading, "MISSING_SET_MAX", set_max)
        with chunks_of(chunk):
            here, helpers = both_ways(monkeypatch, expected, present)
        assert here == helpers == ("ids", 3000, 4, ["i-5", "i-1700", "i-1701", "i-2999"])


def test_a_small_check_starts_no_process(tmp_path, monkeypatch):
    camp = make_campaign(tmp_path, deliverable("p", "out/p.txt", expect_ids="data/expected.txt"))
    write(camp, "data/expected.txt", "a\nb\n")
    write(camp, "out/p.txt", "a\n")

    def no_process(*args, **kwargs):
        raise AssertionError("a process was started for two small files")

    monkeypatch.setattr(id_reading.subprocess, "Popen", no_process)
    assert check(tmp_path, camp).verdicts[0].check("expected_ids").detail == "1 of 2 expected ids are missing (e.g. b)"


@pytest.mark.parametrize("breakage", ["no python", "helper dies"])
def test_helpers_that_cannot_work_leave_the_check_to_this_process(tmp_path, monkeypatch, breakage):
    camp = make_campaign(tmp_path, deliverable("p", "out/p.txt", expect_ids="data/expected.txt"))
    write(camp, "data/expected.txt", "".join(f"e-{n}\n" for n in range(100)))
    write(camp, "out/p.txt", "".join(f"e-{n}\n" for n in range(1, 100)))
    monkeypatch.setattr(id_reading, "PARALLEL_MIN_BYTES", 0)
    if breakage == "no python":
        monkeypatch.setattr(id_reading, "_PYTHON", str(tmp_path / "no-such-python"))
    else:
        monkeypatch.setattr(id_reading, "_BOOT", "import os; os._exit(3)")
    assert check(tmp_path, camp).verdicts[0].check("expected_ids").detail == "1 of 100 expected ids are missing (e.g. e-0)"


def test_the_check_through_the_helpers_reads_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(id_reading, "PARALLEL_MIN_BYTES", 0)
    expected = IDS + ["t-001", "t-100", "t-101", "t-100"] + [f"x-{n}" for n in range(8)]
    camp = make_campaign(tmp_path, deliverable("p", "out/p.jsonl", expect_ids="data/expected.txt"))
    write(camp, "data/expected.txt", "# header comment\n" + "\n".join(expected) + "\n")
    write(camp, "out/p.jsonl", "".join(json.dumps({"id": i}) + "\n" for i in reversed(IDS[2:])))
    with chunks_of(5):
        detail = closing.evaluate(camp, temp_roots=[]).verdicts[0].check("expected_ids").detail
    assert detail == "12 of 20 expected ids are missing (e.g. t-000, t-001, t-100, t-101, x-0, …)"
    write(camp, "out/p.jsonl", "".join(json.dumps({"id": i}) + "\n" for i in reversed(IDS)) + "not json\n")
    detail = check(tmp_path, camp).verdicts[0].check("expected_ids").detail
    assert detail == f"ids cannot be read from the deliverable: p.jsonl line {len(IDS) + 1} is not JSON"
