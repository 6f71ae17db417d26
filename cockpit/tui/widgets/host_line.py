"""The host under the GPUs: CPU, memory and free disk, in one line that fits 80 columns."""

from __future__ import annotations

from rich.text import Text

from cockpit.live.snapshot import HostView
from cockpit.tui import format as fmt
from cockpit.tui.widgets.text_lines import TextLines


class HostLine(TextLines):
    DEFAULT_CSS = """
    HostLine {
        height: 1;
        color: $text-muted;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host: HostView | None = None

    def show(self, host: HostView | None) -> None:
        if host != self.host:
            self.host = host
            self.update_lines()

    def build_lines(self, width: int) -> list[Text]:
        return [Text(host_text(self.host), no_wrap=True, end="")]


def host_text(host: HostView | None) -> str:
    if host is None:
        return "host: no sample"
    parts = []  # the host's own figures, kept short: they share the line at 80 columns
    if host.cpu_percent is not None:
        parts.append(f"cpu {host.cpu_percent:.0f}%")
    if host.memory_used_bytes is not None and host.memory_total_bytes:
        used = host.memory_used_bytes / 2**30
        parts.append(f"mem {used:.1f}/{host.memory_total_bytes / 2**30:.0f}G" if used < 10 else f"mem {used:.0f}/{host.memory_total_bytes / 2**30:.0f}G")
    if host.disk_free_bytes is not None:
        parts.append(f"disk {fmt.gib(host.disk_free_bytes)} free")
    return " ".join(parts) if parts else "host: no sample"
