"""The campaign file (`campaign.toml`, schema 1): typed models and a loader whose every error
names the file, the table, the item id and the key, and says how to fix it."""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from cockpit import catalog

CAMPAIGN_FILE = "campaign.toml"
SCHEMA = 1
CENT = Decimal("0.01")
MONEY_DIGITS = 12  # whole-dollar digits at most: a lot price of a trillion USD is a typo
MAX_HOURS = 24 * 3660.0  # ten years: longer than any lot; keeps date arithmetic finite


def _shown(value: Any, limit: int = 60) -> str:
    """A value as an error message quotes it: never the whole of a 10 MB string."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(text)} characters)"


# ---------------------------------------------------------------- errors


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a campaign file, ready to print."""

    file: str
    where: str  # "[[run]] 'v1' → hours", "[lot] → price_usd", "" for the file itself
    message: str
    line: int | None = None

    def __str__(self) -> str:
        text = f"{self.file}: {self.where}: {self.message}" if self.where else f"{self.file}: {self.message}"
        return f"{text} (line {self.line})" if self.line else text


class CampaignError(Exception):
    """The campaign cannot be used as it is; `findings` says every reason."""

    def __init__(self, findings: list[Finding]):
        self.findings = findings
        super().__init__("\n".join(str(f) for f in findings))


# ---------------------------------------------------------------- value types


def _money(value: Any) -> Decimal:
    """Dollars with cents: "47.14", 47.14 or 110 → Decimal("47.14"); never a binary float inside."""
    if isinstance(value, bool):
        raise ValueError(f"must be an amount in USD such as \"47.14\" (got {value!r})")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite amount in USD (got {value!r})")
        value = repr(value)  # the shortest text that reads back as this float: 47.14 → "47.14"
    if isinstance(value, (int, str)):
        try:
            amount = Decimal(str(value).strip())
        except InvalidOperation:
            raise ValueError(f"must be an amount in USD such as \"47.14\" (got {_shown(value)})") from None
    elif isinstance(value, Decimal):
        amount = value
    else:
        raise ValueError(f"must be an amount in USD such as \"47.14\" (got {_shown(value)})")
    if not amount.is_finite():
        raise ValueError(f"must be a finite amount in USD (got {_shown(value)})")
    if amount.adjusted() >= MONEY_DIGITS:
        raise ValueError(f"is not a plausible amount in USD (got {_shown(value)}); write the price with cents, e.g. \"47.14\"")
    if amount < 0:
        raise ValueError(f"must not be negative (got {value!r})")
    if amount != amount.quantize(CENT):
        raise ValueError(f"must be whole cents, at most two decimals (got {value!r})")
    return amount.quantize(CENT)


Money = Annotated[Decimal, BeforeValidator(_money)]


class Tier(str, Enum):
    indispensable = "indispensable"
    useful = "useful"
    exploratory = "exploratory"


class TaskKind(str, Enum):
    human = "human"
    machine = "machine"


class Role(str, Enum):
    control = "control"
    variant = "variant"


class Direction(str, Enum):
    max = "max"
    min = "min"


class RuleKind(str, Enum):
    non_finite = "non_finite"
    below = "below"
    above = "above"
    truncated = "truncated"
    no_resume = "no_resume"
    stalled = "stalled"


class Action(str, Enum):
    alert = "alert"
    stop = "stop"


class DeliverableKind(str, Enum):
    predictions = "predictions"
    error_analysis = "error_analysis"
    artifact = "artifact"
    adapter = "adapter"
    report = "report"
    other = "other"


PositiveHours = Annotated[float, Field(gt=0, le=MAX_HOURS, allow_inf_nan=False)]
Identifier = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/\-]*$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# ---------------------------------------------------------------- tables


class Closing(_Model):
    metric: str = Field(min_length=1)
    direction: Direction
    threshold: float = Field(allow_inf_nan=False)


