"""Strings from a file, a run or another person never drive the terminal (issue 13, item 11): a
metric name, a truncated input's id, a stop reason, a note or a deliverable's cause holding escape
sequences is shown escaped (`\\x1b`) by `status`, `watch`, `log`, `close`, report.md and the TUI,
and Rich markup in them shows literally; the JSON outputs keep the exact strings. And the `status`
table gives long run ids their own column (item 19)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cockpit.common.text import escape_control, json_safe
from cockpit.record.runlog import RunLog
from tests.conftest import run_cli

TITLE = "\x1b]0;pwned\x07"  # OSC 0: retitles the window
CLEAR = "\x1b[2J"  # CSI 2J: clears the screen
CLIPBOARD = "\x1b]52;c;ZXZpbA==\x07"  # OSC 52: writes the clipboard (through tmux too)
CSI8 = "\x9b2J"  # the 8-bit CSI
MARKUP = "[bold red]x[/]"

# what a terminal would obey: C0 controls but newline, DEL, C1 controls, the bidi overrides
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def raw_controls(text: str) -> list[str]:
    return sorted(set(RAW.findall(text)))


# ---------------------------------------------------------------- the helper


def test_escape_control_writes_controls_as_escapes():
    assert escape_control(TITLE) == "\\x1b]0;pwned\\x07"
    assert escape_control(CLEAR) == "\\x1b[2J"
    assert escape_control(CSI8) == "\\x9b2J"
    assert escape_control("\x9d0;t\x9c") == "\\x9d0;t\\x9c"
    assert escape_control("a\nb\tc\rd\x7f") == "a\\nb\\tc\\rd\\x7f"
    assert escape_control("evil\u202etxt.exe\u2066") == "evil\\u202etxt.exe\\u2066"
    assert escape_control("a\nb", keep_newlines=True) == "a\nb"
    assert escape_control("a\tb\x1b", keep_newlines=True) == "a\\tb\\x1b"


def test_escape_control_leaves_ordinary_text_alone():
    for text in ("ctrl-r1", "eval/macro_f1", "RTX 4090 × 1 · 47.14 USD", "C:\\runs\\x1b", "", "naïve — ok ✓", MARKUP):
        assert escape_control(text) == text
    assert escape_control(None) == "" and escape_control(12) == "12"


def test_the_printable_fast_path_skips_nothing_that_needs_escaping():
    import sys

    from cockpit.common.text import _UNSAFE

    escaped = [code for code in range(sys.maxunicode + 1) if _UNSAFE.match(chr(code))]
    assert len(escaped) == 32 + 1 + 32 + 17
    assert not any(chr(code).isprintable() for code in escaped)


def test_json_safe_keeps_the_value_and_hides_the_controls():
    value = {"metric": TITLE + CSI8 + "\u202e" + "naïve"}
    dumped = json_safe(json.dumps(value, ensure_ascii=False))
    assert raw_controls(dumped) == [] and "naïve" in dumped
    assert json.loads(dumped) == value
    plain = json.dumps({"a": "b"}, ensure_ascii=False)
    assert json_safe(plain) is plain


# ---------------------------------------------------------------- a hostile campaign, from the CLI


def write_stream(directory: Path, run_id: str, lines) -> None:
    path = directory / "runs" / run_id / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        for line in lines:
            handle.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


@pytest.fixture
def hostile(seed_campaign, tmp_path) -> Path:
    """The seed campaign fed hostile strings: a NaN under a hostile metric name (caught by a
    non-finite rule on any metric), an essential truncation of a hostile input id, a stop reason
    and a note from the command line, and hostile expected ids in a deliverable's cause."""
    with open(seed_campaign / "campaign.toml", "a") as toml:
        toml.write('\n[[stop_rule]]\nid = "any-nan"\nkind = "non_finite"\n')
    t0 = time.time() - 120
    write_stream(seed_campaign, "ctrl-r1", [
        {"ts": t0, "event": "started", "pid": 4_000_000},
        {"ts": t0 + 1, "step": 10, "loss": 1.5},
        '{"ts": %f, "step": 20, %s: NaN}' % (t0 + 2, json.dumps(TITLE)),
    ])
    write_stream(seed_campaign, "v-r64", [
        {"ts": t0, "event": "started", "pid": 4_000_001},
        {"ts": t0 + 1, "event": "truncated", "input": CLEAR + CSI8, "essential": True, "step": 3},
    ])
    (seed_campaign / "out" / "ctrl-r1").mkdir(parents=True)
    (seed_campaign / "out" / "ctrl-r1" / "predictions.jsonl").write_text('{"id": "doc-1", "label": "pos"}\n')
    (seed_campaign / "data").mkdir()
    (seed_campaign / "data" / "test_ids.txt").write_text(f"doc-1\n{CLIPBOARD}\n{CSI8}\n")
    assert run_cli("stop", str(seed_campaign), "v-r16", "--reason", CLIPBOARD + " " + MARKUP).returncode == 0
    assert run_cli("note", str(seed_campaign), MARKUP + " " + CSI8 + " " + TITLE, "--run", "ctrl-r1").returncode == 0
    return seed_campaign


