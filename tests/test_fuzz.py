"""Bad input, fuzzed (issue #9 item 3): generated campaign files and metric lines — wrong types,
huge numbers, deep nesting, invalid UTF-8, random keys, a 10 MB line — always end as a clear
error or a skipped, counted line: never another exception, never a hang. Whole campaigns too
(issue 13 item 5): whatever some runs write, a tick still brings the other runs' alerts and the clock.

The examples are bounded (CI has 2 cores); `deadline=None` because a shared machine stalls.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tomllib
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cockpit.commands.live import render_text
from cockpit.live.engine import Engine
from cockpit.live.fake_gpus import FakeGpus
from cockpit.live.metrics import MetricsStream
from cockpit.live.saved_state import load_state, save_state
from cockpit.live.track import last_metrics
from cockpit.live.rules import RuleEvaluator, RuleState
from cockpit.live.snapshot import to_json
from cockpit.plan.campaign import Campaign, CampaignError, StopRule
from cockpit.plan.load import load_campaign, read_campaign_text
from cockpit.record.runlog import encode_event
from tests.conftest import ROOT, SAMPLES

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
BASE_TEXT = (SAMPLES / "sentiment-lora" / "campaign.toml").read_text()
BASE = tomllib.loads(BASE_TEXT)
MONEY_KEYS = {"price_usd", "usd"}
SAFE_DEPTH = 80  # deeper than any real file; the deep end is test_deep_nesting_is_a_campaign_error


# ---------------------------------------------------------------------------------------------
# A small TOML writer (the project has none): enough for the campaign's shape and nasty values


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def toml_text(document: dict) -> str:
    lines: list[str] = []
    tables, arrays = [], []
    for key, value in document.items():
        if isinstance(value, dict):
            tables.append((key, value))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            arrays.append((key, value))
        else:
            lines.append(f"{json.dumps(key)} = {toml_value(value)}")
    for key, table in tables:
        lines.append(f"\n[{json.dumps(key)}]")
        lines += [f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in table.items()]
    for key, items in arrays:
        for item in items:
            lines.append(f"\n[[{json.dumps(key)}]]")
            lines += [f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in item.items()]
    return "\n".join(lines) + "\n"


def test_the_writer_round_trips_the_sample():
    assert tomllib.loads(toml_text(BASE)) == BASE
    assert isinstance(read_campaign_text(toml_text(BASE), SAMPLES / "sentiment-lora"), Campaign)


# ---------------------------------------------------------------------------------------------
# Strategies

keys = st.one_of(
    st.sampled_from(["id", "hours", "gpus", "days", "price_usd", "start", "after", "kind", "tier", "role", "threshold",
                     "after_step", "within_hours", "minutes", "runs", "metric", "action", "usd", "total_steps", "schema",
                     "retrieval_hours", "warn_before_end_hours", "run", "path", "expect_ids", "reload", "direction"]),
    st.text(min_size=1, max_size=12),
)
scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),  # TOML's integers are 64-bit
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(lambda n: n * 10**12 // 10**12),
    st.sampled_from([0, -1, 1, 2**63 - 1, -(2**63), 10**18]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 5e-324, 1e20, 1e25]),
    st.booleans(),
    st.text(max_size=40),
    st.sampled_from(["", " ", "0", "-1", "1e999", "NaN", "inf", "47.141", "indispensable", "stop", "max", "ctrl-r1",
                     "../../etc/passwd", "/tmp/x", "\u202e", "a" * 300]),
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(timezone.utc)),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=4),
    max_leaves=12,
)


def nested(depth: int) -> object:
    value: object = 1
    for level in range(depth):
        value = [value] if level % 2 else {"x": value}
    return value


def huge_amount(value) -> bool:
    """An amount whose cents do not fit Decimal's 28 digits (see test_huge_money_is_a_campaign_error)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return math.isfinite(value) and abs(value) >= 1e20
    if isinstance(value, str):
        try:
            amount = Decimal(value.strip())
        except (InvalidOperation, ValueError):
            return False
        return amount.is_finite() and amount != 0 and amount.adjusted() >= 20
    return False


