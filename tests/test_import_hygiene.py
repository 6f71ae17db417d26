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


def test_the_reload_child_imports_nothing_heavy_and_parses_as_older_python(tmp_path):
    """verify-resume's child (`python -m cockpit.resume.reload_child`) runs under the training
    environment's interpreter, where the cockpit's dependencies are absent and Python may be older:
    it imports the standard library and cockpit.checkpoints.headers, nothing else of the cockpit."""
    import ast
    import json
    import struct

    for relative in ("resume/reload_child.py", "checkpoints/__init__.py", "checkpoints/headers.py"):
        ast.parse((CORE / relative).read_text(encoding="utf-8"), feature_version=(3, 8))
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    script = (
        "import json, sys\n"
        "from cockpit.resume import reload_child\n"
        f"reload_child.main([json.dumps([{{'path': {str(weights)!r}, 'kind': 'safetensors'}}])])\n"
        "print(sorted(m for m in sys.modules if m.startswith(('cockpit', 'pydantic', 'psutil', 'orjson', 'textual'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=CORE.parent)
    assert result.returncode == 0, result.stderr
    answer, loaded = result.stdout.strip().splitlines()[-2:]
    assert '"ok": true' in answer and '"tensor_count": 1' in answer
    assert loaded == "['cockpit', 'cockpit.checkpoints', 'cockpit.checkpoints.headers', 'cockpit.resume', 'cockpit.resume.reload_child']"


def test_pickle_is_used_only_to_read_checkpoints():
    """The cockpit keeps none of its own data as pickles (a pickle runs code when it is loaded):
    only the checkpoint scanner reads them, with its own inert unpickler, and verify-resume's child
    loads a checkpoint through an unpickler that admits only the globals vetted in the file."""
    import ast

    allowed = {"checkpoints/scan.py", "resume/reload_child.py"}
    users = set()
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name.split(".")[0] in ("pickle", "cPickle", "dill", "cloudpickle", "shelve") for name in names):
                users.add(path.relative_to(CORE).as_posix())
    assert users == allowed
