"""The campaign (`campaign.toml`, schema 1): its typed tables.

The tables are plain frozen dataclasses, so the engine, `status` and the TUI hold no pydantic
objects. Their constraints are written as annotations (`hours: PositiveHours`, `Gt(0)`: see
`cockpit.plan.values`) that `cockpit.plan.schema` hands to pydantic when it validates a file,
naming the file, the table, the item id and the key of every problem; `cockpit.plan.load` reads
the file.

Building a table directly (`StopRule(id=..., kind="below", ...)`, as tests do) converts enum
texts and runs the checks across fields (`__post_init__`), but not the per-field constraints
and conversions: those are pydantic's, in `cockpit.plan.schema`."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

from annotated_types import Ge, Gt, Le, MinLen

from cockpit.common.layout import CAMPAIGN_FILE, CHECKPOINTS_DIR, METRICS_FILE, RUNS_DIR
from cockpit.plan import catalog
from cockpit.plan.values import (
    _ID,
    ID_PATTERN,
    ID_RULE,
    MAX_GPU_INDEX,
    MAX_HOURS,
    MAX_STEPS,
    DeliverableId,
    Finite,
    Identifier,
    LotStart,
    Money,
    Pattern,
    PositiveHours,
    SchemaVersion,
    _shown,
)

# ---------------------------------------------------------------- paths derived from ids


def is_safe_id(value: object) -> bool:
    """Whether `value` is a plain name by ID_PATTERN (a run, task or stop rule id)."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def is_inside(directory: str | Path, path: str | Path) -> bool:
    """Whether `path` (relative paths against `directory`) stays in `directory`, read as written:
    `..` counts, symbolic links are not followed (a `runs/` linked to a scratch disk is inside)."""
    base = os.path.normpath(os.path.abspath(directory))
    full = os.path.normpath(os.path.join(base, path))
    return os.path.commonpath([base, full]) == base


def campaign_path(directory: str | Path, *names: str) -> Path:
    """`directory/names…` for a path the cockpit derives from ids: each name a plain name, and the
    whole inside the campaign folder, or ValueError."""
    for name in names:
        if not name or name in (".", "..") or "/" in name or "\\" in name or not name.isprintable():
            raise ValueError(f"{name!r} is not a plain file name: a path derived from it would leave the campaign folder")
    path = Path(directory).joinpath(*names)
    if not is_inside(directory, path):
        raise ValueError(f"{path} is outside the campaign folder {directory}")
    return path


def run_path(directory: str | Path, run_id: str, *names: str) -> Path:
    """runs/<run id>/names… in the campaign folder; an id that is not a plain name is refused."""
    if not is_safe_id(run_id):
        raise ValueError(
            f"{_shown(run_id)} is not a run id: write {ID_RULE} (the pattern {ID_PATTERN}), e.g. \"ctrl-r1\"; "
            "a path derived from it could leave the campaign folder"
        )
    return campaign_path(directory, RUNS_DIR, run_id, *names)


# ---------------------------------------------------------------- errors


_CLAUSE = re.compile(r";\s+|:\s+(?=(?:add|write|remove|check|give|create|save|make|use)\b)")
_FIX_VERBS = ("add", "write", "remove", "check", "give", "create", "save", "make", "use", "run")


@dataclass(frozen=True)
class CampaignFinding:
    """One thing wrong with a campaign file, ready to print."""

    file: str
    where: str  # "[[run]] 'v1' → hours", "[lot] → price_usd", "" for the file itself
    message: str
    line: int | None = None
    # the parts of `where`, for `check --json`: "run", "v1" (or "#2"), "hours"; None where none applies
    table: str | None = None
    item: str | None = None
    key: str | None = None

    @property
    def fix(self) -> str:
        """How to fix it: the message's own advice ("add it", "write gpus = 1"), else where to read."""
        for clause in _CLAUSE.split(self.message):
            if clause.lower().startswith(_FIX_VERBS):
                return clause.rstrip(".")
        wanted = re.match(r"must (be|not be) (.+?)(?: \(got .*\))?$", self.message, re.DOTALL)
        if wanted and self.key:
            return f"make {self.key} {'not ' if wanted.group(1) == 'not be' else ''}{wanted.group(2)}"
        if self.table:
            return f"see the [{self.table}] table in docs/campaign-file.md"
        return "see docs/campaign-file.md"

    def as_json(self) -> dict[str, Any]:
        return {
            "file": self.file, "line": self.line, "table": self.table, "item": self.item, "key": self.key,
            "where": self.where, "message": self.message, "fix": self.fix,
        }

    def __str__(self) -> str:
        text = f"{self.file}: {self.where}: {self.message}" if self.where else f"{self.file}: {self.message}"
        return f"{text} (line {self.line})" if self.line else text


class CampaignError(Exception):
    """The campaign cannot be used as it is; `findings` says every reason."""

    def __init__(self, findings: list[CampaignFinding]):
        self.findings = findings
        super().__init__("\n".join(str(f) for f in findings))


# ---------------------------------------------------------------- value types


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


# pydantic reads this from each table: an unknown key is an error, not silently dropped
_STRICT_KEYS = {"extra": "forbid"}


