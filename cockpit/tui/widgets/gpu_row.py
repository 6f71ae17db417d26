"""One GPU: utilization and memory sparklines with their current values, temperature, power, and
the clock-slowdown reasons or the loss of the GPU on a line of its own when there is one. One
line per GPU (memory as a number) when the panel is too short for two."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from cockpit.common.text import escape_control
from cockpit.live.snapshot import GpuView
from cockpit.tui import format as fmt
from cockpit.tui.widgets.sparkline import sparkline
from cockpit.tui.widgets.text_lines import TextLines

LABEL_WIDTH = 7  # "0 util "
VALUE_WIDTH = 17  # " 100% 101°C 1000W"


class GpuRow(TextLines):
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "gpu-row--label",
        "gpu-row--low",
        "gpu-row--high",
        "gpu-row--problem",
        "gpu-row--lost",
    }

    DEFAULT_CSS = """
    GpuRow {
        height: auto;
    }
    GpuRow > .gpu-row--label { color: $text-muted; }
    GpuRow > .gpu-row--low { color: $primary 60%; }
    GpuRow > .gpu-row--high { color: $primary; }
    GpuRow > .gpu-row--problem { color: $warning; }
    GpuRow > .gpu-row--lost { color: $error; text-style: bold; }
    """

    def __init__(self, gpu: GpuView) -> None:
        super().__init__(id=f"gpu-{gpu.index}")
        self.gpu = gpu
        self.compact = False

    def show(self, gpu: GpuView, *, in_view: bool = True) -> None:
        """A new sample: the histories are new tuples, so an unchanged GPU compares equal and costs
        nothing. Out of view (scrolled away), it is drawn when it comes back."""
        if gpu != self.gpu:
            self.gpu = gpu
            self.update_lines(repaint=in_view)

    def set_compact(self, compact: bool) -> None:
        if compact != self.compact:
            self.compact = compact
            self.update_lines()

    def line_count(self) -> int:
        gpu = self.gpu
        return 1 + (not self.compact and not gpu.lost) + bool(problem_text(gpu))

    def build_lines(self, width: int) -> list[Text]:
        gpu = self.gpu
        label = self.component_style("gpu-row--label")
        low = self.component_style("gpu-row--low")
        high = self.component_style("gpu-row--high")
        spark_width = max(1, width - LABEL_WIDTH - VALUE_WIDTH)
        lines = []
        utilization = Text(f"{gpu.index} util ".ljust(LABEL_WIDTH), label, no_wrap=True, end="")
        utilization.append_text(sparkline(gpu.utilization_history, spark_width, low, high))
        utilization.append(" " + utilization_text(gpu, self.compact))
        lines.append(utilization)
        if not self.compact and not gpu.lost:
            memory = Text("  mem".ljust(LABEL_WIDTH), label, no_wrap=True, end="")
            memory.append_text(sparkline(gpu.memory_history, spark_width, low, high))
            memory.append(" " + memory_text(gpu))
            lines.append(memory)
        problem = problem_text(gpu)
        if problem:
            style = self.component_style("gpu-row--lost" if gpu.lost else "gpu-row--problem")
            lines.append(Text(problem, style, no_wrap=True, end=""))
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
