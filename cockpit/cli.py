"""The `cockpit` command line: argument parsing and one error policy for every command.

Bad input ends with a plain message on stderr and an exit code — 1 for a finding the user must
act on, 2 for a usage error — never a traceback. Each command's work lives in
`cockpit/commands/`, imported only when that command runs, so `cockpit log` never loads Textual.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from cockpit import __version__
from cockpit.common import startup
from cockpit.common.text import escape_control
from cockpit.errors import Finding, UsageError

__all__ = ["Finding", "UsageError", "main"]

COMMANDS = (
    "demo", "init", "check", "schema", "plan", "status", "watch", "stop", "decide", "accept", "note", "ack", "void", "log",
    "verify-resume", "close", "notify",
)


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help, without cutting a path or an id at its hyphens."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False, break_long_words=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False, break_long_words=False)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # argparse's own usage errors: exit 2 with a hint
        self.print_usage(sys.stderr)
        self.exit(2, f"cockpit: {message}\n")


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number (got {text!r})") from None
    if value != value or abs(value) == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number (got {text!r})")
    return value


def _non_negative(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative (got {text!r})")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0 (got {text!r})")
    return value


def _seq(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an event's seq, a whole number (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more (got {text!r})")
    return value


def _whole_days(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of days (got {text!r})") from None
    if not 1 <= value <= 3660:
        raise argparse.ArgumentTypeError(f"must be 1 to 3660 days (got {text!r})")
    return value


def _iso_start(text: str):
    from datetime import datetime

    try:
        value = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an ISO date-time with a zone, e.g. 2026-11-30T08:00:00Z (got {text!r})") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"needs a time zone, e.g. {text}Z for UTC (got {text!r})")
    return value


def _gpu_fault(text: str):
    from cockpit.live.fake_gpus import parse_fault  # only when the flag is given

    try:
        return parse_fault(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix(f"--gpu-fault {text!r}: ")) from None
METRICS_HELP = (
    "serve /metrics (Prometheus) and /snapshot.json (status --json) on ADDR:PORT, e.g. 127.0.0.1:9464 "
    "(a bare PORT binds to loopback; reach it from elsewhere with ssh -L)"
)
LOT_HELP = (
    "another lot to show, by its --metrics address as seen from here, e.g. b=http://127.0.0.1:19464 "
    "(repeatable; also [[lot_view]] entries in ~/.config/cockpit/lots.toml)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="cockpit",
        description="Watch a training campaign on a GPU box rented as a fixed-price lot.",
        epilog="`cockpit [DIR]` with no command opens the cockpit on the campaign in DIR.",
    )
    parser.add_argument("--version", action="version", version=f"cockpit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, handler: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(handler=handler)
        return p

    p = command("demo", "cockpit.commands.demo:run", "make a demo campaign with real toy training runs and open the cockpit on it")
    p.add_argument("dir", nargs="?", metavar="DIR", help="where to make it (default: a new demo-<timestamp> folder in your data folder, ~/.local/share/cockpit on Linux)")
    p.add_argument("--theme", metavar="NAME")
    p.add_argument("--no-tui", action="store_true", help="start the runs and print where they are, without the TUI")
    p.add_argument("--gpu-fault", action="append", type=_gpu_fault, default=[], metavar="KIND@SECONDS",
                   help="simulated GPUs suffer KIND that many seconds in: xid79, xid48, ecc, throttle, idle (repeatable; "
                   "with --no-tui the demo watches until each fault's alert is in the run log)")
    p.add_argument("--metrics", metavar="ADDR:PORT", help=METRICS_HELP)
    p.add_argument("--lot", action="append", metavar="NAME=URL", help=LOT_HELP)

    p = command("init", "cockpit.commands.init:run", "write a commented campaign.toml to start from (refuses to overwrite one)")
    p.add_argument("dir", metavar="DIR", help="the campaign folder (made when missing)")
    p.add_argument("--gpu", metavar="MODEL", help="the lot's GPU model, e.g. \"RTX 4090\" (default: the first catalogue model)")
    p.add_argument("--days", type=_whole_days, metavar="N", help="the lot's duration in days (default: the shortest catalogue lot)")
    p.add_argument("--start", type=_iso_start, metavar="ISO", help="the lot's start with a zone, e.g. 2026-11-30T08:00:00Z (default: the next full hour)")
    p.add_argument("--price", metavar="USD", help="the price of the whole lot, e.g. 47.14 (required where the catalogue has no price)")

    p = command("check", "cockpit.commands.check:run", "validate campaign.toml (exit 1 when invalid)")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object: valid, findings (file, line, table, item, key, message, fix)")

    command("schema", "cockpit.commands.schema:run", "print the JSON Schema of campaign.toml (for an editor: see docs/campaign-file.md)")

    p = command("plan", "cockpit.commands.plan:run", "calendar, window fit, lot options and reduced protocols")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--extra-hours", type=_non_negative, default=0.0, metavar="H", help="add H hours to the committed time")

    p = command("status", "cockpit.commands.live:status", "one snapshot: clock, GPUs, runs, active alerts (exit 1 when alerts are active)")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--lot", action="append", metavar="NAME=URL", help=LOT_HELP)
    p.add_argument("--textfile", metavar="PATH", help="also write the metrics, atomically, as a .prom file for node_exporter's textfile collector")

    p = command("watch", "cockpit.commands.live:watch", "evaluate stop rules and record alerts and auto-stops without a UI")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--headless", action="store_true", help="run without a UI (required)")
    p.add_argument("--interval", type=_positive, default=1.0, metavar="SECONDS", help="seconds between ticks (default 1)")
    p.add_argument("--metrics", metavar="ADDR:PORT", help=METRICS_HELP)

    p = command("stop", "cockpit.commands.register:stop", "record a stop decision for a run")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("run", metavar="RUN")
    why = p.add_mutually_exclusive_group(required=True)
    why.add_argument("--rule", metavar="ID", help="the stop rule that applies")
    why.add_argument("--reason", metavar="TEXT", help="a free-text reason")
    p.add_argument("--signal", action="store_true", help="also send SIGTERM to the run's process")
    p.add_argument("--force", action="store_true", help="record a stop that is probably a mistake (the run finished cleanly, or the rule never triggered for it); the stop says so")

    p = command("decide", "cockpit.commands.register:decide", "record the pilot decision")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("decision", choices=["continue", "drop-optional", "revise"])
    p.add_argument("--note", metavar="TEXT")

    p = command("accept", "cockpit.commands.register:accept", "record the acceptance of a deliverable")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("deliverable", metavar="DELIVERABLE")

    p = command("note", "cockpit.commands.register:note", "record a note (an explained deviation)")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("text", metavar="TEXT")
    p.add_argument("--run", metavar="RUN")

    p = command("void", "cockpit.commands.register:void", "take back a mistaken stop, pilot decision, acceptance or note (appends a void event)")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("seq", type=_seq, metavar="SEQ", help="the seq of the event to take back (see `cockpit log DIR`)")
    p.add_argument("--reason", required=True, metavar="TEXT", help="why it was a mistake")
    p = command("ack", "cockpit.commands.register:ack", "acknowledge an open alert: a person looked at it")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("rule", metavar="RULE", help="a stop rule id or a built-in alert id (lot-window, gpu-lost, run-died, …)")
    p.add_argument("--run", metavar="RUN", help="the run whose alert it is, when RULE is open on several")
    p.add_argument("--note", metavar="TEXT", help="what the person found")

    p = command("log", "cockpit.commands.register:show_log", "print the run log")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--run", metavar="RUN", help="only the events of this run")

    p = command("verify-resume", "cockpit.commands.verify_resume:run", "check a checkpoint is a resume point and reload it in a new process")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--mtbf-hours", type=_positive, default=24.0, metavar="H", help="assumed mean time between failures for the save-interval advice (default 24)")
    p.add_argument("--record", nargs=2, metavar=("DIR", "RUN"), help="when it is a resume point that reloads, append resume_verified to RUN's metrics stream in campaign DIR")
    p.add_argument("--campaign", metavar="DIR", help="take the lot end and retrieval hours for the advice from DIR (implied by --record)")
    p.add_argument("--python", metavar="PATH", help="reload with this interpreter (the training environment's, where torch is); default: the cockpit's own")
    p.add_argument("--timeout", type=_positive, default=600.0, metavar="SECONDS", help="stop the reload after SECONDS (default 600)")
    p.add_argument("--trust-checkpoint", action="store_true", help="load a file that torch.load(weights_only=True) refuses, admitting only allowlisted globals (torch, numpy, collections, argparse.Namespace, ...); only for a file you trust")

    p = command("close", "cockpit.commands.close:run", "closing report; writes DIR/closing/")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = command("notify", "cockpit.commands.notify:run", "the notification channels (masked); --test sends a test message to each")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--test", action="store_true", help="send one test message to every channel and report each outcome (exit 1 if any failed)")
    return parser


def build_tui_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cockpit", description="Open the cockpit on the campaign in DIR.")
    parser.add_argument("dir", nargs="?", default=".", metavar="DIR")
    parser.add_argument("--theme", metavar="NAME", help="a theme from themes/ or ~/.config/cockpit/themes/")
    parser.add_argument("--no-bell", action="store_true", help="do not ring the terminal bell on a new alert")
    parser.add_argument("--metrics", metavar="ADDR:PORT", help=METRICS_HELP)
    parser.add_argument("--lot", action="append", metavar="NAME=URL", help=LOT_HELP)
    parser.set_defaults(handler="cockpit.commands.tui:run", command=None)
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    first = argv[0] if argv else None
    if first in COMMANDS or first in ("-h", "--help", "--version"):
        return build_parser().parse_args(argv)
    return build_tui_parser().parse_args(argv)


class OutputError(Exception):
    """The command's own output could not be written (a full disk, a reader that went away)."""

    def __init__(self, error: OSError):
        super().__init__(error.strerror or str(error))
        self.error = error


