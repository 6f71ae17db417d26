"""The metrics stream reader (SPEC §1.2): incremental, torn lines wait, bad lines counted, files
truncated/replaced/deleted noticed, bounded memory, and a saved state a restart resumes from."""

from __future__ import annotations

import json
import math
import os
import stat
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cockpit.live import metric_values, metrics
from cockpit.live import track as track_module
from cockpit.live.metric_values import ts_seconds
from cockpit.live.metrics import MetricsStream
from cockpit.live.saved_state import SavedState, load_state, save_state
from cockpit.live.track import RunTrack, last_metrics

T0 = 1764489600.0  # 2025-11-30T08:00:00Z


def write(path: Path, *records, mode: str = "a") -> None:
    """Append records as the Python reporter writes them (json.dumps: bare NaN literals)."""
    with open(path, mode, encoding="utf-8") as handle:
        for record in records:
            handle.write((record if isinstance(record, str) else json.dumps(record)) + "\n")


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def collect(stream: MetricsStream, **kwargs):
    seen: list[tuple[int, dict]] = []
    result = stream.poll(lambda record, line, track: seen.append((line, dict(record))), **kwargs)
    return result, seen


@pytest.fixture
def path(tmp_path: Path) -> Path:
    folder = tmp_path / "runs" / "v-r16"
    folder.mkdir(parents=True)
    return folder / "metrics.jsonl"


# ---------------------------------------------------------------- reading and the summary


def test_records_build_the_run_summary(path: Path):
    write(
        path,
        {"ts": T0, "event": "started", "pid": 4242, "config_sha256": "a" * 64},
        {"ts": T0 + 60, "step": 100, "loss": 2.31, "lr": 1e-4},
        {"ts": T0 + 120, "step": 200, "loss": 2.10, "eval/macro_f1": 0.61},
        {"ts": T0 + 130, "event": "checkpoint", "path": "runs/v-r16/checkpoints/step-200.pt", "seconds": 12.4, "bytes": 1048576},
        {"ts": T0 + 200, "event": "resume_verified", "path": "runs/v-r16/checkpoints/step-200.pt", "seconds": 31.0},
        {"ts": T0 + 210, "event": "truncated", "input": "doc-991", "essential": False},
        {"ts": T0 + 300, "event": "finished", "status": "ok"},
    )
    stream = MetricsStream("v-r16", path)
    result = stream.poll()
    track = stream.track
    assert (result.lines, result.records, result.bad, result.reset, result.missing) == (7, 7, 0, False, False)
    assert track.lines == 7 and track.records == 7 and track.bad_lines == 0
    assert track.last_step == 200
    assert track.metric_values == {"loss": 2.10, "lr": 1e-4, "eval/macro_f1": 0.61}
    assert track.first_ts == T0 and track.last_ts == T0 + 300 and track.last_line_ts == T0 + 300
    assert track.started == {"pid": 4242, "config_sha256": "a" * 64, "ts": T0, "line": 1}
    assert track.config_sha256s == ["a" * 64] and track.config_change_line is None
    assert track.checkpoint == {"ts": T0 + 130, "path": "runs/v-r16/checkpoints/step-200.pt", "seconds": 12.4, "bytes": 1048576, "line": 4}
    assert track.resume_verified == {"ts": T0 + 200, "path": "runs/v-r16/checkpoints/step-200.pt", "seconds": 31.0, "line": 5}
    assert track.first_resume_ts == T0 + 200
    assert track.truncations == 1 and track.essential_truncations == 0
    assert track.finished == {"status": "ok", "ts": T0 + 300, "line": 7}
    summary = last_metrics(track)
    assert summary == {"step": 200, "ts": "2025-11-30T08:05:00.000Z", "loss": 2.10, "lr": 1e-4, "eval/macro_f1": 0.61}


def test_nan_infinity_literals_and_texts_are_non_finite(path: Path):
    write(
        path,
        {"ts": T0, "step": 1, "loss": float("nan")},  # json.dumps writes NaN
        {"ts": T0, "step": 2, "loss": float("inf"), "gn": float("-inf")},
        {"ts": T0, "step": 3, "a": "nan", "b": "INF", "c": "-inf", "d": "Infinity", "e": "-INFINITY"},
        {"ts": T0, "step": 4, "phase": "train", "loss": 1.5},
    )
    raw = path.read_bytes()
    assert b"NaN" in raw and b"-Infinity" in raw  # the bare literals a strict parser refuses
    seen: list[tuple[int, dict]] = []
    stream = MetricsStream("r", path)
    result = stream.poll(lambda record, line, track: seen.append((line, dict(record), track.nonfinite_line)))
    assert result.bad == 0 and result.records == 4
    values = stream.track.metric_values
    assert values["loss"] == 1.5 and values["gn"] == -math.inf
    assert math.isnan(values["a"]) and values["b"] == math.inf and values["c"] == -math.inf
    assert values["d"] == math.inf and values["e"] == -math.inf
    assert "phase" not in values  # text that is not a number is no metric
    assert math.isnan(seen[0][1]["loss"]) and seen[0][2] == 1
    assert seen[2][1]["b"] == math.inf  # observers get the float, not the text
    assert stream.track.nonfinite_lines == 3 and stream.track.nonfinite_line == 3
    assert seen[3][2] == 3  # line 4 held nothing non-finite


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (T0, T0),
        (int(T0), T0),
        ("2025-11-30T08:00:00Z", T0),
        ("2025-11-30T08:00:00.500Z", T0 + 0.5),
        ("2025-11-30T08:00:00", T0),  # naive: UTC
        ("2025-11-30T10:00:00+02:00", T0),
        (str(T0), T0),
        (T0 * 1000, T0),  # epoch milliseconds
        ("yesterday", None),
        (True, None),
        (float("nan"), None),
        (None, None),
        ([T0], None),
    ],
)
def test_ts_is_iso_8601_or_epoch_seconds(value, expected):
    assert ts_seconds(value) == expected


