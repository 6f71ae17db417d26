"""Notifications through apprise: a local HTTP server takes the `json://` posts, an aiosmtpd server
on loopback the `mailto://` ones; several cockpits on one campaign send each notification once,
a restart sends nothing again, a failing channel is retried then given up without the tick
waiting, and the heartbeat keeps its schedule on an injected clock."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from cockpit.common.times import utc_now
from cockpit.live.engine import Engine
from cockpit.notify.claim import Item
from cockpit.notify.config import load_config, make_channel
from cockpit.notify.message import compose
from cockpit.notify.sender import Notifier, NotifyingSource, http_get
from cockpit.plan.load import load_campaign
from cockpit.record import decisions
from cockpit.record.runlog import RunLog
from tests.conftest import run_cli
from tests.notify_servers import Receiver, free_port, start_http
from tests.live.test_engine import NoGpus, write_stream


@pytest.fixture
def receiver():
    got = Receiver()
    server = start_http(got)
    yield got
    server.shutdown()
    server.server_close()


@pytest.fixture
def live_campaign(seed_campaign: Path) -> Path:
    """The seed campaign with its lot started an hour ago (so alerts are logged now)."""
    path = seed_campaign / "campaign.toml"
    start = (utc_now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = path.read_text()
    import re

    path.write_text(re.sub(r"(?m)^start = .*$", f"start = {start}", text, count=1))
    return seed_campaign


def config_for(campaign, *urls: str, **environ: str):
    return load_config(campaign, environ={"COCKPIT_NOTIFY": " ".join(urls), **environ})


def nan_stream(directory: Path, run_id: str = "v-r64", pid: int = 4_000_000) -> None:
    t0 = time.time() - 5
    write_stream(directory, run_id, [
        {"ts": t0, "event": "started", "pid": pid, "config_sha256": "c" * 64},
        {"ts": t0 + 1, "step": 1, "loss": 2.0},
        '{"ts": %f, "step": 2, "loss": NaN}' % (t0 + 2),
    ])


def events_of(directory: Path, kind: str) -> list[dict]:
    return [e for e in RunLog(directory).read().events if e["type"] == kind]


def fast(campaign, config, **options) -> Notifier:
    return Notifier(campaign, config, gather_seconds=0.1, poll_seconds=0.1, **options)


# ---------------------------------------------------------------- configuration


def test_channels_come_from_the_environment_masked(live_campaign):
    campaign = load_campaign(live_campaign)
    config = config_for(campaign, "json://user:s3cret@127.0.0.1:8080/hook", "ntfy://ntfy.sh/my-secret-topic", "nosuch://x")
    shown = [c.shown for c in config.channels]
    assert shown[0] == "json://user:****@127.0.0.1:8080/hook" and shown[1] == "ntfy://ntfy.sh/m…c"
    assert "s3cret" not in " ".join(shown) and "my-secret-topic" not in " ".join(shown)
    assert config.channels[2].problem and any("nosuch://" in p for p in config.problems)
    assert config.kinds == {"alert", "stop"}  # the default: alerts and stops


def test_channels_from_the_user_file_and_an_apprise_config_file(live_campaign, tmp_path):
    apprise_file = tmp_path / "apprise.txt"
    apprise_file.write_text("json://127.0.0.1:9999/from-apprise-file\n")
    user_file = tmp_path / "notify.toml"
    user_file.write_text(f'urls = ["json://127.0.0.1:9998/"]\nconfig = "{apprise_file}"\ncolour = "red"\n')
    config = load_config(load_campaign(live_campaign), environ={}, config_path=user_file)
    assert [c.shown for c in config.channels] == ["json://127.0.0.1:9998/", "json://127.0.0.1:9999/f…e"]  # a long path part may be a token
    assert config.source == str(user_file)
    assert any("'colour' is not a key" in p for p in config.problems)
    broken = tmp_path / "broken.toml"
    broken.write_text("urls = [\n")
    config = load_config(load_campaign(live_campaign), environ={}, config_path=broken)
    assert not config.channels and "not valid TOML" in config.problems[0]


def test_the_notify_table_says_what_to_send(live_campaign):
    path = live_campaign / "campaign.toml"
    path.write_text(path.read_text() + '\n[notify]\non = ["stop", "closed"]\nmin_interval_minutes = 5\n'
                    'heartbeat_url = "https://hc-ping.com/0b1e-secret-uuid"\nheartbeat_minutes = 2\n')
    config = config_for(load_campaign(live_campaign), "json://127.0.0.1:1/")
    assert config.kinds == {"stop", "closed"} and config.min_interval_seconds == 300
    assert config.heartbeat_seconds == 120 and config.heartbeat_shown == "https://hc-ping.com/…"
    assert load_config(load_campaign(live_campaign), environ={"COCKPIT_NOTIFY": "", "COCKPIT_HEARTBEAT_URL": "http://127.0.0.1:1/b"}).heartbeat_url == "http://127.0.0.1:1/b"
    path.write_text(path.read_text() + 'oops = 1\n')
    result = run_cli("check", str(live_campaign))
    assert result.returncode == 1 and "[notify]" in result.stderr and "oops" in result.stderr


# ---------------------------------------------------------------- the message


def test_the_message_is_plain_text_a_person_can_act_on(live_campaign):
    campaign = load_campaign(live_campaign)
    snapshot = Engine(campaign, gpus=NoGpus()).tick()
    alert = {"seq": 7, "ts": "2026-11-30T03:00:00.000Z", "type": "alert", "rule": "nan-loss", "run": "v-r64", "action": "alert",
             "value": "NaN", "step": 1200, "message": "v-r64: loss is NaN at step 1200 \x1b]0;owned\x07\x1b[2J"}
    title, body = compose([Item(7, "alert", "nan-loss|v-r64", alert)], campaign_id=campaign.id, directory=live_campaign,
                          snapshot=snapshot, host="gpu-box-7")
    assert "\x1b" not in title + body and "\x07" not in body and "\\x1b]0;owned" in body
    assert campaign.id in body and "gpu-box-7" in body and "v-r64" in title
    assert "nan-loss" in body and "step 1200" in body and "value NaN" in body
    assert f"cockpit stop {live_campaign} v-r64 --rule nan-loss --signal" in body
    assert "h left" in body and "the plan fits" in body


def test_a_burst_of_twenty_alerts_is_one_message(live_campaign, receiver):
    campaign = load_campaign(live_campaign)
    log = RunLog(live_campaign)
    with log.transaction() as tx:  # twenty alerts in one tick, as the engine writes them
        for index in range(20):
            tx.append("alert", key=f"stalled|run-{index}", rule="stalled", run=f"run-{index}", message=f"run-{index}: silent for 20 min")
    notifier = fast(campaign, config_for(campaign, receiver.url))
    notifier.step()
    time.sleep(0.15)
    notifier.step()
    posts = receiver.wait_for_posts(1, 5)
    assert len(posts) == 1
    assert "20 events" in posts[0].body["title"] and "run-0" in posts[0].body["message"] and "8 more" in posts[0].body["message"]
    [notified] = events_of(live_campaign, "notified")
    assert len(notified["seqs"]) == 20 and notified["outcome"] == "sent" and notified["channel"] == receiver.url


# ---------------------------------------------------------------- exactly once


def _watch(campaign_dir: Path, config, stop: threading.Event, ticks: list[float], notifiers: list[Notifier]) -> None:
    campaign = load_campaign(campaign_dir)
    engine = Engine(campaign, gpus=NoGpus())
    if config is not None:
        notifier = fast(campaign, config).start()
        notifiers.append(notifier)
        engine = NotifyingSource(engine, notifier)
    try:
        while not stop.is_set():
            began = time.monotonic()
            engine.tick()
            ticks.append(time.monotonic() - began)
            stop.wait(0.1)
    finally:
        engine.close()


def _watchers(campaign_dir: Path, configs: list, seconds: float, until=None) -> tuple[list[float], list[Notifier]]:
    stop, ticks, notifiers = threading.Event(), [], []
    threads = [threading.Thread(target=_watch, args=(campaign_dir, c, stop, ticks, notifiers)) for c in configs]
    for thread in threads:
        thread.start()
    deadline = time.time() + seconds
    while time.time() < deadline and not (until and until()):
        time.sleep(0.05)
    time.sleep(0.5)  # long enough for a second sender to send a duplicate, were it to
    stop.set()
    for thread in threads:
        thread.join(30)
    return ticks, notifiers


def test_two_watchers_and_a_third_engine_send_the_nan_alert_once_and_a_restart_sends_nothing(live_campaign, receiver):
    nan_stream(live_campaign)
    campaign = load_campaign(live_campaign)
    config = config_for(campaign, receiver.url)
    _watchers(live_campaign, [config, config, None], 10, until=lambda: receiver.posts)
    posts = receiver.wait_for_posts(1, 5)
    assert len(posts) == 1
    assert "nan-loss" in posts[0].body["message"] and "v-r64" in posts[0].body["message"]
    assert len(events_of(live_campaign, "alert")) == 1 and len(events_of(live_campaign, "notified")) == 1

    _watchers(live_campaign, [config, config], 2)  # both restarted
    assert len(receiver.posts) == 1 and len(events_of(live_campaign, "notified")) == 1


def test_an_acknowledged_alert_is_not_sent(live_campaign, receiver):
    nan_stream(live_campaign)
    campaign = load_campaign(live_campaign)
    Engine(campaign, gpus=NoGpus()).tick()  # logs the alert, no notifier yet
    decisions.acknowledge(campaign, RunLog(live_campaign), "nan-loss", "v-r64", source="cli")
    notifier = fast(campaign, config_for(campaign, receiver.url))
    for _ in range(3):
        notifier.step()
        time.sleep(0.15)
    assert receiver.posts == [] and events_of(live_campaign, "notified") == []


def test_an_old_alert_is_not_sent_by_a_first_start(live_campaign, receiver):
    """Notifications set up mid-lot do not flood the phone with the lot's history."""
    campaign = load_campaign(live_campaign)
    RunLog(live_campaign, clock=lambda: utc_now() - timedelta(hours=2)).append(
        "alert", key="stalled|ctrl-r1", rule="stalled", run="ctrl-r1", message="old")
    notifier = fast(campaign, config_for(campaign, receiver.url))
    notifier.step()
    time.sleep(0.15)
    notifier.step()
    assert receiver.posts == []


