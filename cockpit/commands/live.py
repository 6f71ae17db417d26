"""`cockpit status` (one snapshot; `--lot` adds other lots, `--textfile` writes the metrics for
node_exporter) and `cockpit watch --headless` (the engine in a loop, no UI; `--metrics` serves
`/metrics` and `/snapshot.json`)."""

from __future__ import annotations

import signal
import sys
import threading
from datetime import datetime

from cockpit.common.text import escape_control
from cockpit.common.times import hours_text, parse_ts, utc_now
from cockpit.errors import UsageError
from cockpit.live.engine import Engine
from cockpit.live.gpu_health import health_lines
from cockpit.live.gpu_source import env_nvml_source
from cockpit.live.gpu_sampler import GpuSampler
from cockpit.live.snapshot import Snapshot
from cockpit.plan.load import load_campaign

RUN_COLUMN = 16  # the run ids' column; a longer id widens it, so columns never run together


def _local(moment: datetime | None) -> str:
    return moment.astimezone().strftime("%a %d %b %H:%M %Z") if moment else "–"



def _value(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _span(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def render_text(snapshot: Snapshot) -> str:
    lot, clock = snapshot.lot, snapshot.clock
    lines = [
        f"{lot.campaign_id} · {lot.gpu_model} × {lot.gpus} · {lot.days}-day lot · {lot.price_usd:.2f} USD for the lot"
        + (f" · order {lot.order_ref}" if lot.order_ref else ""),
        f"lot ends {_local(lot.end)}",
        "",
        f"clock     {clock.message or ''}",
        f"          elapsed {hours_text(clock.elapsed_hours, 1)} · left {hours_text(clock.remaining_hours, 1)} · "
        f"committed {hours_text(clock.committed_hours, 1)} of {hours_text(clock.window_hours, 1)} "
        f"(uncommitted {hours_text(clock.uncommitted_hours, 1)})",
        f"          remaining plan {hours_text(clock.committed_remaining_hours, 1)} · projected finish with retrieval "
        f"{_local(clock.projected_finish)}" + ("" if clock.fits is not False else " — PAST THE LOT'S END"),
        "",
    ]
    if not snapshot.nvml.available:
        lines.append(f"GPUs      {snapshot.nvml.reason or 'NVML unavailable'}")
    for gpu in snapshot.gpus:
        label = " (SIMULATED)" if gpu.simulated else ""
        if gpu.lost:
            lines.append(f"GPU {gpu.index}     {gpu.name}{label}: LOST")
            continue
        memory = (
            f"{gpu.memory_used_bytes / 2**30:.1f}/{gpu.memory_total_bytes / 2**30:.0f} GiB"
            if gpu.memory_used_bytes is not None and gpu.memory_total_bytes else "mem –"
        )
        utilization = "util not reported (MIG)" if gpu.mig else f"{_value(gpu.utilization_percent)} %"
        lines.append(
            f"GPU {gpu.index}     {gpu.name}{label}: {utilization} · {memory} · "
            f"{_value(gpu.temperature_c)} °C · {_value(gpu.power_watts)} W"
            + (f" · slowed by {', '.join(gpu.throttle_reasons)}" if gpu.throttle_reasons else "")
        )
        lines += [f"          {line}" for line in health_lines(gpu)]
    lines.append("")
    ids = {run.id: escape_control(run.id) for run in snapshot.runs}
    width = max([RUN_COLUMN] + [len(shown) + 2 for shown in ids.values()])
    lines.append(f"{'run':<{width}}{'role':<9}{'tier':<15}{'state':<10}{'step':>9}  {'loss':>9}  {'quality':>8}  resume")
    for run in snapshot.runs:
        step = "–" if run.step is None else (f"{run.step}/{run.total_steps}" if run.total_steps else str(run.step))
        role, tier, state = (escape_control(value) for value in (run.role, run.tier, run.state))
        lines.append(
            f"{ids[run.id]:<{width}}{role:<9}{tier:<15}{state:<10}{step:>9}  {escape_control(_value(run.loss)):>9}  "
            f"{escape_control(_value(run.quality)):>8}  {'verified' if run.resume_verified else '–'}"
            + (f"  stopped: {run.stop_reason}" if run.stop_reason else "")
        )
    for run in snapshot.runs:
        advice = run.save_advice
        if advice:
            lines.append(
                f"  {run.id}: a save takes {_span(advice['save_seconds'])} — save every {_span(advice['interval_minutes'] * 60)} "
                f"(Daly, MTBF {advice['mtbf_hours']:g} h, overhead {advice['overhead_fraction'] * 100:.1f} %)"
                + (f"; last final save by {_local(parse_ts(advice['latest_final_save']))}" if advice.get("latest_final_save") else "")
            )
    lines.append("")
    if snapshot.alerts:
        lines.append(f"{len(snapshot.alerts)} active alert{'s' if len(snapshot.alerts) != 1 else ''}:")
        for alert in snapshot.alerts:
            lines.append(f"  ! [{alert.rule}] {alert.message}")
    else:
        lines.append("no active alerts")
    for notice in snapshot.notices:
        lines.append(f"note: {notice}")
    # Names, reasons, messages and notices come from files, runs and people: each line is shown
    # with its control characters escaped (a data string's newline included).
    return "\n".join(escape_control(line) for line in lines)


def other_lots(args, campaign):
    """The other lots `--lot` and lots.toml name (None when there are none)."""
    from cockpit.lots.config import lot_sources

    sources = lot_sources(getattr(args, "lot", None))
    if not sources:
        return None
    from cockpit.lots.watcher import OtherLots  # only with other lots: its threads and sockets

    return OtherLots.of(sources, campaign.directory)


def status_extra(campaign):
    """What `status --json` adds to the engine's snapshot (the `notify` object and its notices):
    given to the exporter, so its /snapshot.json is exactly `status --json`."""
    from cockpit.notify.status import with_notify

    def extra(snapshot):
        snapshot, notify_json, _lines = with_notify(campaign, snapshot)
        return snapshot, {"notify": notify_json}

    return extra


def status(args) -> int:
    from cockpit.notify.status import with_notify

    campaign = load_campaign(args.dir)
    if args.textfile is not None:
        from cockpit.export.textfile import check_textfile_path

        check_textfile_path(args.textfile)  # refused before anything is read or written
    lots = other_lots(args, campaign)
    if lots:
        lots.poll_once()  # before the tick: a lot silent long enough is an alert of this snapshot
    engine = Engine(campaign, extra_alerts=lots.alerts if lots else None)  # NVML sampled once, in the tick
    try:
        snapshot = engine.tick()
    finally:
        engine.close()
        if lots:
            lots.close()
    snapshot, notify_json, notify_lines = with_notify(campaign, snapshot)  # channels (masked), channels that gave up
    if args.textfile is not None:
        from cockpit.export.metrics import LabelSets
        from cockpit.export.textfile import write_textfile

        write_textfile(args.textfile, snapshot, LabelSets.of(campaign))
    extra: dict = {"notify": notify_json}
    if lots:
        from cockpit.lots.summary import summarize

        readings = lots.readings()
        extra.update(
            lots=[reading.to_json(snapshot.taken_at) for reading in readings],
            lots_summary=summarize(snapshot, readings, snapshot.taken_at).to_json(),
        )
    if args.json:
        from cockpit.live.snapshot import status_json

        sys.stdout.write(status_json(snapshot, extra) + "\n")
    else:
        print(render_text(snapshot) + "".join("\n" + escape_control(line) for line in notify_lines))
        if lots:
            print(render_lots(snapshot, lots.readings()))
    return 1 if snapshot.alerts else 0


def render_lots(snapshot: Snapshot, readings) -> str:
    from cockpit.lots.summary import reading_lines, summarize

    lines = ["", "lots      " + summarize(snapshot, readings, snapshot.taken_at).text()]
    for reading in readings:
        lines += ["", *reading_lines(reading, snapshot.taken_at)]
    return "\n".join(lines)  # reading_lines and the summary escape what they quote


def watch(args) -> int:
    if not args.headless:
        raise UsageError("`watch` runs without a UI and needs --headless; the cockpit's screen is `cockpit DIR`")
    from cockpit.notify.sender import alongside

    campaign = load_campaign(args.dir)
    from cockpit.export.server import serve

    server, latest = serve(args.metrics, campaign, status_extra(campaign))  # a port in use is refused before anything starts
    sampler = GpuSampler(env_nvml_source(), interval=max(1.0, args.interval)).start()
    engine = alongside(campaign, Engine(campaign, gpus=sampler))  # notifications, when configured, on their own thread
    stopping = threading.Event()

    def stop(signum, _frame) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    print(escape_control(f"watching {campaign.id} every {args.interval:g} s; alerts and auto-stops go to {engine.log.path}"), flush=True)
    if getattr(engine, "notifier", None) is not None:
        from cockpit.notify.status import describe

        print("\n".join(describe(engine.notifier.config)), flush=True)
    if server is not None:
        print(f"metrics on {server.url}/metrics, the snapshot on {server.url}/snapshot.json", flush=True)
    said: set[object] = set()  # alert seqs, unrecorded alert keys, notices and errors already printed

    def say_once(key: object, text: str) -> None:
        if key not in said:
            said.add(key)
            print(escape_control(text), flush=True)  # alerts, notices and errors carry data strings

    try:
        while not stopping.is_set():
            try:
                snapshot = engine.tick()
                if latest is not None:
                    latest.publish(snapshot)
            except Exception as error:  # a watcher runs for days: one bad tick is said, not fatal
                say_once(("error", str(error)), f"{_local(utc_now())}  ERROR {type(error).__name__}: {error}; still watching")
                stopping.wait(max(args.interval, 5.0))
                continue
            for alert in reversed(snapshot.alerts):
                key = alert.seq if alert.seq is not None else ("unrecorded", alert.key)
                say_once(key, f"{_local(alert.ts)}  ALERT [{alert.rule}] {alert.message}")
            for notice in snapshot.notices:
                say_once(("notice", notice), f"note: {notice}")
            stopping.wait(args.interval)
    finally:
        if server is not None:
            server.close()
        engine.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("watch stopped", flush=True)
    return 0
