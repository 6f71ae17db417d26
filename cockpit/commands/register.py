"""Recording commands (`stop`, `decide`, `accept`, `note`) and `log`: the run log from the shell.

Each recording checks its names against the campaign first, so an unknown run, rule or
deliverable is refused and nothing is written; a recorded event is on disk before we say so.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from cockpit.campaign import Campaign, load_campaign
from cockpit.cli import Finding, UsageError
from cockpit.runlog import RunLog, ensure_started, parse_ts, plan_drift

SOURCE = "cli"


def _names(values: list[str]) -> str:
    return ", ".join(values) if values else "none"


def require_run(campaign: Campaign, run_id: str) -> None:
    if campaign.run(run_id) is None:
        raise UsageError(
            f"no run '{run_id}' in {campaign.file} (runs: {_names([r.id for r in campaign.runs])}); nothing was recorded"
        )


def _open(args) -> tuple[Campaign, RunLog]:
    campaign = load_campaign(args.dir)
    return campaign, RunLog(campaign.directory)


def _start(campaign: Campaign, log: RunLog) -> None:
    """The first recording starts the campaign: the plan is frozen and logged once."""
    if ensure_started(campaign, log):
        print(f"campaign {campaign.id} started: plan frozen in .cockpit/plan.toml (sha256 {campaign.sha256[:12]}…)")
    drift = plan_drift(campaign)
    if drift:
        print(f"note: {drift}", file=sys.stderr)


def _text(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value:
        raise UsageError(f"{what} is empty; write what happened, e.g. {what} \"loss plateaued at 2.3\"")
    return value


def _last_metrics(campaign: Campaign, run_id: str) -> dict[str, Any]:
    """The run's last step and metric values, as the stop event keeps them."""
    from cockpit.engine import last_metrics_of_run

    return last_metrics_of_run(campaign, run_id)


def stop(args) -> int:
    campaign, log = _open(args)
    require_run(campaign, args.run)
    if args.rule is not None and campaign.rule(args.rule) is None:
        raise UsageError(
            f"no stop rule '{args.rule}' in {campaign.file} "
            f"(rules: {_names([r.id for r in campaign.model.stop_rules])}); use --reason TEXT for a stop no rule covers; nothing was recorded"
        )
    reason = _text(args.reason, "--reason")
    earlier = log.replay().stop_of(args.run)
    if earlier is not None:
        raise Finding(
            f"run '{args.run}' was already stopped (seq {earlier['seq']}, {earlier.get('ts')}); "
            "nothing was recorded. A relaunch after a fix deserves a new run id (§4); "
            "to add an explanation use `cockpit note DIR TEXT --run RUN`"
        )
    _start(campaign, log)
    last = _last_metrics(campaign, args.run)
    signal: dict[str, Any] = {"requested": bool(args.signal), "sent": False}
    if args.signal:
        signal.update(_send_sigterm(campaign, args.run))
    event = log.append(
        "stop",
        run=args.run,
        rule=args.rule,
        reason=reason,
        source=SOURCE,
        last=last,
        signal=signal,
    )
    cause = f"rule {args.rule}" if args.rule else f"reason: {reason}"
    print(f"recorded: stop of run '{args.run}' ({cause}) — seq {event['seq']} in {log.path.name}")
    if args.signal:
        print(("SIGTERM sent: " if signal["sent"] else "no signal sent: ") + signal.get("detail", ""))
        if not signal["sent"]:
            return 1
    return 0


def _send_sigterm(campaign: Campaign, run_id: str) -> dict[str, Any]:
    """SIGTERM to the run's own process only, after checking it is still that process."""
    from cockpit.engine import terminate_run_of

    return terminate_run_of(campaign, run_id)


def decide(args) -> int:
    campaign, log = _open(args)
    note = _text(args.note, "--note")
    pilot = campaign.model.pilot
    _start(campaign, log)
    fields: dict[str, Any] = {"decision": args.decision, "note": note, "source": SOURCE}
    if pilot is not None:
        fields["run"] = pilot.run
        fields["decide_after_hours"] = pilot.decide_after_hours
    start = campaign.lot.start
    if start is not None:
        fields["lot_hours"] = round((log.clock() - start).total_seconds() / 3600, 3)
    event = log.append("pilot_decision", **fields)
    print(f"recorded: pilot decision '{args.decision}' — seq {event['seq']} in {log.path.name}")
    if pilot is None:
        print("note: the campaign declares no [pilot]; the decision is recorded without a pilot run", file=sys.stderr)
    return 0


