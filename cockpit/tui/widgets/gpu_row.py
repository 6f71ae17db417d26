"""One GPU's lines: utilization and memory sparklines with their current values, temperature,
power, and the clock-slowdown reasons or the loss of the GPU on a line of its own when there is
one. One line per GPU (memory as a number) when the panel is too short for two.

Below, only when there is something to say: on a MIG GPU each instance's memory (NVML reports no
utilization for MIG, so none is drawn: never a 0 %); the health counters' deltas since the lot's
first sample (marked "!" when an uncorrected ECC error or a row-remap failure is among them); the
GPU's processes when their pids are not visible here (a container). Plain functions of the GPU's
view: the GPU panel's one widget (`GpuLines`) draws every GPU's lines and makes them once per new
sample, not per repaint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.style import Style
from rich.text import Text

from cockpit.common.text import escape_control
from cockpit.live.snapshot import GpuView
from cockpit.tui import format as fmt
from cockpit.tui.widgets.sparkline import sparkline_runs
from cockpit.tui.widgets.text_lines import Runs

LABEL_WIDTH = 7  # "0 util "
VALUE_WIDTH = 17  # " 100% 101°C 1000W"


COMPONENT_CLASSES = {"gpu-row--label", "gpu-row--low", "gpu-row--high", "gpu-row--problem", "gpu-row--lost"}

Extra = list[tuple[str, tuple[str, ...]]]


def row_height(gpu: GpuView, compact: bool, width: int, extra: Extra) -> int:
    """How many lines `row_lines` makes for the GPU in `compact` mode at `width`."""
    return 1 + (not compact and not gpu.lost) + bool(problem_text(gpu)) + sum(len(_wrap(items, width)) for _, items in extra)


def row_lines(gpu: GpuView, compact: bool, width: int, extra: Extra, style: Callable[[str], Style]) -> list[Text | Runs]:
    """The GPU's lines for `width` cells; `style` gives a component class's style."""
    label, low, high = style("gpu-row--label"), style("gpu-row--low"), style("gpu-row--high")
    spark_width = max(1, width - LABEL_WIDTH - VALUE_WIDTH)
    lines: list[Text | Runs] = []
    if gpu.mig and not gpu.lost:  # no utilization for MIG: words, not a bar or a 0 %
        utilization = Text(f"{gpu.index} ", label, no_wrap=True, end="")
        utilization.append(MIG_UTILIZATION)
        values = values_text(gpu, compact)
        if values:
            utilization.append(" " * max(1, width - utilization.cell_len - len(values)) + values)
    else:  # the lines that move every second, as runs (no Rich text to build and render)
        utilization = (
            (f"{gpu.index} util ".ljust(LABEL_WIDTH), label),
            *sparkline_runs(gpu.utilization_history, spark_width, low, high, label),
            (" " + utilization_text(gpu, compact), label),
        )
    lines.append(utilization)
    if not compact and not gpu.lost:
        lines.append((
            ("  mem".ljust(LABEL_WIDTH), label),
            *sparkline_runs(gpu.memory_history, spark_width, low, high, label),
            (" " + memory_text(gpu), label),
        ))
    problem = problem_text(gpu)
    if problem:
        lines.append(_styled(problem, style("gpu-row--lost" if gpu.lost else "gpu-row--problem")))
    for kind, items in extra:
        line_style = style("gpu-row--problem") if kind == "alarm" else label
        lines.extend(_styled(line, line_style) for line in _wrap(items, width))
    return lines


def utilization_text(gpu: GpuView, compact: bool = False) -> str:
    if gpu.lost:
        return "lost"
    parts = [fmt.percent(gpu.utilization_percent).lstrip() if compact else fmt.percent(gpu.utilization_percent)]
    if compact:
        used, total = gpu.memory_used_bytes, gpu.memory_total_bytes
        parts.append("mem " + fmt.percent(None if used is None or not total else used / total * 100).strip())
    if gpu.temperature_c is not None:
        parts.append(f"{gpu.temperature_c:.0f}°C")
    if gpu.power_watts is not None and not compact:
        parts.append(f"{gpu.power_watts:.0f}W")
    return " ".join(parts)


def values_text(gpu: GpuView, compact: bool = False) -> str:
    """Temperature and power, for a MIG GPU's first line (its memory is on the next ones)."""
    parts = []
    if gpu.temperature_c is not None:
        parts.append(f"{gpu.temperature_c:.0f}°C")
    if gpu.power_watts is not None and not compact:
        parts.append(f"{gpu.power_watts:.0f}W")
    return " ".join(parts)


def memory_text(gpu: GpuView) -> str:
    used, total = gpu.memory_used_bytes, gpu.memory_total_bytes
    share = None if used is None or not total else used / total * 100
    text = fmt.percent(share)
    if used is not None and total:
        text += f" {fmt.gib(used).rstrip('G')}/{fmt.gib(total)}"
    return text


def problem_text(gpu: GpuView) -> str:
    if gpu.lost:
        return f"  GPU {gpu.index} lost: its runs are not computing"
    if gpu.throttle_reasons:
        return "  slowed: " + escape_control(", ".join(gpu.throttle_reasons))
    return ""


def _styled(line: str, style: Any) -> Text:
    """A line in one style, as a span: Rich draws a Text without spans in no style of its own."""
    text = Text(line, no_wrap=True, end="")
    text.stylize(style)
    return text


