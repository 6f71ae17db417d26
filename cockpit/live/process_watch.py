"""What the engine already knows about each run's process, kept across ticks so that asking again
costs next to nothing.

The engine asks every tick, for every run, whether the run's pid is still the process that
reported the run's start. Asking the process table for that costs about a tenth of a millisecond a
run here (psutil reads /proc/<pid>/stat twice), which for 50 runs is half the tick's budget. Two
facts make most of those questions answerable without it:

- a *final* answer stays true: once the run's own process has ended (or the pid is found to name
  another process), that process never comes back, so the same question gets the same answer;
- a *pidfd* (Linux ≥ 5.3) pins one process, not a number: while it does not poll readable, that
  very process is still running, and a pid reused meanwhile cannot be mistaken for it. One
  zero-timeout poll replaces the lookup.

Both stores are bounded; the pidfds of processes nobody asks about any more are closed once their
process ends, and all of them by `close()`. Within `one_look()` (the engine's check of all its
runs in a tick) one poll of every pidfd answers for all of them.
"""

from __future__ import annotations

import os
import select
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

Answer = TypeVar("Answer")

MAX_FINAL = 4096  # answers kept for (pid, start) pairs: runs × restarts of a campaign, with room
MAX_WATCHED = 1024  # pidfds held at once: one per running run's process, far below any fd limit


def has_ended(pidfd: int) -> bool:
    """Whether the process `pidfd` pins has exited (a zombie counts: it runs no more)."""
    poller = select.poll()  # poll, not select: an fd number above 1023 is fine
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


class ProcessWatch(Generic[Answer]):
    """Answers kept per question (a hashable key such as pid, start and tolerances)."""

    def __init__(self) -> None:
        self._final: dict[Hashable, Answer] = {}
        self._watched: dict[Hashable, tuple[int, Answer]] = {}
        self._poller = select.poll()  # every watched pidfd registered, for one_look()
        self._ended_now: set[int] | None = None  # within one_look(): the pidfds that polled readable

    @contextmanager
    def one_look(self) -> Iterator[None]:
        """Within: whether a watched process still runs is answered from one poll of all of them,
        taken on entering (a process that ends meanwhile is seen at the next look)."""
        self._ended_now = {fd for fd, _ in self._poller.poll(0)}
        try:
            yield
        finally:
            self._ended_now = None

    def final(self, key: Hashable) -> Answer | None:
        return self._final.get(key)

    def remember_final(self, key: Hashable, answer: Answer) -> None:
        if len(self._final) >= MAX_FINAL:
            self._final.pop(next(iter(self._final)))
        self._final[key] = answer

    def still_running(self, key: Hashable) -> tuple[bool | None, Answer | None]:
        """(True, the answer given when the watch began) while the watched process runs; (False,
        that answer) once it has ended (the watch is dropped); (None, None) if it is not watched."""
        watched = self._watched.get(key)
        if watched is None:
            return None, None
        pidfd, answer = watched
        if not (has_ended(pidfd) if self._ended_now is None else pidfd in self._ended_now):
            return True, answer
        self._drop(key)
        return False, answer

    def watch(self, key: Hashable, pidfd: int, answer: Answer) -> None:
        """Keep `pidfd` (now owned here) as the evidence that `answer` still holds."""
        if key in self._watched:
            self._drop(key)
        if len(self._watched) >= MAX_WATCHED:
            # Processes of runs restarted under a new start are asked about no more: drop the
            # ended ones first, then the oldest (its process is simply looked up again if asked).
            for old in [k for k, (fd, _) in self._watched.items() if has_ended(fd)]:
                self._drop(old)
            if len(self._watched) >= MAX_WATCHED:
                self._drop(next(iter(self._watched)))
        self._watched[key] = (pidfd, answer)
        self._poller.register(pidfd, select.POLLIN)

    def watched(self) -> int:
        return len(self._watched)

    def _drop(self, key: Hashable) -> None:
        pidfd, _ = self._watched.pop(key)
        try:
            self._poller.unregister(pidfd)
        except KeyError:
            pass
        if self._ended_now is not None:  # its number may be given to a new watch within this look
            self._ended_now.discard(pidfd)
        try:
            os.close(pidfd)
        except OSError:
            pass

    def close(self) -> None:
        """Close every pidfd held; watching starts again on the next question."""
        for key in list(self._watched):
            self._drop(key)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
