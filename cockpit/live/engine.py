"""The live engine: sources (NVML, psutil, metrics streams, the run log) → rules and clock →
one frozen snapshot that the TUI, `status` and `watch` all render.

One `tick()` reads only what is new (metric bytes after the saved offsets, run-log lines after
the last one read), evaluates the stop rules on every new line, logs each new alert once (checked
under the run log's lock, so a TUI and a headless watcher never log it twice), carries out
`action = "stop"` rules, and saves its reading position in `.cockpit/` for the next start.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from datetime import datetime
from typing import Any

from cockpit.common.layout import state_dir
from cockpit.common.times import iso, parse_ts, utc_now
from cockpit.live.alert_log import alert_lines, log_alerts
from cockpit.live.builtin_alerts import PILOT_DUE, STREAM_UNREADABLE, Pending, built_in_alerts, stream_identity
from cockpit.live.clock import ItemProgress, lot_clock, projected
from cockpit.live.gpu import GpuSnapshot
from cockpit.live.gpu_health import HealthMonitor
from cockpit.live.gpu_source import env_nvml_source
from cockpit.live.host import HostProcesses
from cockpit.live.metric_values import seconds_to_datetime
from cockpit.live.metrics import MetricsStream
from cockpit.live.rules import RuleEvaluator, RuleState, Trigger
from cockpit.live.runs import (
    CLOCK_STATES,
    RunState,
    run_start,
    run_state,
    start_bounds,
    terminate_run_of,
    undeclared_runs_notice,
)
from cockpit.live.saved_state import load_state, save_state, state_file
from cockpit.live.series import SeriesStore
from cockpit.live.snapshot import AlertView, ClockView, GpuView, HostView, LotView, NvmlView, RunView, Snapshot
from cockpit.live.track import last_metrics
from cockpit.plan.campaign import Action, Campaign, CampaignError
from cockpit.plan.load import read_campaign_text
from cockpit.plan.schedule import schedule
from cockpit.record.events import EventType
from cockpit.record.runlog import RecordedState, RunLog, RunLogError
from cockpit.record.start import ensure_started, frozen_plan_text, plan_drift, start_in

HISTORY = 120  # sparkline points kept per GPU: bounded whatever the lot's length
SAVE_EVERY_SECONDS = 15.0  # reading positions are saved this often (and at close), not every tick
SOURCE_AUTO = "auto"
DEAD_OUTCOMES = ("ended", "reused", "not-the-run")  # the pid is no longer the run's process
UNDECLARED_SCAN_SECONDS = 60.0  # runs/ is listed this often for folders the campaign does not declare


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
        extra_alerts: Callable[[datetime], list[tuple[str, dict[str, Any]]]] | None = None,
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
        self.extra_alerts = extra_alerts  # (key, fields) of alerts from outside the campaign (another lot silent)
        self._saved_at: float | None = None
        self._unsaved = False
        self.notices: list[str] = []
        self._gpu_history: dict[int, tuple[deque, deque]] = {}
        self._log_offset = 0
        self._recorded = RecordedState()
        # (alert key, stream inode, stream generation, line) of every alert logged
        self._logged_lines: set[tuple[str, Any, Any, Any]] = set()
        self._bad_log_lines = 0
        self._unwritten: list[Pending] = []  # alerts the run log refused (a full disk), retried each tick
        self._stops_due: list[Trigger] = []  # auto-stops not yet recorded, likewise
        self._standing: set[str] = set()  # standing conditions (window, lost GPU) present at the last tick
        self._rearmed: set[str] = set()  # standing conditions that cleared since they were logged
        self._undeclared: str | None = None  # the notice on runs/ folders the campaign does not declare
        self._undeclared_at: float | None = None
        self._starts_logged: dict[str, Any] = {}
        self.pilot_due_at: datetime | None = None
        self._ticked = False
        self.health = HealthMonitor(self.directory, campaign.model.health, persist=persist, monotonic=monotonic)

        self._started = False
        self._start_if_due(clock())
        self.plan = self._frozen_plan()
        self.planned = schedule(self.plan.items, self.plan.lot.gpu_count, self.plan.model.calendar.retrieval_hours)
        self._lot_view = LotView.of(self.plan.lot, campaign_id=campaign.id, question=campaign.model.question,
                                    price_usd=self.plan.price)  # the lot as frozen at the start: fixed
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
        """Save where reading stopped (unless the last tick saved it and nothing changed since:
        a one-shot `status` would write and fsync the same state twice) and release the sources."""
        self._save(force=self._unsaved or self._saved_at is None)
        for stream in self.streams.values():  # the descriptors of the files still growing
            stream.close()
        self.health.close()
        release = getattr(self.host, "close", None)  # the pidfds that watch the runs' processes
        if release:
            release()
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
            self._logged_lines |= alert_lines(events)
            for event in events:  # an acknowledgement, from any process, re-arms the rule
                if event["type"] == EventType.ACK and event.get("run"):
                    self.evaluator.acknowledge(str(event.get("rule")), str(event["run"]))
        return self._recorded

    def _log_alerts(self, pending: list[Pending]) -> list[dict[str, Any]]:
        """Append each alert not already open (nor logged for the same line): `alert_log`."""
        logged = log_alerts(self.log, self.campaign, pending, self._recorded, self._logged_lines, self._rearmed)
        for item in logged.repeated:  # not logged twice, but the rule must not stay silenced for later lines
            self.evaluator.acknowledge(str(item.fields.get("rule")), str(item.fields.get("run")))
        if logged.rearmed_used:
            self._unsaved = True
        return logged.written

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
        with self._one_look():  # every run's process looked at in one poll
            changed = self._check_runs(now, recorded, run_pids, alive, dead, triggers) or changed

        progress = self._progress(recorded, alive)
        try:
            reading = lot_clock(self.plan, now, progress, self.planned)
        except Exception as error:  # the clock without the runs' measured progress, rather than none
            self._run_failed(None, "the runs' measured progress could not be used by the clock", error)
            reading = lot_clock(self.plan, now, {}, self.planned)
        self.series.note_clock(now, reading.committed_remaining_hours, reading.remaining_hours)  # charts (issue 20)

        pending = [
            Pending(
                f"{t.rule_id}|{t.run_id}",
                {**t.event_fields(), **self._stream_identity(t.run_id)},
                t.line,
            )
            for t in triggers
        ]
        pending += self._built_in(now, recorded, alive, dead, run_pids)
        running = {r.id: r.gpu_list for r in self.campaign.runs if run_state(self.streams[r.id].track, recorded.stop_of(r.id),
                                                                            alive.get(r.id), bool(self.streams[r.id].error)) == RunState.RUNNING}
        pending += [Pending(key, fields) for key, fields in self.health.observe(now, gpu_snapshot, running)]  # gpu-xid, -ecc, -throttled, -idle
        if self.extra_alerts is not None:  # alerts of watchers beside the engine (lot-unreachable)
            pending += [Pending(key, fields) for key, fields in self.extra_alerts(now)]
        window = [
            Pending(a.key, {"rule": a.rule, "run": None, "message": a.message, "severity": a.level, "once": True})
            for a in reading.alerts
        ]
        # Before the lot starts a window alert (the plan overruns) is planning advice: shown, not logged,
        # since logging it would start the campaign and freeze a plan its author may still be fixing.
        waiting = [] if reading.started else [replace(p, fields={**p.fields, "waiting": True}) for p in window]
        pending += window if reading.started else []
        for alert in gpu_snapshot.alerts:
            key = f"{alert.rule}:{alert.gpu_index}" if alert.gpu_index is not None else alert.rule
            pending.append(Pending(key, {"rule": alert.rule, "run": None, "message": alert.message, "severity": "critical", "gpu": alert.gpu_index, "once": True}))
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
        unrecorded: list[Pending] = []
        try:
            if self._log_alerts(pending):
                recorded = self._follow_log()
            self._unwritten = []
        except RunLogError as error:
            # Shown all the same, marked: an alert the disk refused must not vanish from the screen.
            unrecorded = self._unwritten = [p for p in pending if p.key not in {a.key for a in recorded.active_alerts}]
            if str(error) not in self.notices:
                self.notices.append(str(error))

        self._stops_due += [t for t in triggers if t.action == Action.stop]
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

    def _one_look(self) -> AbstractContextManager[None]:
        look = getattr(self.host, "one_look", None)  # a stand-in host may not have it
        return look() if look is not None else nullcontext()

    def _check_runs(self, now, recorded, run_pids, alive, dead, triggers) -> bool:
        """Whether each run's own process still runs (`alive`, `dead`) and its time rules
        (`triggers`); True when a run's stream, read once more before judging it dead, had lines."""
        changed = False
        for run_id, stream in self.streams.items():
            pid = run_pids.get(run_id)
            try:
                sees = self.host.sees(stream.track.started) if pid is not None else False
                if pid is None or sees is False:
                    alive[run_id] = None  # `stalled` goes on silence alone
                else:
                    check = self.host.check(pid, run_start(stream.track), **start_bounds(stream.track))
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
        return changed

    def _run_failed(self, run_id: str | None, what: str, error: Exception) -> str:
        """Said once as a notice: a bug meeting one run's data costs that part of the tick only."""
        subject = f"run {run_id}: " if run_id else ""
        message = f"{subject}{what} ({type(error).__name__}: {str(error)[:200]}); everything else is shown"
        if message not in self.notices:
            self.notices.append(message)
        return message

    def _stream_identity(self, run_id: str) -> dict[str, Any]:
        return stream_identity(self.streams[run_id])

    def _built_in(self, now, recorded, alive, dead, run_pids) -> list[Pending]:
        pending, self.pilot_due_at = built_in_alerts(self.streams, self.plan, now, recorded, alive, dead, run_pids)
        return pending

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
        """The notice on metrics folders under runs/ that no declared id owns, listed now and then
        (every UNDECLARED_SCAN_SECONDS), never every tick."""
        moment = self._monotonic()
        if self._undeclared_at is None or moment - self._undeclared_at >= UNDECLARED_SCAN_SECONDS:
            self._undeclared_at = moment
            self._undeclared = undeclared_runs_notice(self.campaign)
        return self._undeclared

    def _log_run_starts(self, recorded: RecordedState) -> None:
        """`run_started` once for each `started` event a run reported (a restart is a new start)."""
        known = self._starts_logged  # run → the start's ts already found in the log: not looked at again
        candidates = [
            (run_id, stream.track.started)
            for run_id, stream in self.streams.items()
            if stream.track.started and known.get(run_id, _UNSEEN) != stream.track.started.get("ts")
        ]
        if not candidates:
            return
        logged = {(e.get("run"), e.get("metric_ts")) for e in recorded.runs_started}
        new = []
        for run_id, started in candidates:
            if (run_id, _ts_text(started.get("ts"))) in logged:
                known[run_id] = started.get("ts")  # the run log is append-only: it stays logged
            else:
                new.append((run_id, started))
        if not new:
            return
        try:
            with self.log.transaction() as tx:
                events = tx.read().events
                logged |= {(e.get("run"), e.get("metric_ts")) for e in events if e["type"] == EventType.RUN_STARTED}
                for run_id, started in new:
                    ts = _ts_text(started.get("ts"))
                    if (run_id, ts) not in logged:
                        start_in(tx, self.campaign, events)  # likewise: `campaign_started` first
                        tx.append(EventType.RUN_STARTED, run=run_id, pid=started.get("pid"),
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
            state = run_state(track, stop, alive[run.id], bool(self.streams[run.id].error))
            ended_at = None
            if stop:
                ended_at = _parse(stop.get("ts"))
            elif track.finished:
                ended_at = seconds_to_datetime(track.finished.get("ts"))
            progress[run.id] = ItemProgress(
                state=CLOCK_STATES.get(state, state),
                started_at=seconds_to_datetime(run_start(track) or track.first_ts),
                ended_at=ended_at,
                step=track.last_step,
                step_at=seconds_to_datetime(track.last_ts),
                total_steps=run.total_steps,
                steps_per_hour=track.steps_per_hour,
            )
        return progress

    def _gpu_views(self, snapshot: GpuSnapshot, process_runs: dict[int, str], container: bool = False) -> tuple[GpuView, ...]:
        views = []
        for sample in snapshot.samples:
            utilization, memory = self._gpu_history.setdefault(sample.index, (deque(maxlen=HISTORY), deque(maxlen=HISTORY)))
            if sample.utilization_percent is not None:
                utilization.append(float(sample.utilization_percent))
            if sample.memory_used_bytes is not None and sample.memory_total_bytes:
                memory.append(100.0 * sample.memory_used_bytes / sample.memory_total_bytes)
            views.append(GpuView.of(sample, process_runs, utilization, memory, container=container, health=self.health.view(sample)))
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
            state = run_state(track, stop, alive.get(run.id), bool(self.streams[run.id].error))
            eta = None
            if state == RunState.RUNNING and run.total_steps and track.last_step is not None and rate and rate > 0:
                base = seconds_to_datetime(track.last_ts) or now
                eta = projected(base, max(0, run.total_steps - track.last_step) / rate)
            advice = None
            save_seconds = (track.checkpoint or {}).get("seconds")
            if state == RunState.RUNNING and isinstance(save_seconds, (int, float)) and save_seconds > 0:
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
        notices.extend(self.health.notices)

        alerts = tuple(
            AlertView(
                rule=str(a.event.get("rule")),
                run=a.event.get("run"),
                message=str(a.event.get("message", "")),
                ts=_parse(a.event.get("ts")),
                seq=a.event.get("seq"),
                severity=str(a.event.get("severity") or ("critical" if a.event.get("action") == Action.stop else "warning")),
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
        return Snapshot(
            taken_at=now,
            lot=self._lot_view,
            clock=ClockView.of(reading, now),
            nvml=NvmlView.of(gpu_snapshot, now),
            gpus=self._gpu_views(gpu_snapshot, process_runs, process_map.container),
            host=HostView.of(self.host.host(self.directory)),
            runs=tuple(runs),
            alerts=alerts,
            notices=tuple(dict.fromkeys(notices)),
            pilot_due_at=self.pilot_due_at,
            series=self.series.view(self._monotonic()),  # charts (issue 20)
        )


_UNSEEN = object()


def _ts_text(seconds: Any) -> str | None:
    moment = seconds_to_datetime(seconds) if isinstance(seconds, (int, float)) else None
    return iso(moment) if moment else None


def _parse(text: Any) -> datetime | None:
    return parse_ts(text) if isinstance(text, str) else None
