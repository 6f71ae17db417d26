"""Cockpit themes: TOML files of `textual.theme.Theme` fields, shipped in `themes/` and added by
the user in `~/.config/cockpit/themes/`. A file that does not make a valid theme is reported
(and skipped), never fatal: the cockpit falls back to its default theme and says why."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.theme import Theme

DEFAULT_THEME = "dark"
MONOCHROME_THEME = "mono"  # chosen when NO_COLOR is set and no theme was asked for

COLOR_FIELDS = (
    "primary", "secondary", "warning", "error", "success", "accent",
    "foreground", "background", "surface", "panel", "boost",
)
OTHER_FIELDS = {"name": str, "description": str, "dark": bool, "ansi": bool, "luminosity_spread": float, "text_alpha": float}
TEXT_STYLES = {"none", "bold", "dim", "italic", "underline", "reverse", "strike", "blink", "not"}
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
PERCENT = re.compile(r"^\d{1,3}%$")


class ThemeFileError(Exception):
    """A theme file that does not make a theme; the message names the file and the key."""


@dataclass(frozen=True)
class ThemeProblem:
    path: Path
    name: str  # the name the file meant to define (its `name`, else its stem)
    message: str


@dataclass
class ThemeCatalog:
    """The themes found, in cycling order (shipped first, then the user's), and the files refused."""

    themes: dict[str, Theme] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)
    problems: list[ThemeProblem] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return list(self.themes)

    def problem(self, name: str) -> ThemeProblem | None:
        return next((p for p in self.problems if p.name == name), None)


def shipped_theme_dir() -> Path | None:
    """`themes/` inside the installed package (wheel), else at the top of the source tree."""
    package = Path(__file__).resolve().parent.parent  # .../cockpit
    for candidate in (package / "themes", package.parent / "themes"):
        if candidate.is_dir() and any(candidate.glob("*.toml")):
            return candidate
    return None


def user_theme_dir() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "cockpit" / "themes"


def _check_color(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ThemeFileError(f"{where} must be a colour string such as \"#1e90ff\" or \"ansi_blue\" (got {value!r})")
    try:
        Color.parse(value)
    except ColorParseError:
        raise ThemeFileError(f"{where} = {value!r} is not a colour; use \"#rrggbb\", a colour name or \"ansi_<name>\"") from None
    return value


def _check_variable(key: str, value: Any, where: str) -> str:
    """A CSS variable's value: a colour (optionally with a percentage), a text style, or `auto N%`."""
    if not isinstance(value, str) or not value.strip():
        raise ThemeFileError(f"{where} must be a non-empty string (got {value!r})")
    tokens = value.split()
    if all(token in TEXT_STYLES for token in tokens):
        return value
    head, rest = tokens[0], tokens[1:]
    if len(rest) > 1 or (rest and not PERCENT.match(rest[0])):
        raise ThemeFileError(f"{where} = {value!r}: write a colour, a colour and a percentage (\"#ff0000 50%\"), or text styles")
    if head != "auto":
        _check_color(head, where)
    return value


def theme_from_mapping(data: dict[str, Any], origin: str, default_name: str) -> tuple[Theme, str]:
    """Build a Theme from a TOML table; raise ThemeFileError naming `origin` and the key."""
    allowed = set(COLOR_FIELDS) | set(OTHER_FIELDS) | {"variables"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ThemeFileError(f"{origin}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} (a theme has {', '.join(sorted(allowed))})")
    name = data.get("name", default_name)
    if not isinstance(name, str) or not NAME.match(name):
        raise ThemeFileError(f"{origin}: name = {name!r} must be letters, digits, '-', '_' or '.'")
    if "primary" not in data:
        raise ThemeFileError(f"{origin}: primary is required (the theme's main colour)")
    fields: dict[str, Any] = {"name": name}
    for key in COLOR_FIELDS:
        if key in data:
            fields[key] = _check_color(data[key], f"{origin}: {key}")
    for key, kind in OTHER_FIELDS.items():
        if key in ("name", "description") or key not in data:
            continue
        value = data[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind):
            raise ThemeFileError(f"{origin}: {key} must be {'true or false' if kind is bool else 'a number'} (got {value!r})")
        fields[key] = value
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ThemeFileError(f"{origin}: description must be a string")
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ThemeFileError(f"{origin}: [variables] must be a table of CSS variable names to values")
    fields["variables"] = {
        str(key): _check_variable(str(key), value, f"{origin}: variables.{key}") for key, value in variables.items()
    }
    if fields.get("ansi"):
        # Textual's ANSI palette leaves these to the theme; its widgets' CSS refers to them.
        dark = fields.get("dark", True)
        fields["variables"].setdefault("ansi-background", "ansi_black" if dark else "ansi_white")
        fields["variables"].setdefault("ansi-foreground", "ansi_white" if dark else "ansi_black")
    theme = Theme(**fields)
    try:
        theme.to_color_system().generate()  # the colours must also blend into Textual's palette
    except Exception as error:  # Textual's own message is the most precise one we can give
        raise ThemeFileError(f"{origin}: the colours do not make a palette ({error})") from None
    return theme, description


def load_theme_file(path: Path) -> tuple[Theme, str]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ThemeFileError(f"{path}: cannot read it ({error.strerror})") from None
    except UnicodeDecodeError:
        raise ThemeFileError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise ThemeFileError(f"{path}: not valid TOML ({error})") from None
    return theme_from_mapping(data, str(path), path.stem)


def _name_in(path: Path) -> str:
    """The name a broken file meant to define, to match it with `--theme NAME`."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        name = data.get("name")
        if isinstance(name, str) and name:
            return name
    except Exception:  # the file is broken; its stem is the best guess
        pass
    return path.stem


def discover_themes(directories: list[Path | None] | None = None) -> ThemeCatalog:
    """Every `*.toml` theme in the shipped folder, then the user's (a user theme may replace a shipped one)."""
    if directories is None:
        directories = [shipped_theme_dir(), user_theme_dir()]
    catalog = ThemeCatalog()
    for directory in directories:
        if directory is None or not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.toml")):
            try:
                theme, description = load_theme_file(path)
            except ThemeFileError as error:
                catalog.problems.append(ThemeProblem(path, _name_in(path), str(error)))
                continue
            catalog.themes[theme.name] = theme
            catalog.descriptions[theme.name] = description
    return catalog


def default_theme_name(environ: dict[str, str] | None = None) -> str:
    """The dark theme, or the monochrome one when the environment asks for no colour."""
    environ = os.environ if environ is None else environ
    return MONOCHROME_THEME if environ.get("NO_COLOR") else DEFAULT_THEME  # no-color.org: set and not empty
