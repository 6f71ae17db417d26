"""The core never imports Textual: it runs headless, in `status`, `watch` and the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "cockpit"


def core_modules() -> list[str]:
    """Every module outside cockpit/tui/, but the two commands that open the TUI."""
    names = []
    for path in sorted(CORE.rglob("*.py")):
        parts = path.relative_to(CORE.parent).with_suffix("").parts
        if parts[1:2] == ("tui",) or parts[-1] == "__main__" or parts in (("cockpit", "commands", "tui"), ("cockpit", "commands", "demo")):
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names)


def test_core_and_cli_commands_do_not_load_textual():
    modules = core_modules()
    assert "cockpit.plan.campaign" in modules and "cockpit.record.runlog" in modules
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(loaded)\nsys.exit(1 if loaded else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=CORE.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_import_contracts_hold():
    """pyproject.toml's [tool.importlinter] contracts: the layers, a feed that imports nothing else of
    cockpit, and no Textual outside cockpit/tui/. `lint-imports` names the import that breaks one."""
    lint = Path(sys.executable).parent / "lint-imports"
    assert lint.exists(), "install the test extra: pip install -e '.[test]' (it brings import-linter)"
    result = subprocess.run([str(lint), "--no-cache"], capture_output=True, text=True, cwd=CORE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
