"""The user documentation in docs/: it names every key the campaign schema accepts and no other,
links only to files inside the repository, and no user-visible text cites a guide's sections."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT

USER_VISIBLE = ["cockpit", "docs", "sample_campaigns", "README.md"]


def test_no_user_visible_text_cites_guide_sections():
    found = []
    for top in USER_VISIBLE:
        path = ROOT / top
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        for file in files:
            try:
                text = file.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                if "§" in line:
                    found.append(f"{file.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "a section sign where the reason should be said in plain words:\n" + "\n".join(found)


def test_readme_does_not_point_at_the_spec_outside_the_clone():
    assert "../shared/SPEC.md" not in (ROOT / "README.md").read_text(encoding="utf-8")
