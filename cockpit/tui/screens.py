"""The cockpit's dialogs. Each one only gathers what the person decided and returns it with
`dismiss`; the app writes it to the run log off the UI thread and confirms once it is on disk.
Enter confirms, Escape cancels, everywhere."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, OptionList, Static
from textual.widgets.option_list import Option

from typing import Any

from cockpit.common.text import escape_control
from cockpit.common.times import parse_ts
from cockpit.live.snapshot import RunView
from cockpit.plan.campaign import StopRule
from cockpit.record.decisions import PILOT_DECISIONS, VOIDABLE_NAMES
from cockpit.record.runlog import voided_seqs
from cockpit.tui import format as fmt
from cockpit.tui.messages import VoidRequested

NO_RULE = "no-rule"


@dataclass(frozen=True)
class StopRequest:
    run: str
    rule: str | None
    reason: str | None


@dataclass(frozen=True)
class DecisionRequest:
    decision: str
    note: str | None


@dataclass(frozen=True)
class NoteRequest:
    text: str
    run: str | None


@dataclass(frozen=True)
class KeyHelp:
    key: str
    description: str
    detail: str = ""


def describe_rule(rule: StopRule) -> str:
    """A stop rule in a few words, as written in campaign.toml."""
    kind = rule.kind.value
    if kind == "non_finite":
        text = f"non-finite {rule.metric or 'metric'}"
    elif kind == "below":
        text = f"{rule.metric} below {rule.threshold:g}"
    elif kind == "above":
        text = f"{rule.metric} above {rule.threshold:g}"
    elif kind == "truncated":
        text = "an essential input truncated"
    elif kind == "no_resume":
        text = f"no verified resume within {rule.within_hours:g} h"
    elif kind == "stalled":
        text = f"no metric line for {rule.minutes:g} min"
    else:
        text = kind
    if rule.after_step:
        text += f" after step {rule.after_step}"
    if rule.action.value == "stop":
        text += " (auto-stop)"
    return text


def last_metrics_text(run: RunView | None) -> str:
    """The run's last metrics; their names come from the run's stream, shown escaped."""
    return escape_control(_last_metrics(run))


def _last_metrics(run: RunView | None) -> str:
    if run is None:
        return "no metrics reported yet"
    parts = [f"state {run.state}"]
    if run.step is not None:
        parts.append(f"step {fmt.step(run.step, run.total_steps)}")
    for name, value in run.last.items():
        if name in ("step", "ts"):
            continue
        parts.append(f"{name} {fmt.metric(value)}")
    return " · ".join(parts) if run.step is not None or len(parts) > 1 else "state " + run.state + " · no metrics reported yet"


class TextField(Input):
    """A one-line field that shows what it will record: a pasted control character (an escape
    sequence copied from a log) is written as its escape (`\\x1b`), never kept invisible."""

    def replace(self, text: str, start: int, end: int) -> None:  # typing, pasting and inserting all end here
        super().replace(escape_control(text), start, end)
class StateCheckbox(Checkbox):
    """A checkbox that shows its state in characters, "[x]" ticked and "[ ]" not: Textual's own
    draws an "X" either way and tells them apart by colour only, which a monochrome screen loses."""

    @property
    def _button(self) -> Content:
        return Content.styled("[x]" if self.value else "[ ]", "bold" if self.value else "")


class Dialog(ModalScreen):
    """A centred box; Escape cancels (dismisses with None)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="dialog.cancel")]

    DEFAULT_CSS = """
    Dialog {
        align: center middle;
    }
    Dialog > #dialog {
        width: 76;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        padding: 0 1;
        border: round $primary;
        background: $surface;
    }
    Dialog .dialog--label { color: $text-muted; margin-top: 1; }
    Dialog .dialog--facts { color: $foreground; }
    Dialog .dialog--hint { color: $text-muted; margin-top: 1; }
    Dialog .dialog--error { color: $error; text-style: bold; display: none; }
    Dialog .dialog--error.-shown { display: block; }
    Dialog OptionList { height: auto; max-height: 8; }
    """

    def action_cancel(self) -> None:
        self.dismiss(None)

    def text_input(self, placeholder: str, id: str) -> Input:
        """A one-line field; its cursor does not blink when TEXTUAL_ANIMATIONS=none (SSH hygiene)."""
        field = TextField(placeholder=placeholder, id=id, compact=True)
        field.cursor_blink = self.app.animation_level != "none"
        return field

    def _error(self, message: str) -> None:
        error = self.query_one(".dialog--error", Static)
        error.update(message)
        error.add_class("-shown")