def test_epoch_and_iso_ts_in_one_stream(path: Path):
    write(path, {"ts": "2025-11-30T08:00:00Z", "step": 1, "loss": 3.0}, {"ts": T0 + 3600, "step": 2, "loss": 2.0},
          {"step": 3, "loss": 1.0})
    stream = MetricsStream("r", path)
    stream.poll()
    assert stream.track.first_ts == T0 and stream.track.last_ts == T0 + 3600
    # the last line has no ts: its time is when the file was last written
    assert stream.track.last_line_ts == pytest.approx(os.stat(path).st_mtime)


def test_only_new_bytes_are_read(path: Path):
    write(path, *({"ts": T0 + i, "step": i, "loss": 1.0} for i in range(5)))
    stream = MetricsStream("r", path)
    result, seen = collect(stream)
    assert result.lines == 5 and [line for line, _ in seen] == [1, 2, 3, 4, 5]
    result, seen = collect(stream)
    assert result.lines == 0 and seen == []
    write(path, {"ts": T0 + 9, "step": 9, "loss": 0.5})
    result, seen = collect(stream)
    assert result.lines == 1 and seen == [(6, {"ts": T0 + 9, "step": 9, "loss": 0.5})]
    assert stream.position.offset == path.stat().st_size


def test_a_torn_last_line_waits_until_complete(path: Path):
    write(path, {"ts": T0, "step": 1, "loss": 2.0})
    append_bytes(path, b'{"ts": 1764489601.0, "step": 2, "lo')
    stream = MetricsStream("r", path)
    result, seen = collect(stream)
    assert result.lines == 1 and result.bad == 0 and result.pending_bytes > 0
    result, seen = collect(stream)  # still torn: nothing new, nothing bad
    assert result.lines == 0 and result.bad == 0
    append_bytes(path, b'ss": 1.5}\n')
    result, seen = collect(stream)
    assert result.lines == 1 and result.bad == 0 and seen == [(2, {"ts": T0 + 1, "step": 2, "loss": 1.5})]
    assert stream.track.bad_lines == 0 and stream.track.last_step == 2


def test_blank_lines_count_as_lines_but_not_as_bad(path: Path):
    append_bytes(path, b'{"step": 1, "loss": 1}\n\n   \r\n{"step": 2, "loss": 2}\r\n')
    stream = MetricsStream("r", path)
    result, seen = collect(stream)
    assert result.lines == 4 and result.bad == 0 and [line for line, _ in seen] == [1, 4]


# ---------------------------------------------------------------- bad input, never fatal


def test_bad_lines_are_counted_with_their_numbers(path: Path):
    append_bytes(
        path,
        b'{"step": 1, "loss": 1.0}\n'
        b'{"step": 2, "loss": \n'  # does not parse
        b'[1, 2, 3]\n'  # not an object
        b'"text"\n'
        b'{"step": 3, "loss": "\xff\xfe"}\n'  # invalid UTF-8
        b'{"step": 4, "loss": 0.5}\n',
    )
    stream = MetricsStream("r", path)
    result = stream.poll()
    assert result.lines == 6 and result.records == 2 and result.bad == 4
    assert stream.track.bad_samples == track_module.deque(
        [(2, "not JSON"), (3, "not a JSON object"), (4, "not a JSON object"), (5, "not UTF-8")]
    )
    assert stream.track.last_step == 4


def test_bad_line_numbers_are_bounded(path: Path):
    append_bytes(path, b"garbage\n" * 1000 + b'{"step": 1}\n')
    stream = MetricsStream("r", path)
    stream.poll()
    assert stream.track.bad_lines == 1000
    assert stream.track.bad_line_numbers == list(range(981, 1001))


def test_deep_nesting_is_a_bad_line_not_a_recursion_error(path: Path):
    deep_valid = b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    append_bytes(path, b"[" * 200_000 + b"\n" + deep_valid + b"\n" + b'{"step": 7, "loss": 1.0}\n')
    stream = MetricsStream("r", path)
    result = stream.poll()
    assert (result.lines, result.bad, result.records) == (3, 2, 1)
    assert {reason for _, reason in stream.track.bad_samples} <= {"not JSON", "nested too deeply"}
    assert stream.track.bad_line_numbers == [1, 2]
    assert stream.track.last_step == 7


