"""The `cockpit` command line: argument parsing and one error policy for every command.

Bad input ends with a plain message on stderr and an exit code — 1 for a finding the user must
act on, 2 for a usage error — never a traceback. Each command's work lives in
`cockpit/commands/`, imported only when that command runs, so `cockpit log` never loads Textual.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from cockpit import __version__
from cockpit.errors import Finding, UsageError

__all__ = ["Finding", "UsageError", "main"]

COMMANDS = (
    "demo", "check", "plan", "status", "watch", "stop", "decide", "accept", "note", "ack", "log",
    "verify-resume", "close",
)


class _Parser(argparse.ArgumentParser):
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
    p.add_argument("dir", nargs="?", metavar="DIR", help="where to make it (default: a new folder here)")
    p.add_argument("--theme", metavar="NAME")
    p.add_argument("--no-tui", action="store_true", help="start the runs and print where they are, without the TUI")

    p = command("check", "cockpit.commands.check:run", "validate campaign.toml (exit 1 when invalid)")
    p.add_argument("dir", metavar="DIR")

    p = command("plan", "cockpit.commands.plan:run", "calendar, window fit, lot options and reduced protocols")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--extra-hours", type=_non_negative, default=0.0, metavar="H", help="add H hours to the committed time")

    p = command("status", "cockpit.commands.live:status", "one snapshot: clock, GPUs, runs, active alerts (exit 1 when alerts are active)")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = command("watch", "cockpit.commands.live:watch", "evaluate stop rules and record alerts and auto-stops without a UI")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--headless", action="store_true", help="run without a UI (required)")
    p.add_argument("--interval", type=_positive, default=1.0, metavar="SECONDS", help="seconds between ticks (default 1)")

    p = command("stop", "cockpit.commands.register:stop", "record a stop decision for a run")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("run", metavar="RUN")
    why = p.add_mutually_exclusive_group(required=True)
    why.add_argument("--rule", metavar="ID", help="the stop rule that applies")
    why.add_argument("--reason", metavar="TEXT", help="a free-text reason")
    p.add_argument("--signal", action="store_true", help="also send SIGTERM to the run's process")

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

    p = command("close", "cockpit.commands.close:run", "closing report; writes DIR/closing/")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def build_tui_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cockpit", description="Open the cockpit on the campaign in DIR.")
    parser.add_argument("dir", nargs="?", default=".", metavar="DIR")
    parser.add_argument("--theme", metavar="NAME", help="a theme from themes/ or ~/.config/cockpit/themes/")
    parser.add_argument("--no-bell", action="store_true", help="do not ring the terminal bell on a new alert")
    parser.set_defaults(handler="cockpit.commands.tui:run", command=None)
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    first = argv[0] if argv else None
    if first in COMMANDS or first in ("-h", "--help", "--version"):
        return build_parser().parse_args(argv)
    return build_tui_parser().parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(list(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "handler", None):
        build_parser().print_help(sys.stderr)
        return 2
    from cockpit.campaign import CampaignError
    from cockpit.runlog import RunLogError

    module_name, function_name = args.handler.split(":")
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
        return int(handler(args) or 0)
    except CampaignError as error:
        for finding in error.findings:
            print(finding, file=sys.stderr)
        print(f"cockpit: {len(error.findings)} problem{'s' if len(error.findings) != 1 else ''} in the campaign; nothing was done", file=sys.stderr)
        return 1
    except (Finding, RunLogError) as error:
        print(f"cockpit: {error}", file=sys.stderr)
        return 1
    except UsageError as error:
        print(f"cockpit: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `cockpit log | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # a bug, not bad input: say so plainly, keep the traceback for debugging
        if os.environ.get("COCKPIT_DEBUG"):
            raise
        print(
            f"cockpit: internal error: {type(error).__name__}: {error}\n"
            "This is a bug in the cockpit, not in your files; run again with COCKPIT_DEBUG=1 "
            "for the traceback and report it.",
            file=sys.stderr,
        )
        return 70


if __name__ == "__main__":
    sys.exit(main())