class Lot(_Model):
    order_ref: str | None = None
    gpu_model: str = Field(min_length=1)
    gpus: int | None = Field(default=None, ge=1, le=64)
    days: int = Field(gt=0, le=3660)
    price_usd: Money | None = None
    start: datetime | None = None

    @field_validator("start", mode="before")
    @classmethod
    def _start_needs_a_zone(cls, value: Any) -> Any:
        if isinstance(value, datetime) and value.tzinfo is None:
            raise ValueError(
                f"needs a time zone (got {value.isoformat()}); write it in UTC with a Z, "
                f"e.g. {value.isoformat()}Z"
            )
        if isinstance(value, datetime) and not 1971 <= value.year <= 9000:
            raise ValueError(f"is not a plausible lot start (got {value.isoformat()}); write it like 2026-11-30T08:00:00Z")
        if not isinstance(value, (datetime, type(None))):
            raise ValueError(
                f"must be a TOML date-time with a zone, e.g. 2026-11-30T08:00:00Z (got {value!r})"
            )
        return value

    @property
    def gpu_count(self) -> int:
        """GPUs the lot holds: as written, else as the catalogue's lot holds, else one."""
        if self.gpus is not None:
            return self.gpus
        entry = catalog.model(self.gpu_model)
        return entry.gpus_per_lot if entry else 1

    @property
    def price(self) -> Decimal | None:
        """The price of the lot: as written, else the catalogue's, else unknown (never derived)."""
        if self.price_usd is not None:
            return self.price_usd
        return catalog.price(self.gpu_model, self.days)

    @property
    def window_hours(self) -> float:
        return self.days * 24.0

    @property
    def end(self) -> datetime | None:
        return self.start + timedelta(days=self.days) if self.start else None


class CalendarSettings(_Model):
    retrieval_hours: float = Field(default=0.0, ge=0, le=MAX_HOURS, allow_inf_nan=False)
    warn_before_end_hours: list[Annotated[float, Field(gt=0, le=MAX_HOURS, allow_inf_nan=False)]] = Field(
        default_factory=lambda: [6.0, 1.0]
    )


class Task(_Model):
    id: Identifier
    kind: TaskKind
    tier: Tier = Tier.indispensable
    hours: PositiveHours
    gpus: list[Annotated[int, Field(ge=0)]] | None = None
    after: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _gpus_fit_the_kind(self) -> "Task":
        if self.kind is TaskKind.human and self.gpus:
            raise ValueError(
                "a human task occupies no GPU: remove `gpus`, or make it kind = \"machine\""
            )
        if self.gpus is not None and self.kind is TaskKind.machine and not self.gpus:
            raise ValueError("a machine task needs at least one GPU, e.g. gpus = [0]")
        return self

    @property
    def machine(self) -> bool:
        return self.kind is TaskKind.machine

    @property
    def gpu_list(self) -> list[int]:
        if not self.machine:
            return []
        return sorted(set(self.gpus)) if self.gpus else [0]


class Run(_Model):
    id: Identifier
    role: Role
    tier: Tier = Tier.indispensable
    hours: PositiveHours
    gpus: list[Annotated[int, Field(ge=0)]] = Field(default_factory=lambda: [0], min_length=1)
    after: list[str] = Field(default_factory=list)
    total_steps: int | None = Field(default=None, gt=0)
    metrics: str | None = None
    checkpoints: str | None = None

    @property
    def machine(self) -> bool:
        return True

    @property
    def gpu_list(self) -> list[int]:
        return sorted(set(self.gpus))

    def metrics_path(self, directory: Path) -> Path:
        return directory / (self.metrics or f"runs/{self.id}/metrics.jsonl")

    def checkpoints_path(self, directory: Path) -> Path:
        return directory / (self.checkpoints or f"runs/{self.id}/checkpoints")


class Pilot(_Model):
    run: str
    decide_after_hours: PositiveHours


_RULE_FIELDS: dict[RuleKind, tuple[set[str], set[str]]] = {
    # kind: (required, also allowed) besides id, kind, action, runs
    RuleKind.non_finite: (set(), {"metric"}),
    RuleKind.below: ({"metric", "threshold"}, {"after_step"}),
    RuleKind.above: ({"metric", "threshold"}, {"after_step"}),
    RuleKind.truncated: (set(), set()),
    RuleKind.no_resume: ({"within_hours"}, set()),
    RuleKind.stalled: ({"minutes"}, set()),
}

_RULE_EXAMPLES = {
    "metric": 'metric = "loss"',
    "threshold": "threshold = 0.55",
    "within_hours": "within_hours = 2",
    "minutes": "minutes = 20",
}