def test_a_10_mb_line_is_skipped_and_counted_in_bounded_memory(path: Path):
    write(path, {"step": 1, "loss": 1.0})
    append_bytes(path, b'{"x": "' + b"a" * (10 * 1024 * 1024) + b'"}\n')
    write(path, {"step": 3, "loss": 0.5})
    stream = MetricsStream("r", path, chunk_bytes=256 * 1024)
    tracemalloc.start()
    try:
        result = stream.poll()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (result.lines, result.records, result.bad) == (3, 2, 1)
    assert stream.track.bad_samples[0][0] == 2 and "longer than" in stream.track.bad_samples[0][1]
    assert stream.track.last_step == 3
    assert peak < 4 * 1024 * 1024, f"held {peak} bytes reading a 10 MB line"


def test_memory_for_a_long_line_does_not_grow_with_the_line(path: Path):
    append_bytes(path, b'{"x": "' + b"a" * (40 * 1024 * 1024) + b'"}\n{"step": 2}\n')
    stream = MetricsStream("r", path)  # default 4 MiB chunks, 1 MiB cap
    tracemalloc.start()
    try:
        result = stream.poll()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (result.lines, result.bad, result.records) == (2, 1, 1)
    assert peak < 3 * (metrics.CHUNK_BYTES + metrics.MAX_LINE_BYTES), f"held {peak} bytes for a 40 MB line"


def test_a_long_line_arriving_in_pieces_is_skipped_once(path: Path, tmp_path: Path):
    stream = MetricsStream("r", path, max_line_bytes=1000, chunk_bytes=300)
    append_bytes(path, b'{"step": 1}\n{"x": "' + b"a" * 1500)
    assert stream.poll().lines == 1
    assert stream.position.skipping
    state = tmp_path / "state.json"
    save_state(state, [stream])  # a restart in the middle of the long line
    stream = load_state(state).stream("r", path)
    stream.max_line_bytes, stream.chunk_bytes = 1000, 300
    append_bytes(path, b"a" * 2000)
    assert stream.poll().lines == 0
    append_bytes(path, b'"}\n{"step": 3}\n')
    result = stream.poll()
    assert (result.lines, result.bad, result.records) == (2, 1, 1)
    assert stream.track.bad_line_numbers == [2] and stream.track.last_step == 3
    assert stream.position.offset == path.stat().st_size


def test_metric_names_are_bounded(path: Path):
    write(path, *({"step": i, f"m{i}": 1.0} for i in range(1000)), {"step": 1000, "n" * 500: 1.0})
    stream = MetricsStream("r", path)
    stream.poll()
    assert len(stream.track.metrics) <= track_module.METRICS_KEPT
    assert "n" * 500 not in stream.track.metrics
    assert stream.track.metric_names_dropped >= 1000 - track_module.METRICS_KEPT


# ---------------------------------------------------------------- files that change under the reader


def test_a_truncated_file_is_read_again_from_the_start(path: Path):
    write(path, {"ts": T0, "event": "started", "pid": 1, "config_sha256": "a" * 64},
          *({"ts": T0 + i, "step": i, "loss": 1.0} for i in range(1, 10)))
    stream = MetricsStream("r", path)
    assert stream.poll().lines == 10
    write(path, {"ts": T0 + 100, "step": 1, "loss": 9.0}, mode="w")
    result, seen = collect(stream)
    assert result.reset and result.reset_reason == "truncated"
    assert result.lines == 1 and seen[0][0] == 1
    track = stream.track
    assert track.lines == 1 and track.last_step == 1 and track.started is None and track.resets == 1
    assert track.config_sha256s == ["a" * 64]  # the run's configurations are remembered across files


def test_a_replaced_file_is_noticed_by_its_inode(path: Path):
    write(path, *({"step": i} for i in range(20)))
    stream = MetricsStream("r", path)
    stream.poll()
    replacement = path.with_name("new.jsonl")
    write(replacement, *({"step": 100 + i} for i in range(30)))  # longer than the old file
    os.replace(replacement, path)
    result = stream.poll()
    assert result.reset and result.reset_reason == "replaced" and result.lines == 30
    assert stream.track.last_step == 129


def test_a_file_rewritten_in_place_past_the_offset_is_noticed(path: Path):
    write(path, *({"ts": T0 + i, "step": i} for i in range(5)))
    stream = MetricsStream("r", path)
    stream.poll()
    with open(path, "r+b") as handle:  # same inode, grown past the offset, other content
        handle.write(b"".join(json.dumps({"ts": T0 + 500 + i, "step": 50 + i}).encode() + b"\n" for i in range(20)))
    result = stream.poll()
    assert result.reset and result.reset_reason == "rewritten" and stream.track.last_step == 69


def test_a_deleted_file_is_missing_not_a_crash(path: Path):
    stream = MetricsStream("r", path)
    assert stream.poll().missing  # not written yet
    write(path, {"step": 1}, {"step": 2})
    assert stream.poll().lines == 2
    path.unlink()
    result = stream.poll()
    assert result.missing and stream.missing and result.lines == 0
    assert stream.track.last_step == 2  # what it said is kept
    write(path, {"step": 1})
    result = stream.poll()
    assert not result.missing and result.reset and result.lines == 1


def test_a_file_deleted_while_being_read_is_read_to_its_end(path: Path):
    write(path, *({"step": i} for i in range(2000)))
    stream = MetricsStream("r", path, chunk_bytes=4096)
    seen = []

    def observer(record, line, track):
        if line == 10:
            path.unlink()  # the open descriptor still reads the old file
        seen.append(line)

    result = stream.poll(observer)
    assert result.lines == 2000 and seen == list(range(1, 2001))
    assert stream.poll().missing