def test_status_text_shows_the_hostile_strings_escaped(hostile):
    result = run_cli("status", str(hostile))
    assert result.returncode == 1, result.stderr  # alerts are active
    assert raw_controls(result.stdout + result.stderr) == []
    assert escape_control(TITLE) in result.stdout  # the metric name, in the any-nan alert
    assert escape_control(CLEAR + CSI8) in result.stdout  # the truncated input's id
    assert escape_control(CLIPBOARD) in result.stdout  # the stop reason


def test_status_json_keeps_the_exact_strings(hostile):
    result = run_cli("status", str(hostile), "--json")
    assert raw_controls(result.stdout) == []  # JSON's own escapes: \u001b, \u009b
    snapshot = json.loads(result.stdout)
    messages = [alert["message"] for alert in snapshot["alerts"]]
    assert any(TITLE in message for message in messages)
    assert any(CLEAR + CSI8 in message for message in messages)
    runs = {run["id"]: run for run in snapshot["runs"]}
    assert runs["v-r16"]["stop_reason"].startswith(CLIPBOARD)


def test_log_text_shows_the_hostile_strings_escaped_and_json_keeps_them(hostile):
    result = run_cli("log", str(hostile))
    assert result.returncode == 0, result.stderr
    assert raw_controls(result.stdout + result.stderr) == []
    assert escape_control(CLIPBOARD) in result.stdout and escape_control(TITLE) in result.stdout
    assert MARKUP in result.stdout

    as_json = run_cli("log", str(hostile), "--json")
    assert raw_controls(as_json.stdout) == []
    events = json.loads(as_json.stdout)["events"]
    assert {e["reason"] for e in events if e["type"] == "stop"} == {CLIPBOARD + " " + MARKUP}
    assert {e["text"] for e in events if e["type"] == "note"} == {MARKUP + " " + CSI8 + " " + TITLE}


def test_watch_headless_shows_the_hostile_strings_escaped(hostile):
    env = {**os.environ, "COCKPIT_NVML": "off", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "cockpit", "watch", str(hostile), "--headless", "--interval", "0.2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 30
    while time.time() < deadline:  # the two hostile alerts are in the run log: the watcher has said them
        alerts = {e.get("rule") for e in RunLog(hostile).read().events if e["type"] == "alert"}
        if {"any-nan", "truncated-input"} <= alerts:
            break
        time.sleep(0.2)
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert raw_controls(out + err) == []
    assert escape_control(TITLE) in out and escape_control(CLEAR + CSI8) in out


def test_close_text_and_report_show_the_hostile_strings_escaped(hostile, tmp_path):
    env = {"COCKPIT_TEMP_ROOTS": str(tmp_path / "volatile")}
    result = run_cli("close", str(hostile), env=env)
    assert result.returncode == 1, result.stderr
    assert raw_controls(result.stdout + result.stderr) == []
    assert escape_control(CLIPBOARD) in result.stdout  # the expected ids missing, and the stop reason
    report = (hostile / "closing" / "report.md").read_text()
    assert raw_controls(report) == []
    assert escape_control(CLIPBOARD) in report and escape_control(TITLE) in report
    reload = (hostile / "closing" / "RELOAD.md").read_text()
    assert raw_controls(reload) == []

    as_json = run_cli("close", str(hostile), "--json", env=env)
    assert raw_controls(as_json.stdout) == []
    summary = json.loads(as_json.stdout)
    assert summary == json.loads((hostile / "closing" / "summary.json").read_text())
    assert [note["text"] for note in summary["notes"]] == [MARKUP + " " + CSI8 + " " + TITLE]
    assert any(CLIPBOARD in rejection["cause"] for rejection in summary["rejections"])


# ---------------------------------------------------------------- item 19: long run ids in `status`


def long_ids_campaign(seed_campaign: Path, ids: dict[str, str]) -> Path:
    toml = seed_campaign / "campaign.toml"
    text = toml.read_text()
    for old, new in ids.items():
        text = text.replace(old, new)
    toml.write_text(text)
    return seed_campaign


def test_status_text_gives_long_run_ids_their_own_column(seed_campaign):
    sixteen, forty = "v-r16-lr3e4-bs32", "v-r64-lr1e4-bs64-warmup500-seed1234-long"
    assert (len(sixteen), len(forty)) == (16, 40)
    long_ids_campaign(seed_campaign, {"v-r16": sixteen, "v-r64": forty})
    result = run_cli("status", str(seed_campaign))
    assert result.returncode in (0, 1), result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("run "))
    role_at = lines[header].index("role")
    rows = {line.split()[0]: line for line in lines[header + 1:header + 4]}
    assert set(rows) == {"ctrl-r1", sixteen, forty}, lines  # each id is a word of its own
    for run_id, line in rows.items():
        assert line[role_at - 1] == " ", line  # the id ends before the role column
        assert line[role_at:].split()[0] in ("control", "variant"), line
    as_json = json.loads(run_cli("status", str(seed_campaign), "--json").stdout)
    assert {run["id"] for run in as_json["runs"]} == {"ctrl-r1", sixteen, forty}