# ---------------------------------------------------------------- failures


def test_a_failing_channel_is_retried_then_given_up_once_and_the_tick_never_waits(live_campaign, receiver):
    receiver.status, receiver.delay = 500, 0.6  # a slow server that refuses
    nan_stream(live_campaign)
    campaign = load_campaign(live_campaign)
    secret = f"json://user:hunter2@127.0.0.1:{receiver.port}/"
    config = config_for(campaign, secret)
    options = dict(retry_seconds=2.5, first_backoff_seconds=0.2, max_backoff_seconds=0.5, timeout_seconds=1.0)
    stop, ticks = threading.Event(), []
    engine = NotifyingSource(Engine(campaign, gpus=NoGpus()), fast(campaign, config, **options).start())
    deadline = time.time() + 20
    snapshot = None
    gave_up = lambda: snapshot is not None and any("gave up" in n for n in snapshot.notices)
    while time.time() < deadline and not gave_up():
        began = time.monotonic()
        snapshot = engine.tick()
        ticks.append(time.monotonic() - began)
        time.sleep(0.05)
    engine.close()
    [failed] = events_of(live_campaign, "notify_failed")
    assert failed["channel"] == f"json://user:****@127.0.0.1:{receiver.port}/" and "hunter2" not in json.dumps(failed)
    assert failed["outcome"] == "failed" and failed["error"] and failed["attempts"] >= 2
    assert len(receiver.posts) == failed["attempts"] >= 2
    assert events_of(live_campaign, "notified") == []
    # each attempt took the server's 0.6 s; no tick waited on one
    assert max(ticks) < 0.5, f"slowest tick {max(ticks):.3f} s"
    assert any("failed" in n and failed["channel"] in n for n in snapshot.notices)
    status = run_cli("status", str(live_campaign), "--json", env={"COCKPIT_NOTIFY": secret})
    payload = json.loads(status.stdout)
    assert payload["notify"]["failed"][0]["channel"] == failed["channel"] and "hunter2" not in status.stdout
    assert any("gave up" in n for n in payload["notices"])