def slots(document: dict) -> list[tuple[dict, str]]:
    """Every (table, key) of the document, arrays of tables included."""
    found: list[tuple[dict, str]] = []

    def walk(table: dict) -> None:
        for key, value in table.items():
            found.append((table, key))
            if isinstance(value, dict):
                walk(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, dict):
                        walk(item)

    walk(document)
    return found


@st.composite
def campaign_texts(draw, huge_money: bool = False, max_depth: int = SAFE_DEPTH) -> str:
    """The sample campaign with 1–5 values replaced, keys added or removed, and nesting inserted."""
    document = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 5))):
        table, key = draw(st.sampled_from(slots(document)))
        operation = draw(st.sampled_from(["replace", "replace", "delete", "add", "nest"]))
        if operation == "delete":
            table.pop(key, None)
        elif operation == "nest":
            table[key] = nested(draw(st.integers(1, max_depth)))
        else:
            target = key if operation == "replace" else draw(keys)
            value = draw(values)
            if not huge_money and target in MONEY_KEYS and huge_amount(value):
                value = "1.00"
            table[target] = value
    return toml_text(document)


def assert_clear_error_or_campaign(load) -> None:
    try:
        campaign = load()
    except (CampaignError, ValueError, TypeError, ArithmeticError, RecursionError, OSError) as error:
        if not isinstance(error, CampaignError):  # reported short: a RecursionError's traceback takes pytest seconds
            pytest.fail(f"{type(error).__name__} instead of a CampaignError: {str(error)[:300]}", pytrace=False)
        assert error.findings, "a CampaignError must say what is wrong"
        for finding in error.findings:
            text = str(finding)
            assert text.startswith(finding.file) and finding.message.strip(), text
        return
    assert isinstance(campaign, Campaign)


# ---------------------------------------------------------------------------------------------
# Campaign files


@FUZZ
@given(text=campaign_texts())
def test_generated_campaign_texts_are_a_campaign_or_a_clear_error(text):
    assert_clear_error_or_campaign(lambda: read_campaign_text(text, SAMPLES / "sentiment-lora"))


@FUZZ
@given(text=st.text(max_size=300))
def test_random_text_is_a_campaign_or_a_clear_error(text):
    assert_clear_error_or_campaign(lambda: read_campaign_text(text, Path("/nonexistent")))


@FUZZ
@given(junk=st.binary(min_size=1, max_size=64), at=st.integers(0, len(BASE_TEXT)))
def test_invalid_utf8_anywhere_is_a_clear_error(tmp_path_factory, junk, at):
    folder = tmp_path_factory.mktemp("utf8")
    data = BASE_TEXT.encode()[:at] + b"\xff" + junk + BASE_TEXT.encode()[at:]
    (folder / "campaign.toml").write_bytes(data)
    with pytest.raises(CampaignError) as caught:
        load_campaign(folder)
    assert "not UTF-8" in str(caught.value) or "not valid TOML" in str(caught.value)