# ---------------------------------------------------------------- check, plan, refusals


def hostile_lot(seed_campaign: Path) -> Path:
    toml = seed_campaign / "campaign.toml"
    text = toml.read_text()
    text = text.replace('gpu_model = "RTX 4090"', 'gpu_model = "RTX 4090 \\u001b]0;pwned\\u0007 [bold red]x[/]"')
    text = text.replace('order_ref = "IG-48113"', 'order_ref = "IG-\\u009b2J"')
    toml.write_text(text)
    return seed_campaign


def test_check_and_plan_show_the_campaigns_words_escaped_and_literal(seed_campaign):
    hostile_lot(seed_campaign)
    check = run_cli("check", str(seed_campaign))
    assert check.returncode == 0, check.stderr
    assert raw_controls(check.stdout + check.stderr) == []
    assert "RTX 4090 \\x1b]0;pwned\\x07 [bold red]x[/]" in check.stdout and "IG-\\x9b2J" in check.stdout
    plan = run_cli("plan", str(seed_campaign))
    assert raw_controls(plan.stdout + plan.stderr) == []
    assert "[bold red]x[/]" in plan.stdout  # Rich markup in the campaign's words shows as written
    as_json = run_cli("plan", str(seed_campaign), "--json")
    assert raw_controls(as_json.stdout) == []
    assert json.loads(as_json.stdout)["gpu_model"] == "RTX 4090 " + TITLE + " " + MARKUP


def test_a_refusal_quoting_the_file_is_escaped(seed_campaign):
    toml = seed_campaign / "campaign.toml"
    toml.write_text(toml.read_text().replace('id = "setup"', 'id = "setup-\\u001b[2J"').replace('["setup"]', '["setup-\\u001b[2J"]'))
    result = run_cli("check", str(seed_campaign))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert raw_controls(result.stderr) == [] and "setup-\\x1b[2J" in result.stderr


# ---------------------------------------------------------------- the TUI

from dataclasses import replace  # noqa: E402

from textual import events  # noqa: E402

from cockpit.live.snapshot import AlertView, NvmlView  # noqa: E402
from cockpit.tui.screens import DecisionScreen, NoteScreen, StopScreen  # noqa: E402
from tests.conftest import NOW, FakeSource, make_app, make_gpu, make_run, make_snapshot  # noqa: E402
from tests.tui.test_tui import started, until  # noqa: E402

pytestmark = pytest.mark.usefixtures("utc_local_time", "no_user_themes")  # the whole module, as before


