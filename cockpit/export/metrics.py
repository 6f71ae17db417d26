"""The Prometheus metrics of one snapshot: a custom collector whose `collect()` turns the latest
snapshot into metric families. Names are in base units (seconds, bytes, ratios, watts, celsius);
the lot's price is the price of the lot, never a rate.

Labels come from bounded sets only: run ids and rule ids the campaign declares (plus the
built-in alerts), metric names its rules and closing read, the fixed run states, the GPUs' index
and UUID. A label value from anywhere else (an alert on an unknown rule, a metric a run invents)
is counted under `other`, never copied: a run cannot grow the series without end."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from cockpit.live.snapshot import Snapshot
from cockpit.plan.campaign import Campaign

OTHER = "other"  # the label value of anything outside the campaign's bounded sets
# The alerts no [[stop_rule]] declares (a rule id outside these and the campaign's is `other`).
BUILT_IN_RULES = (
    "lot-window", "gpu-lost", "nvml-not-answering", "run-died", "stopped-still-running", "stream-unreadable",
    "pilot-due", "gpu-xid", "gpu-ecc", "gpu-throttled", "gpu-idle", "lot-unreachable",
)
# A run's states as the snapshot names them (cockpit_run_state is 1 for the current one, 0 for the rest).
RUN_STATES = ("planned", "running", "finished", "failed", "stopped", "ended", "unreadable")


@dataclass(frozen=True)
class LabelSets:
    """The bounded label values of one campaign."""

    runs: frozenset[str]
    rules: frozenset[str]
    metrics: tuple[str, ...]  # the metric names exported per run, in a stable order

    @classmethod
    def of(cls, campaign: Campaign) -> LabelSets:
        rules = campaign.model.stop_rules
        metrics: list[str] = ["loss"]
        closing = campaign.model.closing
        if closing is not None:
            metrics.append(closing.metric)
        metrics += [rule.metric for rule in rules if getattr(rule, "metric", None)]
        return cls(
            runs=frozenset(run.id for run in campaign.runs),
            rules=frozenset(rule.id for rule in rules) | frozenset(BUILT_IN_RULES),
            metrics=tuple(dict.fromkeys(metrics)),
        )

    def run(self, run_id: str | None) -> str:
        if not run_id:
            return ""  # an alert about the lot or a GPU: no run
        return run_id if run_id in self.runs else OTHER

    def rule(self, rule_id: str) -> str:
        return rule_id if rule_id in self.rules else OTHER


def _number(value: object) -> float | None:
    """A metric value as a float (NaN and infinities kept: Prometheus carries them), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


Row = tuple[tuple[str, ...], float]


@dataclass(frozen=True)
class Series:
    """One metric family as plain data: rendered straight to text (fast), or as a prometheus_client family."""

    name: str
    documentation: str
    labels: tuple[str, ...]
    rows: list[Row]
    kind: str = "gauge"  # or "counter" (its name ends in `_total`)


def series(snapshot: Snapshot, labels: LabelSets) -> list[Series]:
    """Every metric family of one snapshot."""
    clock, lot = snapshot.clock, snapshot.lot
    out: list[Series] = []

    def single(name: str, documentation: str, value: float | None) -> None:
        if value is not None:
            out.append(Series(name, documentation, (), [((), float(value))]))

    out.append(Series("cockpit_lot_info", "The lot being watched: its campaign and GPU model (value 1).",
                      ("campaign", "gpu_model"), [((lot.campaign_id, lot.gpu_model), 1.0)]))
    hours = 3600.0
    single("cockpit_lot_elapsed_seconds", "Time since the lot started.",
           None if clock.elapsed_hours is None else clock.elapsed_hours * hours)
    single("cockpit_lot_remaining_seconds", "Time left to the lot's end.",
           None if clock.remaining_hours is None else clock.remaining_hours * hours)
    single("cockpit_lot_window_seconds", "The lot's whole window.", clock.window_hours * hours)
    single("cockpit_plan_remaining_seconds", "Committed work left in the plan, re-estimated from measured progress.",
           None if clock.committed_remaining_hours is None else clock.committed_remaining_hours * hours)
    single("cockpit_projected_finish_timestamp_seconds", "When the remaining plan ends, retrieval included (Unix time).",
           None if clock.projected_finish is None else clock.projected_finish.timestamp())
    single("cockpit_lot_end_timestamp_seconds", "When the lot ends (Unix time).", None if lot.end is None else lot.end.timestamp())
    single("cockpit_lot_fits", "1 when the projected finish (retrieval included) is before the lot's end, else 0.",
           None if clock.fits is None else float(clock.fits))
    single("cockpit_lot_price_usd", "The price of the whole lot (not a rate).", float(lot.price_usd))
    single("cockpit_lot_gpus", "GPUs in the lot.", float(lot.gpus))
    single("cockpit_snapshot_timestamp_seconds", "When the snapshot these metrics come from was taken (Unix time).",
           snapshot.taken_at.timestamp())

    # Alerts: how many are active per (rule, run); a GPU's alerts carry no run.
    active: dict[tuple[str, str], int] = {}
    for alert in snapshot.alerts:
        if not alert.acknowledged:
            key = (labels.rule(alert.rule), labels.run(alert.run))
            active[key] = active.get(key, 0) + 1
    out.append(Series("cockpit_alerts_active", "Active (unacknowledged) alerts per rule and run.", ("rule", "run"),
                      [(key, float(count)) for key, count in sorted(active.items())]))

    step: list[Row] = []
    total: list[Row] = []
    metric: list[Row] = []
    state: list[Row] = []
    for run in snapshot.runs:
        run_id = labels.run(run.id)
        if run_id == OTHER:
            continue
        if run.step is not None:
            step.append(((run_id,), float(run.step)))
        if run.total_steps is not None:
            total.append(((run_id,), float(run.total_steps)))
        for name in labels.metrics:
            value = _number(run.last.get(name))
            if value is not None:
                metric.append(((run_id, name), value))
        current = run.state if run.state in RUN_STATES else OTHER
        for name in (*RUN_STATES, OTHER) if current == OTHER else RUN_STATES:
            state.append(((run_id, name), 1.0 if name == current else 0.0))
    out += [
        Series("cockpit_run_step", "The last step a run reported.", ("run",), step),
        Series("cockpit_run_total_steps", "The steps a run is planned for.", ("run",), total),
        Series("cockpit_run_metric", "The last value of a metric the campaign's rules or closing read.", ("run", "metric"), metric),
        Series("cockpit_run_state", "1 for a run's current state, 0 for the others.", ("run", "state"), state),
    ]
    out += _gpu_series(snapshot)
    return out


