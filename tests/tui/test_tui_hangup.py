"""The cockpit in a real terminal that goes away with SIGHUP ignored (nohup, or a shell that does
not pass the hangup on): it must leave within 5 s, the run log intact. A pty stands in for the SSH
session's terminal; closing its master side is the session dropping."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

from cockpit.record.runlog import RunLog
from tests.conftest import ROOT

# The user's shell under nohup: SIGHUP ignored before the cockpit starts.
IGNORING_SIGHUP = (
    "import signal, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
    "from cockpit.cli import main; sys.exit(main(sys.argv[1:]))"
)


class Terminal:
    """A pty of 80×24 whose output is read (so the app never blocks on a full pty) and kept."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.name = os.ttyname(self.slave)
        self.seen = bytearray()
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    return
                if not data:
                    return
                self.seen.extend(data)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def hang_up(self) -> None:
        self._stop.set()
        self._reader.join()
        os.close(self.master)


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux ptys")
def test_the_tui_leaves_within_5_s_when_its_terminal_goes_away_with_sighup_ignored(seed_campaign):
    terminal = Terminal()

    def controlling_terminal() -> None:  # the pty is the session's terminal, as an SSH login's is
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    env = {**os.environ, "TERM": "xterm-256color", "COCKPIT_NVML": "off", "TEXTUAL_ANIMATIONS": "none"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-c", IGNORING_SIGHUP, str(seed_campaign), "--no-bell"],
        stdin=terminal.slave, stdout=terminal.slave, stderr=terminal.slave, cwd=ROOT, env=env,
        start_new_session=True, preexec_fn=controlling_terminal,
    )
    os.close(terminal.slave)
    log = RunLog(seed_campaign)
    try:
        assert wait_for(lambda: b"alerts" in terminal.seen, 60), bytes(terminal.seen[-2000:])
        assert wait_for(lambda: any(e["type"] == "campaign_started" for e in log.read().events), 30)
        terminal.type(b"n")
        time.sleep(1.0)
        terminal.type(b"written just before the session dropped")
        time.sleep(0.3)
        terminal.type(b"\r")
        assert wait_for(lambda: any(e["type"] == "note" for e in log.read().events), 30), bytes(terminal.seen[-2000:])

        terminal.hang_up()
        hung_up = time.monotonic()
        assert wait_for(lambda: process.poll() is not None, 5.0), "still running 5 s after its terminal went away"
        assert time.monotonic() - hung_up < 5.0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    read = log.read()
    assert read.bad_lines == 0
    assert read.events[0]["type"] == "campaign_started"
    assert [e["text"] for e in read.events if e["type"] == "note"] == ["written just before the session dropped"]
    assert log.path.read_bytes().endswith(b"\n")
