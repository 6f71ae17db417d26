"""The GPUs of the lot, their lines in one widget, or why NVML is unavailable; a line on the host
below. Simulated GPUs are labelled as such in the title, so nobody mistakes a demo for the box."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from cockpit.common.text import escape_control
from cockpit.live.snapshot import GpuView, HostView, NvmlView
from cockpit.tui.widgets.gpu_lines import GpuLines
from cockpit.tui.widgets.host_line import HostLine


class GpuPanel(VerticalScroll):
    DEFAULT_CSS = """
    GpuPanel {
        height: 100%;
        padding: 0 1;
        scrollbar-size-vertical: 1;
    }
    GpuPanel > #nvml-status { color: $warning; display: none; }
    GpuPanel > #nvml-status.-shown { display: block; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._nvml: NvmlView | None = None
        self._title: str | None = None
        # the three children, kept here, not queried every second
        self._status = Static("", id="nvml-status", markup=False)
        self.gpu_lines = GpuLines(id="gpu-lines")
        self._host = HostLine(id="host")

    def compose(self) -> ComposeResult:
        yield self._status
        yield self.gpu_lines
        yield self._host

    def show(self, nvml: NvmlView, gpus: tuple[GpuView, ...], host: HostView | None) -> None:
        simulated = nvml.simulated or any(g.simulated for g in gpus)
        title = "GPU [reverse] SIMULATED [/]" if simulated else "GPU"
        if title != self._title:
            self._title = title
            self.border_title = title
            self.set_class(simulated, "-simulated")

        if nvml != self._nvml:
            self._nvml = nvml
            status = self._status
            lines = []
            if not nvml.available:
                reason = (nvml.reason or "no reason given").strip()
                if reason.lower().startswith("nvml unavailable"):  # the reason may already say so
                    reason = reason.split(":", 1)[1].strip() if ":" in reason else ""
                if gpus:  # simulated GPUs follow: the reason's first clause, so their rows keep room
                    reason = reason.split(" — ")[0].split(" (")[0]
                lines.append(f"NVML unavailable: {reason or 'no reason given'}")
            lines.extend(nvml.warnings[:2])
            status.update("\n".join(escape_control(line) for line in lines))  # the driver's words, escaped
            status.set_class(bool(lines), "-shown")

        # GPUs are shown whenever the snapshot has some: simulated ones (the demo) come with NVML
        # unavailable, and the reason stays above them.
        self.gpu_lines.show(gpus, self._fits)
        self._host.show(host)

    def on_resize(self) -> None:
        self.gpu_lines.fit(self._fits)

    def _fits(self, lines: int) -> bool:
        """Whether `lines` GPU lines fit under the NVML status, above the host line: two lines a
        GPU when they all fit, else one; scroll beyond that. A lost or slowed GPU takes a third
        line (a power cap is common on a loaded GPU); MIG, health counters and container
        processes take theirs."""
        height = self.content_size.height
        status = self._status
        status_lines = status.outer_size.height if status.has_class("-shown") else 0
        return height <= 0 or lines + 1 + status_lines <= height