def screen_text(app) -> str:
    """What the terminal is sent for the screen on top, without the style sequences: the text of
    every segment of every line (dialogs, toasts and border titles included)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


def hostile_snapshot():
    snapshot = make_snapshot(gpus=1)
    lot = replace(snapshot.lot, gpu_model="RTX " + TITLE, order_ref="IG-" + CSI8, question="Q " + MARKUP + CLEAR)
    nvml = NvmlView(True, None, warnings=("driver says " + CLIPBOARD + " " + MARKUP,))
    gpus = (replace(make_gpu(0), throttle_reasons=("power cap" + CSI8,)),)
    runs = (
        make_run("ctrl-r1", "control", "indispensable", "running", step=100, loss=0.5, quality=0.7, pid=4242, alive=True,
                 last={"step": 100, TITLE: 1.5, "loss": 0.5}),
        make_run("v-r16", role="variant" + CLEAR, tier="useful" + CSI8),
    )
    alerts = (
        AlertView("any-nan", "ctrl-r1", f"ctrl-r1: {TITLE} is NaN {MARKUP}", NOW, 7, key="any-nan|ctrl-r1"),
        AlertView("truncated-input", "v-r16", f"v-r16: essential input {CLEAR}{CSI8} was truncated", NOW, 8,
                  key="truncated-input|v-r16"),
    )
    notices = (f"runs/{CLIPBOARD}: a folder the campaign does not declare {MARKUP}",)
    return replace(snapshot, lot=lot, nvml=nvml, gpus=gpus, runs=runs, alerts=alerts, notices=notices)


async def test_the_tui_shows_hostile_strings_escaped_and_markup_literally(seed_campaign):
    app = make_app(seed_campaign, hostile_snapshot(), bell=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        await until(pilot, lambda: len(app._notifications) >= 2)  # the two new alerts' toasts
        await pilot.pause()
        text = screen_text(app)
        assert raw_controls(text) == [], text
        assert "RTX \\x1b]0;pwned\\x07" in text  # the lot header
        assert "\\x1b]0;pwned\\x07 is NaN [bold red]x[/]" in text  # the alerts list and the toast
        assert "\\x1b[2J\\x9b2J" in text  # the truncated input's id
        assert "power cap\\x9b2J" in text and "useful\\x9b2J" in text  # a GPU's slowdown, a run's tier
        assert "\\x1b]52;c;ZXZpbA==\\x07" in text  # the notice and the NVML warning

        await pilot.press("s")  # the stop dialog lists the last metrics, names from the stream
        await until(pilot, lambda: isinstance(app.screen, StopScreen))
        await pilot.pause()
        text = screen_text(app)
        assert raw_controls(text) == [], text
        assert "\\x1b]0;pwned\\x07 1.5" in text
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, StopScreen))
        await pilot.press("d")  # the pilot's facts
        await until(pilot, lambda: isinstance(app.screen, DecisionScreen))
        await pilot.pause()
        assert raw_controls(screen_text(app)) == []
        await pilot.press("escape")
        await pilot.pause()


async def test_a_pasted_note_shows_and_records_its_controls_escaped(seed_campaign):
    """A person pastes a line copied from a log, escape sequence and all: the field shows the
    escape as `\\x1b`, and what is recorded is what the field showed."""
    app = make_app(seed_campaign, make_snapshot(), bell=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, NoteScreen))
        app.screen.query_one("#text").post_message(events.Paste(MARKUP + " " + TITLE))
        await pilot.pause()
        text = screen_text(app)
        assert raw_controls(text) == [], text
        assert MARKUP + " \\x1b]0;pwned\\x07" in text
        await pilot.press("enter")
        await until(pilot, lambda: any("recorded" in n.title for n in app._notifications))
    notes = [e for e in json.loads(run_cli("log", str(seed_campaign), "--json").stdout)["events"] if e["type"] == "note"]
    assert [note["text"] for note in notes] == [MARKUP + " " + escape_control(TITLE)]


def test_log_text_aligns_long_run_ids(seed_campaign):
    forty = "v-r64-lr1e4-bs64-warmup500-seed1234-long"
    long_ids_campaign(seed_campaign, {"v-r64": forty})
    assert run_cli("note", str(seed_campaign), "short one", "--run", "ctrl-r1").returncode == 0
    assert run_cli("note", str(seed_campaign), "long one", "--run", forty).returncode == 0
    lines = [line for line in run_cli("log", str(seed_campaign)).stdout.splitlines() if " note " in line]
    assert len(lines) == 2 and lines[0].index("short one") == lines[1].index("long one"), lines  # one column for both
