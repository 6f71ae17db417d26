"""The folders a rented box loses when the lot ends, and whether a deliverable depends on one:
lies in one, links into one, or names a path into one in a config file it carries."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

# Folders a rented box loses when the lot ends. COCKPIT_TEMP_ROOTS (paths joined by ':')
# replaces this list and $TMPDIR entirely, e.g. to add a scratch disk the provider wipes.
TEMP_ROOTS_ENV = "COCKPIT_TEMP_ROOTS"
DEFAULT_TEMP_ROOTS = ("/tmp", "/var/tmp", "/dev/shm", "/run/user")


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


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
        return next((r for r in self.roots if inside(self.campaign, r)), None)

    def root_of(self, real: Path) -> Path | None:
        """The temporary folder `real` (already resolved) is in, or None."""
        for root in self.roots:
            if inside(real, root):
                if inside(root, self.campaign) or not (inside(self.campaign, root) and inside(real, self.campaign)):
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