MIG_UTILIZATION = "util not reported (MIG)"
ALARM = "!"  # reads without colour (NO_COLOR, the mono theme)
SEPARATOR = " · "
INDENT = "  "


def _wrap(items: tuple[str, ...], width: int) -> list[str]:
    """Items on lines of at most `width` cells, indented: each on the first line with room for it
    (the first item stays first); an item longer than a line gets one of its own (cut with an
    ellipsis when drawn)."""
    lines: list[str] = []
    for item in items:
        for k, line in enumerate(lines):
            if len(line) + len(SEPARATOR) + len(item) <= width:
                lines[k] = line + SEPARATOR + item
                break
        else:
            lines.append(INDENT + item)
    return lines


def extra_lines(gpu: GpuView) -> Extra:
    """(kind, items) of the lines below a GPU's own: "mig", "health" or "alarm", "processes".
    Width-free, so they are made once per sample and only wrapped per width."""
    if gpu.lost:
        return []
    out: Extra = []
    if gpu.mig_instances is not None:
        out.append(("mig", mig_items(gpu)))
    health = health_items(gpu)
    if health is not None:
        out.append(health)
    processes = container_items(gpu)
    if processes:
        out.append(("processes", processes))
    return out


def mig_items(gpu: GpuView) -> tuple[str, ...]:
    instances = gpu.mig_instances or ()
    if not instances:
        return ("MIG on: no instance reported",)
    items = []
    for k, instance in enumerate(instances):
        used, total = getattr(instance, "memory_used_bytes", None), getattr(instance, "memory_total_bytes", None)
        memory = f"{fmt.gib(used).rstrip('G')}/{fmt.gib(total)}" if used is not None and total else "mem n/a"
        items.append(("MIG " if k == 0 else "") + f"{getattr(instance, 'index', k)}: {memory}")
    return tuple(items)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def health_items(gpu: GpuView) -> tuple[str, tuple[str, ...]] | None:
    """The health counters' deltas since the lot's first sample, only the fields the GPU reports;
    None when it reports none. "alarm" when an uncorrected ECC error or a remap failure is among them."""
    health = gpu.health or {}
    since = health.get("since_start") or {}
    if not isinstance(since, dict) or not since:
        return None
    items = []
    alarm = False
    corrected, uncorrected = _count(since.get("ecc_corrected")), _count(since.get("ecc_uncorrected"))
    if corrected is not None or uncorrected is not None:
        parts = ["ECC"]
        if corrected is not None:
            parts.append(f"+{corrected} corr")
        if uncorrected is not None:
            parts.append(f"+{uncorrected} unc")
            alarm = alarm or uncorrected > 0
        items.append(" ".join(parts))
    rows = [n for n in (_count(since.get("remapped_correctable")), _count(since.get("remapped_uncorrectable"))) if n is not None]
    pending, failed = since.get("remap_pending"), since.get("remap_failed")
    if rows or isinstance(pending, bool) or isinstance(failed, bool):
        parts = ["remap"]
        if rows:
            parts.append(f"+{sum(rows)} rows")
        if isinstance(pending, bool):
            parts.append("PENDING" if pending else "0 pend")
        if isinstance(failed, bool):
            parts.append("FAILED" if failed else "0 fail")
            alarm = alarm or failed
        items.append(" ".join(parts))
    single, double = _count(since.get("retired_pages_single")), _count(since.get("retired_pages_double"))
    if single is not None or double is not None:
        parts = ["retired pages"]
        if single is not None:
            parts.append(f"+{single} sbe")
        if double is not None:
            parts.append(f"+{double} dbe")
        items.append(" ".join(parts))
    replays = _count(since.get("pcie_replays"))
    if replays is not None:
        items.append(f"PCIe +{replays}")
    power, thermal = since.get("power_slowdown_s"), since.get("thermal_slowdown_s")
    slowed = [f"{words} {fmt.age(float(value))}" for words, value in (("pwr", power), ("th", thermal))
              if isinstance(value, (int, float)) and not isinstance(value, bool)]
    if slowed:
        items.append("slow " + " ".join(slowed))
    kwh = health.get("energy_kwh_since_start")
    if not isinstance(kwh, (int, float)) or isinstance(kwh, bool):
        joules = since.get("energy_j")
        kwh = joules / 3.6e6 if isinstance(joules, (int, float)) and not isinstance(joules, bool) else None
    if kwh is not None:
        items.append(f"{kwh:.2f} kWh")
    if not items:
        return None
    items[0] = (f"{ALARM} " if alarm else "") + "since start: " + items[0]
    return ("alarm" if alarm else "health", tuple(escape_control(item) for item in items))


MAX_PROCESSES = 4


def container_items(gpu: GpuView) -> tuple[str, ...]:
    """The GPU's processes when NVML's pids are not visible here (a container): labelled so, since
    they cannot be matched to a run by pid."""
    hidden = [p for p in gpu.processes if p.container]
    if not hidden:
        return ()
    items = []
    for k, process in enumerate(hidden[:MAX_PROCESSES]):
        item = ("procs " if k == 0 else "") + f"pid {process.pid} (container)"
        if process.run:
            item += " " + escape_control(process.run)
        if process.used_memory_bytes is not None:
            item += " " + fmt.gib(process.used_memory_bytes)
        items.append(item)
    if len(hidden) > MAX_PROCESSES:
        items.append(f"+{len(hidden) - MAX_PROCESSES} more")
    return tuple(items)