def test_mailto_through_a_local_smtp_server(live_campaign):
    pytest.importorskip("aiosmtpd")
    from aiosmtpd.controller import Controller

    received = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802
            received.append(envelope)
            return "250 OK"

    port = free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        nan_stream(live_campaign)
        campaign = load_campaign(live_campaign)
        Engine(campaign, gpus=NoGpus()).tick()
        config = config_for(campaign, f"mailto://127.0.0.1:{port}?to=ops@example.com&from=cockpit@example.com&mode=insecure")
        notifier = fast(campaign, config)
        deadline = time.time() + 15
        while time.time() < deadline and not received:
            notifier.step()
            time.sleep(0.1)
    finally:
        controller.stop()
    assert len(received) == 1 and received[0].rcpt_tos == ["ops@example.com"]
    text = received[0].content.decode("utf-8", "replace")
    assert "nan-loss" in text and campaign.id in text
    assert events_of(live_campaign, "notified")[0]["channel"].startswith("mailto://")


# ---------------------------------------------------------------- heartbeat


class Clock:
    def __init__(self, moment: datetime):
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment


def test_the_heartbeat_keeps_its_schedule_while_the_engine_ticks(live_campaign, receiver):
    path = live_campaign / "campaign.toml"
    path.write_text(path.read_text() + f'\n[notify]\nheartbeat_url = "http://127.0.0.1:{receiver.port}/ping/uuid"\nheartbeat_minutes = 5\n')
    campaign = load_campaign(live_campaign)
    config = load_config(campaign, environ={"COCKPIT_NOTIFY": ""})
    clock = Clock(datetime.now(timezone.utc))
    notifier = Notifier(campaign, config, clock=clock, fetch=http_get)
    notifier.step()
    assert receiver.gets == []  # no tick yet: nothing to vouch for
    start = clock.moment
    for minutes, expected in [(0, 1), (2, 1), (4.9, 1), (5, 2), (9, 2), (10.5, 3)]:
        clock.moment = start + timedelta(minutes=minutes)
        notifier.after_tick(None)
        notifier.step()
        assert len(receiver.gets) == expected, f"at {minutes} min"
    assert receiver.gets[0].path == "/ping/uuid"
    clock.moment += timedelta(minutes=20)  # the engine stopped ticking: the beats stop, the service notices
    notifier.step()
    assert len(receiver.gets) == 3
    receiver.status = 503
    notifier.after_tick(None)
    notifier.step()
    assert any("heartbeat to http://127.0.0.1" in n and "503" in n for n in notifier.notices())