def test_a_folder_or_unreadable_path_is_an_error_in_words(tmp_path: Path):
    result = MetricsStream("r", tmp_path).poll()
    assert result.error and "folder" in result.error


@pytest.mark.parametrize("make", ["fifo", "device", "loop", "denied", "folder"])
def test_an_unreadable_path_is_never_opened_nor_waited_on_and_says_why(tmp_path: Path, monkeypatch, make):
    import threading

    path = tmp_path / "metrics.jsonl"
    if make == "fifo":
        os.mkfifo(path)
    elif make == "device":
        path.symlink_to("/dev/zero")
    elif make == "loop":
        path.symlink_to(tmp_path / "other")
        (tmp_path / "other").symlink_to(path)
    elif make == "folder":
        path.mkdir()
    else:
        path.write_text('{"step": 1, "loss": NaN}\n')
    opened = []
    real_open = os.open

    def watched_open(target, flags, *args):
        opened.append(str(target))
        if make == "denied":
            raise PermissionError(13, "Permission denied", str(target))
        return real_open(target, flags, *args)

    monkeypatch.setattr(metrics.os, "open", watched_open)
    stream = MetricsStream("r", path)
    results = []
    reader = threading.Thread(target=lambda: results.append(stream.poll()), daemon=True)
    reader.start()
    reader.join(5)
    assert results, "a poll of an unreadable path must never block"
    (result,) = results
    expected = {"fifo": "a FIFO (named pipe)", "device": "a device", "loop": "symbolic links",
                "denied": "Permission denied", "folder": "a folder"}[make]
    assert result.error and expected in result.error and str(path) in result.error
    assert stream.error == result.error and not result.missing and result.lines == 0
    if make != "denied":
        assert opened == []  # looked at, never opened
    path.unlink() if make != "folder" else path.rmdir()
    write(path, {"step": 1, "loss": 1.0})
    monkeypatch.setattr(metrics.os, "open", real_open)
    assert stream.poll().error is None and stream.error is None  # readable again: said so


def test_a_rewritten_file_is_a_new_generation_even_with_the_same_inode(path: Path):
    write(path, {"ts": 1.5, "event": "started", "pid": 7}, {"step": 1, "loss": 1.0})
    stream = MetricsStream("r", path)
    stream.poll()
    first = stream.generation
    write(path, {"step": 2, "loss": 1.0})
    stream.poll()
    assert stream.generation == first  # the same writing, grown
    inode = path.stat().st_ino
    write(path, {"ts": 9.5, "event": "started", "pid": 8}, {"step": 1, "loss": 1.0}, mode="w")
    assert path.stat().st_ino == inode
    assert stream.poll().reset and stream.generation != first and stream.generation.startswith(f"{inode}-")


def test_max_bytes_reads_in_slices(path: Path):
    write(path, *({"step": i, "loss": 1.0} for i in range(1000)))
    stream = MetricsStream("r", path, chunk_bytes=4096)
    result = stream.poll(max_bytes=4096)
    assert result.more and 0 < result.lines < 1000
    total = result.lines
    while result.more:
        result = stream.poll(max_bytes=4096)
        total += result.lines
    assert total == 1000 and stream.track.last_step == 999


# ---------------------------------------------------------------- rate


def test_step_rate_from_recent_points(path: Path):
    # 10 steps a second for 20 minutes: 36,000 steps an hour
    write(path, *({"ts": T0 + i, "step": i * 10, "loss": 1.0} for i in range(1200)))
    stream = MetricsStream("r", path)
    stream.poll()
    assert stream.track.steps_per_hour == pytest.approx(36000)
    assert len(stream.track.rate_points) <= track_module.RATE_POINTS
    # resumed from an earlier checkpoint at half the speed: the old points are forgotten
    write(path, *({"ts": T0 + 1200 + i, "step": 5000 + i * 5} for i in range(600)))
    stream.poll()
    assert stream.track.steps_per_hour == pytest.approx(18000)


def test_rate_points_stay_bounded_over_a_long_stream(path: Path):
    write(path, *({"ts": T0 + i * 60, "step": i} for i in range(5000)))  # 3.5 days
    stream = MetricsStream("r", path)
    stream.poll()
    assert len(stream.track.rate_points) == track_module.RATE_POINTS
    assert stream.track.steps_per_hour == pytest.approx(60)


# ---------------------------------------------------------------- saved state