class StopRule(_Model):
    id: Identifier
    kind: RuleKind
    action: Action = Action.alert
    runs: list[str] | None = None
    metric: str | None = Field(default=None, min_length=1)
    threshold: float | None = Field(default=None, allow_inf_nan=False)
    after_step: int | None = Field(default=None, ge=0)
    within_hours: float | None = Field(default=None, gt=0, le=MAX_HOURS, allow_inf_nan=False)
    minutes: float | None = Field(default=None, gt=0, le=MAX_HOURS * 60, allow_inf_nan=False)

    @model_validator(mode="after")
    def _fields_of_the_kind(self) -> "StopRule":
        required, optional = _RULE_FIELDS[self.kind]
        missing = sorted(k for k in required if getattr(self, k) is None)
        if missing:
            examples = ", ".join(_RULE_EXAMPLES[k] for k in missing)
            raise ValueError(f"a '{self.kind.value}' rule needs {', '.join(missing)}: add {examples}")
        stray = sorted(
            k for k in ("metric", "threshold", "after_step", "within_hours", "minutes")
            if getattr(self, k) is not None and k not in required | optional
        )
        if stray:
            raise ValueError(
                f"{', '.join(stray)} does not apply to a '{self.kind.value}' rule: remove it"
            )
        return self

    def applies_to(self, run_id: str) -> bool:
        return self.runs is None or run_id in self.runs


class Deliverable(_Model):
    id: Identifier
    run: str | None = None
    kind: DeliverableKind
    path: str = Field(min_length=1)
    expect_ids: str | None = None
    reload: str | None = None


class Expense(_Model):
    label: str = Field(min_length=1)
    usd: Money


class CampaignModel(_Model):
    schema_: int = Field(alias="schema")
    id: Identifier
    question: str | None = None
    corpus: str | None = None
    corpus_sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    closing: Closing | None = None
    lot: Lot
    calendar: CalendarSettings = Field(default_factory=CalendarSettings)
    tasks: list[Task] = Field(default_factory=list, alias="task")
    runs: list[Run] = Field(default_factory=list, alias="run")
    pilot: Pilot | None = None
    stop_rules: list[StopRule] = Field(default_factory=list, alias="stop_rule")
    deliverables: list[Deliverable] = Field(default_factory=list, alias="deliverable")
    expenses: list[Expense] = Field(default_factory=list, alias="expense")

    @field_validator("schema_")
    @classmethod
    def _known_schema(cls, value: int) -> int:
        if value != SCHEMA:
            raise ValueError(f"this cockpit reads schema {SCHEMA} (got {value}); write schema = 1")
        return value


# ---------------------------------------------------------------- the loaded campaign


@dataclass(frozen=True)
class Campaign:
    """A validated campaign and where it lives."""

    model: CampaignModel
    directory: Path
    text: str
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def file(self) -> Path:
        return self.directory / CAMPAIGN_FILE

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def id(self) -> str:
        return self.model.id

    @property
    def lot(self) -> Lot:
        return self.model.lot

    @property
    def runs(self) -> list[Run]:
        return self.model.runs

    @cached_property
    def items(self) -> list[Task | Run]:
        """Tasks and runs in file order: the calendar's items (computed once; the engine asks every tick)."""
        return _file_order(self.model, self.text)

    def run(self, run_id: str) -> Run | None:
        return next((r for r in self.model.runs if r.id == run_id), None)

    def rule(self, rule_id: str) -> StopRule | None:
        return next((r for r in self.model.stop_rules if r.id == rule_id), None)

    def deliverable(self, deliverable_id: str) -> Deliverable | None:
        return next((d for d in self.model.deliverables if d.id == deliverable_id), None)

    @property
    def price(self) -> Decimal:
        price = self.model.lot.price
        assert price is not None, "load_campaign refuses a lot without a price"
        return price


def _file_order(model: CampaignModel, text: str) -> list[Task | Run]:
    """Tasks and runs interleaved as they appear in the file (tables of arrays keep their own order)."""
    headers = [m.group(1) for m in re.finditer(r"(?m)^\s*\[\[\s*(task|run)\s*\]\]", text)]
    tasks, runs = iter(model.tasks), iter(model.runs)
    ordered: list[Task | Run] = []
    for header in headers:
        item = next(tasks if header == "task" else runs, None)
        if item is not None:
            ordered.append(item)
    ordered.extend(tasks)
    ordered.extend(runs)
    return ordered


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


def _place(raw: dict[str, Any], table: str, index: int | None) -> str:
    if table in _ARRAY_TABLES and index is None:
        return table
    if table in _ARRAY_TABLES:
        items = raw.get(table)
        item_id = None
        if isinstance(items, list) and index is not None and index < len(items):
            entry = items[index]
            if isinstance(entry, dict):
                item_id = entry.get("id") if table != "expense" else entry.get("label")
        if isinstance(item_id, str) and item_id:
            return f"[[{table}]] '{item_id}'"
        return f"[[{table}]] #{(index or 0) + 1}"
    return f"[{table}]" if table else ""


