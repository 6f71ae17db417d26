"""`cockpit status DIR --textfile PATH`: the exporter's metrics written as a `.prom` file for
node_exporter's textfile collector, atomically (a temporary file beside it, then a rename), so
the collector never reads half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from cockpit.errors import Finding, UsageError
from cockpit.export.metrics import LabelSets, exposition
from cockpit.live.snapshot import Snapshot


def check_textfile_path(path: str | os.PathLike[str]) -> Path:
    target = Path(path)
    if target.suffix != ".prom":
        # node_exporter reads only *.prom files: another name would be written and never collected
        raise UsageError(f"--textfile wants a file name ending in .prom (node_exporter reads only those), got {str(target)!r}")
    if target.is_dir():
        raise UsageError(f"--textfile {str(target)!r} is a folder; name a file in it, e.g. {target / 'cockpit.prom'}")
    return target


def write_textfile(path: str | os.PathLike[str], snapshot: Snapshot, labels: LabelSets) -> Path:
    target = check_textfile_path(path)
    body = exposition(snapshot, labels)
    folder = target.parent
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as error:
        raise Finding(f"cannot write {target}: {error.strerror or error} (the folder {folder} must exist and be writable)") from None
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)  # node_exporter often runs as another user
        os.replace(temporary, target)
    except OSError as error:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise Finding(f"cannot write {target}: {error.strerror or error}") from None
    return target