def _as_enums(item: Any, **kinds: type[Enum]) -> None:
    """Enum fields given as their text (`kind="machine"`) become the enum, as validation makes them."""
    for name, kind in kinds.items():
        value = getattr(item, name)
        if not isinstance(value, kind):
            object.__setattr__(item, name, kind(value))


# ---------------------------------------------------------------- tables


@dataclass(frozen=True, kw_only=True)
class Closing:
    """[closing]: the metric, direction and threshold that let the campaign close."""

    __pydantic_config__ = _STRICT_KEYS

    metric: Annotated[str, MinLen(1)]
    direction: Direction
    threshold: Annotated[float, Finite]

    def __post_init__(self) -> None:
        _as_enums(self, direction=Direction)


@dataclass(frozen=True, kw_only=True)
class Lot:
    """[lot]: the GPU box rented for a fixed price and a fixed number of days."""

    __pydantic_config__ = _STRICT_KEYS

    order_ref: str | None = None
    gpu_model: Annotated[str, MinLen(1)]
    gpus: Annotated[int | None, Ge(1), Le(64)] = None
    days: Annotated[int, Gt(0), Le(3660)]
    price_usd: Money | None = None
    start: LotStart = None

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


def _default_warnings() -> list[float]:
    return [6.0, 1.0]


@dataclass(frozen=True, kw_only=True)
class CalendarSettings:
    """[calendar]: retrieval time at the end and the warnings before the lot ends."""

    __pydantic_config__ = _STRICT_KEYS

    retrieval_hours: Annotated[float, Ge(0), Le(MAX_HOURS), Finite] = 0.0
    warn_before_end_hours: list[PositiveHours] = field(default_factory=_default_warnings)


@dataclass(frozen=True, kw_only=True)
class HealthSettings:
    """[health]: when the built-in GPU alerts gpu-throttled and gpu-idle fire."""

    __pydantic_config__ = _STRICT_KEYS

    throttle_percent: Annotated[float, Gt(0), Le(100), Finite] = 20.0  # share of the window in power/thermal slowdown
    throttle_minutes: Annotated[float, Gt(0), Le(MAX_HOURS * 60), Finite] = 10.0  # the window
    idle_percent: Annotated[float, Gt(0), Le(100), Finite] = 5.0  # utilization under this counts as idle
    idle_minutes: Annotated[float, Gt(0), Le(MAX_HOURS * 60), Finite] = 10.0  # idle this long while a run runs


@dataclass(frozen=True, kw_only=True)
class Task:
    """[[task]]: human or machine work on the calendar that is not a monitored run."""

    __pydantic_config__ = _STRICT_KEYS

    id: Identifier
    kind: TaskKind
    tier: Tier = Tier.indispensable
    hours: PositiveHours
    gpus: list[Annotated[int, Ge(0), Le(MAX_GPU_INDEX)]] | None = None
    after: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        _as_enums(self, kind=TaskKind, tier=Tier)
        if self.kind is TaskKind.human and self.gpus:
            raise ValueError(
                "a human task occupies no GPU: remove `gpus`, or make it kind = \"machine\""
            )
        if self.gpus is not None and self.kind is TaskKind.machine and not self.gpus:
            raise ValueError("a machine task needs at least one GPU, e.g. gpus = [0]")

    @property
    def machine(self) -> bool:
        return self.kind is TaskKind.machine

    @property
    def gpu_list(self) -> list[int]:
        if not self.machine:
            return []
        return sorted(set(self.gpus)) if self.gpus else [0]


def _first_gpu() -> list[int]:
    return [0]


@dataclass(frozen=True, kw_only=True)
class Run:
    """[[run]]: one training run, its GPUs, planned hours and where it writes its metrics."""

    __pydantic_config__ = _STRICT_KEYS

    id: Identifier
    role: Role
    tier: Tier = Tier.indispensable
    hours: PositiveHours
    gpus: Annotated[list[Annotated[int, Ge(0), Le(MAX_GPU_INDEX)]], MinLen(1)] = field(default_factory=_first_gpu)
    after: list[str] = field(default_factory=list)
    total_steps: Annotated[int | None, Gt(0), Le(MAX_STEPS)] = None
    metrics: str | None = None
    checkpoints: str | None = None

    def __post_init__(self) -> None:
        _as_enums(self, role=Role, tier=Tier)

    @property
    def machine(self) -> bool:
        return True

    @property
    def gpu_list(self) -> list[int]:
        return sorted(set(self.gpus))

    def metrics_path(self, directory: Path) -> Path:
        """`metrics` as written (it may point elsewhere on purpose), else runs/<id>/metrics.jsonl."""
        return directory / self.metrics if self.metrics else run_path(directory, self.id, METRICS_FILE)

    def checkpoints_path(self, directory: Path) -> Path:
        return directory / self.checkpoints if self.checkpoints else run_path(directory, self.id, CHECKPOINTS_DIR)


class NotifyKind(str, Enum):
    """What [notify] `on` may name: the events that go out as notifications."""

    alert = "alert"  # a stop rule or a built-in alert (the lot's window warnings aside)
    stop = "stop"  # a stop recorded (by a key, the command line or a stop rule)
    window = "window"  # the lot's window warnings (`lot-window`)
    closed = "closed"  # the campaign closed


