"""The live engine: sources (NVML, psutil, metrics streams, the run log) → rules and clock →
one frozen snapshot that the TUI, `status` and `watch` all render.

One `tick()` reads only what is new (metric bytes after the saved offsets, run-log lines after
the last one read), evaluates the stop rules on every new line, logs each new alert once (checked
under the run log's lock, so a TUI and a headless watcher never log it twice), carries out
`action = "stop"` rules, and saves its reading position in `.cockpit/` for the next start.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from cockpit.common.layout import RUNS_DIR, state_dir
from cockpit.common.times import iso, parse_ts, utc_minute, utc_now
from cockpit.live.clock import ItemProgress, lot_clock, projected
from cockpit.live.gpu import FakeGpus, GpuSampler, GpuSnapshot, NvmlSource
from cockpit.live.host import HostProcesses
from cockpit.live.metrics import (
    MetricsStream,
    RunTrack,
    last_metrics,
    load_state,
    save_state,
    seconds_to_datetime,
    state_file,
)
from cockpit.live.rules import RuleEvaluator, RuleState, Trigger
from cockpit.live.series import SeriesStore
from cockpit.live.snapshot import (
    AlertView,
    ClockView,
    GpuProcessView,
    GpuView,
    HostView,
    LotView,
    NvmlView,
    RunView,
    Snapshot,
)
from cockpit.plan.campaign import Campaign, CampaignError
from cockpit.plan.load import read_campaign_text
from cockpit.plan.schedule import schedule
from cockpit.record.runlog import RecordedState, RunLog, RunLogError, alert_key
from cockpit.record.start import ensure_started, frozen_plan_text, plan_drift, start_in

HISTORY = 120  # sparkline points kept per GPU: bounded whatever the lot's length
SAVE_EVERY_SECONDS = 15.0  # reading positions are saved this often (and at close), not every tick
SOURCE_AUTO = "auto"
# Built-in alerts: no [[stop_rule]] declares them.
RUN_DIED = "run-died"
STOPPED_STILL_RUNNING = "stopped-still-running"
STREAM_UNREADABLE = "stream-unreadable"
PILOT_DUE = "pilot-due"
STOPPED_GRACE_SECONDS = 120.0  # lines this long after a stop are a shutdown's last words, not a run going on
DEAD_OUTCOMES = ("ended", "reused", "not-the-run")  # the pid is no longer the run's process
UNDECLARED_SCAN_SECONDS = 60.0  # runs/ is listed this often for folders the campaign does not declare


def _run_start(track: RunTrack) -> float | None:
    started = track.started or {}
    ts = started.get("ts")
    return ts if isinstance(ts, (int, float)) else track.first_started_ts


def _start_bounds(track: RunTrack) -> dict[str, float]:
    """A start taken from when the `started` line was read only bounds the process's start from
    above (it began before the line was read): no "started too long before" check then."""
    return {"startup_allowance_s": math.inf} if track.started and track.started_ts_read else {}


@dataclass
class _Pending:
    """An alert or auto-stop the disk refused, kept to be written at the next tick."""

    key: str
    fields: dict[str, Any]
    line: int | None = None  # the metrics line that triggered it, with the stream's inode in fields


class Engine:
    """The campaign's live state, advanced one `tick()` at a time (run it off the UI thread)."""

    def __init__(
        self,
        campaign: Campaign,
        *,
        clock: Callable[[], datetime] = utc_now,
        gpus: Any = None,
        host: HostProcesses | None = None,
        signal_runs: bool = True,
        persist: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.campaign = campaign
        self.directory = campaign.directory
        self.clock = clock
        self.log = RunLog(self.directory, clock=clock)
        # A started GpuSampler offers `latest()` (never blocks); a bare source is sampled in the tick
        # itself, which suits a one-shot `status` and tests.
        self.gpus = gpus if gpus is not None else env_nvml_source()
        self._read_gpus = getattr(self.gpus, "latest", None) or self.gpus.sample
        self.host = host or HostProcesses()
        self.signal_runs = signal_runs
        self.persist = persist
        self._monotonic = monotonic
        self._saved_at: float | None = None
        self._unsaved = False
        self.notices: list[str] = []
        self._gpu_history: dict[int, tuple[deque, deque]] = {}
        self._log_offset = 0
        self._recorded = RecordedState()
        # (alert key, stream inode, stream generation, line) of every alert logged
        self._logged_lines: set[tuple[str, Any, Any, Any]] = set()
        self._bad_log_lines = 0
        self._unwritten: list[_Pending] = []  # alerts the run log refused (a full disk), retried each tick
        self._stops_due: list[Trigger] = []  # auto-stops not yet recorded, likewise
        self._standing: set[str] = set()  # standing conditions (window, lost GPU) present at the last tick
        self._rearmed: set[str] = set()  # standing conditions that cleared since they were logged
        self._undeclared: str | None = None  # the notice on runs/ folders the campaign does not declare
        self._undeclared_at: float | None = None
        self.pilot_due_at: datetime | None = None
        self._ticked = False

        self._started = False
        self._start_if_due(clock())
        self.plan = self._frozen_plan()
        self.planned = schedule(self.plan.items, self.plan.lot.gpu_count, self.plan.model.calendar.retrieval_hours)
        drift = plan_drift(campaign)
        if drift:
            self.notices.append(drift)

        saved = load_state(state_file(self.directory))
        self.streams: dict[str, MetricsStream] = {
            run.id: saved.stream(run.id, run.metrics_path(self.directory)) for run in campaign.runs
        }
        self.evaluator = RuleEvaluator(campaign.model.stop_rules, RuleState.from_dict((saved.extra or {}).get("rules")))
        # charts (issue 20): the downsampled series, saved beside the reading positions they match
        self.series = SeriesStore.for_campaign(campaign, (saved.extra or {}).get("series"),
                                               {run_id: stream.position.lines for run_id, stream in self.streams.items()})
        rearmed = (saved.extra or {}).get("rearmed")
        if isinstance(rearmed, list):  # cleared while an earlier cockpit watched: may be said again
            self._rearmed = {key for key in rearmed if isinstance(key, str)}

    # ------------------------------------------------------------ set-up

    def _start_if_due(self, now: datetime) -> None:
        """The campaign starts — plan frozen, `campaign_started` logged — once its lot has started
        (or at once when the lot has no start): looking at it before the lot does not freeze it."""
        if self._started:
            return
        start = self.campaign.lot.start
        if start is not None and now < start:
            return
        try:
            ensure_started(self.campaign, self.log)
            self._started = True
        except RunLogError as error:  # a full disk: watch anyway, say nothing can be recorded, retry
            if str(error) not in self.notices:
                self.notices.append(str(error))

    def _frozen_plan(self) -> Campaign:
        """The plan as frozen at the start: the clock measures against it, not today's file."""
        text = frozen_plan_text(self.directory)
        if text is None or text == self.campaign.text:
            return self.campaign
        try:
            return read_campaign_text(text, self.directory, ".cockpit/plan.toml")
        except CampaignError:
            self.notices.append(".cockpit/plan.toml (the frozen plan) no longer reads; the clock uses campaign.toml")
            return self.campaign

    def close(self) -> None:
        """Save where reading stopped and release the GPU source."""
        self._save(force=True)
        closer = getattr(self.gpus, "close", None)
        if closer:
            closer()

    def _save(self, force: bool = False) -> None:
        """Persist reading positions and rule state: after a trigger at once, otherwise now and then
        (a lost position only means re-reading; the run log keeps alerts from repeating)."""
        if not self.persist or not (self._unsaved or force):
            return
        now = self._monotonic()
        if not force and self._saved_at is not None and now - self._saved_at < SAVE_EVERY_SECONDS:
            return
        try:
            state_dir(self.directory)
            save_state(state_file(self.directory), list(self.streams.values()),
                       extra={"rules": self.evaluator.state.to_dict(), "rearmed": sorted(self._rearmed),
                              "series": self.series.to_dict()})  # charts (issue 20)
        except (OSError, ValueError, TypeError) as error:
            notice = (
                f"cannot save the reading position in .cockpit/ ({getattr(error, 'strerror', None) or error}); "
                "the next start reads the metrics again, nothing recorded is lost"
            )
            if notice not in self.notices:
                self.notices.append(notice)
            self._saved_at = now  # try again later, not every tick
            return
        self._saved_at, self._unsaved = now, False

    # ------------------------------------------------------------ the run log

    def _follow_log(self) -> RecordedState:
        events, bad, self._log_offset = self.log.read_from(self._log_offset)
        self._bad_log_lines += bad
        if events:
            self._recorded.apply(events)
            self.series.take_log(events, parse_ts)  # charts (issue 20): alerts, stops, notes by run
            self._logged_lines |= _alert_lines(events)
            for event in events:  # an acknowledgement, from any process, re-arms the rule
                if event["type"] == "ack" and event.get("run"):
                    self.evaluator.acknowledge(str(event.get("rule")), str(event["run"]))
        return self._recorded

    def _to_log(
        self, pending: list[_Pending], open_keys: set[str], logged_lines: set[tuple[str, Any, Any, Any]]
    ) -> tuple[list[_Pending], list[_Pending]]:
        """(alerts to write, alerts already logged for the same line of the same file)."""
        open_keys = set(open_keys)
        ever_keys = {identity[0] for identity in logged_lines}
        keep: list[_Pending] = []
        repeated: list[_Pending] = []
        for item in pending:
            if item.key in open_keys:
                continue
            if item.line is not None and _line_identity(item.key, item.fields, item.line) in logged_lines:
                repeated.append(item)  # the same line of the same file, re-read after the saved state was lost
                continue
            if item.fields.get("once") and item.key in ever_keys and item.key not in self._rearmed:
                continue  # a standing condition (a window threshold, a lost GPU): said once while it holds
            keep.append(item)
            open_keys.add(item.key)
        return keep, repeated

    def _log_alerts(self, pending: list[_Pending]) -> list[dict[str, Any]]:
        """Append each alert not already open (nor logged for the same line); the lock is taken only
        when the run log as followed so far leaves something to write."""
        open_keys = {a.key for a in self._recorded.active_alerts}
        keep, repeated = self._to_log(pending, open_keys, self._logged_lines)
        for item in repeated:  # not logged twice, but the rule must not stay silenced for later lines
            self.evaluator.acknowledge(str(item.fields.get("rule")), str(item.fields.get("run")))
        if not keep:
            return []
        written = []
        with self.log.transaction() as tx:  # checked again under the lock: another cockpit may have logged it
            events = tx.read().events
            keep, _ = self._to_log(
                keep, {a.key for a in RecordedState.from_events(events).active_alerts}, _alert_lines(events)
            )
            if keep:  # an alert is a recording: the run log begins with `campaign_started`
                start_in(tx, self.campaign, events)
            for item in keep:
                fields = {k: v for k, v in item.fields.items() if k != "once"}
                written.append(tx.append("alert", key=item.key, **fields))
                if item.key in self._rearmed:
                    self._rearmed.discard(item.key)
                    self._unsaved = True
        return written

    # ------------------------------------------------------------ one tick

    def tick(self) -> Snapshot:
        now = self.clock()
        self._start_if_due(now)
        recorded = self._settle_pilot(self._follow_log())
        gpu_snapshot: GpuSnapshot = self._read_gpus()
        triggers: list[Trigger] = []
        changed = False
        for run_id, stream in self.streams.items():
            observer = None if recorded.stop_of(run_id) else self.evaluator.observer(run_id, triggers)
            observer = self.series.observer(run_id, observer)  # charts (issue 20): every line feeds the series
            try:  # one run's stream never hides another run, the GPUs or the clock
                result = stream.poll(observer, now=now.timestamp())
            except Exception as error:
                self._run_failed(run_id, "its metrics could not be read this tick", error)
                continue
            changed = changed or bool(result.lines) or result.reset

        self._log_run_starts(recorded)

        run_pids = {
            run_id: stream.track.started["pid"]
            for run_id, stream in self.streams.items()
            if stream.track.started and isinstance(stream.track.started.get("pid"), int)
        }
        alive: dict[str, bool | None] = {}  # None: no pid, or one from another host or pid namespace
        dead: dict[str, Any] = {}  # run → the check that found its own process gone
        for run_id, stream in self.streams.items():
            pid = run_pids.get(run_id)
            try:
                sees = self.host.sees(stream.track.started) if pid is not None else False
                if pid is None or sees is False:
                    alive[run_id] = None  # `stalled` goes on silence alone
                else:
                    check = self.host.check(pid, _run_start(stream.track), **_start_bounds(stream.track))
                    alive[run_id] = check.ok
                    if sees and not check.ok and check.outcome in DEAD_OUTCOMES:
                        # judged only where the pid means what it meant to the run; read once more first:
                        # a run that wrote `finished` just after this tick's read and then exited did not die
                        observer = None if recorded.stop_of(run_id) else self.evaluator.observer(run_id, triggers)
                        observer = self.series.observer(run_id, observer)  # charts (issue 20)
                        changed = bool(stream.poll(observer, now=now.timestamp()).lines) or changed
                        if stream.track.finished is None:
                            dead[run_id] = check
                if recorded.stop_of(run_id) is None:
                    triggers.extend(self.evaluator.tick(run_id, stream.track, now, alive[run_id]))
            except Exception as error:
                alive.setdefault(run_id, None)
                self._run_failed(run_id, "its time rules could not be evaluated this tick", error)

        progress = self._progress(recorded, alive)
        try:
            reading = lot_clock(self.plan, now, progress, self.planned)
        except Exception as error:  # the clock without the runs' measured progress, rather than none
            self._run_failed(None, "the runs' measured progress could not be used by the clock", error)
            reading = lot_clock(self.plan, now, {}, self.planned)
        self.series.note_clock(now, reading.committed_remaining_hours, reading.remaining_hours)  # charts (issue 20)

        pending = [
            _Pending(
                f"{t.rule_id}|{t.run_id}",
                {**t.event_fields(), **self._stream_identity(t.run_id)},
                t.line,
            )
            for t in triggers
        ]
        pending += self._built_in_alerts(now, recorded, alive, dead, run_pids)
        window = [
            _Pending(a.key, {"rule": a.rule, "run": None, "message": a.message, "severity": a.level, "once": True})
            for a in reading.alerts
        ]
        # Before the lot starts a window alert (the plan overruns) is planning advice: shown, not logged,
        # since logging it would start the campaign and freeze a plan its author may still be fixing.
        waiting = [] if reading.started else [replace(p, fields={**p.fields, "waiting": True}) for p in window]
        pending += window if reading.started else []
        for alert in gpu_snapshot.alerts:
            key = f"{alert.rule}:{alert.gpu_index}" if alert.gpu_index is not None else alert.rule
            pending.append(_Pending(key, {"rule": alert.rule, "run": None, "message": alert.message, "severity": "critical", "gpu": alert.gpu_index, "once": True}))
        standing = {p.key for p in pending if p.fields.get("once")}
        rearmed = len(self._rearmed)
        self._rearmed |= self._standing - standing  # a condition that cleared may be said again
        if not self._ticked:  # an unreadable stream fixed while no cockpit watched may be said again
            self._ticked = True
            self._rearmed |= {i[0] for i in self._logged_lines if i[0].startswith(STREAM_UNREADABLE + "|")} - standing
        self._unsaved = self._unsaved or len(self._rearmed) != rearmed
        self._standing = standing

        # Alerts the disk refused earlier come first: kept and retried until they are on disk.
        seen = {(p.key, p.line) for p in self._unwritten}
        pending = self._unwritten + [p for p in pending if (p.key, p.line) not in seen]
        unrecorded: list[_Pending] = []
        try:
            if self._log_alerts(pending):
                recorded = self._follow_log()
            self._unwritten = []
        except RunLogError as error:
            # Shown all the same, marked: an alert the disk refused must not vanish from the screen.
            unrecorded = self._unwritten = [p for p in pending if p.key not in {a.key for a in recorded.active_alerts}]
            if str(error) not in self.notices:
                self.notices.append(str(error))

        self._stops_due += [t for t in triggers if t.action == "stop"]
        due, self._stops_due = self._stops_due, []
        for trigger in due:
            if recorded.stop_of(trigger.run_id) is not None:
                continue
            try:
                self._auto_stop(trigger)
            except RunLogError as error:
                self._stops_due.append(trigger)  # retried next tick: a stop rule is not dropped by a full disk
                message = f"{trigger.run_id}: the stop rule {trigger.rule_id} could not be recorded yet: {error}"
                if message not in self.notices:
                    self.notices.append(message)
            recorded = self._follow_log()

        self._unsaved = self._unsaved or changed or bool(triggers)
        self._save(force=bool(triggers))
        return self._snapshot(now, recorded, gpu_snapshot, reading, alive, run_pids, [*unrecorded, *waiting])

    def _run_failed(self, run_id: str | None, what: str, error: Exception) -> str:
        """Said once as a notice: a bug meeting one run's data costs that part of the tick only."""
        subject = f"run {run_id}: " if run_id else ""
        message = f"{subject}{what} ({type(error).__name__}: {str(error)[:200]}); everything else is shown"
        if message not in self.notices:
            self.notices.append(message)
        return message

    def _stream_identity(self, run_id: str) -> dict[str, Any]:
        stream = self.streams[run_id]
        return {"stream_inode": stream.position.inode, "stream_generation": stream.generation}

    def _built_in_alerts(
        self, now: datetime, recorded: RecordedState, alive: dict[str, bool | None], dead: dict[str, Any],
        run_pids: dict[str, int],
    ) -> list[_Pending]:
        """The alerts no campaign declares: a run's process gone without `finished`, a stopped run
        still writing, a stream that cannot be read, the pilot decision due."""
        pending: list[_Pending] = []
        now_s = now.timestamp()

        def alert(rule: str, run_id: str | None, message: str, severity: str, line: int | None = None, **fields: Any) -> None:
            key = f"{rule}|{run_id or ''}"
            body = {"rule": rule, "run": run_id, "message": message, "severity": severity, **fields}
            if line is None:
                body["once"] = True  # a standing condition: said once while it holds
            else:
                body["line"] = line  # the stream's line it is about: logged once per line of each writing
            pending.append(_Pending(key, body, line))

        for run_id, stream in self.streams.items():
            track = stream.track
            stop = recorded.stop_of(run_id)
            if stream.error:
                alert(STREAM_UNREADABLE, run_id,
                      f"{run_id}: its metrics cannot be read: {stream.error}; no rule sees its lines until the path "
                      "holds a readable file (check [[run]] metrics in campaign.toml, the file's type and permissions)",
                      "critical")
            check = dead.get(run_id)
            if check is not None and stop is None and track.finished is None and track.started:
                pid = track.started["pid"]
                gone = {"reused": "its pid now belongs to another process",
                        "not-the-run": "its pid belongs to a process older than the run"}.get(check.outcome, "it has ended")
                silence = _ago(now_s - track.last_line_ts) if track.last_line_ts is not None else "no line yet"
                step = "none" if track.last_step is None else str(track.last_step)
                alert(RUN_DIED, run_id,
                      f"{run_id}: its process (pid {pid}) died without a `finished` event ({gone}); "
                      f"last step {step}, last line {silence}",
                      "critical", track.started.get("line"), pid=pid, step=track.last_step, **self._stream_identity(run_id))
            if stop is not None and track.finished is None and alive.get(run_id) is not False:
                stopped_at = _parse(stop.get("ts"))
                if stopped_at is not None and track.last_ts is not None and track.last_ts > stopped_at.timestamp() + STOPPED_GRACE_SECONDS:
                    alert(STOPPED_STILL_RUNNING, run_id, self._still_running_text(run_id, stop, stopped_at, now_s, alive, run_pids),
                          "critical", pid=run_pids.get(run_id), step=track.last_step)

        self.pilot_due_at = None
        pilot = self.plan.model.pilot
        stream = self.streams.get(pilot.run) if pilot is not None else None
        if pilot is not None and stream is not None and recorded.pilot_decision is None:
            start = _run_start(stream.track) or stream.track.first_ts
            due = seconds_to_datetime(start + pilot.decide_after_hours * 3600.0) if start is not None else None
            if due is not None and now >= due:
                self.pilot_due_at = due
                alert(PILOT_DUE, pilot.run,
                      f"pilot decision due: {pilot.run} started {_utc_text(seconds_to_datetime(start))} and the "
                      f"{pilot.decide_after_hours:g} h set for the decision passed at {_utc_text(due)}; record it: "
                      "continue, drop-optional or revise (key d, or `cockpit decide DIR ...`)",
                      "warning", due=iso(due))
        return pending

    def _still_running_text(self, run_id, stop, stopped_at, now_s, alive, run_pids) -> str:
        track = self.streams[run_id].track
        signal = stop.get("signal") or {}
        sent = "SIGTERM was sent" if signal.get("sent") else "no signal was sent"
        step = f", step {track.last_step}" if track.last_step is not None else ""
        pid = run_pids.get(run_id)
        if pid is not None and alive.get(run_id):
            how = f"send it the signal: kill -TERM {pid} (its own process, checked)"
        elif pid is not None:
            how = f"its pid {pid} is in another pid namespace or on another host: send SIGTERM where it runs (e.g. docker kill --signal TERM …)"
        else:
            how = "it reported no pid: send SIGTERM where it runs"
        return (
            f"{run_id}: recorded as stopped at {_utc_text(stopped_at)} ({sent}) but its process goes on writing metrics "
            f"(last line {_ago(now_s - track.last_ts)}{step}): the lot is still paying for it; {how}"
        )

    def _settle_pilot(self, recorded: RecordedState) -> RecordedState:
        """A recorded pilot decision answers `pilot-due`: its open alert is acknowledged for it."""
        if recorded.pilot_decision is None or not any(a.event.get("rule") == PILOT_DUE for a in recorded.active_alerts):
            return recorded
        from cockpit.record import decisions  # rare: once per decision

        for record in [a for a in recorded.active_alerts if a.event.get("rule") == PILOT_DUE]:
            try:
                decisions.acknowledge(self.campaign, self.log, PILOT_DUE, record.event.get("run"), source=SOURCE_AUTO, key=record.key)
            except (decisions.Finding, RunLogError):
                pass  # another cockpit did it first, or the disk is full: the next tick tries again
        return self._follow_log()

    def _undeclared_notice(self) -> str | None:
        """One notice for metrics folders under runs/ that no declared id owns (a typo in a run id
        reads as a run that never reports); listed now and then, never every tick."""
        moment = self._monotonic()
        if self._undeclared_at is not None and moment - self._undeclared_at < UNDECLARED_SCAN_SECONDS:
            return self._undeclared
        self._undeclared_at = moment
        folder = self.directory / RUNS_DIR
        declared = {item.id for item in self.campaign.items}
        used = set()
        for run in self.campaign.runs:
            for path in (run.metrics_path(self.directory), run.checkpoints_path(self.directory)):
                try:
                    used.add(path.relative_to(folder).parts[0])
                except (ValueError, IndexError):
                    pass
        names = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name.startswith(".") or entry.name in declared or entry.name in used:
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False) and os.path.isfile(os.path.join(entry.path, "metrics.jsonl")):
                            names.append(entry.name)
                    except OSError:
                        continue
        except OSError:
            names = []
        if not names:
            self._undeclared = None
        else:
            names.sort()
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            self._undeclared = (
                f"runs/ holds metrics of {len(names)} id{'s' if len(names) != 1 else ''} the campaign does not declare "
                f"({shown}): they are ignored; declare each as a [[run]] in campaign.toml, or move it out of runs/"
            )
        return self._undeclared

    def _log_run_starts(self, recorded: RecordedState) -> None:
        """`run_started` once for each `started` event a run reported (a restart is a new start)."""
        logged = {(e.get("run"), e.get("metric_ts")) for e in recorded.runs_started}
        new = [
            (run_id, stream.track.started)
            for run_id, stream in self.streams.items()
            if stream.track.started and (run_id, _ts_text(stream.track.started.get("ts"))) not in logged
        ]
        if not new:
            return
        try:
            with self.log.transaction() as tx:
                events = tx.read().events
                logged |= {(e.get("run"), e.get("metric_ts")) for e in events if e["type"] == "run_started"}
                for run_id, started in new:
                    ts = _ts_text(started.get("ts"))
                    if (run_id, ts) not in logged:
                        start_in(tx, self.campaign, events)  # likewise: `campaign_started` first
                        tx.append("run_started", run=run_id, pid=started.get("pid"),
                                  config_sha256=started.get("config_sha256"), metric_ts=ts)
        except RunLogError as error:
            if str(error) not in self.notices:
                self.notices.append(str(error))
            return
        self._follow_log()

    def _auto_stop(self, trigger: Trigger) -> None:
        from cockpit.record import decisions  # only when a rule stops a run: most ticks never need it

        track = self.streams[trigger.run_id].track
        signal = (lambda: self._terminate(trigger.run_id)) if self.signal_runs else None
        try:
            decisions.record_stop(
                self.campaign, self.log, trigger.run_id, rule=trigger.rule_id, source=SOURCE_AUTO,
                last=last_metrics(track), signal=signal,
            )
        except decisions.Finding:
            pass  # another cockpit recorded the stop first

    def _terminate(self, run_id: str) -> dict[str, Any]:
        return terminate_run_of(self.campaign, run_id, host=self.host, track=self.streams[run_id].track)

    # ------------------------------------------------------------ building the snapshot

    def _progress(self, recorded: RecordedState, alive: dict[str, bool | None]) -> dict[str, ItemProgress]:
        progress: dict[str, ItemProgress] = {}
        for run in self.campaign.runs:
            track = self.streams[run.id].track
            if not track.lines and not track.started:
                continue
            stop = recorded.stop_of(run.id)
            state = _state(track, stop, alive[run.id], bool(self.streams[run.id].error))
            ended_at = None
            if stop:
                ended_at = _parse(stop.get("ts"))
            elif track.finished:
                ended_at = seconds_to_datetime(track.finished.get("ts"))
            clock_state = {"planned": "pending", "ended": "failed", "quiet": "running", "unreadable": "running"}.get(state, state)
            progress[run.id] = ItemProgress(
                state=clock_state,
                started_at=seconds_to_datetime(_run_start(track) or track.first_ts),
                ended_at=ended_at,
                step=track.last_step,
                step_at=seconds_to_datetime(track.last_ts),
                total_steps=run.total_steps,
                steps_per_hour=track.steps_per_hour,
            )
        return progress

    def _gpu_views(self, snapshot: GpuSnapshot, process_runs: dict[int, str]) -> tuple[GpuView, ...]:
        views = []
        for sample in snapshot.samples:
            utilization, memory = self._gpu_history.setdefault(sample.index, (deque(maxlen=HISTORY), deque(maxlen=HISTORY)))
            if sample.utilization_percent is not None:
                utilization.append(float(sample.utilization_percent))
            if sample.memory_used_bytes is not None and sample.memory_total_bytes:
                memory.append(100.0 * sample.memory_used_bytes / sample.memory_total_bytes)
            views.append(
                GpuView(
                    index=sample.index,
                    name=sample.name,
                    utilization_percent=sample.utilization_percent,
                    memory_used_bytes=sample.memory_used_bytes,
                    memory_total_bytes=sample.memory_total_bytes,
                    temperature_c=sample.temperature_c,
                    power_watts=sample.power_draw_w,
                    power_limit_watts=sample.power_limit_w,
                    sm_clock_mhz=sample.sm_clock_mhz,
                    memory_clock_mhz=sample.memory_clock_mhz,
                    throttle_reasons=sample.slowed_by,
                    processes=tuple(
                        GpuProcessView(p.pid, p.used_memory_bytes, process_runs.get(p.pid)) for p in sample.processes or ()
                    ),
                    lost=sample.lost,
                    simulated=sample.simulated,
                    utilization_history=tuple(utilization),
                    memory_history=tuple(memory),
                )
            )
        return tuple(views)

    def _snapshot(self, now, recorded, gpu_snapshot, reading, alive, run_pids, unrecorded=()) -> Snapshot:
        campaign, lot = self.campaign, self.plan.lot  # the lot as frozen at the start, like the clock
        notices = list(self.notices)
        undeclared = self._undeclared_notice()
        if undeclared:
            notices.append(undeclared)
        process_map = self.host.map_gpu_processes(gpu_snapshot.samples, run_pids, [r.id for r in campaign.runs])
        for message in process_map.messages:
            if message not in self.notices:
                self.notices.append(message)
                notices.append(message)
        process_runs = {pid: entry.run for entry in process_map.runs for pid in entry.pids}
        closing_metric = campaign.model.closing.metric if campaign.model.closing else None

        runs = []
        for run in campaign.runs:
            track = self.streams[run.id].track
            stop = recorded.stop_of(run.id)
            values = track.metric_values
            rate = track.steps_per_hour
            state = _state(track, stop, alive.get(run.id), bool(self.streams[run.id].error))
            eta = None
            if state == "running" and run.total_steps and track.last_step is not None and rate and rate > 0:
                base = seconds_to_datetime(track.last_ts) or now
                eta = projected(base, max(0, run.total_steps - track.last_step) / rate)
            advice = None
            save_seconds = (track.checkpoint or {}).get("seconds")
            if state == "running" and isinstance(save_seconds, (int, float)) and save_seconds > 0:
                from cockpit.live.cadence import save_advice  # a large module, needed only once runs save

                try:
                    advice = save_advice(
                        float(save_seconds), source="checkpoint events", lot_end=lot.end,
                        retrieval_hours=self.plan.model.calendar.retrieval_hours, now=now,
                    ).to_json()
                except (ArithmeticError, ValueError) as error:
                    notices.append(self._run_failed(run.id, "no save advice from its checkpoint time", error))
            if track.bad_lines:
                notices.append(f"run {run.id}: {track.bad_lines} metric line{'s' if track.bad_lines != 1 else ''} could not be read and were skipped")
            notices.extend(track.notices(run.id))
            runs.append(
                RunView(
                    id=run.id,
                    role=run.role.value,
                    tier=run.tier.value,
                    state=state,
                    step=track.last_step,
                    total_steps=run.total_steps,
                    loss=values.get("loss"),
                    quality=values.get(closing_metric) if closing_metric else None,
                    last=values,
                    eta=eta,
                    last_checkpoint_at=seconds_to_datetime((track.checkpoint or {}).get("ts")),
                    resume_verified=track.resume_verified is not None,
                    resume_verified_at=seconds_to_datetime((track.resume_verified or {}).get("ts")),
                    pid=run_pids.get(run.id),
                    alive=alive.get(run.id),
                    bad_lines=track.bad_lines,
                    bad_fields=track.bad_fields,
                    stop_reason=(stop.get("rule") or stop.get("reason")) if stop else None,
                    save_advice=advice,
                )
            )
        if self._bad_log_lines:
            notices.append(f"runlog.jsonl: {self._bad_log_lines} torn or bad line{'s' if self._bad_log_lines != 1 else ''} skipped")
        notices.extend(w for w in gpu_snapshot.warnings if w not in notices)

        alerts = tuple(
            AlertView(
                rule=str(a.event.get("rule")),
                run=a.event.get("run"),
                message=str(a.event.get("message", "")),
                ts=_parse(a.event.get("ts")),
                seq=a.event.get("seq"),
                severity=str(a.event.get("severity") or ("critical" if a.event.get("action") == "stop" else "warning")),
                key=a.key,
            )
            for a in reversed(recorded.active_alerts)
        ) + tuple(
            AlertView(
                rule=str(p.fields.get("rule")), run=p.fields.get("run"),
                message=f"{p.fields.get('message', '')} " + (
                    "(not in the run log: the lot has not started)" if p.fields.get("waiting")
                    else "(NOT RECORDED: the run log could not be written)"
                ),
                ts=now, seq=None, severity="critical", key=p.key,
            )
            for p in unrecorded
        )
        host = self.host.host(self.directory)
        return Snapshot(
            taken_at=now,
            lot=LotView(
                campaign_id=campaign.id,
                question=campaign.model.question,
                gpu_model=lot.gpu_model,
                gpus=lot.gpu_count,
                days=lot.days,
                price_usd=self.plan.price,
                order_ref=lot.order_ref,
                start=lot.start,
                end=lot.end,
            ),
            clock=ClockView(
                now=now,
                started=reading.started,
                elapsed_hours=reading.elapsed_hours,
                remaining_hours=reading.remaining_hours,
                window_hours=reading.window_hours,
                committed_hours=self.planned.committed_hours,
                committed_remaining_hours=reading.committed_remaining_hours,
                uncommitted_hours=reading.window_hours - self.planned.committed_hours,
                projected_finish=reading.projected_retrieval_end,
                retrieval_hours=reading.retrieval_hours,
                fits=reading.fits,
                message=reading.message,
            ),
            nvml=NvmlView(
                available=gpu_snapshot.available,
                reason=gpu_snapshot.reason,
                simulated=gpu_snapshot.simulated,
                sample_age_seconds=gpu_snapshot.age_seconds(now),
                warnings=tuple(gpu_snapshot.warnings),
            ),
            gpus=self._gpu_views(gpu_snapshot, process_runs),
            host=HostView(
                cpu_percent=host.cpu_percent,
                memory_used_bytes=host.memory_used_bytes,
                memory_total_bytes=host.memory_total_bytes,
                disk_used_bytes=host.disk_used_bytes,
                disk_total_bytes=host.disk_total_bytes,
                disk_free_bytes=host.disk_free_bytes,
            ),
            runs=tuple(runs),
            alerts=alerts,
            notices=tuple(dict.fromkeys(notices)),
            pilot_due_at=self.pilot_due_at,
            series=self.series.view(self._monotonic()),  # charts (issue 20)
        )