# ---------------------------------------------------------------- commands


def test_notify_test_reports_each_channel_and_fails_if_any_failed(live_campaign, receiver):
    good = f"json://user:s3cret@127.0.0.1:{receiver.port}/"
    dead = f"json://127.0.0.1:{free_port()}/"
    result = run_cli("notify", str(live_campaign), "--test", env={"COCKPIT_NOTIFY": good})
    assert result.returncode == 0, result.stderr
    assert f"sent    json://user:****@127.0.0.1:{receiver.port}/" in result.stdout and "s3cret" not in result.stdout
    assert len(receiver.posts) == 1 and "test notification" in receiver.posts[0].body["title"]
    result = run_cli("notify", str(live_campaign), "--test", env={"COCKPIT_NOTIFY": f"{good} {dead}"})
    assert result.returncode == 1 and "FAILED  json://127.0.0.1" in result.stdout and "1 of 2 channels failed" in result.stderr
    result = run_cli("notify", str(live_campaign), "--test", env={"COCKPIT_NOTIFY": ""})
    assert result.returncode == 1 and "COCKPIT_NOTIFY" in result.stderr


def test_status_shows_the_channels_masked(live_campaign):
    env = {"COCKPIT_NOTIFY": "json://user:s3cret@127.0.0.1:8/ ntfy://ntfy.sh/secret-topic"}
    text = run_cli("status", str(live_campaign), env=env)
    assert "notify    2 channels" in text.stdout and "json://user:****@127.0.0.1:8/" in text.stdout
    payload = json.loads(run_cli("status", str(live_campaign), "--json", env=env).stdout)
    assert payload["notify"]["channels"][0] == "json://user:****@127.0.0.1:8/" and len(payload["notify"]["channels"]) == 2
    assert payload["notify"]["on"] == ["alert", "stop"]
    for output in (text.stdout, json.dumps(payload)):
        assert "s3cret" not in output and "secret-topic" not in output


