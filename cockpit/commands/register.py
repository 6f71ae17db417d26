"""Recording commands (`stop`, `decide`, `accept`, `note`, `ack`, `void`) and `log`: the run log from the shell.

Each recording checks its names against the campaign first, so an unknown run, rule or
deliverable is refused and nothing is written; a recorded event is on disk before we say so.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from cockpit.common.text import escape_control, json_safe
from cockpit.common.times import parse_ts
from cockpit.errors import UsageError
from cockpit.plan.campaign import Campaign
from cockpit.plan.load import load_campaign
from cockpit.record import decisions
from cockpit.record.describe import event_summary
from cockpit.record.runlog import RunLog
from cockpit.record.start import plan_drift

SOURCE = "cli"


def _open(args) -> tuple[Campaign, RunLog]:
    campaign = load_campaign(args.dir)
    return campaign, RunLog(campaign.directory)


def _say_start_and_drift(campaign: Campaign, log: RunLog) -> None:
    if log.start_written is not None:  # this command wrote the start, so it says so; later ones do not
        print(escape_control(f"campaign {campaign.id} started: plan frozen in .cockpit/plan.toml (sha256 {campaign.sha256[:12]}…)"))
    drift = plan_drift(campaign)
    if drift:
        print(escape_control(f"note: {drift}"), file=sys.stderr)


def stop(args) -> int:
    from cockpit.live.runs import last_metrics_of_run, terminate_run_of, track_of

    campaign, log = _open(args)
    decisions.require_run(campaign, args.run)
    if args.rule is not None:
        decisions.require_rule(campaign, args.rule)
    track = track_of(campaign, args.run)  # read once: for the last metrics and for the run's pid
    signal = (lambda: terminate_run_of(campaign, args.run, track=track)) if args.signal else None
    finished = track is not None and track.finished_cleanly
    event = decisions.record_stop(
        campaign, log, args.run, rule=args.rule, reason=args.reason, source=SOURCE,
        last=last_metrics_of_run(campaign, args.run, track=track), signal=signal,
        finished=finished, force=bool(getattr(args, "force", False)),
    )
    _say_start_and_drift(campaign, log)
    cause = f"rule {args.rule}" if args.rule else f"reason: {event['reason']}"
    print(escape_control(f"recorded: stop of run '{args.run}' ({cause}) — seq {event['seq']} in {log.path.name}"))
    if event.get("after_finish"):
        print(escape_control(f"note: run '{args.run}' had finished cleanly; the stop says so (after_finish)"), file=sys.stderr)
    if event.get("rule_triggered") is False:
        print(escape_control(f"note: rule '{args.rule}' never triggered for this run; the stop says so (rule_triggered: false)"), file=sys.stderr)
    if args.signal:
        outcome = event["signal"]
        print(escape_control(("SIGTERM sent: " if outcome["sent"] else "no signal sent: ") + outcome.get("detail", "")))
        return 0 if outcome["sent"] else 1
    return 0


def decide(args) -> int:
    campaign, log = _open(args)
    event = decisions.record_decision(campaign, log, args.decision, note=args.note, source=SOURCE)
    _say_start_and_drift(campaign, log)
    print(escape_control(f"recorded: pilot decision '{args.decision}' — seq {event['seq']} in {log.path.name}"))
    if campaign.model.pilot is None:
        print("note: the campaign declares no [pilot]; the decision is recorded without a pilot run", file=sys.stderr)
    return 0


def accept(args) -> int:
    campaign, log = _open(args)
    event = decisions.record_acceptance(campaign, log, args.deliverable, source=SOURCE)
    _say_start_and_drift(campaign, log)
    if event.get("run") and log.replay().stop_of(event["run"]):
        print(
            escape_control(f"note: run '{event['run']}' was stopped; `cockpit close` will not count its deliverable as accepted"),
            file=sys.stderr,
        )
    print(escape_control(f"recorded: acceptance of '{args.deliverable}' — seq {event['seq']} in {log.path.name}"))
    return 0


def note(args) -> int:
    campaign, log = _open(args)
    event = decisions.record_note(campaign, log, args.text, run_id=args.run, source=SOURCE)
    _say_start_and_drift(campaign, log)
    print(escape_control(f"recorded: note — seq {event['seq']} in {log.path.name}"))
    return 0


def void(args) -> int:
    campaign, log = _open(args)
    event = decisions.record_void(campaign, log, args.seq, reason=args.reason, source=SOURCE)
    _say_start_and_drift(campaign, log)
    what = decisions.VOIDABLE_NAMES.get(event.get("voided_type"), "the event")
    print(f"recorded: void of seq {args.seq} ({what}) — seq {event['seq']} in {log.path.name}; the run log keeps both")
    return 0


def _alert_name(alert) -> str:
    run = alert.event.get("run")
    return f"{alert.event.get('rule')}" + (f" on {run}" if run else "") + f" (seq {alert.event.get('seq')})"


def ack(args) -> int:
    """Acknowledge the open alerts of RULE (on --run RUN): a person looked. The same event as `a`
    in the cockpit; `cockpit close` no longer holds them against the run's deliverables."""
    campaign, log = _open(args)
    if args.run is not None:
        decisions.require_run(campaign, args.run)
    note = decisions.clean_text(args.note, "the note")
    active = log.replay().active_alerts
    matching = [
        a for a in active
        if a.event.get("rule") == args.rule and (args.run is None or a.event.get("run") == args.run)
    ]
    if not matching:
        where = f" on run '{args.run}'" if args.run else ""
        listed = "; ".join(_alert_name(a) for a in active)
        raise UsageError(escape_control(
            f"no open alert of rule '{args.rule}'{where} "
            + (f"(open alerts: {listed})" if listed else "(no alert is open)")
            + "; nothing was recorded"
        ))
    runs = list(dict.fromkeys(str(a.event["run"]) for a in matching if a.event.get("run")))
    if args.run is None and len(runs) > 1:
        raise UsageError(
            f"rule '{args.rule}' has open alerts on runs {', '.join(runs)}: say which with --run RUN; nothing was recorded"
        )
    for alert in matching:
        run = alert.event.get("run")
        event = decisions.acknowledge(
            campaign, log, str(alert.event.get("rule")), run, source=SOURCE, key=alert.key, note=note
        )
        where = f" on run '{run}'" if run else ""
        print(escape_control(
            f"recorded: acknowledgement of {event['rule']}{where} (alert seq {event['alert_seq']}) "
            f"— seq {event['seq']} in {log.path.name}"
        ))
    _say_start_and_drift(campaign, log)
    return 0


