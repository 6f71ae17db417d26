"""`cockpit notify DIR [--test]`: the notification channels configured for DIR (masked), and with
`--test` one test message to each, with each outcome; exit 1 when any failed or none is configured."""

from __future__ import annotations

import sys

from cockpit.common.text import escape_control
from cockpit.notify.claim import NOTIFIED, NOTIFY_FAILED, ledger_of, record
from cockpit.notify.config import ENV_URLS, load_config, user_config_path
from cockpit.notify.message import trial_message
from cockpit.notify.sender import TIMEOUT_SECONDS, apprise_send
from cockpit.notify.status import describe
from cockpit.plan.load import load_campaign
from cockpit.record.runlog import RunLog, RunLogError


def how_to_configure() -> str:
    return (
        f"set {ENV_URLS} to apprise URLs separated by spaces (e.g. {ENV_URLS}=ntfy://my-topic), "
        f"or list them in {user_config_path()} as urls = [\"ntfy://my-topic\"]"
    )


def run(args) -> int:
    campaign = load_campaign(args.dir)
    config = load_config(campaign)
    for line in describe(config):
        print(line)
    for problem in config.problems:
        print(escape_control(f"note: {problem}"), file=sys.stderr)
    if not config.channels:
        print(escape_control(f"no notification channel is configured: {how_to_configure()}"), file=sys.stderr)
        return 1
    if not args.test:
        print("`cockpit notify DIR --test` sends a test message to each")
        return 0
    log = RunLog(campaign.directory)
    failed_before = {e.get("channel") for e in ledger_of(log).failed_channels()} if log.path.exists() else set()
    title, body = trial_message(campaign.id, campaign.directory)
    failures = 0
    for channel in config.channels:
        error = apprise_send(channel, title, body, TIMEOUT_SECONDS)
        if error is None:
            print(escape_control(f"sent    {channel.shown}"))
        else:
            failures += 1
            print(escape_control(f"FAILED  {channel.shown}: {error}"))
        if channel.shown in failed_before:  # a channel that had given up: its notice ends once a test gets through
            kind = NOTIFIED if error is None else NOTIFY_FAILED
            fields = {"key": "test", "keys": ["test"], "seqs": [], "kinds": ["test"], "channel": channel.shown, "attempts": 1,
                      "outcome": "sent" if error is None else "failed"}
            if error is not None:
                fields["error"] = error
            try:
                record(log, kind, fields)
            except RunLogError as problem:
                print(escape_control(f"note: {problem}"), file=sys.stderr)
    if failures:
        print(f"{failures} of {len(config.channels)} channel{'s' if len(config.channels) != 1 else ''} failed", file=sys.stderr)
    return 1 if failures else 0
