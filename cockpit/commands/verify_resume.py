"""`cockpit verify-resume PATH`: is a checkpoint a resume point, does it reload in a new process,
and how often to save; with `--record DIR RUN`, write the verdict into that run's metrics stream."""

from __future__ import annotations

import json
import math
import shutil
import sys
import textwrap
from pathlib import Path

from cockpit.common.text import escape_control, json_safe
from cockpit.common.times import iso, utc_minute, utc_now
from cockpit.errors import Finding, UsageError
from cockpit.checkpoints.scan import TRUST_FLAG
from cockpit.live import cadence
from cockpit.resume import verify as resume
from cockpit.resume import report as resume_report


def run(args) -> int:
    mtbf_hours = getattr(args, "mtbf_hours", None)
    mtbf_hours = 24.0 if mtbf_hours is None else float(mtbf_hours)
    if not (math.isfinite(mtbf_hours) and mtbf_hours > 0):
        raise UsageError(f"--mtbf-hours must be a positive number of hours (got {mtbf_hours:g})")
    timeout = getattr(args, "timeout", None)
    timeout = resume_report.DEFAULT_TIMEOUT_S if timeout is None else float(timeout)
    if not (math.isfinite(timeout) and timeout > 0):
        raise UsageError(f"--timeout must be a positive number of seconds (got {timeout:g})")
    record = getattr(args, "record", None)
    campaign_dir = getattr(args, "campaign", None)

    # the campaign and run are checked before the reload, which can take minutes
    campaign, run_entry = None, None
    if record:
        directory, run_id = record
        campaign = _load(directory)
        run_entry = campaign.run(run_id)
        if run_entry is None:
            known = ", ".join(r.id for r in campaign.runs) or "none"
            raise UsageError(f"no run {run_id!r} in {campaign.file} (runs: {known}); nothing was recorded")
    elif campaign_dir:
        campaign = _load(campaign_dir)

    report = resume.verify_resume(
        args.path, python=getattr(args, "python", None), timeout=timeout,
        trust=bool(getattr(args, "trust_checkpoint", False)),
    )
    if report.problem and report.problem.startswith("no such file or folder"):
        if not args.json:
            raise Finding(report.problem)
        print(escape_control(f"cockpit: {report.problem}"), file=sys.stderr)

    advice = _advice(report, campaign, run_entry, mtbf_hours)
    recorded = None
    if run_entry is not None:
        recorded = _record(report, campaign, run_entry)

    if args.json:
        payload = report.to_json()
        payload["advice"] = advice.to_json() if advice else None
        payload["recorded"] = recorded
        print(json_safe(json.dumps(payload, ensure_ascii=False, indent=2)))
    else:
        _print_text(report, advice, recorded, run_entry)
    return 0 if report.ok else 1


def _load(directory: str):
    from cockpit.plan.load import load_campaign

    return load_campaign(directory)


def _advice(report: resume_report.ResumeReport, campaign, run_entry, mtbf_hours: float) -> cadence.SaveAdvice | None:
    """Daly's interval from the run's measured saves, else from the timed reload."""
    save_seconds, source = None, None
    if run_entry is not None:
        save_seconds = resume.save_seconds_from_metrics(run_entry.metrics_path(campaign.directory))
        source = "checkpoint events" if save_seconds else None
    if save_seconds is None and report.reload.ok and report.reload.seconds:
        save_seconds, source = report.reload.seconds, "reload"
    if not save_seconds:
        return None
    lot_end = campaign.lot.end if campaign is not None else None
    retrieval = campaign.model.calendar.retrieval_hours if campaign is not None else 0.0
    return cadence.save_advice(
        save_seconds, mtbf_hours=mtbf_hours, source=source,
        restart_seconds=report.reload.seconds or 0.0,
        lot_end=lot_end, retrieval_hours=retrieval, now=utc_now(),
    )


def _record(report: resume_report.ResumeReport, campaign, run_entry) -> bool:
    if not report.ok:
        why = "it is not a resume point" if not report.resume_point else "it did not reload"
        report.notes.append(f"nothing recorded for {run_entry.id}: {why}")
        return False
    checkpoint = Path(report.checkpoint or report.path)
    try:
        shown = str(checkpoint.resolve().relative_to(campaign.directory.resolve()))
    except ValueError:
        shown = str(checkpoint.resolve())
    metrics = run_entry.metrics_path(campaign.directory)
    try:
        resume.record_resume_verified(metrics, shown, report.reload.seconds or 0.0, iso(utc_now()))
    except OSError as error:
        raise Finding(f"cannot write {metrics}: {error.strerror or error}; nothing was recorded") from None
    report.notes.append(f"recorded resume_verified in {metrics}")
    return True


# ---------------------------------------------------------------- text


def _width() -> int:
    return max(60, min(shutil.get_terminal_size((100, 24)).columns, 110))


def _line(label: str, text: str, width: int) -> str:
    return textwrap.fill(  # a path is never cut at its hyphens
        text, width=width, initial_indent=f"{label:<12}", subsequent_indent=" " * 12, break_on_hyphens=False, break_long_words=False
    )