@FUZZ
@given(data=st.binary(max_size=400))
def test_random_bytes_are_a_campaign_or_a_clear_error(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("bytes")
    (folder / "campaign.toml").write_bytes(data)
    assert_clear_error_or_campaign(lambda: load_campaign(folder))


@FUZZ
@example(text=BASE_TEXT.replace('price_usd = "47.14"', 'price_usd = 1e308'))
@example(text=BASE_TEXT.replace('price_usd = "47.14"', 'price_usd = "1e999999"'))
@example(text=BASE_TEXT.replace('usd = "3.10"', "usd = 1000000000000000000000000000000"))
@given(text=campaign_texts(huge_money=True))
def test_huge_money_is_a_campaign_error(text):
    assert_clear_error_or_campaign(lambda: read_campaign_text(text, SAMPLES / "sentiment-lora"))


@pytest.mark.parametrize("text", ["a = " + "[" * 5000 + "]" * 5000, "a = " + "{b = " * 3000 + "1" + "}" * 3000],
                         ids=["arrays", "inline-tables"])
def test_deep_nesting_is_a_campaign_error(text):
    assert_clear_error_or_campaign(lambda: read_campaign_text(text, Path("/nonexistent")))


@pytest.mark.parametrize("old, new", [("hours = 12 ", "hours = 1e308 "), ("start = 2026-11-30T08:00:00Z", "start = 9999-12-31T23:00:00Z")],
                         ids=["hours", "start"])
def test_a_valid_campaign_has_computable_dates(old, new):
    from cockpit.plan.schedule import schedule

    text = BASE_TEXT.replace(old, new, 1)
    try:
        campaign = read_campaign_text(text, SAMPLES / "sentiment-lora")
    except CampaignError:
        return  # refusing such a file is a fine answer too
    planned = schedule(campaign.items, campaign.lot.gpu_count, campaign.model.calendar.retrieval_hours)
    assert planned.committed_hours >= 0
    assert campaign.lot.end is None or campaign.lot.end > campaign.lot.start


# ---------------------------------------------------------------------------------------------
# Metric lines

RULES = [
    StopRule(id="nan-loss", kind="non_finite", metric="loss"),
    StopRule(id="any-nan", kind="non_finite"),
    StopRule(id="floor", kind="below", metric="eval/f1", threshold=0.5, after_step=10),
    StopRule(id="blowup", kind="above", metric="loss", threshold=100.0),
    StopRule(id="truncated", kind="truncated"),
    StopRule(id="no-resume", kind="no_resume", within_hours=1),
    StopRule(id="stalled", kind="stalled", minutes=1),
]

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 10**400, -(10**30), 2**53 + 1]), st.text(max_size=20),
    st.sampled_from(["nan", "inf", "-Infinity", "NaN", "1e999", "2026-11-30T08:00:00Z", "9999-99-99", ""]),
)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=8)
good_lines = st.builds(
    lambda step, loss, f1, ts: json.dumps({"ts": ts, "step": step, "loss": loss, "eval/f1": f1}).encode(),
    st.integers(0, 10**9), st.floats(0, 10, allow_nan=False), st.floats(0, 1, allow_nan=False),
    st.floats(1.7e9, 1.9e9, allow_nan=False),
)
weird_lines = st.one_of(  # JSON the reader must take or skip, never choke on
    st.dictionaries(st.sampled_from(["ts", "step", "loss", "eval/f1", "event", "pid", "essential", "input", "status", "seconds",
                                     "config_sha256", "path", "bytes"]) | st.text(max_size=10), json_values, max_size=6)
    .map(lambda record: json.dumps(record).encode()),
    st.sampled_from([b'{"step": 1, "loss": NaN}', b'{"loss": Infinity, "step": 2}', b'{"loss": -Infinity}', b'{"loss": 1e999}',
                     b'{"event": "started", "pid": 1e300, "config_sha256": {"a": 1}}', b'{"event": "truncated", "essential": [1]}',
                     b'{"event": ["x"]}', b'{"event": "finished", "status": 5}', b'{"ts": NaN, "step": 3}',
                     b'{"event": "checkpoint", "seconds": 1e400, "bytes": -99999999999999999999999}', b'{"step": true}',
                     b'{"event": "started", "pid": -1, "ts": "nan"}', b'{"ts": "2026-01-01T00:00:00+99:00", "step": 4}']),
    st.integers(1, 60).map(lambda depth: ('{"loss": ' + "[" * depth + "]" * depth + "}").encode()),
)
bad_lines = st.one_of(  # lines that cannot be a record
    st.binary(max_size=30).map(lambda b: b"\xff" + b.replace(b"\n", b"")),
    st.sampled_from([b"not json", b"{", b'{"loss": }', b"[1, 2]", b"null", b"42", b'"text"', b'{"a": 1} trailing',
                     b'{"step": ' + b"9" * 5000 + b"}", b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 3000 + b"1" + b"}" * 3000]),
)
labelled_lines = st.lists(
    st.one_of(good_lines.map(lambda x: ("good", x)), weird_lines.map(lambda x: ("weird", x)), bad_lines.map(lambda x: ("bad", x))),
    min_size=1, max_size=40,
)


def read_all(path: Path, evaluator: RuleEvaluator, stream: MetricsStream, now: float) -> list:
    triggers: list = []
    result = stream.poll(evaluator.observer("r", triggers))
    triggers += evaluator.tick("r", stream.track, now, True)
    triggers += evaluator.tick("r", stream.track, now, False)
    return triggers, result