def _alert_lines(events: list[dict[str, Any]]) -> set[tuple[str, Any, Any, Any]]:
    return {_line_identity(alert_key(e), e, e.get("line")) for e in events if e["type"] == "alert"}


def _line_identity(key: str, fields: dict[str, Any], line: Any) -> tuple[str, Any, Any, Any]:
    """What makes an alert the same alert of the same line: its key, the stream's inode and
    generation (a rewritten file is a new writing even where the inode number comes back), the line."""
    return (key, fields.get("stream_inode"), fields.get("stream_generation"), line)


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _utc_text(moment: datetime | None) -> str:
    return utc_minute(moment) if moment else "an unknown time"


def _ts_text(seconds: Any) -> str | None:
    moment = seconds_to_datetime(seconds) if isinstance(seconds, (int, float)) else None
    return iso(moment) if moment else None


def _parse(text: Any) -> datetime | None:
    return parse_ts(text) if isinstance(text, str) else None


def _state(track: RunTrack, stop: dict[str, Any] | None, alive: bool | None, unreadable: bool = False) -> str:
    if stop is not None:
        return "stopped"
    if unreadable:
        return "unreadable"  # its metrics path holds no readable file: nothing it says is seen
    if track.finished is not None:
        return "finished" if track.finished_cleanly else "failed"
    if not track.lines and not track.started:
        return "planned"
    if alive is False:
        return "ended"  # its process is gone and it never said `finished`
    return "running"