def accept(args) -> int:
    campaign, log = _open(args)
    deliverable = campaign.deliverable(args.deliverable)
    if deliverable is None:
        raise UsageError(
            f"no deliverable '{args.deliverable}' in {campaign.file} "
            f"(deliverables: {_names([d.id for d in campaign.model.deliverables])}); nothing was recorded"
        )
    path = campaign.directory / deliverable.path
    if not path.exists():
        raise Finding(f"deliverable '{deliverable.id}': {deliverable.path} does not exist; nothing was recorded")
    _start(campaign, log)
    state = log.replay()
    if deliverable.run and state.stop_of(deliverable.run):
        print(
            f"note: run '{deliverable.run}' was stopped; `cockpit close` will not count its deliverable as accepted",
            file=sys.stderr,
        )
    event = log.append("accepted", deliverable=deliverable.id, run=deliverable.run, path=deliverable.path, source=SOURCE)
    print(f"recorded: acceptance of '{deliverable.id}' — seq {event['seq']} in {log.path.name}")
    return 0


def note(args) -> int:
    campaign, log = _open(args)
    if args.run is not None:
        require_run(campaign, args.run)
    text = _text(args.text, "the note")
    _start(campaign, log)
    event = log.append("note", run=args.run, text=text, source=SOURCE)
    print(f"recorded: note — seq {event['seq']} in {log.path.name}")
    return 0


# ---------------------------------------------------------------- log


def _summary(event: dict[str, Any]) -> str:
    kind = event["type"]
    if kind == "campaign_started":
        return f"plan frozen, sha256 {str(event.get('plan_sha256', ''))[:12]}…"
    if kind == "stop":
        cause = f"rule {event['rule']}" if event.get("rule") else f"reason: {event.get('reason')}"
        signal = event.get("signal") or {}
        return cause + (", SIGTERM sent" if signal.get("sent") else "")
    if kind == "pilot_decision":
        return str(event.get("decision")) + (f" — {event['note']}" if event.get("note") else "")
    if kind in ("accepted", "rejected"):
        return str(event.get("deliverable")) + (f" — {event['cause']}" if event.get("cause") else "")
    if kind == "note":
        return str(event.get("text"))
    if kind in ("alert", "ack"):
        return f"{event.get('rule')}: {event.get('message', '')}".rstrip(": ")
    skip = {"seq", "ts", "type", "run", "who", "source"}
    return ", ".join(f"{k}={v}" for k, v in event.items() if k not in skip and not isinstance(v, (dict, list)))[:120]


def _local(ts: Any) -> str:
    moment = parse_ts(ts) if isinstance(ts, str) else None
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z") if moment else str(ts)


def show_log(args) -> int:
    campaign, log = _open(args)
    if args.run is not None:
        require_run(campaign, args.run)
    read = log.read()
    events = [e for e in read.events if args.run is None or e.get("run") == args.run]
    if args.json:
        json.dump({"events": events, "bad_lines": read.bad_lines}, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    if not events:
        print(f"{log.path}: no events" + (f" for run '{args.run}'" if args.run else ""))
    for event in events:
        run = event.get("run") or "-"
        origin = " ".join(str(x) for x in (event.get("source"), event.get("who")) if x)
        print(f"{event['seq']:>5}  {_local(event.get('ts'))}  {event['type']:<16} {run:<14} {_summary(event)}  [{origin}]")
    if read.bad_lines:
        numbers = ", ".join(str(n) for n in read.bad_line_numbers[:10])
        more = "…" if read.bad_lines > 10 else ""
        print(f"{read.bad_lines} bad line{'s' if read.bad_lines != 1 else ''} skipped in {log.path.name} (line {numbers}{more}): torn or not an event", file=sys.stderr)
    return 0
