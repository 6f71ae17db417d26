"""CI runs exactly what the README tells a new user to run."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", setup)


def test_readme_has_two_setup_commands_and_ci_runs_the_test_one():
    commands = readme_commands()
    assert len(commands) == 2, commands
    run, test = commands
    assert "cockpit" in run and "pytest" in test
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci, "the README's test command must appear verbatim in .ci/run"