def _describe(error: dict[str, Any], raw: dict[str, Any]) -> tuple[str, int | None, str | None, str]:
    """(table, index, key, message) for one pydantic error."""
    loc = list(error["loc"])
    table, index = "", None
    if loc and isinstance(loc[0], str) and loc[0] in _ARRAY_TABLES | {"lot", "calendar", "closing", "pilot"}:
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
    if kind == "missing":
        message = "is missing; add it"
    elif kind == "extra_forbidden":
        message = f"is not a key of schema {SCHEMA}; check its spelling or remove it"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        words = {
            "greater_than": ("greater than", "gt"),
            "greater_than_equal": ("at least", "ge"),
            "less_than": ("less than", "lt"),
            "less_than_equal": ("at most", "le"),
        }[kind]
        limit = ctx.get(words[1])
        message = f"must be {words[0]} {limit:g}{got}" if isinstance(limit, (int, float)) else f"must be {words[0]} {limit}{got}"
    elif kind == "enum":
        message = f"must be one of {ctx.get('expected', '').replace(chr(39), '')}{got}"
    elif kind == "string_pattern_mismatch" and key == "id":
        message = f"must start with a letter or digit and hold only letters, digits, . _ / -{got}"
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
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        message = f"must be a table{got}"
    elif kind == "too_short":
        message = "must not be empty" + got
    else:
        message = f"{error['msg'].rstrip('.')}{got}".replace("Value error, ", "")
    if index is None and table in _ARRAY_TABLES and not key_path:
        message = f"must be an array of tables written [[{table}]]{got}"
    return table, index, key_path or None, message


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
        notes.append("no [closing] table: nothing says what lets the campaign close (§1); add metric, direction and threshold")
    if not model.runs:
        notes.append("no [[run]]: nothing will be monitored")
    if not any(r.role is Role.control for r in model.runs) and model.runs:
        notes.append("no run has role = \"control\": a variant is compared with nothing")
    return notes


# ---------------------------------------------------------------- loading


def read_campaign_text(text: str, directory: Path, file_label: str = CAMPAIGN_FILE) -> Campaign:
    """Parse and validate campaign TOML text; raise CampaignError naming every problem."""
    try:
        raw = tomllib.loads(text)
    except RecursionError:
        raise CampaignError([Finding(file_label, "", "not valid for a campaign: arrays or tables nested too deep to read")]) from None
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        match = re.search(r"\(at line (\d+), column (\d+)\)", message)
        line = int(match.group(1)) if match else None
        detail = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        if match:
            detail += f" at column {match.group(2)}"
        raise CampaignError([Finding(file_label, "", f"not valid TOML: {detail}", line)]) from None

    locator = _Locator(text)
    findings: list[Finding] = []

    def add(table: str, index: int | None, key: str | None, message: str) -> None:
        where = _place(raw, table, index)
        if key:
            where = f"{where} → {key}" if where else key
        findings.append(Finding(file_label, where, message, locator.line(table, index or 0, key.split(".")[0] if key else None)))

    try:
        model = CampaignModel.model_validate(raw)
    except RecursionError:
        raise CampaignError([Finding(file_label, "", "not valid for a campaign: values nested too deep to read")]) from None
    except ValidationError as error:
        for problem in error.errors(include_url=False):
            table, index, key, message = _describe(problem, raw)
            add(table, index, key, message)
        raise CampaignError(findings) from None
    _cross_checks(model, add)
    if findings:
        raise CampaignError(findings)
    return Campaign(model=model, directory=directory, text=text, warnings=tuple(_warnings(model)))


def load_campaign(directory: str | Path) -> Campaign:
    """Load `DIR/campaign.toml` (or a path to the file itself)."""
    path = Path(directory)
    if path.is_file() or path.suffix == ".toml":
        directory, file = path.parent, path
    else:
        directory, file = path, path / CAMPAIGN_FILE
    label = str(file)
    if not directory.exists():
        raise CampaignError([Finding(str(directory), "", "no such folder; give the folder that holds campaign.toml")])
    if not file.is_file():
        raise CampaignError([Finding(label, "", f"no campaign file here; create {CAMPAIGN_FILE} (see README: file formats) or give the folder that holds it")])
    try:
        data = file.read_bytes()
    except OSError as error:
        raise CampaignError([Finding(label, "", f"cannot be read: {error.strerror}")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise CampaignError([Finding(label, "", "is not UTF-8 text; save it as UTF-8", line)]) from None
    return read_campaign_text(text, directory.resolve(), label)
