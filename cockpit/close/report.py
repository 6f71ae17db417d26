"""The closing's two pages for people: report.md (the whole story on one page, readable without
the cockpit) and RELOAD.md (how to reload each accepted artifact, by its type)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cockpit.close.incidents import incidents_markdown
from cockpit.close.figures import plural, short_ts, significant, stop_cause, threshold_text
from cockpit.close.summary import ClosingSummary
from cockpit.close.verify import DeliverableVerdict
from cockpit.common.text import escape_control


# ---------------------------------------------------------------- report.md


def files_sentence(charts: Sequence[str] = ()) -> str:
    """report.md's footer: the files of the closing folder, the charts (closing/chart-*.svg) named
    when they were written (cockpit/close/charts.py puts this sentence, with them, in place of the
    one rendered without them)."""
    shown = f", and the charts {', '.join(charts)} (linked above)" if charts else ""
    return ("Files in this folder: report.md, summary.json (the same figures as JSON), manifest.json, "
            f"plan.toml (the plan as frozen), runlog.jsonl (the run log), RELOAD.md{shown}.")


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    return str(value).replace("|", "\\|").replace("\n", " ")



def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"



def render_report(summary: ClosingSummary) -> str:
    """The whole story on one page, readable without the cockpit."""
    lot, times, plan = summary.lot, summary.times, summary.plan
    lines = [f"# Closing report — {summary.campaign}", ""]
    if summary.question:
        lines.append(f"**Question:** {summary.question}  ")
    if summary.corpus:
        lines.append(f"**Corpus:** {summary.corpus}  ")
    lines.append(
        f"**Lot:** {lot.gpu_model} × {lot.gpus}, {lot.days} days"
        + (f", order {lot.order_ref}" if lot.order_ref else "")
        + (f", {short_ts(lot.start)} → {short_ts(lot.end)} UTC" if lot.start else "")
        + "  "
    )
    lines.append(f"**Closed:** {short_ts(times.closed_at)} UTC — {times.timing}  ")
    lines.append(f"**Plan:** {plan.label}, sha256 {plan.sha256[:12]}…")
    lines.append("")
    for warning in summary.warnings:
        lines.append(f"> **Note:** {warning}")
    if summary.warnings:
        lines.append("")

    lines += ["## Budget", "", "| | |", "|---|---|", f"| Lot price | {summary.lot_price_usd} USD |"]
    for expense in summary.other_expenses:
        lines.append(f"| Other expense, kept apart: {_cell(expense.label)} | {expense.usd} USD |")
    if not summary.other_expenses:
        lines.append("| Other expenses | none recorded |")
    lines.append(f"| Deliverables accepted | {summary.accepted} of {summary.deliverables_total} |")
    lines.append(f"| Lot price per accepted deliverable | {_cell(summary.cost_per_accepted)} |")
    if summary.cost_per_accepted_usd is None and summary.rejections:
        lines += ["", "Why nothing was accepted:", ""]
        lines += [f"- {r.deliverable}: {r.cause}" for r in summary.rejections]
    lines += [
        "",
        "Other expenses are listed apart and never added into the lot price; no tax or transfer cost is "
        "assumed. A negative result does not cancel the cost of the campaign.",
        "",
        "## Conclusion",
        "",
        summary.conclusion.text + ".",
        "",
    ]
    c = summary.conclusion
    if c.runs and c.metric:
        lines += [f"| run | role | {c.metric} (last) | reached {threshold_text(c.threshold)} |", "|---|---|---|---|"]
        for row in c.runs:
            value = significant(row.value) if row.value is not None else "not reported"
            reached = {True: "yes", False: "no", None: "—"}[row.reached]
            if row.open_alerts:
                reached += f" (open alert {', '.join(row.open_alerts)})"
            lines.append(f"| {row.run} | {row.role} | {value} | {reached}{' (stopped)' if row.stopped else ''} |")
        lines.append("")

    lines += ["## Deliverables", "", "| deliverable | run | verdict | why |", "|---|---|---|---|"]
    for item in summary.deliverables:
        why = item.cause or "; ".join(ch.detail for ch in item.checks if ch.name in ("reloads", "expected_ids", "base_revision") and ch.ok)
        person = " (also accepted by a person)" if item.accepted_by_person else ""
        lines.append(f"| {_cell(item.id)} | {_cell(item.run)} | **{item.verdict}**{person} | {_cell(why)} |")
    if not summary.deliverables:
        lines.append("| — | — | — | the campaign declares no deliverable |")
    lines += [
        "",
        "Accepted means every announced check passed: present, not empty, no path into a temporary "
        "folder, expected ids present, base revision recorded (adapters), reloads, run not stopped, "
        "no alert on the run that no person acknowledged, content distinct. The checks decide; an acceptance recorded by a person is shown beside "
        "them but is not required. Reload instructions: RELOAD.md; sizes and sha256: manifest.json.",
        "",
        "## Planned vs actual",
        "",
        f"Planned: {plan.committed_hours:g} h committed of a {plan.window_hours:g} h "
        f"window, retrieval {plan.retrieval_hours:g} h included. Hours from the lot start.",
        "",
        "| item | tier | planned (h) | planned hours | measured (h) | measured hours | deviation | state |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in summary.planned_vs_actual:
        planned_span = (
            f"{_num(row.planned_start_hours)}–{_num(row.planned_end_hours)}"
            if row.planned_hours is not None else "not planned"
        )
        measured_span = (
            f"{_num(row.measured_start_hours)}–{_num(row.measured_end_hours)}"
            if row.measured and row.measured_start_hours is not None
            else (f"{short_ts(row.measured_start)}–{short_ts(row.measured_end)}" if row.measured else "not measured")
        )
        deviation_text = "—" if row.deviation_hours is None else f"{row.deviation_hours:+g} h"
        state = row.state + (" · stopped" if row.stopped else "")
        lines.append(
            f"| {row.id} ({row.type}) | {row.tier} | {planned_span} | {_num(row.planned_hours)} | "
            f"{measured_span} | {_num(row.measured_hours)} | {deviation_text} | {_cell(state)} |"
        )
    lines += ["", "## Decisions", ""]
    if summary.decisions:
        for d in summary.decisions:
            at = f" at lot hour {d.lot_hours:g}" if isinstance(d.lot_hours, (int, float)) else ""
            lines.append(f"- Pilot decision **{d.decision}**{at} ({short_ts(d.ts)}, {d.who or '?'})" + (f": {d.note}" if d.note else ""))
    else:
        lines.append("- No pilot decision was recorded.")
    for a in summary.accepted_by_person:
        verified = {True: "verified", False: "but the checks failed", None: "no such deliverable today"}[a.verified]
        lines.append(f"- {a.deliverable} accepted by {a.who or '?'} ({short_ts(a.ts)}), {verified}")
    lines += ["", "## Stops", ""]
    if summary.stops:
        for s in summary.stops:
            lines.append(
                f"- {s.run}: {stop_cause(s.rule, s.reason)} — {s.source or '?'}, {short_ts(s.ts)}"
                + (", SIGTERM sent" if s.signal_sent else "")
                + ". The stopped run stays an expense; its deliverables are not accepted."
            )
    else:
        lines.append("- No run was stopped.")
    lines += ["", *incidents_markdown(summary), "## Alerts", ""]
    for alert in summary.alerts:
        where = f" [{alert.run}]" if alert.run else ""
        message = f": {alert.message}" if alert.message else ""
        if alert.acknowledged:
            by = f"acknowledged by {alert.acknowledged_by or '?'} ({alert.acknowledged_source or '?'}, {short_ts(alert.acknowledged_at)})"
            by += f": {alert.note}" if alert.note else ""
        else:
            by = "**not acknowledged**" + (": its run's deliverables are not accepted" if alert.run else "")
        lines.append(f"- {short_ts(alert.ts)}{where} {alert.rule}{message} — {by}")
    if not summary.alerts:
        lines.append("- No alert was raised.")
    lines += ["", "## Notes (explained deviations)", ""]
    if summary.notes:
        for n in summary.notes:
            lines.append(f"- {short_ts(n.ts)}" + (f" [{n.run}]" if n.run else "") + f": {n.text}")
    else:
        lines.append("- No note was recorded.")
    if summary.voided:
        lines += ["", "## Voided decisions (taken back, left out of everything above)", ""]
        for v in summary.voided:
            lines.append(
                f"- seq {v.seq} {v.type}" + (f" [{v.run}]" if v.run else "")
                + f", voided by {v.voided_by or '?'} ({short_ts(v.voided_at)}, seq {v.void_seq}): {v.reason}"
            )
    lines += [
        "",
        "---",
        f"Generated {times.generated_at} by `cockpit close`. {files_sentence()}",
        "",
    ]
    return "\n".join(escape_control(line) for line in lines)  # names, causes, notes: data strings



# ---------------------------------------------------------------- RELOAD.md


_PEFT_CLASSES = {
    "CAUSAL_LM": "AutoModelForCausalLM",
    "SEQ_CLS": "AutoModelForSequenceClassification",
    "SEQ_2_SEQ_LM": "AutoModelForSeq2SeqLM",
    "TOKEN_CLS": "AutoModelForTokenClassification",
    "QUESTION_ANS": "AutoModelForQuestionAnswering",
    "FEATURE_EXTRACTION": "AutoModel",
}


def _reload_snippet(verdict: DeliverableVerdict) -> list[str]:
    d = verdict.deliverable
    path = d.path
    if d.reload:
        return [
            "The campaign's own check, run from the campaign folder (exit 0 = it reloads):",
            "", "```sh", d.reload, "```",
        ]
    fmt = verdict.format
    if fmt == "adapter":
        adapter = verdict.adapter or {}
        model_class = _PEFT_CLASSES.get(str(adapter.get("task_type") or "").upper(), "AutoModel")
        return [
            f"A PEFT adapter on base `{adapter.get('base')}` at revision `{adapter.get('revision')}`:",
            "", "```python",
            f"from transformers import {model_class}",
            "from peft import PeftModel",
            f"base = {model_class}.from_pretrained({adapter.get('base')!r}, revision={adapter.get('revision')!r})",
            f"model = PeftModel.from_pretrained(base, {path!r})",
            "```",
        ]
    code = {
        "json": ["import json", f"data = json.load(open({path!r}, encoding='utf-8'))"],
        "jsonl": ["import json", f"rows = [json.loads(line) for line in open({path!r}, encoding='utf-8') if line.strip()]"],
        "csv": ["import csv", f"rows = list(csv.DictReader(open({path!r}, newline='', encoding='utf-8')))"],
        "tsv": ["import csv", f"rows = list(csv.DictReader(open({path!r}, newline='', encoding='utf-8'), delimiter='\\t'))"],
        "toml": ["import tomllib", f"data = tomllib.load(open({path!r}, 'rb'))"],
        "safetensors": ["from safetensors.torch import load_file", f"tensors = load_file({path!r})"],
        "npy": ["import numpy", f"array = numpy.load({path!r}, allow_pickle=False)"],
        "npz": ["import numpy", f"arrays = dict(numpy.load({path!r}, allow_pickle=False))"],
        "torch": ["import torch", f"state = torch.load({path!r}, map_location='cpu', weights_only=True)"],
        "parquet": ["import pandas", f"frame = pandas.read_parquet({path!r})"],
        "zip": ["import zipfile", f"zipfile.ZipFile({path!r}).extractall('restored')"],
    }.get(fmt or "")
    if fmt == "text":
        return [f"Plain UTF-8 text: open `{path}` in any editor or `less {path}`."]
    if fmt == "folder":
        listed = ", ".join(f"`{Path(f.path).name}`" for f in verdict.files[:8])
        return [f"A folder of {plural(len(verdict.files), 'file')} ({listed}{', …' if len(verdict.files) > 8 else ''}); each reloads by its type as above."]
    if code is None:
        return [f"`{path}`: no reader known to the cockpit; see the campaign's notes."]
    return ["```python", *code, "```"]



def render_reload(summary: ClosingSummary, verdicts: list[DeliverableVerdict]) -> str:
    """How to reload each accepted artifact, by its type, and how to check it is the same file."""
    lines = [
        f"# Reloading the outputs of {summary.campaign}",
        "",
        "Paths are relative to the campaign folder (the one holding campaign.toml). Check a file is "
        "the one closed with `sha256sum PATH` against manifest.json.",
        "",
    ]
    accepted = [v for v in verdicts if v.accepted]
    if not accepted:
        lines += ["No deliverable was accepted, so there is nothing verified to reload. Causes:", ""]
        lines += [f"- {v.id}: {v.cause}" for v in verdicts]
        if not verdicts:
            lines.append("- the campaign declares no deliverable")
        lines.append("")
        return "\n".join(escape_control(line, keep_newlines=True) for line in lines)
    for verdict in accepted:
        d = verdict.deliverable
        lines += [f"## {d.id}", "", f"`{d.path}` — {d.kind.value}, {verdict.format}, sha256 `{verdict.sha256}`", ""]
        lines += _reload_snippet(verdict)
        lines.append("")
    return "\n".join(escape_control(line, keep_newlines=True) for line in lines)  # a reload command may hold lines

