"""Campaign texts already validated, kept in `.cockpit/validated/` so that the commands that run
every few seconds (`status`, `watch`, the TUI) skip TOML parsing and pydantic.

An entry is named by the SHA-256 of the campaign text *and* of what validated it (this
package's version and the sources of its campaign, schema and catalogue modules, the catalogue
data, the Python version, the installed pydantic and pydantic-core), and holds that name, so
editing `campaign.toml`, upgrading anything involved or renaming an entry simply misses, and
the text is validated again. It is a cache and nothing else: an entry that is missing,
unreadable, foreign, corrupt or not the user's own is ignored; one that cannot be written is not
written. Either way the answer is the one full validation gives.

Entries are pickles read by an unpickler that can build nothing but the campaign's own tables,
enums, dates and decimals, from a file owned by this user, opened without following links, in a
folder that is not a link and that only they can write to.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import io
import os
import pickle
import stat
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.runlog import DIR_MODE, FILE_MODE, STATE_DIR, state_dir

if TYPE_CHECKING:
    from cockpit.campaign import Campaign, CampaignModel

FOLDER = "validated"
FORMAT = 2
KEEP = 8  # entries kept: the current campaign text, the frozen plan, a few recent edits
MAX_BYTES = 8 << 20  # an entry larger than this is not ours
STALE_TEMPORARY_SECONDS = 600  # a temporary file this old was left by a process that died
_SOURCES = ("__init__.py", "campaign.py", "campaign_schema.py", "campaign_cache.py", "catalog.py", "data/catalog.json")
_VALIDATORS = ("pydantic", "pydantic_core")  # their installed files, by size and time

_ALLOWED = {
    "datetime": {"datetime", "date", "timedelta", "timezone"},
    "decimal": {"Decimal"},
}


def _code_digest() -> bytes | None:
    """What validation depends on besides the text; None when it cannot be told (no caching)."""
    digest = hashlib.sha256(f"{FORMAT}/{sys.version}".encode())
    package = Path(__file__).resolve().parent
    try:
        for name in _SOURCES:
            digest.update(name.encode() + b"\0" + (package / name).read_bytes())
        for name in _VALIDATORS:
            spec = importlib.machinery.PathFinder.find_spec(name)  # finds the package without importing it
            if spec is None or not spec.origin:
                return None
            info = os.stat(spec.origin)
            digest.update(f"{name}:{spec.origin}:{info.st_size}:{info.st_mtime_ns}".encode())
    except (OSError, ImportError, ValueError):
        return None
    return digest.digest()


_CODE: bytes | None = None
_CODE_KNOWN = False


def _key(text: str) -> str | None:
    global _CODE, _CODE_KNOWN
    if not _CODE_KNOWN:
        _CODE, _CODE_KNOWN = _code_digest(), True
    if _CODE is None:
        return None
    return hashlib.sha256(_CODE + text.encode("utf-8")).hexdigest()


def _folder(directory: Path) -> Path:
    return directory / STATE_DIR / FOLDER


class _TablesOnly(pickle.Unpickler):
    """Builds the campaign's dataclasses and enums, dates and decimals; refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "cockpit.campaign":
            from cockpit import campaign

            found = getattr(campaign, name, None)
            if isinstance(found, type) and found.__module__ == module:
                return found
        elif name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a campaign")


def _private(status: os.stat_result) -> bool:
    return status.st_uid == os.getuid() and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _open_folder(folder: Path) -> int | None:
    """A descriptor of the folder if it is a real folder of this user's that others cannot write."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if _private(os.fstat(fd)):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def lookup(directory: Path, text: str) -> tuple[CampaignModel, tuple[str, ...]] | None:
    """The validated model and warnings for this text, if this code kept them; else None."""
    from cockpit.campaign import CampaignModel

    key = _key(text)
    folder_fd = _open_folder(_folder(directory)) if key else None
    if folder_fd is None:
        return None
    try:
        fd = os.open(key, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder_fd)
    except OSError:
        return None
    finally:
        os.close(folder_fd)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or not _private(status) or status.st_size > MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        entry = _TablesOnly(io.BytesIO(data)).load()
    except Exception:  # a corrupt or foreign entry is a miss, whatever it raises
        return None
    if not (isinstance(entry, tuple) and len(entry) == 4 and entry[0] == FORMAT and entry[1] == key):
        return None  # another format, or an entry moved under another text's name
    _, _, model, warnings = entry
    if not isinstance(model, CampaignModel) or not isinstance(warnings, tuple):
        return None
    if not all(isinstance(w, str) for w in warnings):
        return None
    return model, warnings


def keep(campaign: Campaign) -> bool:
    """Keep a validated campaign for its text; False (and nothing written) when that fails."""
    key = _key(campaign.text)
    if key is None:
        return False
    try:
        data = pickle.dumps((FORMAT, key, campaign.model, tuple(campaign.warnings)), protocol=5)
    except (pickle.PicklingError, TypeError, RecursionError, AttributeError):
        return False
    if len(data) > MAX_BYTES:
        return False
    try:
        state_dir(campaign.directory)  # .cockpit/ as every writer creates it: owner and group only
        _folder(campaign.directory).mkdir(mode=DIR_MODE, exist_ok=True)
    except OSError:
        return False
    folder_fd = _open_folder(_folder(campaign.directory))
    if folder_fd is None:
        return False  # a folder that lookup would not trust: writing there would never be read
    temporary = f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     FILE_MODE, dir_fd=folder_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(temporary, key, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except OSError:
        try:
            os.unlink(temporary, dir_fd=folder_fd)
        except OSError:
            pass
        os.close(folder_fd)
        return False
    _prune(folder_fd)
    os.close(folder_fd)
    return True


def _prune(folder_fd: int) -> None:
    """Keep the KEEP most recently written entries; remove temporary files a dead process left."""
    try:
        entries: list[tuple[int, str]] = []
        now = time.time()
        for name in os.listdir(folder_fd):
            info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            if name.startswith(".") and name.endswith(".tmp"):
                if now - info.st_mtime > STALE_TEMPORARY_SECONDS:
                    os.unlink(name, dir_fd=folder_fd)
            elif len(name) == 64:
                entries.append((info.st_mtime_ns, name))
        for _, name in sorted(entries, reverse=True)[KEEP:]:
            os.unlink(name, dir_fd=folder_fd)
    except OSError:
        pass
