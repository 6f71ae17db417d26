"""Which other lots to show: `--lot NAME=URL` on the command line, and `[[lot_view]]` entries
(`name`, `url`) in ~/.config/cockpit/lots.toml. A name given on the command line replaces the
file's entry of the same name."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cockpit.errors import Finding, UsageError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
CONFIG_FILE = "lots.toml"
SNAPSHOT_PATH = "/snapshot.json"


@dataclass(frozen=True)
class LotSource:
    """Another lot: the name it is shown under and its exporter's address (through a tunnel)."""

    name: str
    url: str  # the exporter's base URL, e.g. http://127.0.0.1:19464

    @property
    def snapshot_url(self) -> str:
        return self.url + SNAPSHOT_PATH


def default_config_path() -> Path:
    import platformdirs

    return platformdirs.user_config_path("cockpit") / CONFIG_FILE


def _check(name: object, url: object, where: str, error: type[Exception]) -> LotSource:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise error(f"{where}: the lot's name {name!r} must be 1 to 32 letters, digits, '.', '_' or '-' (e.g. b)")
    if not isinstance(url, str):
        raise error(f"{where}: lot {name}'s url must be a text like http://127.0.0.1:19464")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise error(
            f"{where}: lot {name}'s url {url!r} must be http://HOST:PORT, the other lot's `--metrics` "
            "address as seen from here (e.g. through `ssh -L 19464:127.0.0.1:9464 other-box`)"
        )
    try:
        parts.port
    except ValueError:
        raise error(f"{where}: lot {name}'s url {url!r} has a bad port") from None
    base = url.strip().rstrip("/")
    if base.endswith(SNAPSHOT_PATH):
        base = base[: -len(SNAPSHOT_PATH)]
    return LotSource(name, base)


def parse_lot_flag(text: str) -> LotSource:
    """`--lot NAME=URL`."""
    name, sep, url = text.partition("=")
    if not sep:
        raise UsageError(f"--lot wants NAME=URL, e.g. --lot b=http://127.0.0.1:19464 (got {text!r})")
    return _check(name.strip(), url, "--lot", UsageError)


def read_config(path: Path) -> list[LotSource]:
    """The `[[lot_view]]` entries of lots.toml (none when the file is absent)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as error:
        raise Finding(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise Finding(f"{path} is not valid TOML ({error}); fix it or remove it") from None
    entries = data.get("lot_view", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise Finding(f"{path}: lot_view must be a list of tables, each [[lot_view]] with name and url")
    sources = []
    for number, entry in enumerate(entries, 1):
        unknown = sorted(set(entry) - {"name", "url"})
        if unknown:
            raise Finding(f"{path}: [[lot_view]] number {number} has unknown key(s) {', '.join(unknown)}; it takes name and url")
        sources.append(_check(entry.get("name"), entry.get("url"), f"{path}, [[lot_view]] number {number}", Finding))
    return sources


def lot_sources(flags: Sequence[str] | None, config_path: Path | None = None) -> list[LotSource]:
    """The other lots to show: the file's entries, then the flags' (a flag replaces a same-named entry)."""
    given = [parse_lot_flag(text) for text in flags or ()]
    names = [source.name for source in given]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UsageError(f"--lot names each lot once; {', '.join(repeated)} is given more than once")
    configured = read_config(config_path if config_path is not None else default_config_path())
    chosen = {source.name: source for source in configured}
    chosen.update({source.name: source for source in given})
    return list(chosen.values())
