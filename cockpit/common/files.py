"""Writing the cockpit's own files so that a crash, a full disk or a second cockpit never leaves
half of one: `write_atomic` replaces a whole file, `append_line` adds complete lines to one.

Every write goes through `os.write` in a loop (a short write is finished, never mistaken for the
whole), and is fsynced before it counts.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from cockpit.common.layout import FILE_MODE


def write_atomic(path: str | Path, data: bytes | str, *, mode: int = FILE_MODE, replace: bool = True) -> None:
    """Replace `path` with `data` (text is written as UTF-8) all at once: the new content goes to a
    temporary file in the same folder (so the rename never crosses filesystems), is fsynced, then
    renamed over `path`; the folder is fsynced after, so the rename itself survives a power cut.

    A reader sees the old file or the new one, never a mix. On any failure the temporary file is
    removed and `path` is left as it was; the OSError is raised for the caller to word.
    The temporary name holds the process and thread, so two writers never share one. It is built
    as plain text, not through pathlib: pathlib interns every name it parses, and a name interned
    anew at every save churns the interpreter's table of interned strings until it doubles.

    `replace=False`: never over a file that is there, even one made a moment ago (FileExistsError):
    the complete file is linked into place instead of renamed.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    folder, name = os.path.split(os.fspath(path))
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(temporary, path)
        else:
            try:
                os.link(temporary, path)  # fails if `path` exists, where a rename would replace it
            except FileExistsError:
                raise
            except OSError:  # a filesystem without hard links: create it exclusively and write it
                _write_new(path, data, mode)
            _unlink_quietly(temporary)
    except BaseException:
        _unlink_quietly(temporary)
        raise
    _fsync_folder(path.parent)


def append_line(path: str | Path, data: bytes, *, mode: int = FILE_MODE) -> None:
    """Append complete lines (`data` ends with a newline) to `path` in one O_APPEND write, fsynced.

    A line torn by a writer that died mid-line is ended first, so these lines stay whole; on a
    failure the file is cut back to what it held before, so it holds all of `data` or none of it.
    """
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, mode)  # read: the last byte
    try:
        append_to(fd, data, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def append_to(fd: int, data: bytes, size: int) -> None:
    """`append_line` on a file already open for reading and appending (and locked, where writers share it):
    `size` is its size when it was looked at, before `data` was composed."""
    if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
        data = b"\n" + data  # a crash tore the last line: end it so these lines stay whole
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except OSError:
        try:
            os.ftruncate(fd, size)  # leave what was already written exactly as it was
        except OSError:
            pass
        raise


def _write_new(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(path)  # ours, made just now: never leave half of it
        raise
    os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse a folder fsync; the rename already happened
        pass
    finally:
        os.close(fd)


def _unlink_quietly(path: str | Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