class StopScreen(Dialog):
    """Stop a run: a rule from the campaign, a free-text reason, or both."""

    def __init__(self, run_id: str, run: RunView | None, rules: Sequence[StopRule]) -> None:
        super().__init__()
        self.run_id = run_id
        self.run_view = run
        # The rules written for this run first; the others stay available (a person may judge one
        # applies), marked as written for other runs.
        self.rules = sorted(rules, key=lambda rule: not rule.applies_to(run_id))

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = Content(f"Stop run {escape_control(self.run_id)}")  # a title, not markup
            yield Static(f"Last: {last_metrics_text(self.run_view)}", classes="dialog--facts", markup=False)
            yield Static("Rule — ↑↓ to choose, Enter to stop with it", classes="dialog--label", markup=False)
            options = [Option(Content.styled("no rule: write a reason below", "$text-muted"), id=NO_RULE)]
            width = max((len(rule.id) for rule in self.rules), default=0)
            for rule in self.rules:  # ids and metric names as written in campaign.toml, escaped
                prompt = Content.assemble((f"{escape_control(rule.id):<{width}}", "bold"), (f"  {escape_control(describe_rule(rule))}", ""))
                if not rule.applies_to(self.run_id):
                    prompt = Content.assemble(prompt, (f"  (written for {escape_control(', '.join(rule.runs or []))})", "$text-muted"))
                options.append(Option(prompt, id=rule.id))
            yield OptionList(*options, id="rules", compact=True)
            yield Static("Reason — free text, Enter to stop", classes="dialog--label", markup=False)
            yield self.text_input("what happened, e.g. loss plateaued at 2.3 for 3 h", "reason")
            yield Static("", classes="dialog--error", markup=False)
            yield Static("Enter confirms · Esc cancels · Tab: rule ↔ reason", classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        rules = self.query_one("#rules", OptionList)
        rules.highlighted = 0
        rules.focus()

    @on(OptionList.OptionSelected, "#rules")
    def _rule_chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id == NO_RULE:
            self.query_one("#reason", Input).focus()
            return
        self._confirm(event.option.id)

    @on(Input.Submitted, "#reason")
    def _reason_given(self, event: Input.Submitted) -> None:
        event.stop()
        option = self.query_one("#rules", OptionList).highlighted_option
        self._confirm(None if option is None or option.id == NO_RULE else option.id)

    def _confirm(self, rule: str | None) -> None:
        reason = self.query_one("#reason", Input).value.strip() or None
        if rule is None and reason is None:
            self._error("Pick a rule or write a reason: a stop needs one of them.")
            self.query_one("#reason", Input).focus()
            return
        self.dismiss(StopRequest(self.run_id, rule, reason))


class ConfirmScreen(ModalScreen["bool | None"]):
    """A question before something is written or sent. `y` answers yes, `n` no; Escape (and the
    Cancel button, when there is one) cancels: the result is None and nothing is recorded.
    `default` is the button Enter presses ("no" for what cannot be undone)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n", "answer(False)", "No", id="confirm.no"),
        Binding("escape", "cancel", "Cancel", id="confirm.cancel"),
        Binding("left,right", "focus_other", "Switch", show=False),
    ]

    DEFAULT_CSS = """
    ConfirmScreen {
        align: center middle;
    }
    ConfirmScreen > #dialog {
        width: 68;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        padding: 0 1;
        border: round $warning;
        background: $surface;
    }
    ConfirmScreen #buttons {
        height: auto;
        margin-top: 1;
        align: center middle;
    }
    ConfirmScreen Button { margin: 0 1; }
    """

    def __init__(
        self, title: str, message: str, yes: str = "Yes [y]", no: str | None = "No [n]", *,
        cancel: str | None = None, default: str = "no", id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self._title, self._message, self._yes, self._no, self._cancel = title, message, yes, no, cancel
        self._default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = Content(escape_control(self._title))
            yield Static(escape_control(self._message, keep_newlines=True), markup=False, id="message")
            with Horizontal(id="buttons"):
                # Plain text labels: "[y]" would otherwise be read as markup and vanish.
                yield Button(Content(self._yes), id="yes", variant="warning", compact=True)
                if self._no is not None:
                    yield Button(Content(self._no), id="no", compact=True)
                if self._cancel is not None:
                    yield Button(Content(self._cancel), id="cancel", compact=True)

    def on_mount(self) -> None:
        wanted = self._default if self.query(f"#{self._default}") else "yes"
        self.query_one(f"#{wanted}", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss({"yes": True, "no": False}.get(event.button.id or ""))

    def action_answer(self, answer: bool) -> None:
        if not answer and self._no is None:  # no "No" here: n cancels
            self.dismiss(None)
            return
        self.dismiss(answer)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_focus_other(self) -> None:
        self.focus_next(Button)


DECISION_HELP = {
    "continue": "the pilot is sane: run the plan as written",
    "drop-optional": "drop an optional variant (useful or exploratory tier)",
    "revise": "revise the question before spending more of the lot",
}


class DecisionScreen(Dialog):
    """The pilot decision: continue, drop an optional variant, or revise the question."""

    def __init__(self, pilot_facts: str) -> None:
        super().__init__()
        self.pilot_facts = pilot_facts

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = "Pilot decision"
            yield Static(escape_control(self.pilot_facts, keep_newlines=True), classes="dialog--facts", markup=False)
            yield Static("Decision — ↑↓ to choose, Enter to record it", classes="dialog--label", markup=False)
            width = max(len(name) for name in PILOT_DECISIONS)
            options = [
                Option(Content.assemble((f"{name:<{width}}", "bold"), (f"  {DECISION_HELP[name]}", "")), id=name)
                for name in PILOT_DECISIONS
            ]
            yield OptionList(*options, id="decisions", compact=True)
            yield Static("Note — why (optional), Enter to record", classes="dialog--label", markup=False)
            yield self.text_input("e.g. pilot F1 0.71 at 2 h; v-r64 adds little", "note")
            yield Static("", classes="dialog--error", markup=False)
            yield Static("Enter confirms · Esc cancels · Tab: decision ↔ note", classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        decisions = self.query_one("#decisions", OptionList)
        decisions.highlighted = 0
        decisions.focus()

    @on(OptionList.OptionSelected, "#decisions")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self._confirm(event.option.id)

    @on(Input.Submitted, "#note")
    def _noted(self, event: Input.Submitted) -> None:
        event.stop()
        option = self.query_one("#decisions", OptionList).highlighted_option
        self._confirm(option.id if option is not None else None)

    def _confirm(self, decision: str | None) -> None:
        if decision is None:
            self._error("Choose continue, drop-optional or revise.")
            return
        note = self.query_one("#note", Input).value.strip() or None
        self.dismiss(DecisionRequest(decision, note))


class NoteScreen(Dialog):
    """A note: an explained deviation from the plan, on the campaign or on the selected run."""

    def __init__(self, run_id: str | None, on_run: bool = False) -> None:
        super().__init__()
        self.run_id = run_id
        self.on_run = on_run  # opened from the run's detail screen: about that run unless unticked

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = "Note"
            yield Static("What deviated from the plan, and why — Enter to record", classes="dialog--label", markup=False)
            yield self.text_input("e.g. v-r16 relaunched as v-r16b after a tokenizer fix", "text")
            if self.run_id is not None:
                yield StateCheckbox(Content(f"about run {escape_control(self.run_id)}"), value=self.on_run, id="on-run", compact=True)
            yield Static("", classes="dialog--error", markup=False)
            hint = "Enter records · Esc cancels" + (" · Tab, then Space: attach to the run" if self.run_id else "")
            yield Static(hint, classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        self.query_one("#text", Input).focus()

    @on(Input.Submitted, "#text")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if not text:
            self._error("Write the note first (what happened, and why).")
            return
        on_run = self.run_id is not None and self.query_one("#on-run", Checkbox).value
        self.dismiss(NoteRequest(text, self.run_id if on_run else None))


class HelpScreen(Dialog):
    """The keys, with what each one records."""

    BINDINGS = [
        Binding("escape,q,question_mark", "cancel", "Close", id="help.close"),
    ]

    def __init__(self, keys: Sequence[KeyHelp]) -> None:
        super().__init__()
        self.keys = list(keys)

    def compose(self) -> ComposeResult:
        width = max(len(k.key) for k in self.keys) if self.keys else 1
        lines = []
        for key in self.keys:
            line = Content.assemble((f"{key.key:>{width}}  ", "bold $accent"), (key.description, "bold"))
            if key.detail:
                line = Content.assemble(line, (f" — {key.detail}", ""))
            lines.append(line)
        with Vertical(id="dialog") as dialog:
            dialog.border_title = "Keys"
            yield Static(Content("\n").join(lines))
            yield Static(
                "Tab moves between the runs, the alerts and the GPUs; ↑↓ picks the run (s, n) or the alert (a).\n"
                "In a dialog: Enter confirms, Esc cancels (nothing is recorded), Tab moves between fields.\n"
                "A mistaken decision is taken back in the run log (l, then v): a void event, never an edit.\n"
                "Every decision is in runlog.jsonl (source \"key\") before the cockpit says so; "
                "a write that fails is shown as an error and nothing is recorded.",
                classes="dialog--hint",
                markup=False,
            )
            yield Static("Esc, q or ? closes", classes="dialog--hint", markup=False)


def event_line(event: dict[str, Any], summary: str, voided_by: dict[str, Any] | None) -> Content:
    """One run-log event on one line: seq, local time, type, run, what it says, and its source."""
    moment = parse_ts(event["ts"]) if isinstance(event.get("ts"), str) else None
    when = fmt.local(moment).strftime("%d %b %H:%M") if moment else fmt.DASH
    run = escape_control(str(event.get("run") or "-"))  # every string of the log came from a file or a person
    run = run if len(run) <= 9 else run[:8] + "…"  # the columns stay aligned; the summary names it in full
    head = f"{event['seq']:>4} {when} {escape_control(str(event['type'])):<16} {run:<9} "
    summary = escape_control(summary)
    source = f"  [{escape_control(str(event['source']))}]" if event.get("source") else ""
    if voided_by is not None:
        return Content.assemble((head, "$text-muted"), (f"VOIDED by {voided_by['seq']}: ", "bold"), (summary + source, "$text-muted"))
    style = "bold" if event["type"] in VOIDABLE_NAMES else ""
    return Content.assemble((head, ""), (summary, style), (source, "$text-muted"))


class LogScreen(ModalScreen):
    """The run log, newest first. `v` takes back the selected decision (a stop, a pilot decision,
    an acceptance or a note) by appending a `void` event; nothing already written changes."""

    BINDINGS = [
        Binding("escape,l,q", "close", "Close", id="log.close"),
        Binding("v", "void", "Void the selected decision", id="log.void"),
    ]

    DEFAULT_CSS = """
    LogScreen {
        align: center middle;
    }
    LogScreen > #dialog {
        width: 100%;
        height: 100%;
        padding: 0 1;
        border: round $primary;
        background: $surface;
    }
    LogScreen #events { height: 1fr; text-wrap: nowrap; text-overflow: ellipsis; }
    LogScreen .dialog--hint { color: $text-muted; height: 1; }
    """

    def __init__(self, events: Sequence[dict[str, Any]], summaries: dict[int, str], path_name: str = "runlog.jsonl") -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []
        self.summaries: dict[int, str] = {}
        self.voided: dict[int, dict[str, Any]] = {}
        self.path_name = path_name
        self._pending = (list(events), dict(summaries))

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = f"run log · {self.path_name} · newest first"
            yield OptionList(id="events", compact=True)
            yield Static("↑↓ choose · v void the selected decision (a void event) · Esc close", classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        self.show_events(*self._pending)
        self.query_one("#events", OptionList).focus()

    def show_events(self, events: Sequence[dict[str, Any]], summaries: dict[int, str]) -> None:
        """Show the log again (after a void), keeping the selected event."""
        listing = self.query_one("#events", OptionList)
        selected = listing.highlighted_option.id if listing.highlighted_option is not None else None
        self.events, self.summaries = list(events), dict(summaries)
        self.voided = voided_seqs(self.events)
        options = [
            Option(event_line(e, self.summaries.get(e["seq"], ""), self.voided.get(e["seq"])), id=f"seq:{e['seq']}")
            for e in reversed(self.events)
        ]
        if not options:
            options = [Option(Content.styled("the run log is empty: nothing recorded yet", "$text-muted"), id="none", disabled=True)]
        listing.set_options(options)
        if selected is not None and any(o.id == selected for o in options):
            listing.highlighted = next(i for i, o in enumerate(options) if o.id == selected)
        elif self.events:
            listing.highlighted = 0

    @property
    def selected_event(self) -> dict[str, Any] | None:
        option = self.query_one("#events", OptionList).highlighted_option
        if option is None or not (option.id or "").startswith("seq:"):
            return None
        seq = int(option.id.split(":", 1)[1])
        return next((e for e in self.events if e["seq"] == seq), None)

    def action_close(self) -> None:
        self.dismiss(None)

    def action_void(self) -> None:
        event = self.selected_event
        if event is None:
            self.app.notify("No event selected.", severity="warning")
            return
        if event["type"] not in VOIDABLE_NAMES:
            kinds = ", ".join(VOIDABLE_NAMES.values())
            what = "a void cannot be taken back" if event["type"] == "void" else f"a '{event['type']}' event is not a decision"
            self.app.notify(f"seq {event['seq']}: {what}; only {kinds} can be voided.", severity="warning", markup=False)
            return
        if event["seq"] in self.voided:
            self.app.notify(f"seq {event['seq']} is already voided (seq {self.voided[event['seq']]['seq']}).", severity="warning", markup=False)
            return
        self.app.push_screen(VoidScreen(event, self.summaries.get(event["seq"], "")), self._void_reason)

    def _void_reason(self, reason: str | None) -> None:
        event = self.selected_event
        if reason is None or event is None:
            self.app.notify("Void cancelled: nothing recorded.")
            return
        self.post_message(VoidRequested(event["seq"], reason))


class VoidScreen(Dialog):
    """Why a recorded decision was a mistake: the reason goes into the `void` event."""

    def __init__(self, event: dict[str, Any], summary: str) -> None:
        super().__init__()
        self.event = event
        self.summary = summary

    def compose(self) -> ComposeResult:
        what = VOIDABLE_NAMES.get(self.event["type"], self.event["type"])
        with Vertical(id="dialog") as dialog:
            dialog.border_title = f"Void seq {self.event['seq']}"
            run = f" of run {self.event['run']}" if self.event.get("run") else ""
            yield Static(escape_control(f"Take back {what}{run}: {self.summary}"), classes="dialog--facts", markup=False)
            yield Static(
                "A void event is appended; the decision stays in the run log, marked voided, and the "
                "cockpit, status and close treat it as absent.",
                classes="dialog--label", markup=False,
            )
            yield Static("Reason — why it was a mistake, Enter to record", classes="dialog--label", markup=False)
            yield self.text_input("e.g. pressed s on the wrong run", "reason")
            yield Static("", classes="dialog--error", markup=False)
            yield Static("Enter records · Esc cancels", classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        self.query_one("#reason", Input).focus()

    @on(Input.Submitted, "#reason")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        reason = event.value.strip()
        if not reason:
            self._error("Write why it was a mistake: the void records the reason.")
            return
        self.dismiss(reason)
