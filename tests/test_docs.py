"""The user documentation in docs/: it names every key the campaign schema accepts and no other,
links only to files inside the repository, and no user-visible text cites a guide's sections."""

from __future__ import annotations

import re

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


# ---------------------------------------------------------------- campaign-file.md against the schema

DOC = ROOT / "docs" / "campaign-file.md"
_SECTION = re.compile(r"^## (?:`\[\[?(?P<table>\w+)\]\]?`|(?P<top>Top-level keys))\s*$")
_ROW = re.compile(r"^\| `(?P<key>\w+)` \|")


def documented_keys() -> set[tuple[str, str]]:
    """(table, key) of every row of campaign-file.md's key tables; "" is the file's own table."""
    keys: set[tuple[str, str]] = set()
    table: str | None = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            match = _SECTION.match(line)
            table = (match["table"] or "") if match else None
            continue
        row = _ROW.match(line)
        if row and table is not None:
            keys.add((table, row["key"]))
    return keys


def schema_keys() -> set[tuple[str, str]]:
    """(table, key) for every key the campaign schema accepts, read from the JSON Schema."""
    from cockpit.plan.schema import json_schema

    schema = json_schema()
    definitions = schema["$defs"]

    def target(spec: dict) -> dict | None:
        for option in [spec, *spec.get("anyOf", [])]:
            if "$ref" in option:
                return definitions[option["$ref"].split("/")[-1]]
            if option.get("type") == "array" and "$ref" in option.get("items", {}):
                return definitions[option["items"]["$ref"].split("/")[-1]]
        return None

    keys = {("", key) for key in schema["properties"]}
    for key, spec in schema["properties"].items():
        table = target(spec)
        if table is not None and "properties" in table:
            keys |= {(key, inner) for inner in table["properties"]}
    return keys


def test_campaign_file_doc_names_every_key_the_schema_accepts_and_no_other():
    documented, accepted = documented_keys(), schema_keys()
    assert accepted - documented == set(), "keys the schema accepts that docs/campaign-file.md does not describe"
    assert documented - accepted == set(), "keys docs/campaign-file.md describes that the schema refuses"


def test_the_doc_test_reads_tables_at_all():
    assert {("lot", "price_usd"), ("stop_rule", "after_step"), ("", "schema"), ("run", "total_steps")} <= documented_keys()


def test_the_doc_example_passes_check_and_plan(tmp_path, cli):
    text = DOC.read_text(encoding="utf-8")
    example = text.split("## A complete example", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "campaign.toml").write_text(example)
    checked = cli("check", str(tmp_path))
    assert checked.returncode == 0 and "note:" not in checked.stdout, checked.stdout + checked.stderr
    assert cli("plan", str(tmp_path)).returncode == 0


def test_the_doc_quotes_what_check_really_says():
    """Each quoted message of a table's "When it is wrong" list is one `check` can print: its
    fixed words are in the code that builds the messages."""
    text = DOC.read_text(encoding="utf-8")
    code = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "cockpit" / "plan").glob("*.py"))
    for fixed in ("is not a key of schema", "must be whole cents, at most two decimals", "needs a time zone",
                  "is already the id of a", "which is no task or run", "dependency cycle", "does not apply to a",
                  "the price of this lot is unknown", "does not end before the lot's"):
        assert fixed in text and fixed in code, fixed


# ---------------------------------------------------------------- links stay inside the repository

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def test_docs_and_readme_link_only_to_files_inside_the_repository():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = []
    for page in pages:
        for target in _LINK.findall(page.read_text(encoding="utf-8")):
            path = target.split("#", 1)[0]
            if "://" in target or target.startswith(("mailto:", "/")):
                bad.append(f"{page.name}: {target} (outside the repository)")
            elif path and not (page.parent / path).resolve().is_relative_to(ROOT):
                bad.append(f"{page.name}: {target} (outside the repository)")
            elif path and not (page.parent / path).exists():
                bad.append(f"{page.name}: {target} (no such file)")
    assert not bad, bad


def test_every_doc_page_exists_and_readme_points_at_it():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("campaign-file.md", "metrics-stream.md", "run-log.md", "json-output.md", "commands.md"):
        assert (ROOT / "docs" / name).is_file(), name
        assert f"docs/{name}" in readme, name
