"""The two kinds of refusal every command shares (kept apart from cli.py so `python -m cockpit.cli` and
`import cockpit.cli` raise and catch the same classes)."""


class UsageError(Exception):
    """The command line asks for something that does not exist (exit 2, nothing written)."""


class Finding(Exception):
    """Something the user must act on (exit 1); the message says what and how."""