def _gpu_series(snapshot: Snapshot) -> list[Series]:
    names = ("gpu", "uuid")
    lost: list[Row] = []
    readings: dict[str, list[Row]] = {key: [] for key in _GPU_FAMILIES}
    health: dict[str, list[Row]] = {key: [] for key in _HEALTH_FAMILIES}
    for gpu in snapshot.gpus:
        key = (str(gpu.index), getattr(gpu, "uuid", None) or "")
        lost.append((key, float(gpu.lost)))
        if gpu.lost:
            continue
        for name, value in (
            ("cockpit_gpu_utilization_ratio", None if gpu.utilization_percent is None else gpu.utilization_percent / 100.0),
            ("cockpit_gpu_memory_used_bytes", gpu.memory_used_bytes),
            ("cockpit_gpu_memory_total_bytes", gpu.memory_total_bytes),
            ("cockpit_gpu_temperature_celsius", gpu.temperature_c),
            ("cockpit_gpu_power_watts", gpu.power_watts),
            ("cockpit_gpu_power_limit_watts", gpu.power_limit_watts),
        ):
            number = _number(value)
            if number is not None and not math.isnan(number):
                readings[name].append((key, number))
        _health_rows(key, gpu.health, health)
    return [
        Series("cockpit_nvml_available", "1 when NVML answers, else 0.", (), [((), float(snapshot.nvml.available))]),
        Series("cockpit_gpu_lost", "1 when a GPU is lost (fallen off the bus, not answering).", names, lost),
    ] + [Series(name, documentation, names, readings[name]) for name, documentation in _GPU_FAMILIES.items()] + [
        Series(name, documentation, names + extra, health[name], kind)
        for name, (kind, extra, documentation, _) in _HEALTH_FAMILIES.items()
    ]


# The GPU health counters, as NVML reports them (raw, not deltas since the lot's first sample:
# Prometheus' rate() and increase() take the deltas and see a reset). Each: the kind, the extra
# label, the help text and (counters field, label value) pairs. A field the GPU does not report
# is left out, never written as 0.
_HEALTH_FAMILIES: dict[str, tuple[str, tuple[str, ...], str, tuple[tuple[str, str], ...]]] = {
    "cockpit_gpu_ecc_errors_total": (
        "counter", ("type",),
        "ECC errors in the GPU's memory, NVML's volatile count (raw: since the driver loaded; a driver reload resets it).",
        (("ecc_corrected", "corrected"), ("ecc_uncorrected", "uncorrected"))),
    "cockpit_gpu_remapped_rows": (
        "gauge", ("cause",),
        "Memory rows the GPU has remapped, by the errors that caused it (kept across reboots).",
        (("remapped_correctable", "correctable"), ("remapped_uncorrectable", "uncorrectable"))),
    "cockpit_gpu_row_remap_pending": (
        "gauge", (), "1 when a row remap waits for the GPU's next reset, else 0.", (("remap_pending", ""),)),
    "cockpit_gpu_row_remap_failed": (
        "gauge", (), "1 when a row remap failed (the GPU is out of spare rows), else 0.", (("remap_failed", ""),)),
    "cockpit_gpu_retired_pages": (
        "gauge", ("cause",), "Memory pages retired (GPUs before row remapping), by the ECC errors that caused it.",
        (("retired_pages_single", "single_bit"), ("retired_pages_double", "double_bit"))),
    "cockpit_gpu_pcie_replays_total": (
        "counter", (), "PCIe replays, NVML's count (raw: since the driver loaded).", (("pcie_replays", ""),)),
    "cockpit_gpu_slowdown_seconds_total": (
        "counter", ("reason",), "Time the GPU spent slowed down by its power or thermal limits, NVML's count (raw: since the driver loaded).",
        (("power_slowdown_s", "power"), ("thermal_slowdown_s", "thermal"))),
    "cockpit_gpu_energy_joules_total": (
        "counter", (), "Energy the GPU drew, NVML's count (raw: since the driver loaded).", (("energy_j", ""),)),
}


