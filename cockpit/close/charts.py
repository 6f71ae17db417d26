"""The closing folder's pictures: the same three charts the screens show (each run's loss and
closing metric against step, the comparison with the threshold, the lot's burn-down), written by
hand as small SVG files in `closing/` (chart-*.svg) and linked from report.md. No plotting library: the
series are already downsampled (at most 1,000 points a line), so each file stays small."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from cockpit.close.report import files_sentence
from cockpit.common.files import write_atomic
from cockpit.common.text import escape_control
from cockpit.live.chart_data import ChartData, burndown_chart, compare_chart, nice_ticks, run_chart, tick_text
from cockpit.live.series import SeriesView, series_of
from cockpit.plan.schedule import schedule

PREFIX = "chart-"  # closing/chart-compare.svg, chart-burndown.svg, chart-run-<id>.svg
WIDTH, PANEL_HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 34, 46
LEGEND_ROW = 16
# Colour and a dash pattern per line, so a grey print still tells them apart.
PALETTE = ("#1f5fa8", "#2e8b3d", "#c27c0e", "#8a3fa0", "#0f7f86", "#b23a3a")
DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2", "10 4")
THRESHOLD_COLOUR, MARKER_COLOUR, MARK_COLOUR, AXIS_COLOUR = "#b23a3a", "#c27c0e", "#7a4a00", "#555555"


def _text(value: str) -> str:
    return escape(escape_control(value))


def _number(value: float) -> str:
    return f"{value:.1f}"


class _Panel:
    """One chart drawn into a box of the SVG: its own scales, axes, lines and legend."""

    def __init__(self, data: ChartData, top: float, height: float):
        self.data = data
        self.top = top
        self.height = height
        legend_rows = max(1, math.ceil(len(_legend_items(data)) / 3))
        self.plot_top = top + TOP
        self.plot_bottom = top + height - BOTTOM - legend_rows * LEGEND_ROW
        self.plot_left, self.plot_right = LEFT, WIDTH - RIGHT
        self.legend_top = self.plot_bottom + 32

    def draw(self) -> list[str]:
        data = self.data
        out = [f'<text x="{LEFT}" y="{_number(self.top + 20)}" class="title">{_text(data.title)}</text>']
        bounds = data.plot_bounds()
        if bounds is None:
            out.append(f'<text x="{LEFT}" y="{_number(self.top + 60)}" class="note">{_text(data.empty_text)}</text>')
            return out
        x0, x1, y0, y1 = bounds
        left, right, top, bottom = self.plot_left, self.plot_right, self.plot_top, self.plot_bottom

        def sx(x: float) -> float:
            return left + (x - x0) / (x1 - x0) * (right - left)

        def sy(y: float) -> float:
            return bottom - (y - y0) / (y1 - y0) * (bottom - top)

        for value in nice_ticks(y0, y1, 6):
            y = sy(value)
            out.append(f'<line x1="{left}" y1="{_number(y)}" x2="{right}" y2="{_number(y)}" class="grid"/>')
            out.append(f'<text x="{left - 6}" y="{_number(y + 4)}" class="tick" text-anchor="end">{_text(tick_text(value))}</text>')
        for value in nice_ticks(x0, x1, 8):
            x = sx(value)
            out.append(f'<line x1="{_number(x)}" y1="{_number(bottom)}" x2="{_number(x)}" y2="{_number(bottom + 4)}" class="axis"/>')
            out.append(f'<text x="{_number(x)}" y="{_number(bottom + 16)}" class="tick" text-anchor="middle">{_text(tick_text(value))}</text>')
        out.append(f'<line x1="{left}" y1="{_number(bottom)}" x2="{right}" y2="{_number(bottom)}" class="axis"/>')
        out.append(f'<line x1="{left}" y1="{_number(top)}" x2="{left}" y2="{_number(bottom)}" class="axis"/>')
        out.append(f'<text x="{right}" y="{_number(bottom + 30)}" class="tick" text-anchor="end">{_text(data.x_label)}</text>')
        for threshold in data.thresholds:
            if threshold.x_from is not None and threshold.x_from > x1:
                continue  # applies from a step the run has not reached: named in the legend only
            start = sx(threshold.x_from) if threshold.x_from is not None else left
            y = sy(threshold.y)
            out.append(f'<line x1="{_number(start)}" y1="{_number(y)}" x2="{right}" y2="{_number(y)}" class="threshold"/>')
        for marker in data.markers:
            x = sx(marker.x)
            out.append(f'<line x1="{_number(x)}" y1="{_number(top)}" x2="{_number(x)}" y2="{_number(bottom)}" class="marker"/>')
            out.append(f'<text x="{_number(x + 3)}" y="{_number(top + 10)}" class="marker-label">{_text(marker.label)}</text>')
        for line in sorted(data.lines, key=lambda item: item.style != "reference"):
            if not line.points:
                continue
            colour = "#999999" if line.style == "reference" else PALETTE[line.colour % len(PALETTE)]
            dash = "3 3" if line.style == "reference" else DASHES[line.colour % len(DASHES)]
            points = " ".join(f"{_number(sx(x))},{_number(sy(y))}" for x, y in line.points)
            dashing = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.6"{dashing}/>')
        for mark in data.marks:
            x = sx(mark.x)
            if mark.on_axis:
                y = bottom - 2
            elif mark.y is None or not math.isfinite(mark.y):
                y = top + 4
            else:
                y = sy(mark.y) + 4
            kind = "nan" if mark.kind == "nan" else "mark"
            out.append(f'<text x="{_number(x)}" y="{_number(y)}" class="{kind}" text-anchor="middle">{_text(mark.glyph)}</text>')
        out += self._legend()
        return out

    def _legend(self) -> list[str]:
        out = []
        for index, (glyph, colour, dash, label) in enumerate(_legend_items(self.data)):
            x = LEFT + (index % 3) * 230
            y = self.legend_top + (index // 3) * LEGEND_ROW
            if glyph is None:
                dashing = f' stroke-dasharray="{dash}"' if dash else ""
                out.append(f'<line x1="{x}" y1="{y - 4}" x2="{x + 22}" y2="{y - 4}" stroke="{colour}" stroke-width="2"{dashing}/>')
            else:
                out.append(f'<text x="{x + 11}" y="{y}" fill="{colour}" text-anchor="middle" class="legend">{_text(glyph)}</text>')
            out.append(f'<text x="{x + 28}" y="{y}" class="legend">{_text(label)}</text>')
        return out


_MARK_NAMES = {"nan": "NaN", "alert": "alert", "checkpoint": "checkpoint", "resume_verified": "resume verified",
               "truncated": "truncated", "stop": "stop", "finished": "finished"}


def _legend_items(data: ChartData) -> list[tuple[str | None, str, str, str]]:
    items: list[tuple[str | None, str, str, str]] = []
    for line in data.lines:
        if line.style == "reference":
            items.append((None, "#999999", "3 3", line.name))
        else:
            items.append((None, PALETTE[line.colour % len(PALETTE)], DASHES[line.colour % len(DASHES)], line.name))
    items += [(None, THRESHOLD_COLOUR, "5 4", t.label) for t in data.thresholds]
    items += [(None, MARKER_COLOUR, "2 2", m.label) for m in data.markers]
    seen: set[str] = set()
    for mark in data.marks:
        if mark.kind not in seen:
            seen.add(mark.kind)
            items.append((mark.glyph, MARK_COLOUR, "", _MARK_NAMES.get(mark.kind, mark.kind)))
    return items


STYLE = (
    "<style>"
    "text{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;font-size:11px;fill:#222}"
    ".title{font-size:13px;font-weight:bold}.tick{fill:#555}.note{fill:#777;font-style:italic}"
    f".grid{{stroke:#e4e4e4;stroke-width:1}}.axis{{stroke:{AXIS_COLOUR};stroke-width:1}}"
    f".threshold{{stroke:{THRESHOLD_COLOUR};stroke-width:1.2;stroke-dasharray:5 4}}"
    f".marker{{stroke:{MARKER_COLOUR};stroke-width:1.2;stroke-dasharray:2 2}}.marker-label{{fill:{MARKER_COLOUR};font-size:10px}}"
    f".nan{{fill:{THRESHOLD_COLOUR};font-weight:bold;font-size:13px}}.mark{{fill:{MARK_COLOUR};font-weight:bold}}"
    "</style>"
)


def svg(charts: Sequence[ChartData], title: str, notes: Sequence[str] = ()) -> str:
    """One SVG document holding `charts` stacked, with `title` as its accessible name."""
    height = PANEL_HEIGHT * len(charts) + (18 * len(notes)) + 8
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-label={quoteattr(escape_control(title))}>',
        f"<title>{_text(title)}</title>",
        STYLE,
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>',
    ]
    for index, data in enumerate(charts):
        out += _Panel(data, index * PANEL_HEIGHT, PANEL_HEIGHT).draw()
    for index, note in enumerate(notes):
        out.append(f'<text x="{LEFT}" y="{PANEL_HEIGHT * len(charts) + 14 + 18 * index}" class="note">{_text(note)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def chart_files(campaign, series: SeriesView | None = None) -> dict[str, str]:
    """The closing's charts as {file name: SVG text}: one per run, the comparison, the burn-down."""
    series = series if series is not None else series_of(campaign)
    closing = campaign.model.closing
    metrics = ["loss"] + ([closing.metric] if closing and closing.metric != "loss" else [])
    files: dict[str, str] = {}
    for run in campaign.runs:
        view = series.run(run.id)
        files[f"{PREFIX}run-{run.id}.svg"] = svg([run_chart(campaign, run.id, view, metric) for metric in metrics], f"{run.id}: {', '.join(metrics)} against step")
    compare = compare_chart(campaign, series)
    files[f"{PREFIX}compare.svg"] = svg([compare], compare.title)
    planned = schedule(campaign.items, campaign.lot.gpu_count, campaign.model.calendar.retrieval_hours)
    burndown = burndown_chart(campaign, planned, series)
    files[f"{PREFIX}burndown.svg"] = svg([burndown], burndown.title, burndown.notes)
    return files


