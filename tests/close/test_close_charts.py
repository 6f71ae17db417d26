"""`cockpit close` writes the screens' three charts into closing/ as SVG files (chart-*.svg ; well-formed
XML, drawn by hand), linked from report.md; the series come from what `.cockpit/` saved, brought up
to date from each stream's new bytes (issue 20)."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ElementTree

from tests.close.test_close_cli import close
from tests.close.test_closing import IDS, LOT_START, deliverable, make_campaign, predictions, write

SVG = "{http://www.w3.org/2000/svg}"


def _curve(directory, run, last_step, reach, nan_at=None):
    t0 = LOT_START.timestamp() + 3600
    lines = [{"ts": t0, "event": "started", "pid": 4242}]
    for step in range(0, last_step + 1, 10):
        line = {"ts": t0 + step, "step": step, "loss": 2.0 * math.exp(-step / 300) + 0.3}
        if step % 100 == 0:
            line["eval/macro_f1"] = 0.5 + (reach - 0.5) * step / last_step
        if nan_at is not None and step >= nan_at:
            line["loss"] = math.nan
        lines.append(line)
        if step and step % 500 == 0:
            lines.append({"ts": t0 + step + 1, "event": "checkpoint", "path": f"runs/{run}/ckpt-{step}.pt", "seconds": 3.0})
    write(directory, f"runs/{run}/metrics.jsonl", "".join(json.dumps(line) + "\n" for line in lines))


def test_close_writes_the_three_charts_as_svg_linked_from_the_report(tmp_path):
    camp = make_campaign(tmp_path, deliverable("ctrl/predictions", "out/ctrl.jsonl", run="ctrl-r1", expect_ids="data/test_ids.txt"))
    write(camp, "out/ctrl.jsonl", predictions(IDS, "pos"))
    _curve(camp, "ctrl-r1", 2000, 0.78)
    _curve(camp, "v-r16", 1500, 0.83, nan_at=1200)
    result = close(camp, temp=tmp_path / "volatile")
    assert result.returncode in (0, 1), result.stderr
    charts = camp / "closing"
    names = sorted(p.name for p in charts.glob("*.svg"))
    assert names == ["chart-burndown.svg", "chart-compare.svg", "chart-run-ctrl-r1.svg", "chart-run-v-r16.svg"]
    report = (camp / "closing" / "report.md").read_text()
    assert "## Charts" in report
    linked = set(re.findall(r"\((chart-[^)]+\.svg)\)", report))
    assert linked == set(names)  # every file linked, nothing linked that is not there
    assert report.index("## Charts") < report.index("\n---\n")  # before the footer
    for name in names:
        root = ElementTree.parse(charts / name).getroot()  # well-formed XML
        assert root.tag == f"{SVG}svg" and root.find(f"{SVG}title") is not None
    compare = ElementTree.parse(charts / "chart-compare.svg").getroot()
    assert len(compare.findall(f"{SVG}polyline")) >= 2  # a line per run that reported the metric
    texts = [t.text for t in compare.iter(f"{SVG}text")]
    assert "threshold 0.8 (at least)" in texts
    run = ElementTree.parse(charts / "chart-run-v-r16.svg").getroot()
    assert "×" in [t.text for t in run.iter(f"{SVG}text")]  # the NaN marker
    for text in run.iter(f"{SVG}text"):
        assert "\x1b" not in (text.text or "")


def test_closing_again_writes_the_same_charts(tmp_path):
    camp = make_campaign(tmp_path, deliverable("ctrl/predictions", "out/ctrl.jsonl", run="ctrl-r1", expect_ids="data/test_ids.txt"))
    write(camp, "out/ctrl.jsonl", predictions(IDS, "pos"))
    _curve(camp, "ctrl-r1", 800, 0.7)
    close(camp, temp=tmp_path / "volatile")
    first = {p.name: p.read_bytes() for p in (camp / "closing").glob("chart-*.svg")}
    close(camp, temp=tmp_path / "volatile")
    again = {p.name: p.read_bytes() for p in (camp / "closing").glob("chart-*.svg")}
    assert first == again


def test_manifest_and_report_footer_name_the_charts(tmp_path):
    """manifest.json's closing_files and report.md's footer list every file of the folder, the
    chart SVGs included; summary.json's content hash does not depend on them."""
    camp = make_campaign(tmp_path, deliverable("ctrl/predictions", "out/ctrl.jsonl", run="ctrl-r1", expect_ids="data/test_ids.txt"))
    write(camp, "out/ctrl.jsonl", predictions(IDS, "pos"))
    _curve(camp, "ctrl-r1", 800, 0.7)
    close(camp, temp=tmp_path / "volatile")
    folder = camp / "closing"
    charts = sorted(p.name for p in folder.glob("chart-*.svg"))
    assert charts
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["closing_files"]) == {p.name for p in folder.iterdir()}  # every file there, none that is not
    footer = (folder / "report.md").read_text().rpartition("\n---\n")[2]
    named = footer.split("Files in this folder:", 1)[1]
    for name in [*charts, "report.md", "summary.json", "manifest.json", "plan.toml", "runlog.jsonl", "RELOAD.md"]:
        assert name in named, name
    summary = json.loads((folder / "summary.json").read_text())
    assert "chart-" not in json.dumps(summary)
