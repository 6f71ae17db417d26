"""Where notifications go and what is sent. The channels (apprise URLs, which hold tokens and
passwords) are the user's: `COCKPIT_NOTIFY`, else `~/.config/cockpit/notify.toml` (its `urls`,
or an apprise config file it names); `campaign.toml`, shared and often committed, only says what
to send (`[notify] on`, `min_interval_minutes`) and where the heartbeat goes."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cockpit.common.text import escape_control
from cockpit.plan.campaign import Campaign, NotifySettings

ENV_URLS = "COCKPIT_NOTIFY"
ENV_HEARTBEAT = "COCKPIT_HEARTBEAT_URL"
CONFIG_FILE = "notify.toml"
CONFIG_KEYS = ("urls", "config", "heartbeat_url")


def user_config_path() -> Path:
    """~/.config/cockpit/notify.toml on Linux (platformdirs' user config folder)."""
    import platformdirs

    return platformdirs.user_config_path("cockpit") / CONFIG_FILE


@dataclass(frozen=True)
class Channel:
    """One apprise URL: the secret URL to send with, and the masked one to show and record."""

    url: str = field(repr=False)
    shown: str
    problem: str | None = None  # apprise does not know the URL: every send to it fails with this

    def __str__(self) -> str:
        return self.shown


@dataclass(frozen=True)
class NotifyConfig:
    """The channels, what to send on them, and the heartbeat."""

    channels: tuple[Channel, ...] = ()
    kinds: frozenset[str] = frozenset({"alert", "stop"})
    min_interval_seconds: float = 0.0
    heartbeat_url: str | None = field(default=None, repr=False)
    heartbeat_shown: str | None = None
    heartbeat_seconds: float = 300.0
    source: str | None = None  # where the channels came from: COCKPIT_NOTIFY, or the file
    problems: tuple[str, ...] = ()  # what could not be read, shown as notices

    @property
    def active(self) -> bool:
        """Anything to do: a channel to send on, or a heartbeat to keep."""
        return bool(self.channels or self.heartbeat_url)

    def to_json(self) -> dict[str, Any]:
        """`status --json`'s `notify` object (docs/json-output.md); never a secret."""
        return {
            "channels": [c.shown for c in self.channels],
            "invalid_channels": [c.shown for c in self.channels if c.problem],
            "source": self.source,
            "on": sorted(self.kinds),
            "min_interval_minutes": round(self.min_interval_seconds / 60, 3),
            "heartbeat_url": self.heartbeat_shown,
            "heartbeat_minutes": round(self.heartbeat_seconds / 60, 3),
            "problems": list(self.problems),
        }


# ---------------------------------------------------------------- masking


def _rough_mask(url: str) -> str:
    """A URL apprise does not know, shown without anything that may be a secret: the scheme and
    host only (a password, a path token and the query are left out)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return (url.split("://", 1)[0] + "://…") if "://" in url else "…"
    user = "****@" if parts.username or parts.password else ""
    rest = "/…" if (parts.path.strip("/") or parts.query) else ""
    return f"{parts.scheme}://{user}{host}{port}{rest}"


def _hide(part: str) -> str:
    """A part that may be a token (an ntfy topic, a webhook id): its first and last characters."""
    if len(part) < 6 or "..." in part or "*" in part or "…" in part:
        return part
    return f"{part[0]}…{part[-1]}"


def _looks_like_host(name: str) -> bool:
    return name == "localhost" or "." in name or ":" in name


def _apprise_shown(plugin: Any) -> str:
    """apprise's own privacy mask (each service knows which part of its URL is the secret),
    without the query of defaults it appends; then every long path part, and a "host" that is
    no host name (ntfy://my-topic), hidden too: some services' secret is their topic."""
    shown = plugin.url(privacy=True).split("?", 1)[0]
    scheme, sep, rest = shown.partition("://")
    if not sep:
        return shown
    authority, slash, path = rest.partition("/")
    user, at, host = authority.rpartition("@")
    name, colon, port = host.partition(":") if not host.startswith("[") else (host, "", "")
    if not _looks_like_host(name):
        name = _hide(name)
    segments = "/".join(_hide(segment) for segment in path.split("/")) if path else ""
    return f"{scheme}://{user}{at}{name}{colon}{port}{slash}{segments}"


def make_channel(url: str) -> Channel:
    """The channel for `url`, masked by apprise; a URL apprise cannot load is kept, with why."""
    url = url.strip()
    try:
        import apprise

        plugin = apprise.Apprise.instantiate(url, asset=asset())
    except Exception as error:  # apprise refuses some URLs by raising
        plugin, reason = None, f"{type(error).__name__}: {error}"
    else:
        reason = None
    if plugin is None:
        why = "apprise cannot load this URL (check its scheme and parts: https://github.com/caronc/apprise/wiki)"
        return Channel(url, _rough_mask(url), why if reason is None else f"{why}; {_mask_in(reason, url)}")
    return Channel(url, _apprise_shown(plugin))


def mask_url(url: str) -> str:
    return make_channel(url).shown if "://" in url else _rough_mask(url)


def _mask_in(text: str, *urls: str) -> str:
    """`text` with each of `urls` replaced by its masked form (an error message may quote one)."""
    for url in urls:
        if url and url in text:
            text = text.replace(url, _rough_mask(url))
    return text


def asset() -> Any:
    """apprise's settings for the cockpit: nothing kept on disk, messages as plain text."""
    import apprise

    return apprise.AppriseAsset(storage_mode="memory", body_format=apprise.NotifyFormat.TEXT)


# ---------------------------------------------------------------- loading


def _split_urls(text: str) -> list[str]:
    return [part for part in text.split() if part]


def _urls_of_apprise_config(path: Path) -> tuple[list[str], str | None]:
    """The URLs an apprise config file (TEXT or YAML) holds, or why it holds none."""
    import apprise

    if not path.is_file():
        return [], f"the apprise config file {path} does not exist"
    config = apprise.AppriseConfig(asset=asset())
    if not config.add(str(path)):
        return [], f"the apprise config file {path} could not be read"
    loaded = apprise.Apprise(asset=asset())
    loaded.add(config)
    servers = list(loaded)
    if not servers:
        return [], f"the apprise config file {path} names no URL apprise can load"
    return [plugin.url() for plugin in servers], None


def _read_user_file(path: Path) -> tuple[dict[str, Any], list[str]]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, []
    except tomllib.TOMLDecodeError as error:
        return {}, [f"{path}: not valid TOML ({error}); notifications from it are off until it is fixed"]
    except (OSError, UnicodeDecodeError) as error:
        return {}, [f"{path}: cannot be read ({getattr(error, 'strerror', None) or error}); notifications from it are off"]
    problems = []
    for key in data:
        if key not in CONFIG_KEYS:
            problems.append(f"{path}: '{key}' is not a key of notify.toml (keys: {', '.join(CONFIG_KEYS)}); it is ignored")
    urls = data.get("urls", [])
    if isinstance(urls, str):
        urls = _split_urls(urls)
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        problems.append(f'{path}: urls must be a list of apprise URLs, e.g. urls = ["ntfy://my-topic"]; it is ignored')
        urls = []
    data["urls"] = urls
    for key in ("config", "heartbeat_url"):
        if key in data and not (isinstance(data[key], str) and data[key].strip()):
            problems.append(f"{path}: {key} must be a non-empty string; it is ignored")
            data.pop(key)
    return data, problems


def load_config(
    campaign: Campaign | NotifySettings | None,
    *,
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> NotifyConfig:
    """The notification settings for `campaign`: channels from COCKPIT_NOTIFY (space-separated
    apprise URLs; set but empty turns them off), else from `config_path` (default
    ~/.config/cockpit/notify.toml). Never raises for what the user wrote: problems are listed."""
    environ = os.environ if environ is None else environ
    settings = campaign.model.notify if isinstance(campaign, Campaign) else (campaign or NotifySettings())
    problems: list[str] = []
    urls: list[str] = []
    source: str | None = None
    user: dict[str, Any] = {}
    if ENV_URLS in environ:
        urls, source = _split_urls(environ[ENV_URLS]), ENV_URLS
    else:
        path = config_path if config_path is not None else user_config_path()
        user, problems = _read_user_file(path)
        urls = list(user.get("urls", []))
        if user.get("config"):
            found, problem = _urls_of_apprise_config(Path(os.path.expanduser(user["config"])))
            urls += found
            if problem:
                problems.append(f"{path}: {problem}")
        source = str(path) if (urls or user) else None
    channels = []
    for url in dict.fromkeys(urls):  # a URL given twice is one channel
        channel = make_channel(url)
        channels.append(channel)
        if channel.problem:
            problems.append(f"notification channel {channel.shown}: {channel.problem}")
    heartbeat = environ.get(ENV_HEARTBEAT) or settings.heartbeat_url or user.get("heartbeat_url")
    heartbeat = heartbeat.strip() if isinstance(heartbeat, str) and heartbeat.strip() else None
    return NotifyConfig(
        channels=tuple(channels),
        kinds=frozenset(k.value for k in settings.on),
        min_interval_seconds=float(settings.min_interval_minutes) * 60.0,
        heartbeat_url=heartbeat,
        heartbeat_shown=_rough_mask(heartbeat) if heartbeat else None,
        heartbeat_seconds=float(settings.heartbeat_minutes) * 60.0,
        source=source,
        problems=tuple(escape_control(p) for p in problems),
    )