@FUZZ
@given(lines=labelled_lines, cuts=st.lists(st.integers(0, 10**6), max_size=6))
def test_generated_metric_lines_never_raise_and_bad_ones_are_counted(tmp_path_factory, lines, cuts):
    folder = tmp_path_factory.mktemp("metrics")
    path = folder / "metrics.jsonl"
    data = b"".join(line + b"\n" for _, line in lines)

    # the stream as the trainer writes it: in arbitrary pieces, torn lines included, polled in between
    evaluator, stream = RuleEvaluator(RULES), MetricsStream("r", path)
    triggers: list = []
    bounds = sorted({min(c, len(data)) for c in cuts} | {len(data)})
    written = 0
    for bound in bounds:
        with open(path, "ab") as handle:
            handle.write(data[written:bound])
        written = bound
        found, result = read_all(path, evaluator, stream, 1.95e9)
        assert result.error is None
        triggers += found

    track = stream.track
    known_bad = sum(1 for label, _ in lines if label == "bad")
    weird = sum(1 for label, _ in lines if label == "weird")
    assert track.lines == len(lines)
    assert known_bad <= track.bad_lines <= known_bad + weird
    for trigger in triggers:  # every alert the rules raised can be written to the run log
        encode_event({"seq": 1, "type": "alert", **trigger.event_fields()})
    encode_event({"seq": 1, "type": "stop", "last": last_metrics(track)})
    state = folder / "state.json"
    save_state(state, [stream], extra={"rules": evaluator.state.to_dict()})
    restored = load_state(state).stream("r", path)
    assert restored.position.offset == stream.position.offset and restored.track.bad_lines == track.bad_lines
    RuleState.from_dict(load_state(state).extra.get("rules"))

    # reading the whole file at once says the same as reading it piece by piece
    cold = MetricsStream("r", path)
    cold.poll(RuleEvaluator(RULES).observer("r", []))
    assert (cold.track.lines, cold.track.bad_lines, cold.track.records, cold.track.last_step) == (
        track.lines, track.bad_lines, track.records, track.last_step)
    assert repr(cold.track.metric_values) == repr(track.metric_values)