def _bytes(size: int | None) -> str:
    if size is None:
        return "size unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _duration(seconds: float) -> str:
    if seconds < 0.1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 1:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes = seconds / 60
    if minutes < 60:
        return f"{minutes:.0f} min"
    hours, rest = divmod(round(minutes), 60)
    return f"{round(minutes)} min ({hours} h {rest:02d} min)"


def _print_text(report: resume_report.ResumeReport, advice, recorded, run_entry) -> None:
    width = _width()
    out = []
    out.append(_line("checkpoint", report.checkpoint or report.path, width))
    facts = [report.format, _bytes(report.size_bytes)]
    if report.tensor_count is not None:
        noun = "arrays" if report.format in (resume_report.CheckpointFormat.demo, resume_report.CheckpointFormat.npz) else "tensors"
        facts.append(f"{report.tensor_count} {noun}")
    out.append(_line("format", " · ".join(facts), width))
    if report.problem:
        out.append(_line("problem", report.problem, width))
    for part in resume_report.PARTS if not report.problem else ():
        entry = report.parts[part]
        if entry.present:
            status, text = "yes", entry.where or ""
            if entry.detail and entry.detail.startswith(text):
                text = entry.detail
            elif entry.detail:
                text = f"{text} ({entry.detail})" if text else entry.detail
        elif part in report.not_needed:
            status, text = "not needed", report.not_needed[part]
        else:
            status, text = "MISSING", resume_report.COSTS[part].split(": ", 1)[1]
        out.append(textwrap.fill(
            text, width=width, initial_indent=f"  {part:<14}{status:<11}", subsequent_indent=" " * 27,
            break_on_hyphens=False, break_long_words=False,
        ))
    reload = report.reload
    if reload.ok:
        how = "weights_only=True" if reload.weights_only else ("weights_only=False" if reload.weights_only is False else "")
        text = f"ok in a new process: {_duration(reload.seconds or 0.0)} to load"
        if reload.process_seconds:
            text += f" ({_duration(reload.process_seconds)} with the interpreter start)"
        if how:
            text += f", {how}"
    elif reload.tried:
        text = f"FAILED: {reload.error or 'did not load'}"
    else:
        text = f"not tried: {reload.error or 'nothing to reload'}"
    out.append(_line("reload", text, width))
    if report.ok:
        missing = report.missing
        verdict = "a resume point" + (
            f"; missing {', '.join(missing)} (what each costs is above)" if missing else ", nothing missing"
        )
    elif report.damaged:
        verdict = f"NOT a resume point: {report.damaged[0]}" + (
            f" (and {len(report.damaged) - 1} more damaged)" if len(report.damaged) > 1 else ""
        )
    elif report.problem:
        verdict = "NOT a resume point: its contents cannot be read"
    elif report.would_run_code:
        verdict = (
            f"NOT verified: it would run code ({', '.join(report.would_run_code[:6])}) when unpickled, so it "
            f"was not loaded, not even with {TRUST_FLAG}"
        )
    elif report.needs_trust:
        verdict = (
            f"NOT verified: it needs {TRUST_FLAG} to load ({', '.join(report.needs_trust[:6])}), "
            "and only if you trust the file"
        )
    elif not report.resume_point:
        lacking = [p for p in (resume_report.PartName.model, resume_report.PartName.optimizer, resume_report.PartName.progress) if not report.parts[p].present]
        verdict = f"NOT a resume point: no {', '.join(lacking)}" if lacking else "NOT a resume point"
    else:
        verdict = "NOT verified: it did not reload in a new process"
    out.append(_line("verdict", verdict, width))
    if advice is not None:
        measured = {
            "checkpoint events": "measured from the run's checkpoint events",
            "reload": "taken from the reload time",
        }.get(advice.source, advice.source)
        basis = (
            f"Daly's interval for a {_duration(advice.save_seconds)} save, {measured}, and a mean time "
            f"between failures of {advice.mtbf_hours:g} h"
        )
        if advice.interval_seconds < 300:
            text = (
                f"as often as convenient: a save this cheap costs next to nothing ({basis}: every "
                f"{_duration(advice.interval_seconds)}); the interval is set by the work you accept to lose"
            )
        else:
            text = (
                f"{_duration(advice.interval_seconds)} of training ({basis}); expected overhead "
                f"{advice.overhead_fraction * 100:.1f} % (saves plus work redone after a failure)"
            )
        out.append(_line("save every", text, width))
        if advice.latest_final_save is not None:
            text = (
                f"start it by {_clock(advice.latest_final_save)} so that the save and "
                f"{advice.retrieval_hours:g} h of copying off end before the lot ends at {_clock(advice.lot_end)}"
            )
            if advice.too_late:
                text += " — that moment has passed"
            out.append(_line("final save", text, width))
    if report.notes:
        out.append("notes")
        for note in report.notes:
            out.append(textwrap.fill(note, width=width, initial_indent="  - ", subsequent_indent="    ", break_on_hyphens=False, break_long_words=False))
    # key names and paths come from the checkpoint: each line shown with its controls escaped
    print("\n".join(escape_control(line) for line in "\n".join(out).split("\n")))
    if recorded is False and run_entry is not None:
        print(f"cockpit: nothing recorded for run {run_entry.id}", file=sys.stderr)


def _clock(moment) -> str:
    return utc_minute(moment) if moment else "?"
