"""The terminal the cockpit draws on, and the watchdog that notices it is gone.

When the SSH session drops and SIGHUP was ignored (nohup, a shell that does not pass it on), the
app would draw into nothing for the rest of the lot. A thread looks for the terminal's device
once a second; when it is gone the app is asked to leave, and if Textual's own shutdown blocks
on the dead terminal (its writer waits on output nobody reads) the process leaves after a grace
period. Nothing recorded is lost: each run-log event is one fsynced write, complete before the
screen confirmed it."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

TERMINAL_CHECK_SECONDS = 1.0  # the watchdog looks for the terminal this often (one stat)
EXIT_GRACE_SECONDS = 2.5  # an orderly exit without a terminal gets this long, then the process leaves


def terminal_path() -> str | None:
    """The path of the terminal the cockpit draws on (`/dev/pts/3`), when it has one."""
    for stream in (sys.__stdout__, sys.__stdin__):
        try:
            return os.ttyname(stream.fileno())
        except (AttributeError, OSError, ValueError):
            continue
    return None


def watch(gone: Callable[[], bool], left: threading.Event) -> None:
    """The watchdog's loop, on its own thread so that an event loop stuck writing to a dead
    terminal cannot silence it: `gone()` asks the app to leave and says whether the terminal is
    gone; `left` is set once the app is over (the watchdog stands down)."""
    while not left.wait(TERMINAL_CHECK_SECONDS):
        if gone():
            if not left.wait(EXIT_GRACE_SECONDS):
                os._exit(1)
            return


def start_watchdog(gone: Callable[[], bool], left: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=watch, args=(gone, left), name="cockpit-terminal-watchdog", daemon=True)
    thread.start()
    return thread