# ---------------------------------------------------------------- log


def _local(ts: Any) -> str:
    moment = parse_ts(ts) if isinstance(ts, str) else None
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z") if moment else str(ts)


def show_log(args) -> int:
    campaign, log = _open(args)
    if args.run is not None:
        decisions.require_run(campaign, args.run)
    read = log.read()
    events = [e for e in read.events if args.run is None or e.get("run") == args.run]
    if args.json:
        sys.stdout.write(json_safe(json.dumps({"events": events, "bad_lines": read.bad_lines}, ensure_ascii=False)) + "\n")
        return 0
    if not events:
        print(escape_control(f"{log.path}: no events" + (f" for run '{args.run}'" if args.run else "")))
    # every field was written by a command, a run or a person: shown escaped, padded after; the
    # run column as wide as the longest run id shown
    runs = [escape_control(event.get("run") or "-") for event in events]
    width = max([14] + [len(run) for run in runs])
    for event, run in zip(events, runs):
        kind = escape_control(event["type"])
        origin = " ".join(str(x) for x in (event.get("source"), event.get("who")) if x)
        print(escape_control(f"{event['seq']:>5}  {_local(event.get('ts'))}  {kind:<16} {run:<{width}} {event_summary(event)}  [{origin}]"))
    if read.bad_lines:
        numbers = ", ".join(str(n) for n in read.bad_line_numbers[:10])
        more = "…" if read.bad_lines > 10 else ""
        print(escape_control(f"{read.bad_lines} bad line{'s' if read.bad_lines != 1 else ''} skipped in {log.path.name} (line {numbers}{more}): torn or not an event"), file=sys.stderr)
    return 0