def test_state_round_trip_and_a_restart_reads_nothing_old(path: Path, tmp_path: Path):
    write(path, {"ts": T0, "event": "started", "pid": 77, "config_sha256": "b" * 64},
          *({"ts": T0 + i, "step": i, "loss": 1.0 / i} for i in range(1, 50)),
          {"ts": T0 + 50, "step": 50, "loss": float("nan")},
          {"ts": T0 + 51, "event": "truncated", "input": "doc-1", "essential": True})
    append_bytes(path, b"not json\n" + b'{"step": 5')  # one bad line and a torn tail
    stream = MetricsStream("v-r16", path)
    stream.poll()
    state = tmp_path / ".cockpit" / "state.json"
    save_state(state, {"v-r16": stream}, extra={"rules": {"fired": [["nan-loss", "v-r16"]]}})
    assert stat.S_IMODE(state.stat().st_mode) & ~0o640 == 0
    assert not list(state.parent.glob("*.tmp"))

    saved = load_state(state)
    assert saved.extra == {"rules": {"fired": [["nan-loss", "v-r16"]]}}
    again = saved.stream("v-r16", path)
    assert again.position.to_dict() == stream.position.to_dict()
    restored, original = again.track.to_dict(), stream.track.to_dict()
    assert restored == original
    assert math.isnan(again.track.metrics["loss"])  # non-finite values survive the JSON file
    assert json.loads(state.read_text()) and b"NaN" not in state.read_bytes().replace(b'"NaN"', b"")

    result, seen = collect(again)
    assert result.lines == 0 and seen == []
    append_bytes(path, b'1, "loss": 0.1}\n')
    result, seen = collect(again)
    assert result.lines == 1 and seen[0][0] == 54 and seen[0][1]["step"] == 51


def test_a_corrupt_or_foreign_state_file_reads_as_absent(path: Path, tmp_path: Path):
    state = tmp_path / "state.json"
    assert load_state(state).streams == {}  # no file
    for text in ("{not json", "[1, 2]", '{"version": 99, "streams": {}}', "[" * 100000, "\udcff"):
        state.write_text(text, errors="surrogateescape")
        loaded = load_state(state)
        assert isinstance(loaded, SavedState) and loaded.streams == {} and loaded.extra == {}
    fresh = load_state(state).stream("r", path)
    assert fresh.position.offset == 0 and fresh.track.lines == 0


def test_a_damaged_stream_entry_is_read_afresh(path: Path, tmp_path: Path):
    write(path, {"ts": T0, "event": "started", "pid": 5, "config_sha256": "c" * 64})
    stream = MetricsStream("r", path)
    stream.poll()
    state = tmp_path / "state.json"
    save_state(state, [stream])
    document = json.loads(state.read_text())
    document["streams"]["r"]["track"]["started"]["pid"] = "5; rm -rf /"
    state.write_text(json.dumps(document))
    again = load_state(state).stream("r", path)
    assert again.position.offset == 0 and again.track.started is None
    assert again.poll().lines == 1 and again.track.started["pid"] == 5
    # a saved stream for another path (the campaign moved its metrics) starts afresh too
    save_state(state, [stream])
    assert load_state(state).stream("r", path.with_name("other.jsonl")).position.offset == 0


def test_run_track_from_dict_rejects_wrong_types():
    good = RunTrack().to_dict()
    assert RunTrack.from_dict(good).to_dict() == good
    for name, value in (("lines", "3"), ("last_step", 1.5), ("rate_points", [[1.0]]), ("bad_samples", {}),
                        ("config_sha256s", [1]), ("finished", {"status": "ok"}), ("resets", True)):
        with pytest.raises((TypeError, ValueError)):
            RunTrack.from_dict({**good, name: value})


# ---------------------------------------------------------------- fuzzed appends


_VALID = st.dictionaries(
    st.sampled_from(["step", "loss", "lr", "eval/f1", "x"]), st.integers(-10**6, 10**6), min_size=1, max_size=4
)
_GARBAGE = st.binary(max_size=60).map(lambda b: b.replace(b"\n", b""))
_SEGMENT = st.one_of(_VALID.map(lambda d: json.dumps(d).encode()), _GARBAGE)


def _reference_valid(line: bytes, cap: int) -> bool:
    if len(line) > cap:
        return False
    try:
        value = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(value, dict)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    segments=st.lists(_SEGMENT, max_size=25),
    tail=_GARBAGE,
    cuts=st.lists(st.tuples(st.integers(0, 2000), st.booleans()), max_size=12),
)
def test_arbitrary_appends_in_arbitrary_splits(tmp_path: Path, segments, tail, cuts):
    from cockpit.plan.campaign import StopRule
    from cockpit.live.rules import RuleEvaluator

    folder = tmp_path / f"fuzz-{os.urandom(6).hex()}"
    folder.mkdir()
    path, state = folder / "metrics.jsonl", folder / "state.json"
    cap = 40
    blob = b"".join(s + b"\n" for s in segments) + tail
    complete = blob.split(b"\n")[:-1]
    expected = [(number, line) for number, line in enumerate(complete, start=1) if _reference_valid(line, cap)]

    evaluator = RuleEvaluator([StopRule(id="nf", kind="non_finite"), StopRule(id="lo", kind="below", metric="loss", threshold=0)])
    triggers: list = []
    seen: list[tuple[int, dict]] = []
    watch = evaluator.observer("r", triggers)

    def observer(record, line, track):
        watch(record, line, track)
        seen.append((line, record))

    stream = MetricsStream("r", path, max_line_bytes=cap, chunk_bytes=16)
    points = sorted({min(c, len(blob)) for c, _ in cuts} | {len(blob)})
    restarts = dict((min(c, len(blob)), r) for c, r in cuts)
    written = 0
    for point in points:
        append_bytes(path, blob[written:point])
        written = point
        result = stream.poll(observer)
        assert result.error is None and not result.reset
        position = stream.position  # the bytes kept to notice a rewrite are the very bytes before the offset
        assert position.tail == blob[max(0, position.offset - metrics.TAIL_BYTES):position.offset]
        if restarts.get(point):
            save_state(state, [stream])
            stream = load_state(state).stream("r", path)
            stream.max_line_bytes, stream.chunk_bytes = cap, 16
    stream.poll(observer)
    assert [line for line, _ in seen] == [line for line, _ in expected]
    for (line, record), (_, raw) in zip(seen, expected):
        if raw.startswith(b"{") and all(type(v) is int for v in json.loads(raw).values()):
            assert record == json.loads(raw)
    assert stream.track.lines == len(complete)
    assert stream.track.records == len(expected)
    assert stream.track.bad_lines == sum(1 for line in complete if line.strip()) - len(expected)


_JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10**450, max_value=10**450),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["nan", "-Infinity", "inf", "started", "checkpoint", "resume_verified", "truncated", "finished",
                     "2025-11-30T08:00:00Z", "true", "", "x" * 300]),
    st.text(max_size=20),
)
_JSON = st.recursive(_JSON_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                     max_leaves=8)
_KEYS = st.sampled_from(["ts", "step", "event", "loss", "eval/macro_f1", "pid", "config_sha256", "essential",
                         "input", "status", "path", "seconds", "bytes", "x" * 250])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(st.dictionaries(_KEYS, _JSON, max_size=6), max_size=12))
def test_wrong_types_and_huge_numbers_never_raise(tmp_path: Path, records):
    from cockpit.plan.campaign import StopRule
    from cockpit.live.rules import RuleEvaluator

    folder = tmp_path / f"types-{os.urandom(6).hex()}"
    folder.mkdir()
    path = folder / "metrics.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    rules = [
        StopRule(id="nf", kind="non_finite"), StopRule(id="nf-loss", kind="non_finite", metric="loss"),
        StopRule(id="lo", kind="below", metric="eval/macro_f1", threshold=0.5, after_step=10),
        StopRule(id="hi", kind="above", metric="loss", threshold=1.0), StopRule(id="tr", kind="truncated"),
        StopRule(id="nr", kind="no_resume", within_hours=1), StopRule(id="st", kind="stalled", minutes=1),
    ]
    evaluator = RuleEvaluator(rules)
    triggers: list = []
    stream = MetricsStream("r", path)
    result = stream.poll(evaluator.observer("r", triggers))
    assert result.error is None and result.lines == len(records)
    triggers += evaluator.tick("r", stream.track, T0 + 10**6, True)
    assert all(t.message.startswith("r: ") for t in triggers)
    stream.track.steps_per_hour
    last_metrics(stream.track)
    save_state(folder / "state.json", [stream])
    again = load_state(folder / "state.json").stream("r", path)
    assert again.track.to_dict() == stream.track.to_dict()


def test_numbers_past_any_float_are_kept_usable(path: Path):
    huge = 10**400
    write(path, {"ts": huge, "step": huge, "loss": huge, "gn": -huge},
          {"ts": T0, "event": "checkpoint", "path": "c", "seconds": huge, "bytes": huge},
          {"ts": T0, "event": "started", "pid": huge})
    stream = MetricsStream("r", path)
    result = stream.poll()
    assert result.records == 3 and result.bad == 0
    track = stream.track
    assert track.last_step is None and track.first_ts == T0  # no step, no time from the first line
    assert track.metric_values == {"loss": math.inf, "gn": -math.inf} and track.nonfinite_line == 1
    assert track.checkpoint["seconds"] is None and track.checkpoint["bytes"] is None
    assert track.started["pid"] is None


# ---------------------------------------------------------------- implausible values (issue 13, items 5 and 7)


