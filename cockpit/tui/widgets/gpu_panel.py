"""The GPUs of the lot, one row each, or why NVML is unavailable; a line on the host below.
Simulated GPUs are labelled as such in the title, so nobody mistakes a demo for the box."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from cockpit.common.text import escape_control
from cockpit.live.snapshot import GpuView, HostView, NvmlView
from cockpit.tui.widgets.gpu_row import GpuRow
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
        self._gpu_count = 0
        self._rows: dict[str, GpuRow] = {}  # by widget id; kept here, not queried every second
        self._status = Static("", id="nvml-status", markup=False)  # likewise, the two fixed children
        self._host = HostLine(id="host")

    def compose(self) -> ComposeResult:
        yield self._status
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
        rows = self._rows
        wanted = {f"gpu-{g.index}" for g in gpus}
        for key in [key for key in rows if key not in wanted]:
            rows.pop(key).remove()
        new_rows = []
        for gpu in gpus:
            row = rows.get(f"gpu-{gpu.index}")
            if row is None:
                row = rows[f"gpu-{gpu.index}"] = GpuRow(gpu)
                new_rows.append(row)
            else:
                row.show(gpu, in_view=self._in_view(row))
        if new_rows:
            self.mount_all(new_rows, before="#host")
        self._gpu_count = len(wanted)
        self._fit_rows()

        self._host.show(host)

    def on_resize(self) -> None:
        self._fit_rows()
        self._repaint_rows_in_view()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._repaint_rows_in_view()

    def _in_view(self, row: GpuRow) -> bool:
        """Whether any line of the row is inside the panel's scrolled window (a row not laid out
        yet counts as in view)."""
        region = row.virtual_region
        if not region.height:
            return True
        top = self.scroll_offset.y
        return region.bottom > top and region.y < top + self.scrollable_content_region.height

    def _repaint_rows_in_view(self) -> None:
        for row in self._rows.values():
            if self._in_view(row):
                row.repaint_if_stale()

    def _fit_rows(self) -> None:
        """Two lines per GPU when they all fit, else one (8 GPUs at 80×24); scroll beyond that."""
        height = self.content_size.height
        status = self._status
        status_lines = status.outer_size.height if status.has_class("-shown") else 0
        # a lost or slowed GPU takes a third line (a power cap is common on a loaded GPU); MIG,
        # health counters and container processes take theirs
        width = self.scrollable_content_region.width
        needed = sum(row.lines_wanted(False, width) for row in self._rows.values())
        compact = height > 0 and needed + 1 + status_lines > height
        for row in self._rows.values():
            row.set_compact(compact)
