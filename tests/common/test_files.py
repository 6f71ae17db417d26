"""common/files.py: a whole file replaced at once or not at all; lines appended whole or not at all."""

from __future__ import annotations

import errno
import os

import pytest

from cockpit.common import files
from cockpit.common.files import append_line, write_atomic


def test_write_atomic_replaces_the_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "state.json"
    write_atomic(path, b"old")
    write_atomic(path, "new ✓")
    assert path.read_text(encoding="utf-8") == "new ✓"
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_write_the_disk_refuses_leaves_the_old_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    write_atomic(path, b"old")
    real_write = os.write

    def full_disk(fd, data):
        real_write(fd, bytes(data[:2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "write", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, b"new content")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_replace_false_never_writes_over_a_file_that_is_there(tmp_path):
    path = tmp_path / "campaign.toml"
    write_atomic(path, "first", replace=False)
    with pytest.raises(FileExistsError):
        write_atomic(path, "second", replace=False)
    assert path.read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["campaign.toml"]


def test_append_line_ends_a_torn_line_and_keeps_all_or_nothing(tmp_path, monkeypatch):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": ')  # a writer died mid-line
    append_line(path, b'{"c": 3}\n')
    assert path.read_bytes() == b'{"a": 1}\n{"b": \n{"c": 3}\n'
    before = path.read_bytes()
    real_write = os.write

    def full_disk(fd, data):
        real_write(fd, bytes(data[:3]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "write", full_disk)
    with pytest.raises(OSError):
        append_line(path, b'{"d": 4}\n')
    monkeypatch.undo()
    assert path.read_bytes() == before


def test_replacing_a_file_again_and_again_interns_no_new_names(tmp_path, monkeypatch):
    """The cockpit saves its state every few seconds for weeks. A temporary name built through
    pathlib is interned by the interpreter (pathlib interns every part it parses), and one that dies
    between saves is interned anew each time: the interned table churns until it doubles (~0.5 MB at
    tick ~25,000 of bench/memory_30day.py, read there as growth). The temporary name is plain text."""
    import sys

    path = tmp_path / "state.json"
    write_atomic(path, b"first")
    interned: list[str] = []
    real = sys.intern
    monkeypatch.setattr(sys, "intern", lambda text: interned.append(text) or real(text))
    for n in range(5):
        write_atomic(path, f"save {n}")
    assert path.read_text() == "save 4"
    assert [name for name in interned if name.endswith(".tmp")] == []
