"""Running a command the cockpit does not trust to end on its own (a deliverable's `reload`
check, a checkpoint reload): a timeout that ends everything the command started, and output kept
bounded however much it prints.

The command starts in a session of its own. Its descendants are collected while it runs (a
`setsid` daemon leaves the process group but stays a descendant until its parent exits), and
every process that carries the command's token in its environment is found at the end (one that
forked away before it was seen). When the command exits or its time runs out, all of them are
killed: a check that leaves a daemon holding its pipes must not hold `close`, nor stay on a box
that is paid by the hour.
"""

from __future__ import annotations

import os
import secrets
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

TAIL_BYTES = 64 * 1024  # of each stream, the end kept for messages
TOKEN_VARIABLE = "COCKPIT_COMMAND_TOKEN"
READ_BYTES = 1 << 16
SCAN_SECONDS = 0.2  # how often the descendants are collected while the command runs
DRAIN_SECONDS = 1.0  # after everything was killed, how long the pipes may take to close


class BoundedOutput:
    """The first `head` bytes and the last `tail` bytes of a stream, and how many there were."""

    def __init__(self, head: int = 0, tail: int = TAIL_BYTES):
        self.head_limit, self.tail_limit = head, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.tail += data
        excess = len(self.tail) - self.tail_limit
        if excess > 0:
            del self.tail[:excess]


@dataclass(frozen=True)
class Finished:
    """How a bounded command ended."""

    returncode: int | None  # None when its time ran out
    timed_out: bool
    seconds: float
    stdout: BoundedOutput
    stderr: BoundedOutput
    ended: int  # processes of its tree killed at the end (leftovers included)


def run_bounded(
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout: float,
    stdout_head: int = 0,
    tail: int = TAIL_BYTES,
    env: Mapping[str, str] | None = None,
) -> Finished:
    """Run argv (no shell) for at most `timeout` seconds; Popen's OSError is the caller's."""
    token = secrets.token_hex(12)
    environment = {**(os.environ if env is None else env), TOKEN_VARIABLE: token}
    started = time.monotonic()
    process = subprocess.Popen(
        list(argv), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, env=environment,
    )
    stdout, stderr = BoundedOutput(stdout_head, tail), BoundedOutput(0, tail)
    outputs = {process.stdout.fileno(): stdout, process.stderr.fileno(): stderr}
    tree: dict[int, psutil.Process] = {}
    selector = selectors.DefaultSelector()
    for fd in outputs:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    deadline = started + timeout
    timed_out = False
    next_scan = started
    try:
        while True:
            now = time.monotonic()
            if now >= next_scan:
                _collect(process.pid, tree)
                next_scan = now + SCAN_SECONDS
            if _exited(process.pid):  # not reaped yet: its pid and group cannot be reused before the kill
                break
            if now >= deadline:
                timed_out = True
                break
            _read_ready(selector, outputs, min(0.05, deadline - now))
        ended = _end_tree(process.pid, tree, token)
        drain_until = time.monotonic() + DRAIN_SECONDS
        while selector.get_map() and time.monotonic() < drain_until:
            _read_ready(selector, outputs, 0.05)
    finally:
        selector.close()
        process.stdout.close()
        process.stderr.close()
        if not _exited(process.pid):  # an exception on the way: never leave it running
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass
        process.wait()
    return Finished(None if timed_out else process.returncode, timed_out, time.monotonic() - started, stdout, stderr, ended)


def _exited(pid: int) -> bool:
    """Whether our child `pid` has exited, leaving it unreaped (a zombie keeps its pid taken)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _read_ready(selector: selectors.BaseSelector, outputs: dict[int, BoundedOutput], wait: float) -> None:
    if not selector.get_map():
        time.sleep(max(0.0, wait))
        return
    for key, _ in selector.select(max(0.0, wait)):
        try:
            data = os.read(key.fd, READ_BYTES)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if data:
            outputs[key.fd].feed(data)
        else:
            selector.unregister(key.fd)


def _collect(pid: int, tree: dict[int, psutil.Process]) -> None:
    """Add the command's live descendants to `tree` (psutil objects: a reused pid is never killed)."""
    try:
        root = tree.get(pid) or psutil.Process(pid)
        tree[pid] = root
        for child in root.children(recursive=True):
            tree.setdefault(child.pid, child)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        pass
    for known in list(tree.values()):  # a daemon whose parent exited keeps its own descendants
        try:
            for child in known.children(recursive=True):
                tree.setdefault(child.pid, child)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass


def _end_tree(pid: int, tree: dict[int, psutil.Process], token: str) -> int:
    """Kill the command's session and process group, every descendant collected, and every process
    that carries its token; return how many were still alive."""
    _collect(pid, tree)
    own = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid in tree or proc.pid in (own, pid):
            continue
        try:
            if os.getsid(proc.pid) == pid or proc.environ().get(TOKEN_VARIABLE) == token:
                tree[proc.pid] = proc
        except (OSError, psutil.Error):
            continue
    _collect(pid, tree)  # and what those found since started
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    alive = []
    for proc in tree.values():
        if proc.pid in (own, pid):  # the command itself: its group was killed, the caller reaps it
            continue
        try:
            proc.kill()  # psutil refuses a pid that now belongs to another process
            alive.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    ended = len(alive)
    until = time.monotonic() + 1.0
    while alive and time.monotonic() < until:  # a killed process that is not our child may stay a zombie
        alive = [proc for proc in alive if _running(proc)]
        if alive:
            time.sleep(0.02)
    return ended


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


__all__ = ["TAIL_BYTES", "BoundedOutput", "Finished", "run_bounded"]