def _default_notify_kinds() -> list[NotifyKind]:
    return [NotifyKind.alert, NotifyKind.stop]


@dataclass(frozen=True, kw_only=True)
class NotifySettings:
    """[notify]: what is sent off the box, how often at most, and the heartbeat. The channels
    (apprise URLs, which hold secrets) are the user's, never in this shared file."""

    __pydantic_config__ = _STRICT_KEYS

    on: list[NotifyKind] = field(default_factory=_default_notify_kinds)
    min_interval_minutes: Annotated[float, Ge(0), Le(1440), Finite] = 0.0
    heartbeat_url: Annotated[str | None, MinLen(1)] = None
    heartbeat_minutes: Annotated[float, Gt(0), Le(1440), Finite] = 5.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "on", [k if isinstance(k, NotifyKind) else NotifyKind(k) for k in self.on])


@dataclass(frozen=True, kw_only=True)
class Pilot:
    """[pilot]: the run whose first hours decide whether the campaign goes on."""

    __pydantic_config__ = _STRICT_KEYS

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


@dataclass(frozen=True, kw_only=True)
class StopRule:
    """[[stop_rule]]: a rule written before the trials; `action = "stop"` stops the run."""

    __pydantic_config__ = _STRICT_KEYS

    id: Identifier
    kind: RuleKind
    action: Action = Action.alert
    runs: list[str] | None = None
    metric: Annotated[str | None, MinLen(1)] = None
    threshold: Annotated[float | None, Finite] = None
    after_step: Annotated[int | None, Ge(0), Le(MAX_STEPS)] = None
    within_hours: Annotated[float | None, Gt(0), Le(MAX_HOURS), Finite] = None
    minutes: Annotated[float | None, Gt(0), Le(MAX_HOURS * 60), Finite] = None

    def __post_init__(self) -> None:
        _as_enums(self, kind=RuleKind, action=Action)
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

    def applies_to(self, run_id: str) -> bool:
        return self.runs is None or run_id in self.runs


@dataclass(frozen=True, kw_only=True)
class Deliverable:
    """[[deliverable]]: an output the closing verifies and prices."""

    __pydantic_config__ = _STRICT_KEYS

    id: DeliverableId
    run: str | None = None
    kind: DeliverableKind
    path: Annotated[str, MinLen(1)]
    expect_ids: str | None = None
    reload: str | None = None

    def __post_init__(self) -> None:
        _as_enums(self, kind=DeliverableKind)


@dataclass(frozen=True, kw_only=True)
class Expense:
    """[[expense]]: a cost besides the lot, counted in the cost per deliverable."""

    __pydantic_config__ = _STRICT_KEYS

    label: Annotated[str, MinLen(1)]
    usd: Money


# the TOML keys of the campaign's own table where they differ from the attribute names
_TOML_KEYS = {
    "schema_": "schema",
    "tasks": "task",
    "runs": "run",
    "stop_rules": "stop_rule",
    "deliverables": "deliverable",
    "expenses": "expense",
}


def _toml_key(name: str) -> str:
    return _TOML_KEYS.get(name, name)


@dataclass(frozen=True, kw_only=True)
class CampaignModel:
    """The whole file, as validated."""

    # the TOML keys; the attribute names are accepted too, as the schema has always read them
    __pydantic_config__ = {**_STRICT_KEYS, "alias_generator": _toml_key, "validate_by_alias": True, "validate_by_name": True}

    schema_: SchemaVersion
    id: Identifier
    question: str | None = None
    corpus: str | None = None
    corpus_sha256: Annotated[str | None, Pattern(r"^[0-9a-fA-F]{64}$")] = None
    closing: Closing | None = None
    lot: Lot
    calendar: CalendarSettings = field(default_factory=CalendarSettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    tasks: list[Task] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    pilot: Pilot | None = None
    stop_rules: list[StopRule] = field(default_factory=list)
    deliverables: list[Deliverable] = field(default_factory=list)
    expenses: list[Expense] = field(default_factory=list)
    notify: NotifySettings = field(default_factory=NotifySettings)


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

    def outside_paths(self) -> list[tuple[str, Path]]:
        """(what, path) for each path written in campaign.toml that leads outside the campaign
        folder — often on purpose (training writes to a scratch disk), but worth seeing; a path
        named twice is listed once, for its first user."""
        written: list[tuple[str, str | None]] = []
        for run in self.model.runs:
            written += [(f"metrics of run {run.id}", run.metrics), (f"checkpoints of run {run.id}", run.checkpoints)]
        for deliverable in self.model.deliverables:
            written += [(f"path of deliverable {deliverable.id}", deliverable.path),
                        (f"expected ids of deliverable {deliverable.id}", deliverable.expect_ids)]
        found: dict[Path, str] = {}
        for what, path in written:
            if path and not is_inside(self.directory, path):
                found.setdefault(Path(os.path.normpath(os.path.join(self.directory, path))), what)
        return [(what, path) for path, what in found.items()]

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
