"""The stop of a run, as the person walks through it: the rule or reason (StopScreen), then, read
from the run log in a thread, what makes this stop doubtful (a finished run, a rule that never
fired: "stop anyway?"), then SIGTERM or not when the run's process is known, then one line that
says exactly what will be written. Esc at any step cancels and records nothing. A doubtful stop
confirmed here is recorded with `force`, as `cockpit stop --force` does, and says so in its event."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cockpit.live.snapshot import RunView
from cockpit.record import decisions
from cockpit.record.runlog import RunLogError
from cockpit.tui import format as fmt
from cockpit.tui.messages import RecordFailed
from cockpit.tui.screens import ConfirmScreen, StopRequest, StopScreen

if TYPE_CHECKING:
    from cockpit.tui.app import CockpitApp

SOURCE = "key"


class StopFlow:
    """One stop, from the dialog to the run log; `start` opens its first step."""

    def __init__(self, app: CockpitApp, run_id: str, run: RunView | None) -> None:
        self.app = app
        self.run_id = run_id
        self.run = run

    def start(self) -> None:
        app = self.app
        app.push_screen(StopScreen(self.run_id, self.run, app.campaign.model.stop_rules), self._chosen)

    def _cancelled(self) -> None:
        self.app.notify("Stop cancelled: nothing recorded.", timeout=4)

    def _chosen(self, request: StopRequest | None) -> None:
        """After the rule or reason: read the run log (in a thread) for what makes this stop
        doubtful and for the rule's last value, then ask the next question."""
        if request is None:
            self._cancelled()
            return
        app, run = self.app, self.run
        log = app.run_log
        finished = run is not None and run.state == "finished"
        rule = app.campaign.rule(request.rule) if request.rule else None

        def check() -> None:
            try:
                state = log.replay()
            except RunLogError as error:
                app.post_message(RecordFailed(f"stop of run {request.run}", str(error)))
                return
            doubts = decisions.stop_doubts(state, request.run, request.rule, finished=finished)
            value = rule_value_text(rule, run, state, request.run)
            app.call_from_thread(self._doubt_step, request, doubts, value)

        app.run_worker(check, name="check stop", group="check", thread=True, exit_on_error=False)

    def _doubt_step(self, request: StopRequest, doubts: list, value: str | None) -> None:
        if not doubts:
            self._signal_step(request, doubts, value)
            return
        message = (
            "This stop is probably a mistake:\n" + "\n".join(f"· {d.why}" for d in doubts)
            + "\nRecord it anyway? The stop will say so in the run log."
        )

        def answered(answer: bool | None) -> None:
            if answer:
                self._signal_step(request, doubts, value)
            else:
                self._cancelled()

        self.app.push_screen(
            ConfirmScreen("Stop anyway?", message, yes="Stop anyway [y]", no=None, cancel="Cancel [Esc]", default="cancel", id="stop-doubt"),
            answered,
        )

    def _signal_step(self, request: StopRequest, doubts: list, value: str | None) -> None:
        run = self.run
        if self.app.signal_run is None or run is None or run.pid is None or run.alive is False:
            self._confirm_step(request, doubts, value, False)
            return
        question = (
            f"Also send SIGTERM to run {request.run}'s process (pid {run.pid})? The training loop is "
            "asked to save and exit; a signal cannot be taken back."
        )

        def answered(answer: bool | None) -> None:
            if answer is None:
                self._cancelled()
            else:
                self._confirm_step(request, doubts, value, answer)

        self.app.push_screen(
            ConfirmScreen("Send SIGTERM?", question, yes="Send SIGTERM [y]", no="Record only [n]", cancel="Cancel [Esc]", id="stop-signal"),
            answered,
        )

    def _confirm_step(self, request: StopRequest, doubts: list, value: str | None, send: bool) -> None:
        """One line that says exactly what will be written; Enter records it, Esc cancels."""
        run = self.run
        parts = [f"stop of run {request.run}"]
        if request.rule:
            parts.append(f"rule {request.rule}" + (f" ({value})" if value else ""))
        if request.reason:
            parts.append(f"reason: {request.reason}")
        parts.append(f"then SIGTERM to pid {run.pid}" if send and run is not None else "no SIGTERM")
        parts += [{"after_finish": "marked after_finish", "rule_triggered": "marked rule_triggered: false"}[d.flag] for d in doubts]

        def answered(answer: bool | None) -> None:
            if answer:
                self._record(request, send, force=bool(doubts))
            else:
                self._cancelled()

        self.app.push_screen(
            ConfirmScreen("Record this stop?", " · ".join(parts), yes="Record [y]", no=None, cancel="Cancel [Esc]", default="yes", id="stop-confirm"),
            answered,
        )

    def _record(self, request: StopRequest, send_signal: bool | None, *, force: bool = False) -> None:
        app, run = self.app, self.run
        last: dict[str, Any] = dict(run.last) if run is not None else {}
        if run is not None and run.step is not None:
            last.setdefault("step", run.step)
        signal = None
        if send_signal and app.signal_run is not None:
            signal_run, run_id = app.signal_run, request.run
            signal = lambda: signal_run(run_id)  # noqa: E731 — runs inside the run log's lock, after validation
        campaign, log = app.campaign, app.run_log
        finished = run is not None and run.state == "finished"

        def write() -> dict[str, Any]:
            return decisions.record_stop(
                campaign, log, request.run, rule=request.rule, reason=request.reason, source=SOURCE, last=last,
                signal=signal, finished=finished, force=force,
            )

        def describe(event: dict[str, Any]) -> str:
            cause = f"rule {event['rule']}" if event.get("rule") else f"reason: {event.get('reason')}"
            text = f"stop of run {request.run} ({cause}), seq {event['seq']}"
            outcome = event.get("signal") or {}
            if outcome.get("requested"):
                text += "; SIGTERM sent" if outcome.get("sent") else "; SIGTERM NOT sent"
                if outcome.get("detail"):
                    text += f": {outcome['detail']}"
            return text

        app.record("stop", f"stop of run {request.run}", write, describe)


def rule_value_text(rule: Any, run: RunView | None, state: Any, run_id: str) -> str | None:
    """The rule's last value for the run: its metric's last value, else the value its last alert
    for that run carried; None when the rule watches nothing the run reported."""
    if rule is None:
        return None
    metric = getattr(rule, "metric", None)
    if metric and run is not None and metric in run.last:
        return f"{metric} last {fmt.metric(run.last[metric])}"
    alert = next((a.event for a in reversed(state.alerts) if a.event.get("rule") == rule.id and a.event.get("run") == run_id), None)
    if alert is not None and alert.get("value") is not None:
        return f"last alert value {fmt.metric(alert.get('value'))}"
    return f"{metric} not reported yet" if metric else "no value recorded for it"
