"""Campaign texts already validated, kept in `.cockpit/validated/` so that the commands that run
every few seconds (`status`, `watch`, the TUI) skip TOML parsing and pydantic.

An entry is named by the SHA-256 of the campaign text *and* of the code that validated it (this
package's version, the campaign and schema modules, the catalogue), so editing `campaign.toml`,
upgrading the cockpit or changing the catalogue simply misses, and the text is validated again.
It is a cache and nothing else: an entry that is missing, unreadable, foreign, corrupt or not
the user's own is ignored; one that cannot be written is not written. Either way the answer is
the one full validation gives.

Entries are pickles read by an unpickler that can build nothing but the campaign's own tables,
enums, dates and decimals, from a file owned by this user in a folder only they can write to.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cockpit.campaign import Campaign, CampaignModel

FOLDER = "validated"
FORMAT = 1
KEEP = 8  # entries kept: the current campaign text, the frozen plan, a few recent edits
MAX_BYTES = 8 << 20  # an entry larger than this is not ours
_SOURCES = ("campaign.py", "campaign_schema.py", "campaign_cache.py", "data/catalog.json")

_ALLOWED = {
    "datetime": {"datetime", "date", "timedelta", "timezone"},
    "decimal": {"Decimal"},
}


def _code_digest() -> bytes:
    """What the validation depends on besides the text: this package's version and sources."""
    from cockpit import __version__

    digest = hashlib.sha256(f"{__version__}/{FORMAT}".encode())
    package = Path(__file__).resolve().parent
    for name in _SOURCES:
        try:
            digest.update((package / name).read_bytes())
        except OSError:
            digest.update(f"missing:{name}".encode())
    return digest.digest()


_CODE: bytes | None = None


def _key(text: str) -> str:
    global _CODE
    if _CODE is None:
        _CODE = _code_digest()
    return hashlib.sha256(_CODE + text.encode("utf-8")).hexdigest()


def _folder(directory: Path) -> Path:
    from cockpit.runlog import STATE_DIR

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


def lookup(directory: Path, text: str) -> tuple[CampaignModel, tuple[str, ...]] | None:
    """The validated model and warnings for this text, if this code kept them; else None."""
    from cockpit.campaign import CampaignModel

    folder = _folder(directory)
    path = folder / _key(text)
    try:
        status = folder.lstat()
        if not stat.S_ISDIR(status.st_mode) or not _private(status):
            return None  # a link, or a folder others can write to: not trusted
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
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
    if not (isinstance(entry, tuple) and len(entry) == 3 and entry[0] == FORMAT):
        return None
    _, model, warnings = entry
    if not isinstance(model, CampaignModel) or not isinstance(warnings, tuple):
        return None
    if not all(isinstance(w, str) for w in warnings):
        return None
    return model, warnings


def keep(campaign: Campaign) -> bool:
    """Keep a validated campaign for its text; False (and nothing written) when that fails."""
    from cockpit.metrics import STATE_DIR_MODE, STATE_FILE_MODE

    folder = _folder(campaign.directory)
    path = folder / _key(campaign.text)
    try:
        data = pickle.dumps((FORMAT, campaign.model, tuple(campaign.warnings)), protocol=5)
    except (pickle.PicklingError, TypeError, RecursionError, AttributeError):
        return False
    if len(data) > MAX_BYTES:
        return False
    temporary = folder / f".{path.name}.{os.getpid()}.tmp"
    try:
        folder.mkdir(mode=STATE_DIR_MODE, parents=True, exist_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, STATE_FILE_MODE)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        try:
            temporary.unlink()
        except OSError:
            pass
        return False
    _prune(folder)
    return True


def _prune(folder: Path) -> None:
    """Keep the KEEP most recently written entries."""
    try:
        entries = sorted(
            (entry for entry in folder.iterdir() if len(entry.name) == 64 and not entry.name.startswith(".")),
            key=lambda entry: entry.stat().st_mtime_ns,
            reverse=True,
        )
        for old in entries[KEEP:]:
            old.unlink()
    except OSError:
        pass