class _GuardedOutput:
    """sys.stdout while a command runs: a write or flush that fails is known to be the output's
    (an OSError from anything else the command writes stays what it is). Not an OSError itself,
    so no library on the way (rich ends a broken pipe with exit 1) takes it for its own."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            raise OutputError(error) from None

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise OutputError(error) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _discard_output() -> None:
    """What is still buffered for stdout goes to /dev/null: the interpreter's last flush cannot fail."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
    except (AttributeError, OSError, ValueError):
        pass


def _output_lost(error: OutputError) -> int:
    """A closed pipe ends the command quietly with 0; any other failure says so and exits 1."""
    _discard_output()
    if error.error.errno == errno.EPIPE:
        return 0
    try:
        print(f"cockpit: cannot write the output: {error}", file=sys.stderr)
    except OSError:
        pass
    return 1


def entry() -> int:
    """The process's entry point (the `cockpit` command, `python -m cockpit`): `main` with the
    garbage collector paused until the command's campaign is loaded (`cockpit.common.startup`)."""
    startup.pause_collection()
    try:
        return main()
    finally:
        startup.resume_collection()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(list(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "handler", None):
        build_parser().print_help(sys.stderr)
        return 2
    output = sys.stdout
    if output is None:  # started with stdout closed (`>&-`): print() writes nothing, as Python does
        return _run(args)
    sys.stdout = _GuardedOutput(output)
    try:
        code = _run(args)
    finally:
        sys.stdout = output
    try:
        output.flush()  # after a refusal, output written before it may still be buffered
    except (OSError, ValueError):
        _discard_output()
    return code


def _run(args: argparse.Namespace) -> int:
    from cockpit.plan.campaign import CampaignError
    from cockpit.record.runlog import RunLogError

    module_name, function_name = args.handler.split(":")
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
        code = int(handler(args) or 0)
        if sys.stdout is not None:
            sys.stdout.flush()  # an output error surfaces here, not in the interpreter's last flush
        return code
    except OutputError as error:
        return _output_lost(error)
    except CampaignError as error:
        for finding in error.findings:  # a finding quotes the file: its control characters escaped
            print(escape_control(finding, keep_newlines=True), file=sys.stderr)
        print(f"cockpit: {len(error.findings)} problem{'s' if len(error.findings) != 1 else ''} in the campaign; nothing was done", file=sys.stderr)
        return 1
    except (Finding, RunLogError) as error:
        print(escape_control(f"cockpit: {error}", keep_newlines=True), file=sys.stderr)
        return 1
    except UsageError as error:
        print(escape_control(f"cockpit: {error}", keep_newlines=True), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError as error:  # a closed pipe met outside sys.stdout (a library writing to the fd)
        return _output_lost(OutputError(error))
    except Exception as error:  # a bug, not bad input: say so plainly, keep the traceback for debugging
        if os.environ.get("COCKPIT_DEBUG"):
            raise
        print(
            escape_control(f"cockpit: internal error: {type(error).__name__}: {error}", keep_newlines=True) + "\n"
            "This is a bug in the cockpit, not in your files; run again with COCKPIT_DEBUG=1 "
            "for the traceback and report it.",
            file=sys.stderr,
        )
        return 70


if __name__ == "__main__":
    sys.exit(main())
