"""The cockpit's panels, one widget a module; each takes a part of the frozen snapshot and redraws
only when that part changed."""

from cockpit.tui.widgets.alerts_list import AlertsList
from cockpit.tui.widgets.clock_panel import ClockPanel
from cockpit.tui.widgets.gpu_panel import GpuPanel
from cockpit.tui.widgets.gpu_lines import GpuLines
from cockpit.tui.widgets.host_line import HostLine
from cockpit.tui.widgets.lot_header import LotHeader
from cockpit.tui.widgets.runs_table import RunsTable
from cockpit.tui.widgets.text_lines import TextLines

__all__ = ["AlertsList", "ClockPanel", "GpuLines", "GpuPanel", "HostLine", "LotHeader", "RunsTable", "TextLines"]