# ---------------------------------------------------------------- for the command line


def track_of(campaign: Campaign, run_id: str) -> RunTrack | None:
    """The run's summary, brought up to date from the saved position (reads only new bytes)."""
    run = campaign.run(run_id)
    if run is None:
        return None
    path = run.metrics_path(campaign.directory)
    saved = load_state(state_file(campaign.directory))
    stream = saved.stream(run_id, path)
    stream.poll()
    return stream.track


def last_metrics_of_run(campaign: Campaign, run_id: str, *, track: RunTrack | None = None) -> dict[str, Any]:
    """The run's last step and metric values, for a stop event ({} when it has reported nothing)."""
    track = track or track_of(campaign, run_id)
    if track is None or (not track.lines and not track.started):
        return {}
    return last_metrics(track)


def terminate_run_of(
    campaign: Campaign, run_id: str, *, host: HostProcesses | None = None, track: RunTrack | None = None
) -> dict[str, Any]:
    """SIGTERM to the run's own process only: the pid of its `started` event, checked to be the
    same user's and started when the run said it started (a reused pid is never signalled)."""
    track = track or track_of(campaign, run_id)
    started = (track.started if track else None) or {}
    pid = started.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return {"sent": False, "detail": f"run '{run_id}' has reported no pid (no `started` event), so no process was signalled"}
    result = (host or HostProcesses()).terminate_run(pid, _run_start(track), **_start_bounds(track))
    return {"sent": result.sent, "pid": pid, "outcome": result.outcome, "detail": result.message}