def test_a_10_mb_single_line_is_skipped_counted_and_never_held(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with open(path, "wb") as handle:
        handle.write(b'{"ts": 1764489600, "step": 1, "loss": 2.0}\n')
        handle.write(b'{"step": 2, "loss": [' + b"1.0, " * (10 * 1024 * 1024 // 5) + b"1.0]}\n")
        handle.write(b'{"ts": 1764489602, "step": 3, "loss": NaN}\n')
    assert path.stat().st_size > 10 * 1024 * 1024
    evaluator, stream = RuleEvaluator(RULES), MetricsStream("r", path)
    triggers: list = []
    result = stream.poll(evaluator.observer("r", triggers))
    assert result.lines == 3 and result.bad == 1
    assert stream.track.bad_samples[0][0] == 2 and "longer than" in stream.track.bad_samples[0][1]
    assert stream.track.last_step == 3
    assert {t.rule_id for t in triggers} == {"nan-loss", "any-nan"}  # the line after the giant one still counts


def test_a_10_mb_line_still_being_written_is_not_held_in_memory(tmp_path):
    path = tmp_path / "metrics.jsonl"
    stream = MetricsStream("r", path, chunk_bytes=1 << 20)
    with open(path, "wb") as handle:
        handle.write(b'{"step": 1, "loss": 1.0}\n' + b"x" * (10 * 1024 * 1024))
    result = stream.poll()
    assert result.lines == 1 and result.pending_bytes == 0 and stream.position.skipping
    with open(path, "ab") as handle:
        handle.write(b'x"}\n{"step": 2, "loss": 0.5}\n')
    result = stream.poll()
    assert result.lines == 2 and result.bad == 1 and stream.track.last_step == 2


# ---------------------------------------------------------------------------------------------
# `cockpit check` on nasty files, as a user runs it


def check(folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COCKPIT_NVML": "off", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "cockpit", "check", str(folder)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


NASTY_FILES = {
    "invalid-utf8": BASE_TEXT.encode().replace(b"sentiment", b"senti\xc3\x28ment", 1),
    "nul-byte": BASE_TEXT.encode() + b"\n# \x00\n",
    "empty": b"",
    "10mb-line": b'id = "' + b"a" * (10 * 1024 * 1024) + b'"\n',
    "wrong-types-huge-numbers": BASE_TEXT.replace("gpus = 1", 'gpus = "one"').replace("hours = 12 ", "hours = [12] ", 1)
    .replace("days = 3", "days = 9223372036854775807").replace("threshold = 0.55", "threshold = 1e308").encode(),
    "random-keys": BASE_TEXT.replace("[lot]", '[lot]\n"\u202e" = 1\n"a.b" = {c = [1, {d = 2}]}').encode(),
}


@pytest.mark.parametrize("name", sorted(NASTY_FILES))
def test_check_on_a_nasty_file_exits_1_with_a_message(tmp_path, name):
    (tmp_path / "campaign.toml").write_bytes(NASTY_FILES[name])
    result = check(tmp_path)
    assert result.returncode == 1, (result.stdout, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert "campaign.toml" in result.stderr  # says which file


def test_check_does_not_echo_a_10_mb_value(tmp_path):
    (tmp_path / "campaign.toml").write_bytes(NASTY_FILES["10mb-line"])
    result = check(tmp_path)
    assert result.returncode == 1 and len(result.stderr) < 20_000, len(result.stderr)


@pytest.mark.parametrize("content", ["a = " + "[" * 5000 + "]" * 5000, BASE_TEXT.replace('price_usd = "47.14"', "price_usd = 1e308")],
                         ids=["deep-nesting", "huge-price"])
def test_check_on_a_file_that_breaks_the_loader_exits_1(tmp_path, content):
    (tmp_path / "campaign.toml").write_text(content)
    result = check(tmp_path)
    assert result.returncode == 1 and "internal error" not in result.stderr, result.stderr


def test_check_on_a_folder_named_campaign_toml_exits_1(tmp_path):
    (tmp_path / "campaign.toml").mkdir()
    result = check(tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr and "internal error" not in result.stderr


# ---------------------------------------------------------------------------------------------
# Whole campaigns (issue 13 item 5): any lines in any runs, and every other run's alerts, the GPUs
# and the clock keep coming. One tick never raises, whatever one run wrote.

CAMPAIGN_NOW = datetime(2026, 11, 30, 18, 0, tzinfo=timezone.utc)  # 10 h into the sample's lot
SURROGATES = st.sampled_from(["\udcff", "\ud800", "\udfff", "runs/\udcfe.pt", "doc-\udc80"])
nasty_numbers = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 1.0, 2**53 + 1, 10**15, 10**400, 1e308, -1e308, 1.24e19, CAMPAIGN_NOW.timestamp() * 1000,
                     CAMPAIGN_NOW.timestamp() * 1e9, 4102444801.0, 946684799.0]),
)
nasty_texts = st.one_of(
    st.text(max_size=12), SURROGATES, st.builds(lambda a, b: a + b, st.text(max_size=4), SURROGATES),
    st.sampled_from(["nan", "inf", "-Infinity", "1970-01-01T00:00:01Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z",
                     "2026-11-30T17:00:00Z", "2026-11-30T17:00:00+99:00", "\u202e", "a" * 300]),
)
nasty_values = st.recursive(
    st.one_of(st.none(), st.booleans(), nasty_numbers, nasty_texts),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(nasty_texts, inner, max_size=3),
    max_leaves=6,
)
stream_keys = st.sampled_from(["ts", "step", "loss", "eval/macro_f1", "event", "pid", "essential", "input", "status", "seconds",
                               "config_sha256", "path", "bytes"]) | nasty_texts
events = st.sampled_from(["started", "checkpoint", "resume_verified", "truncated", "finished", "other"])


@st.composite
def stream_records(draw) -> bytes:
    record = draw(st.dictionaries(stream_keys, nasty_values, max_size=6))
    if draw(st.booleans()):
        record["event"] = draw(events)
    ascii_only = draw(st.booleans())
    text = json.dumps(record, ensure_ascii=ascii_only)
    return text.encode("utf-8", "surrogatepass")  # a surrogate written raw is not UTF-8: a bad line


any_lines = st.lists(
    st.one_of(
        stream_records(),
        st.binary(max_size=80),
        st.sampled_from([b'{"ts": 1.0, "step": 1, "loss": 2.0}', b'{"event": "checkpoint", "seconds": 1.24e19, "bytes": 5}',
                         b'{"event": "started"}', b'{"event": "started", "pid": 1}', b'{"ts": NaN, "loss": NaN}',
                         b'{"step": 1000000000000000, "ts": 1796119448}', b'{"event": "resume_verified", "seconds": -1}',
                         b'{"path": "\\udcff", "event": "truncated", "essential": true, "input": "\\ud800"}']),
    ),
    max_size=25,
)


@pytest.fixture
def fuzzed_campaign(tmp_path):
    folder = tmp_path / "campaign"
    shutil.copytree(SAMPLES / "sentiment-lora", folder, ignore=shutil.ignore_patterns("runlog.jsonl", ".cockpit", "runs", "closing"))
    return folder


def _write(folder: Path, run_id: str, lines: list[bytes]) -> None:
    path = folder / "runs" / run_id / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as handle:
        handle.write(b"".join(line + b"\n" for line in lines))


@FUZZ
@example(first=[b'{"event": "checkpoint", "seconds": 1.24e19, "bytes": 5, "ts": 1796119448}'], second=[b'{"ts": 1.0, "step": 1}'], more=[])
@example(first=[b'{"path": "\\udcff", "event": "checkpoint", "seconds": 1.0}'], second=[b'{"event": "started"}'], more=[b'{"step": 7}'])
@given(first=any_lines, second=any_lines, more=any_lines)
def test_any_lines_in_any_runs_never_hide_another_runs_alert_the_gpus_or_the_clock(fuzzed_campaign, first, second, more):
    folder = fuzzed_campaign
    for name in ("runs", ".cockpit"):
        shutil.rmtree(folder / name, ignore_errors=True)
    (folder / "runlog.jsonl").unlink(missing_ok=True)
    campaign = load_campaign(folder)
    t0 = (CAMPAIGN_NOW - timedelta(hours=1)).timestamp()
    # v-r64 is well behaved, and reports a NaN loss: its alert must come whatever the others wrote
    _write(folder, "v-r64", [json.dumps({"ts": t0, "step": 10, "loss": 2.0}).encode(),
                             ('{"ts": %f, "step": 20, "loss": NaN}' % (t0 + 60)).encode()])
    _write(folder, "ctrl-r1", first)
    _write(folder, "v-r16", second)

    def tick(engine: Engine):
        snapshot = engine.tick()
        assert any(a.rule == "nan-loss" and a.run == "v-r64" for a in snapshot.alerts), snapshot.alerts
        assert snapshot.clock.elapsed_hours == pytest.approx(10.0) and snapshot.clock.remaining_hours == pytest.approx(62.0)
        assert len(snapshot.gpus) == 1
        assert next(r for r in snapshot.runs if r.id == "v-r64").step == 20
        document = json.dumps(to_json(snapshot), allow_nan=False, ensure_ascii=False)  # what status --json prints
        document.encode("utf-8")
        render_text(snapshot).encode("utf-8")  # what status prints
        return snapshot

    engine = Engine(campaign, clock=lambda: CAMPAIGN_NOW, gpus=FakeGpus(1), signal_runs=False)
    tick(engine)
    _write(folder, "ctrl-r1", more)
    _write(folder, "v-r16", first)
    tick(engine)
    engine.close()  # the reading positions are saved, whatever the lines held
    restarted = Engine(campaign, clock=lambda: CAMPAIGN_NOW + timedelta(minutes=1), gpus=FakeGpus(1), signal_runs=False)
    try:
        snapshot = restarted.tick()
    finally:
        restarted.close()
    assert any(a.rule == "nan-loss" and a.run == "v-r64" for a in snapshot.alerts)
