"""The core never imports Textual: it runs headless, in `status`, `watch` and the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "cockpit"


def core_modules() -> list[str]:
    names = [f"cockpit.{p.stem}" for p in CORE.glob("*.py") if p.stem not in ("__init__", "__main__")]
    names += [f"cockpit.commands.{p.stem}" for p in (CORE / "commands").glob("*.py") if p.stem not in ("__init__", "tui", "demo")]
    return sorted(names)


def test_core_and_cli_commands_do_not_load_textual():
    modules = core_modules()
    assert "cockpit.campaign" in modules and "cockpit.runlog" in modules
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(loaded)\nsys.exit(1 if loaded else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=CORE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