def env_nvml_source() -> Any:
    """NVML as the environment allows (COCKPIT_NVML=off behaves as if no driver were present)."""
    return NvmlSource(environ=os.environ)


class SimulatedGpus:
    """The demo's stand-in where NVML is unavailable: simulated figures, labelled as such, and the
    real reason NVML is unavailable kept beside them — never passed off as measurements."""

    def __init__(self, count: int, name: str, reason: str | None, **figures: Any):
        self._fake = FakeGpus(count, name=f"{name} (simulated)", **figures)
        self._reason = reason or "NVML unavailable"

    def sample(self) -> GpuSnapshot:
        snapshot = self._fake.sample()
        return replace(snapshot, available=False, simulated=True,
                       reason=f"{self._reason} — the demo shows SIMULATED GPUs, not measurements")

    def close(self) -> None:
        self._fake.close()


def live_gpus(interval: float = 1.0, *, simulate: int | None = None, name: str = "GPU", **figures: Any) -> GpuSampler:
    """A started background sampler over NVML; with `simulate`, simulated GPUs where NVML is unavailable."""
    source: Any = env_nvml_source()
    if simulate:
        probe = source.sample()
        if not probe.available:
            source.close()
            source = SimulatedGpus(simulate, name, probe.reason, **figures)
    return GpuSampler(source, interval=interval).start()