def _health_rows(key: tuple[str, str], health: dict | None, rows: dict[str, list[Row]]) -> None:
    counters = health.get("counters") if isinstance(health, dict) else None
    if not isinstance(counters, dict):
        return
    for name, (_, extra, _, fields) in _HEALTH_FAMILIES.items():
        for field, label in fields:
            value = counters.get(field)
            number = float(value) if isinstance(value, bool) else _number(value)
            if number is not None and not math.isnan(number):
                rows[name].append(((*key, label) if extra else key, number))


_GPU_FAMILIES = {
    "cockpit_gpu_utilization_ratio": "GPU utilization, 0 to 1.",
    "cockpit_gpu_memory_used_bytes": "GPU memory in use.",
    "cockpit_gpu_memory_total_bytes": "GPU memory in all.",
    "cockpit_gpu_temperature_celsius": "GPU temperature.",
    "cockpit_gpu_power_watts": "GPU power draw.",
    "cockpit_gpu_power_limit_watts": "GPU power limit.",
}


def families(snapshot: Snapshot, labels: LabelSets) -> list[Metric]:
    """The metric families of one snapshot as prometheus_client objects (for any registry)."""
    out = []
    for item in series(snapshot, labels):
        kind = CounterMetricFamily if item.kind == "counter" else GaugeMetricFamily
        family = kind(item.name, item.documentation, labels=list(item.labels))
        for values, value in item.rows:
            family.add_metric(list(values), value)
        out.append(family)
    return out


class SnapshotCollector(Collector):
    """Yields the metric families of whatever snapshot `latest()` returns (nothing before the first)."""

    def __init__(self, labels: LabelSets, latest: Callable[[], Snapshot | None]):
        self.labels = labels
        self.latest = latest

    def collect(self) -> Iterator[Metric]:
        snapshot = self.latest()
        if snapshot is not None:
            yield from families(snapshot, self.labels)


def registry_for(labels: LabelSets, latest: Callable[[], Snapshot | None]) -> CollectorRegistry:
    """A registry of the cockpit's metrics only (no process or platform collectors: the box's own
    exporter, if any, reports those)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(labels, latest))
    return registry


def _label_value(text: str) -> str:
    if "\\" in text or '"' in text or "\n" in text:
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return text


def _value(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


_PREFIXES: dict[str, dict[tuple[str, ...], str]] = {}  # per family: `name{labels} ` of each series seen
_MAX_PREFIXES = 10_000  # per family; label values are bounded, so never reached: a guard all the same
_CONSTANTS = {0.0: "0.0", 1.0: "1.0"}


def _prefix(name: str, names: tuple[str, ...], values: tuple[str, ...]) -> str:
    pairs = ",".join(f'{label}="{_label_value(text)}"' for label, text in zip(names, values))
    return f"{name}{{{pairs}}} "


def exposition(snapshot: Snapshot, labels: LabelSets) -> bytes:
    """The Prometheus text format (0.0.4) of one snapshot: what `/metrics` serves and `--textfile`
    writes. Written directly from the series (each series' `name{labels} ` made once and kept:
    its label values are bounded): prometheus_client's `generate_latest` gives the same text but
    takes about ten times as long, and a scrape must stay within 2 ms."""
    lines: list[str] = []
    add = lines.append
    constants = _CONSTANTS
    for item in series(snapshot, labels):
        name, names = item.name, item.labels
        add(f"# HELP {name} {item.documentation}\n# TYPE {name} {item.kind}")
        if not names:
            for _, value in item.rows:
                add(f"{name} {_value(value)}")
            continue
        prefixes = _PREFIXES.setdefault(name, {})
        if len(prefixes) > _MAX_PREFIXES:
            prefixes.clear()
        for values, value in item.rows:
            prefix = prefixes.get(values)
            if prefix is None:
                prefix = prefixes[values] = _prefix(name, names, values)
            add(prefix + (constants.get(value) or _value(value)))
    add("")
    return "\n".join(lines).encode()
