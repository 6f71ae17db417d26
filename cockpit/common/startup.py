"""A command's start, and the garbage collector during it.

A `cockpit` process starts by importing its modules and building the campaign's validator: tens
of thousands of objects (modules, classes, functions, pydantic's schema) that live as long as the
process. Python's cyclic garbage collector passes over them again and again while they are being
made and finds nothing to free: about 30 ms of a 0.5 s `cockpit status` on a slow box. So the
process's entry point (`cockpit.cli.entry`, what the `cockpit` command and `python -m cockpit`
run) pauses collection, and `settled()`, called once the campaign is loaded, moves everything
alive at that moment out of the collector's sight (`gc.freeze`, the use the standard library
documents) and resumes collection for the rest of the process: a long-running cockpit collects as
usual, and never walks its start-up objects again. A command that loads no campaign resumes when
`entry` returns.

Nothing here acts unless `entry` paused collection: code that calls `cockpit.cli.main` or loads a
campaign in-process (the tests, a notebook) keeps its collector as it was.
"""

from __future__ import annotations

import gc

_paused = False


def pause_collection() -> None:
    """Pause the cyclic garbage collector for the process's start (the process entry only)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def settled() -> None:
    """The start is over: what exists now lives as long as the process; collect from here on.
    A no-op unless `pause_collection` paused the collector, and after the first call."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


def resume_collection() -> None:
    """Resume collection without freezing (the process entry's last word, whatever happened)."""
    global _paused
    if _paused:
        _paused = False
        gc.enable()
