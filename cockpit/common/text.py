"""Strings from a file, a run or another person, made safe to show: control characters written as
escapes (`\\x1b`), so a metric name or a note can neither drive the terminal nor hide in report.md.

A terminal obeys the bytes it is sent: ESC and the 8-bit C1 codes start sequences that retitle
the window (OSC 0), clear the screen (CSI 2J) or write the clipboard through tmux (OSC 52), and
the bidirectional overrides reorder what is read. Every text view passes data strings through
`escape_control`; JSON outputs keep the exact strings (`json_safe` only spells the few that JSON
leaves raw as `\\u` escapes, which parse back to the same string)."""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls (U+0080–U+009F: U+009B is the 8-bit CSI, U+009D the 8-bit OSC);
# the Arabic letter mark, zero-width space, the left-to-right and right-to-left marks, the line and
# paragraph separators, the bidi embeddings and overrides (U+202A–U+202E), the word joiner, the
# bidi isolates (U+2066–U+2069) and the byte-order mark: invisible, or they move what is read.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff]")
_UNSAFE_KEEPING_LINES = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff]")
# What `json.dumps(..., ensure_ascii=False)` leaves raw: it escapes C0 controls itself.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff]")

_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_control(text: object, *, keep_newlines: bool = False) -> str:
    """`text` (made a str) with every control character written as an escape: ESC as `\\x1b`,
    U+009B as `\\x9b`, U+202E as `\\u202e`; newline and tab as `\\n`, `\\t` (a data string is one
    line), unless `keep_newlines` (a message of several lines of our own). A backslash stays."""
    if type(text) is not str:
        text = "" if text is None else str(text)
    if text.isprintable():  # the usual case: every character escaped below is unprintable to Python
        return text
    return (_UNSAFE_KEEPING_LINES if keep_newlines else _UNSAFE).sub(_escape, text)


def json_safe(dumped: str) -> str:
    """Serialized JSON (`ensure_ascii=False`) with DEL, C1 controls and the invisible characters
    above written as `\\u` escapes: the same JSON value, parsed, and nothing a terminal obeys.
    Only strings can hold these characters in JSON text, and `\\uXXXX` is valid in any string."""
    if dumped.isascii() and "\x7f" not in dumped:
        return dumped
    return _JSON_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", dumped)


__all__ = ["escape_control", "json_safe"]