def report_section(names: Sequence[str]) -> list[str]:
    """report.md's charts section: each file linked, as the screens showed it."""
    lines = ["## Charts", "", "The screens' charts, as SVG files in this folder (drawn from the cockpit's downsampled series).", ""]
    labels = {f"{PREFIX}compare.svg": "The closing metric of every run against the threshold",
              f"{PREFIX}burndown.svg": "Burn-down: committed hours remaining against the time left in the lot"}
    for name in names:
        label = labels.get(name) or f"Run {name[len(PREFIX) + 4:-4]}: loss and the closing metric against step"
        lines.append(f"- {label}: [{name}]({name})")
    lines.append("")
    for name in labels:
        if name in names:
            lines += [f"![{labels[name]}]({name})", ""]
    return lines


def with_charts(folder: Path, campaign, report: str) -> tuple[str, list[str]]:
    """Write closing/chart-*.svg; return report.md with its charts section (before the footer,
    whose list of files then names them) and the names written, for manifest.json's
    closing_files. A chart that cannot be drawn is said in the report; it never stops the closing."""
    names: list[str] = []
    try:
        files = chart_files(campaign)
    except Exception as error:  # the pictures are a view: the verified closing stands without them
        section = ["## Charts", "", f"The charts could not be drawn ({type(error).__name__}: {str(error)[:200]}).", ""]
    else:
        for stale in folder.glob(f"{PREFIX}*.svg"):  # a run no longer in the campaign leaves no old picture
            if stale.name not in files:
                stale.unlink(missing_ok=True)
        for name, text in files.items():
            write_atomic(folder / name, text.encode("utf-8"))
        names = list(files)
        section = report_section(names)
    marker = "\n---\n"
    head, found, tail = report.rpartition(marker)
    if names:
        tail = tail.replace(files_sentence(), escape_control(files_sentence(names)), 1)
    text = "\n".join(escape_control(line) for line in section)
    return (f"{head}\n{text}{found}{tail}" if found else f"{report}\n{text}\n"), names