@pytest.mark.parametrize("value", [1.0, 0, -5.0, 946684799.0, 4102444801.0, 1e300, 10**400 // 10**300,
                                   "1970-01-01T00:00:01Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])
def test_a_ts_outside_this_century_is_no_time(value):
    assert ts_seconds(value) is None


def test_the_century_bounds_and_milliseconds_are_times():
    assert ts_seconds(metric_values.TS_MIN) == metric_values.TS_MIN and ts_seconds(metric_values.TS_MAX) == metric_values.TS_MAX
    assert ts_seconds(metric_values.TS_MAX * 1000) == metric_values.TS_MAX


def test_an_implausible_ts_is_a_counted_bad_field_and_the_line_still_counts(path: Path):
    write(path, {"ts": 1.0, "step": 1, "loss": 2.0}, {"ts": T0, "step": 2, "loss": 1.5})
    stream = MetricsStream("r", path)
    result = stream.poll()
    track = stream.track
    assert result.bad == 0 and result.records == 2 and track.bad_lines == 0
    assert track.bad_fields == 1 and track.bad_field_samples[-1][0] == 1
    assert "ts 1 is not a time between 2000-01-01 and 2100-01-01" in track.bad_field_samples[-1][1]
    assert track.first_ts == T0 and track.last_step == 2 and track.metric_values["loss"] == 1.5
    (notice,) = track.notices("r")
    assert notice.startswith("run r: 1 implausible value ignored") and "line 1" in notice


@pytest.mark.parametrize("field, value, reason", [
    ("seconds", 12_400_000_000_000_000_000.0, "checkpoint seconds 1.24e+19 is not a duration"),
    ("seconds", -1.0, "checkpoint seconds -1 is not a duration"),
    ("seconds", 10**400 // 10**300, "checkpoint seconds 1e+100 is not a duration"),
    ("bytes", 1 << 60, "checkpoint bytes 1.15292e+18 is not a size"),
    ("bytes", -3, "checkpoint bytes -3 is not a size"),
    ("bytes", "big", "checkpoint bytes 'big' is not a size"),
])
def test_implausible_checkpoint_figures_are_bad_fields(path: Path, field, value, reason):
    line = json.dumps({"ts": T0, "event": "checkpoint", "path": "a.pt", "seconds": 12.4, "bytes": 5, field: value})
    write(path, line)
    stream = MetricsStream("r", path)
    stream.poll()
    track = stream.track
    assert track.checkpoints == 1 and track.checkpoint[field] is None and track.checkpoint["path"] == "a.pt"
    assert track.bad_fields == 1 and reason in track.bad_field_samples[-1][1], track.bad_field_samples


@pytest.mark.parametrize("line", [
    '{"ts": %f, "step": 1.5, "loss": 2.0}' % T0,
    '{"ts": %f, "step": 100000000000000000000, "loss": 2.0}' % T0,
    '{"ts": %f, "step": true, "loss": 2.0}' % T0,
    '{"ts": %f, "event": "started", "pid": -4}' % T0,
])
def test_an_implausible_step_or_pid_is_a_bad_field(path: Path, line):
    write(path, line)
    stream = MetricsStream("r", path)
    assert stream.poll().bad == 0
    assert stream.track.bad_fields == 1 and stream.track.last_step is None


def test_a_lone_surrogate_is_replaced_counted_and_the_state_saves(path: Path, tmp_path: Path):
    write(path, json.dumps({"ts": T0, "event": "truncated", "input": "doc-\udcff", "essential": True}),
          json.dumps({"ts": T0, "event": "checkpoint", "path": "runs/r/\udcff.pt", "seconds": 1.0}),
          json.dumps({"ts": T0, "step": 3, "\udcfe": 1.0, "loss": float("nan")}))
    stream = MetricsStream("r", path)
    seen = []
    stream.poll(lambda record, line, track: seen.append(record))
    track = stream.track
    assert track.bad_fields == 3 and "lone surrogate" in track.bad_field_samples[-1][1]
    assert track.checkpoint["path"] == "runs/r/\ufffd.pt" and track.truncation_events[-1]["input"] == "doc-\ufffd"
    assert "\ufffd" in track.metric_values and seen[0]["input"] == "doc-\ufffd"  # observers see the safe text
    state = tmp_path / "state.json"
    save_state(state, [stream])
    state.read_bytes().decode("utf-8")
    again = load_state(state).stream("r", path)
    assert again.position.offset == stream.position.offset and again.track.bad_fields == 3
    assert again.track.checkpoint["path"] == "runs/r/\ufffd.pt"


def test_a_state_holding_a_surrogate_still_saves(path: Path, tmp_path: Path):
    write(path, {"ts": T0, "step": 1, "loss": 1.0})
    stream = MetricsStream("r", path)
    stream.poll()
    stream.track.last_reset = "\udcff"  # however it got there, the reading position must be saved
    save_state(tmp_path / "state.json", [stream])
    assert load_state(tmp_path / "state.json").stream("r", path).position.offset == stream.position.offset


def test_an_observer_that_fails_on_one_line_costs_that_line_only(path: Path):
    write(path, *({"ts": T0 + i, "step": i, "loss": 1.0} for i in range(1, 5)))
    stream = MetricsStream("r", path)
    seen = []

    def observer(record, line, track):
        if line == 2:
            raise OverflowError("int too large to convert to C int")
        seen.append(line)

    result = stream.poll(observer)
    assert seen == [1, 3, 4] and result.bad == 1 and stream.track.last_step == 4
    assert stream.track.bad_samples[-1] == (2, "could not be taken in (OverflowError: int too large to convert to C int): skipped")
    assert stream.poll(observer).lines == 0  # the position moved past it


def test_a_started_line_without_ts_is_dated_when_first_read_not_by_mtime(path: Path):
    write(path, {"event": "started", "pid": 4242})
    os.utime(path, (T0 + 7200, T0 + 7200))
    stream = MetricsStream("r", path)
    stream.poll(now=T0 + 60)
    track = stream.track
    assert track.started["ts"] == T0 + 60 and track.started_ts_read and track.first_started_ts == T0 + 60
    write(path, {"step": 1, "loss": 1.0})
    stream.poll(now=T0 + 600)
    assert track.started["ts"] == T0 + 60  # first read, not re-dated by later polls
    assert any("has no ts" in n and "first read" in n for n in track.notices("r"))
    write(path, {"ts": T0 + 700, "event": "started", "pid": 4243})
    stream.poll(now=T0 + 800)
    assert track.started["ts"] == T0 + 700 and not track.started_ts_read
    assert not any("has no ts" in n for n in track.notices("r"))


def test_old_saved_tracks_without_the_new_fields_still_load(path: Path):
    write(path, {"ts": T0, "step": 1, "loss": 1.0})
    stream = MetricsStream("r", path)
    stream.poll()
    saved = stream.to_dict()
    for name in ("bad_fields", "bad_field_samples", "started_ts_read"):
        del saved["track"][name]
    restored = SavedState(streams={"r": saved}).stream("r", path)
    assert restored.position.offset == stream.position.offset and restored.track.bad_fields == 0


# ---------------------------------------------------------------- system calls a tick

def _counting_open(monkeypatch) -> list[str]:
    opened: list[str] = []
    real_open = os.open

    def counted(target, flags, *args):
        opened.append(str(target))
        return real_open(target, flags, *args)

    monkeypatch.setattr(metrics.os, "open", counted)
    return opened


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_growing_file_is_opened_once_and_a_quiet_one_not_held_open(path: Path, monkeypatch):
    opened = _counting_open(monkeypatch)
    stream = MetricsStream("r", path)
    for step in range(5):
        write(path, {"step": step, "loss": 1.0})
        assert stream.poll().lines == 1
    assert opened == [str(path)] and stream.track.last_step == 4  # growing: one open for all
    held = _open_fds()
    assert stream.poll().lines == 0 and _open_fds() == held - 1  # quiet: released, not reopened
    assert stream.poll().lines == 0 and len(opened) == 1
    write(path, {"step": 5, "loss": 1.0})
    assert stream.poll().lines == 1 and len(opened) == 2 and stream.track.last_step == 5
    stream.close()
    assert _open_fds() == held - 1


def test_the_kept_descriptor_never_reads_a_replaced_or_deleted_file(path: Path):
    write(path, *({"step": i} for i in range(3)))
    stream = MetricsStream("r", path)
    stream.poll()
    held = _open_fds()
    for round_ in range(5):  # each replacement closes the descriptor of the file it replaced
        replacement = path.with_name("new.jsonl")
        write(replacement, *({"step": 100 * round_ + i} for i in range(2)))
        os.replace(replacement, path)
        result = stream.poll()
        assert result.reset_reason == "replaced" and stream.track.last_step == 100 * round_ + 1
        assert _open_fds() == held
    path.unlink()
    assert stream.poll().missing and _open_fds() == held - 1  # a deleted file's space is not held
    stream.close()


def test_a_quiet_file_rewritten_in_place_is_noticed_when_it_changes(path: Path):
    write(path, *({"ts": T0 + i, "step": i} for i in range(5)))
    stream = MetricsStream("r", path)
    stream.poll()
    size = path.stat().st_size
    with open(path, "r+b") as handle:  # same size and inode, other content: the mtime moved
        handle.write(b'{"ts": 1764489700.0, "step": 90}\n'.ljust(size, b" "))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    result = stream.poll()
    assert result.reset and result.reset_reason == "rewritten"


def test_a_growing_file_costs_one_read_a_poll_and_a_rewrite_is_still_seen(path: Path, monkeypatch):
    write(path, *({"ts": T0 + i, "step": i} for i in range(50)))
    stream = MetricsStream("r", path)
    stream.poll()
    reads: list[int] = []
    real_pread = os.pread
    monkeypatch.setattr(metrics.os, "pread", lambda fd, n, at: reads.append(at) or real_pread(fd, n, at))
    for step in range(50, 55):
        write(path, {"ts": T0 + step, "step": step})
        assert stream.poll().lines == 1
    assert len(reads) == 5  # the new line and the bytes it must follow, in one read
    with open(path, "r+b") as handle:  # the same inode grown past the offset with other bytes
        handle.write(b"".join(json.dumps({"ts": T0 + 900 + i, "step": 900 + i}).encode() + b"\n" for i in range(80)))
    result = stream.poll()
    assert result.reset and result.reset_reason == "rewritten" and stream.track.last_step == 979


def test_a_position_saved_without_a_tail_still_notices_a_rewrite(path: Path, tmp_path: Path):
    write(path, *({"ts": T0 + i, "step": i} for i in range(5)))
    stream = MetricsStream("r", path)
    stream.poll()
    state = tmp_path / "state.json"
    save_state(state, [stream])
    saved = json.loads(state.read_text())
    text = json.dumps(saved).replace(f'"tail": "{stream.position.tail.hex()}"', '"tail": ""')
    assert text != json.dumps(saved)
    state.write_text(text)  # as an older cockpit saved it
    restored = load_state(state).stream("r", path)
    assert restored.position.tail == b"" and restored.position.offset == stream.position.offset
    with open(path, "r+b") as handle:
        handle.write(b"".join(json.dumps({"ts": T0 + 500 + i, "step": 50 + i}).encode() + b"\n" for i in range(20)))
    result = restored.poll()
    assert result.reset and result.reset_reason == "rewritten" and restored.track.last_step == 69


def test_a_stream_left_open_at_exit_closes_quietly(path: Path, monkeypatch):
    """A stream still holding its descriptor when the interpreter shuts down (a script that never
    called Engine.close) is released without an "Exception ignored in __del__" on stderr: by then
    the interpreter may have set the module's names, `os` among them, to None."""
    write(path, {"step": 1, "loss": 1.0})
    stream = MetricsStream("r", path)
    assert stream.poll().lines == 1
    fd = stream._fd
    assert fd is not None
    monkeypatch.setattr(metrics, "os", None)  # what the shutdown leaves
    stream.__del__()
    monkeypatch.undo()
    with pytest.raises(OSError):
        os.fstat(fd)  # released
    assert stream._fd is None