# ---------------------------------------------------------------- done when: the demo, watched twice


def _start_watcher(directory: Path, env: dict[str, str]):
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "cockpit", "watch", str(directory), "--headless", "--interval", "0.5"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = process.stdout.readline()  # "watching …": the watcher is up (its channels loaded)
    assert first.startswith("watching"), first + process.stderr.read()
    return process


def _stop_watcher(process) -> str:
    import signal

    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    return out


def test_done_when_the_demo_nan_stop_arrives_once_within_5_s_and_never_again_after_restarts(tmp_path, receiver):
    from cockpit.demo.setup import launch_runs, prepare_demo, stop_runs

    directory = prepare_demo(tmp_path / "demo", utc_now())
    # the demo's diverging run, fast: its loss turns NaN a few seconds in, and the nan-loss rule stops it
    (directory / "runs.toml").write_text('[run.v-hot-lr]\nargs = ["--step-seconds", "0.1", "--diverge"]\n')
    env = {**os.environ, "COCKPIT_NVML": "off", "PYTHONUNBUFFERED": "1", "COCKPIT_NOTIFY": receiver.url}
    watchers = [_start_watcher(directory, env), _start_watcher(directory, env)]
    stop, ticks, notifiers = threading.Event(), [], []
    beside = threading.Thread(target=_watch, args=(directory, config_for(load_campaign(directory), receiver.url), stop, ticks, notifiers))
    beside.start()  # a third cockpit, as the TUI runs it: the engine with a notifier beside it
    processes = launch_runs(directory)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not any("v-hot-lr" in p.body["message"] for p in receiver.posts):
            time.sleep(0.05)
        time.sleep(1.5)  # room for a duplicate, were one to come
    finally:
        stop.set()
        beside.join(30)
        outputs = [_stop_watcher(w) for w in watchers]
        stop_runs(processes)
    about_stop = [p for p in receiver.posts if "v-hot-lr" in p.body["message"]]
    assert len(about_stop) == 1, [p.body for p in receiver.posts]
    assert "STOPPED run v-hot-lr (rule nan-loss, by the stop rule)" in about_stop[0].body["message"]
    lines = [json.loads(line.replace("NaN", '"NaN"')) for line in (directory / "runs" / "v-hot-lr" / "metrics.jsonl").read_text().splitlines()]
    nan_at = next(line["ts"] for line in lines if line.get("loss") == "NaN")
    latency = about_stop[0].at - nan_at
    assert latency < 5.0, f"arrived {latency:.2f} s after the NaN line"
    print(f"delivery latency of the NaN auto-stop: {latency:.2f} s\n{about_stop[0].body['title']}\n{about_stop[0].body['message']}")
    assert all("ALERT [nan-loss]" in out for out in outputs)

    posts = len(receiver.posts)
    notified = events_of(directory, "notified")
    seqs = [seq for event in notified for seq in event["seqs"]]
    assert len(seqs) == len(set(seqs)) and len(notified) == posts  # nothing went out twice
    watchers = [_start_watcher(directory, env), _start_watcher(directory, env)]  # both restarted
    time.sleep(4)
    for watcher in watchers:
        _stop_watcher(watcher)
    assert len(receiver.posts) == posts and len(events_of(directory, "notified")) == len(notified)


