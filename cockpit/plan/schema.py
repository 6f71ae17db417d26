"""Validating a campaign file: TOML text → the typed campaign of `cockpit.plan.campaign`, or a
CampaignError whose every finding names the file, the table, the item id, the key and the line.

This is the only module that imports pydantic. The campaign's dataclasses write their
constraints as annotations (`hours: PositiveHours`, `Gt(0)`, see `cockpit.plan.values`) that
are complete at run time; pydantic reads them here, at each load.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pydantic

from cockpit.plan import catalog
from cockpit.common.layout import CAMPAIGN_FILE
from cockpit.plan.campaign import Campaign, CampaignError, CampaignFinding, CampaignModel, Role
from cockpit.plan.values import ID_PATTERN, ID_RULE, SCHEMA, _shown


@cache
def _adapter() -> pydantic.TypeAdapter[CampaignModel]:
    """The validator of a whole campaign file, built once."""
    return pydantic.TypeAdapter(CampaignModel)


# ---------------------------------------------------------------- locating keys in the TOML text


class _Locator:
    """Finds the line of a key inside a table (or the n-th array table) of the raw TOML text."""

    _header = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-]+)\s*\]\]?")
    _key = re.compile(r"^\s*([A-Za-z0-9_\-]+|\"[^\"]*\")\s*=")

    def __init__(self, text: str):
        # (table, index) → {key: line}; index counts array tables, 0 for plain tables
        self.keys: dict[tuple[str, int], dict[str, int]] = {}
        self.headers: dict[tuple[str, int], int] = {}
        counts: dict[str, int] = {}
        current = ("", 0)
        self.headers[current] = 1
        for number, line in enumerate(text.splitlines(), start=1):
            header = self._header.match(line)
            if header:
                name = header.group(2)
                if header.group(1) == "[[":
                    index = counts.get(name, 0)
                    counts[name] = index + 1
                else:
                    index = 0
                current = (name, index)
                self.headers.setdefault(current, number)
                continue
            key = self._key.match(line)
            if key:
                self.keys.setdefault(current, {}).setdefault(key.group(1).strip('"'), number)

    def line(self, table: str, index: int, key: str | None) -> int | None:
        if key is not None:
            found = self.keys.get((table, index), {}).get(key)
            if found:
                return found
        return self.headers.get((table, index))


_ARRAY_TABLES = {"task", "run", "stop_rule", "deliverable", "expense"}


def _item_id(raw: dict[str, Any], table: str, index: int) -> str | None:
    items = raw.get(table)
    item_id = None
    if isinstance(items, list) and index < len(items):
        entry = items[index]
        if isinstance(entry, dict):
            item_id = entry.get("id") if table != "expense" else entry.get("label")
    if isinstance(item_id, str) and item_id and item_id.isprintable() and len(item_id) <= 80:
        return item_id
    return None


def _item(raw: dict[str, Any], table: str, index: int | None) -> str | None:
    """The item of an array table a finding is about: its id (an expense's label), else "#N"."""
    if table not in _ARRAY_TABLES or index is None:
        return None
    return _item_id(raw, table, index) or f"#{index + 1}"


def _place(raw: dict[str, Any], table: str, index: int | None) -> str:
    if table in _ARRAY_TABLES and index is None:
        return table
    if table in _ARRAY_TABLES:
        item_id = _item_id(raw, table, index or 0)
        if item_id is not None:
            return f"[[{table}]] '{item_id}'"
        return f"[[{table}]] #{(index or 0) + 1}"
    return f"[{table}]" if table else ""


_ID_EXAMPLES = {"run": "ctrl-r1", "task": "data-check", "stop_rule": "nan-loss", "": "sentiment-lora-2026-11"}


def _id_message(table: str) -> str:
    """Why an id was refused: ids become folder names (runs/<id>/), so they are plain names."""
    if table == "deliverable":
        return (
            f"must be one to four names joined by '/', each {ID_RULE} (the pattern {ID_PATTERN}), "
            'e.g. "ctrl-r1/predictions"; no "..", no leading, trailing or doubled "/", no backslash'
        )
    example = _ID_EXAMPLES.get(table, "ctrl-r1")
    return (
        f"must be {ID_RULE} (the pattern {ID_PATTERN}), e.g. \"{example}\"; "
        "the cockpit names folders after ids, so an id holds no '/', '\\' or '..'"
    )


def _describe(error: dict[str, Any], raw: dict[str, Any]) -> tuple[str, int | None, str | None, str]:
    """(table, index, key, message) for one pydantic error."""
    loc = list(error["loc"])
    table, index = "", None
    if loc and isinstance(loc[0], str) and loc[0] in _ARRAY_TABLES | {"lot", "calendar", "health", "closing", "pilot", "notify"}:
        table = loc.pop(0)
        if table in _ARRAY_TABLES and loc and isinstance(loc[0], int):
            index = loc.pop(0)
    key_path = ".".join(str(p) for p in loc if not str(p).startswith(("function-", "tagged-union")))
    key = str(loc[0]) if loc else None
    if key == "schema_":
        key = key_path = "schema"
    kind = error["type"]
    ctx = error.get("ctx") or {}
    given = error.get("input")
    got = f" (got {_shown(given)})" if not isinstance(given, (dict, list)) else ""
    if kind in ("missing", "missing_argument"):
        message = "is missing; add it"
    elif kind in ("extra_forbidden", "unexpected_keyword_argument"):
        message = f"is not a key of schema {SCHEMA}; check its spelling or remove it"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        words = {
            "greater_than": ("greater than", "gt"),
            "greater_than_equal": ("at least", "ge"),
            "less_than": ("less than", "lt"),
            "less_than_equal": ("at most", "le"),
        }[kind]
        limit = ctx.get(words[1])
        if isinstance(limit, int) and not isinstance(limit, bool):
            message = f"must be {words[0]} {limit}{got}"
        else:
            message = f"must be {words[0]} {limit:g}{got}" if isinstance(limit, (int, float)) else f"must be {words[0]} {limit}{got}"
        if kind in ("less_than", "less_than_equal") and str(loc[-1] if loc else "") in _LIMIT_REASONS:
            message += f": {_LIMIT_REASONS[str(loc[-1])]}"
        elif kind in ("less_than", "less_than_equal") and key in _LIMIT_REASONS:
            message += f": {_LIMIT_REASONS[key]}"
    elif kind == "enum":
        message = f"must be one of {ctx.get('expected', '').replace(chr(39), '')}{got}"
    elif kind == "string_pattern_mismatch" and key == "id":
        message = _id_message(table) + got
    elif kind == "string_pattern_mismatch" and key == "corpus_sha256":
        message = f"must be 64 hexadecimal digits{got}"
    elif kind == "value_error":
        message = str(ctx.get("error", error["msg"]))
    elif kind in ("int_type", "int_parsing", "int_from_float"):
        message = f"must be a whole number{got}"
    elif kind in ("float_type", "float_parsing"):
        message = f"must be a number{got}"
    elif kind == "finite_number":
        message = f"must be a finite number{got}"
    elif kind in ("string_type",):
        message = f"must be a string in quotes{got}"
    elif kind in ("list_type",):
        message = f"must be a list, e.g. [0]{got}"
    elif kind in ("model_type", "model_attributes_type", "dict_type", "dataclass_type", "dataclass_args_type"):
        message = f"must be a table{got}"
    elif kind in ("too_short", "string_too_short"):
        message = "must not be empty" + got
    else:
        message = f"{error['msg'].rstrip('.')}{got}".replace("Value error, ", "")
    if index is None and table in _ARRAY_TABLES and not key_path:
        message = f"must be an array of tables written [[{table}]]{got}"
    return table, index, key_path or None, message


# Why an upper bound is where it is, said after "must be at most N": no real campaign comes near.
_LIMIT_REASONS = {
    "total_steps": "more steps than any training run takes (the allowed range is 1 to 10^12)",
    "after_step": "more steps than any training run takes (the allowed range is 0 to 10^12)",
    "hours": "longer than any lot (the allowed range is up to ten years)",
    "retrieval_hours": "longer than any lot (the allowed range is 0 to ten years)",
    "within_hours": "longer than any lot (the allowed range is up to ten years)",
    "warn_before_end_hours": "longer than any lot (the allowed range is up to ten years)",
    "decide_after_hours": "longer than any lot (the allowed range is up to ten years)",
    "minutes": "longer than any lot (the allowed range is up to ten years)",
    "days": "longer than any lot (the allowed range is 1 to 3660 days)",
    "gpus": "a box holds at most 64 GPUs (indexes 0 to 63)",
}


# ---------------------------------------------------------------- cross-item checks


def _cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """One dependency cycle as a closed path of ids, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _cross_checks(model: CampaignModel, add) -> None:
    seen: dict[str, str] = {}
    for table, items in (("task", model.tasks), ("run", model.runs), ("deliverable", model.deliverables)):
        for index, item in enumerate(items):
            if item.id in seen:
                add(table, index, "id", f"'{item.id}' is already the id of a [[{seen[item.id]}]]; ids are unique across tasks, runs and deliverables")
            else:
                seen[item.id] = table
    rule_ids: set[str] = set()
    for index, rule in enumerate(model.stop_rules):
        if rule.id in rule_ids:
            add("stop_rule", index, "id", f"'{rule.id}' is already the id of another stop rule")
        rule_ids.add(rule.id)

    calendar_ids = {i.id for i in model.tasks} | {r.id for r in model.runs}
    run_ids = [r.id for r in model.runs]
    gpus = model.lot.gpu_count
    for table, items in (("task", model.tasks), ("run", model.runs)):
        for index, item in enumerate(items):
            for dep in item.after:
                if dep == item.id:
                    add(table, index, "after", f"'{item.id}' cannot come after itself")
                elif dep not in calendar_ids:
                    known = ", ".join(sorted(calendar_ids)) or "none"
                    add(table, index, "after", f"names '{dep}', which is no task or run (known: {known})")
            for gpu in item.gpu_list:
                if gpu >= gpus:
                    add(table, index, "gpus", f"GPU {gpu} is not in the lot: a {model.lot.gpu_model} lot holds {gpus} GPU{'s' if gpus != 1 else ''} (indexes 0–{gpus - 1})")

    graph = {i.id: [d for d in i.after if d in calendar_ids] for i in [*model.tasks, *model.runs]}
    cycle = _cycle(graph)
    if cycle:
        first = cycle[0]
        table = "task" if any(t.id == first for t in model.tasks) else "run"
        index = [i.id for i in (model.tasks if table == "task" else model.runs)].index(first)
        add(table, index, "after", f"dependency cycle: {' → '.join(reversed(cycle))}; remove one of these `after` entries")

    if model.pilot and model.pilot.run not in run_ids:
        add("pilot", None, "run", f"names '{model.pilot.run}', which is no [[run]] (runs: {', '.join(run_ids) or 'none'})")
    for index, rule in enumerate(model.stop_rules):
        for run in rule.runs or []:
            if run not in run_ids:
                add("stop_rule", index, "runs", f"names '{run}', which is no [[run]] (runs: {', '.join(run_ids) or 'none'})")
    for index, deliverable in enumerate(model.deliverables):
        if deliverable.run is not None and deliverable.run not in run_ids:
            add("deliverable", index, "run", f"names '{deliverable.run}', which is no [[run]] (runs: {', '.join(run_ids) or 'none'})")

    lot = model.lot
    entry = catalog.model(lot.gpu_model)
    if entry and lot.gpus is not None and lot.gpus != entry.gpus_per_lot:
        add("lot", None, "gpus", f"a catalogue {entry.name} lot holds {entry.gpus_per_lot} GPU{'s' if entry.gpus_per_lot != 1 else ''} (got {lot.gpus}); write gpus = {entry.gpus_per_lot}")
    if lot.price is None:
        if entry and entry.offers:
            durations = ", ".join(f"{o.days} days" for o in entry.offers)
            hint = f"the catalogue prices {entry.name} lots of {durations} only"
        elif entry:
            hint = f"the catalogue knows no price for a {entry.name} lot"
        else:
            hint = f"'{lot.gpu_model}' is not in the catalogue (known: {', '.join(catalog.known_models())})"
        add("lot", None, "price_usd", f"the price of this lot is unknown: {hint}; write the price you pay for the whole lot, e.g. price_usd = \"123.45\"")
    if model.calendar.retrieval_hours >= lot.window_hours:
        add("calendar", None, "retrieval_hours", f"retrieval alone ({model.calendar.retrieval_hours:g} h) does not end before the lot's {lot.window_hours:g} h")
    for hours in model.calendar.warn_before_end_hours:
        if hours >= lot.window_hours:
            add("calendar", None, "warn_before_end_hours", f"{hours:g} h before the end is before the lot even starts ({lot.window_hours:g} h)")


def _warnings(model: CampaignModel) -> list[str]:
    notes = []
    if model.closing is None:
        notes.append("no [closing] table: nothing says what lets the campaign close, so no result can be called a decision; add metric, direction and threshold")
    if not model.runs:
        notes.append("no [[run]]: nothing will be monitored")
    if not any(r.role is Role.control for r in model.runs) and model.runs:
        notes.append("no run has role = \"control\": a variant is compared with nothing")
    return notes


# ---------------------------------------------------------------- loading


def validate_text(text: str, directory: Path, file_label: str = CAMPAIGN_FILE) -> Campaign:
    """Parse and validate campaign TOML text; raise CampaignError naming every problem."""
    try:
        raw = tomllib.loads(text)
    except RecursionError:
        raise CampaignError([CampaignFinding(file_label, "", "not valid for a campaign: arrays or tables nested too deep to read")]) from None
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        match = re.search(r"\(at line (\d+), column (\d+)\)", message)
        line = int(match.group(1)) if match else None
        detail = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        if match:
            detail += f" at column {match.group(2)}"
        raise CampaignError([CampaignFinding(file_label, "", f"not valid TOML: {detail}", line)]) from None

    locator = _Locator(text)
    findings: list[CampaignFinding] = []

    def add(table: str, index: int | None, key: str | None, message: str) -> None:
        where = _place(raw, table, index)
        if key:
            where = f"{where} → {key}" if where else key
        findings.append(CampaignFinding(
            file_label, where, message, locator.line(table, index or 0, key.split(".")[0] if key else None),
            table=table or None, item=_item(raw, table, index), key=key,
        ))

    try:
        model = _adapter().validate_python(raw)
    except RecursionError:
        raise CampaignError([CampaignFinding(file_label, "", "not valid for a campaign: values nested too deep to read")]) from None
    except pydantic.ValidationError as error:
        for problem in error.errors(include_url=False):
            table, index, key, message = _describe(problem, raw)
            add(table, index, key, message)
        raise CampaignError(findings) from None
    _cross_checks(model, add)
    if findings:
        raise CampaignError(findings)
    return Campaign(model=model, directory=directory, text=text, warnings=tuple(_warnings(model)))




# ---------------------------------------------------------------- the JSON Schema, for editors

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def json_schema() -> dict[str, Any]:
    """The JSON Schema of campaign.toml, from the same model `check` validates with, for editors
    (taplo, Even Better TOML). It checks each key's type and range; what spans several keys (an
    `after` naming an unknown id, a rule kind's required keys) is `cockpit check`'s alone. TOML
    date-times are strings in JSON: `start` is a `date-time` string there."""
    schema = _adapter().json_schema(mode="validation")
    schema["properties"]["schema"] = {"const": SCHEMA, "description": "the campaign file's format version: write schema = 1"}
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": f"cockpit campaign.toml (schema {SCHEMA})",
        **{k: v for k, v in schema.items() if k != "title"},
        "description": "A training campaign on a GPU box rented as a fixed-price lot; see docs/campaign-file.md.",
    }