def test_min_interval_holds_the_next_message_and_sends_what_waited_together(live_campaign, receiver):
    path = live_campaign / "campaign.toml"
    path.write_text(path.read_text() + "\n[notify]\nmin_interval_minutes = 10\n")
    campaign = load_campaign(live_campaign)
    clock = Clock(utc_now())
    log = RunLog(live_campaign, clock=clock)
    notifier = Notifier(campaign, config_for(campaign, receiver.url), clock=clock, gather_seconds=0, log=log)
    log.append("alert", key="stalled|ctrl-r1", rule="stalled", run="ctrl-r1", message="ctrl-r1: silent")
    notifier.step()
    assert len(receiver.wait_for_posts(1, 5)) == 1
    for run in ("v-r16", "v-r64"):
        clock.moment += timedelta(minutes=1)
        log.append("alert", key=f"stalled|{run}", rule="stalled", run=run, message=f"{run}: silent")
        notifier.step()
    assert len(receiver.posts) == 1  # held: ten minutes have not passed since the last message
    clock.moment += timedelta(minutes=8, seconds=1)
    notifier.step()
    posts = receiver.wait_for_posts(2, 5)
    assert len(posts) == 2 and "v-r16" in posts[1].body["message"] and "v-r64" in posts[1].body["message"]


def test_the_tui_runs_its_engine_with_the_notifier_beside_it(live_campaign, receiver, monkeypatch):
    """`cockpit DIR` and `cockpit demo` open the TUI through run_app: its source is the engine with
    the notifier, so the TUI's ticks feed it and its notices reach the screen's notices."""
    import cockpit.tui.app as tui_app
    from cockpit.commands.tui import run_app

    seen = {}

    class FakeApp:
        def __init__(self, campaign, source, log, **options):
            seen["source"], self.tick_lock, self.left, self.return_code = source, threading.Lock(), threading.Event(), 0

        def run(self):
            seen["snapshot"] = seen["source"].tick()

    monkeypatch.setattr(tui_app, "CockpitApp", FakeApp)
    monkeypatch.setenv("COCKPIT_NOTIFY", "nosuch://x")
    campaign = load_campaign(live_campaign)
    assert run_app(campaign, Engine(campaign, gpus=NoGpus()), theme=None, bell=False, themes=None) == 0
    assert isinstance(seen["source"], NotifyingSource)
    assert any("nosuch://" in notice for notice in seen["snapshot"].notices)  # the invalid channel, said


def test_an_alert_written_while_a_message_is_being_sent_goes_in_the_next_one(live_campaign):
    """Found by bench/notify_latency.py: the run log's lines read while recording a delivery were
    applied to the ledger but never queued, so that alert was never sent."""
    campaign = load_campaign(live_campaign)
    log = RunLog(live_campaign)
    sent: list[str] = []

    def send(channel, title, body, timeout):
        sent.append(body)
        if len(sent) == 1:  # another cockpit logs an alert during this delivery
            log.append("alert", key="stalled|v-r16", rule="stalled", run="v-r16", message="v-r16: silent")
        return None

    log.append("alert", key="stalled|ctrl-r1", rule="stalled", run="ctrl-r1", message="ctrl-r1: silent")
    notifier = Notifier(campaign, config_for(campaign, "json://127.0.0.1:1/"), send=send, gather_seconds=0)
    notifier.step()
    notifier.step()
    assert len(sent) == 2 and "ctrl-r1" in sent[0] and "v-r16" in sent[1]
