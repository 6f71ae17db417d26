"""Several lots in one cockpit: `--lot NAME=URL` and lots.toml, another lot's /snapshot.json read
over HTTP, its last reading kept after it stops answering, `lot-unreachable` after 60 s, the
summary across lots; through `cockpit status` and the TUI."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from cockpit.common.times import iso
from cockpit.errors import Finding, UsageError
from cockpit.export.metrics import LabelSets
from cockpit.export.server import Address, LatestSnapshot, MetricsServer
from cockpit.live.engine import Engine
from cockpit.live.gpu import GpuSnapshot
from cockpit.lots.config import LotSource, lot_sources, parse_lot_flag, read_config
from cockpit.lots.watcher import LotFetchError, LotWatcher, OtherLots
from cockpit.plan.load import load_campaign
from cockpit.record.runlog import RunLog
from tests.conftest import run_cli

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


class NoGpus:
    def latest(self) -> GpuSnapshot:
        return GpuSnapshot(available=False, reason="NVML unavailable: turned off by COCKPIT_NVML=off")

    def close(self) -> None:
        pass


class Clock:
    def __init__(self, moment: datetime):
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment

    def advance(self, seconds: float) -> None:
        self.moment += timedelta(seconds=seconds)


@pytest.fixture(autouse=True)
def no_user_lots(monkeypatch, tmp_path):
    """The user's own ~/.config/cockpit/lots.toml never leaks into a test."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def serve_campaign(directory: Path, clock: Clock) -> tuple[MetricsServer, Engine, LatestSnapshot]:
    """Another lot's exporter, in-process: its engine ticked once, its snapshot served."""
    campaign = load_campaign(directory)
    engine = Engine(campaign, clock=clock, gpus=NoGpus())
    latest = LatestSnapshot(LabelSets.of(campaign))
    latest.publish(engine.tick())
    return MetricsServer(Address("127.0.0.1", 0), latest), engine, latest


# ---------------------------------------------------------------- configuration


def test_lot_flag_and_config_entries(tmp_path):
    assert parse_lot_flag("b=http://127.0.0.1:19464/") == LotSource("b", "http://127.0.0.1:19464")
    assert parse_lot_flag("b=http://127.0.0.1:19464/snapshot.json").url == "http://127.0.0.1:19464"
    for bad in ("b", "=http://x:1", "b=ftp://x", "b c=http://x:1", "b=http://x:port"):
        with pytest.raises(UsageError) as raised:
            parse_lot_flag(bad)
        assert "--lot" in str(raised.value)
    config = tmp_path / "lots.toml"
    config.write_text('[[lot_view]]\nname = "b"\nurl = "http://127.0.0.1:1"\n[[lot_view]]\nname = "c"\nurl = "http://127.0.0.1:2"\n')
    assert [s.name for s in read_config(config)] == ["b", "c"]
    chosen = lot_sources(["b=http://127.0.0.1:9"], config)
    assert {s.name: s.url for s in chosen} == {"b": "http://127.0.0.1:9", "c": "http://127.0.0.1:2"}
    with pytest.raises(UsageError):
        lot_sources(["b=http://a:1", "b=http://a:2"], config)
    config.write_text('[[lot_view]]\nname = "b"\nadress = "http://127.0.0.1:1"\n')
    with pytest.raises(Finding) as raised:
        read_config(config)
    assert "adress" in str(raised.value) and str(config) in str(raised.value)
    config.write_text("[[lot_view]\n")
    with pytest.raises(Finding):
        read_config(config)
    assert read_config(tmp_path / "absent.toml") == []


def test_status_reads_lot_view_entries_from_the_user_config(seed_campaign, tmp_path):
    config = tmp_path / "xdg" / "cockpit" / "lots.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[[lot_view]]\nname = "far"\nurl = "http://127.0.0.1:9"\n')
    result = run_cli("status", str(seed_campaign), "--json", env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    body = json.loads(result.stdout)
    assert [lot["name"] for lot in body["lots"]] == ["far"]
    assert body["lots"][0]["reachable"] is False and body["lots"][0]["error"]


# ---------------------------------------------------------------- the watcher


def test_a_silent_lot_keeps_its_last_reading_and_raises_lot_unreachable_after_60_s(tmp_path):
    clock = Clock(NOW)
    answer: dict = {"body": json.dumps({"campaign": "other", "lot": {"price_usd": "110.00"}, "runs": [], "alerts": [], "gpus": []}).encode()}

    def fetch(url: str, timeout: float) -> bytes:
        assert url == "http://127.0.0.1:19464/snapshot.json"
        if answer["body"] is None:
            raise LotFetchError("connection refused")
        return answer["body"]

    watcher = LotWatcher(LotSource("b", "http://127.0.0.1:19464"), campaign_dir=tmp_path, clock=clock, fetch=fetch)
    lots = OtherLots([watcher])
    assert watcher.poll_once().reachable and watcher.reading().snapshot["campaign"] == "other"
    answer["body"] = None
    clock.advance(10)
    reading = watcher.poll_once()
    assert not reading.reachable and reading.snapshot["campaign"] == "other"  # the last good reading stays
    assert reading.age_seconds(clock()) == 10 and lots.alerts(clock()) == []
    clock.advance(49.9)
    watcher.poll_once()
    assert lots.alerts(clock()) == []
    clock.advance(0.1)
    [(key, fields)] = lots.alerts(clock())
    assert key == "lot-unreachable:b" and fields["rule"] == "lot-unreachable" and fields["run"] is None
    assert "60 s" in fields["message"] and "connection refused" in fields["message"]
    # kept on disk: a restarted cockpit (or the next one-shot status) still has it, with its age
    again = LotWatcher(LotSource("b", "http://127.0.0.1:19464"), campaign_dir=tmp_path, clock=clock, fetch=fetch)
    assert again.reading().snapshot["campaign"] == "other" and again.reading().age_seconds(clock()) == 60
    # it answers again: no alert is raised any more (the logged one waits for an acknowledgement)
    answer["body"] = json.dumps({"campaign": "other", "lot": {}, "runs": [], "alerts": [], "gpus": []}).encode()
    watcher.poll_once()
    assert lots.alerts(clock()) == [] and watcher.reading().reachable


def test_an_answer_that_is_not_a_cockpit_snapshot_is_named(tmp_path):
    watcher = LotWatcher(LotSource("b", "http://127.0.0.1:1"), fetch=lambda url, timeout: b"<html>hello</html>")
    assert "not JSON" in watcher.poll_once().error
    watcher = LotWatcher(LotSource("b", "http://127.0.0.1:1"), fetch=lambda url, timeout: b'{"a": 1}')
    assert "not a cockpit snapshot" in watcher.poll_once().error


# ---------------------------------------------------------------- cockpit status --lot


def test_status_with_another_lot_keeps_its_reading_after_its_server_stops(seed_campaign, b200_campaign):
    server, engine, _ = serve_campaign(b200_campaign, Clock(NOW))
    url = server.url
    try:
        first = run_cli("status", str(seed_campaign), "--lot", f"b={url}", "--json")
        body = json.loads(first.stdout)
        [lot] = body["lots"]
        assert lot["name"] == "b" and lot["reachable"] and lot["snapshot"]["campaign"] == "summarise-ft-2026-12"
        summary = body["lots_summary"]
        assert summary["total_price_usd"] == "1497.14"  # 47.14 for this lot + 1450.00 for b: the lots' prices, summed
        assert [(line["name"], line["price_usd"]) for line in summary["lots"]] == [("this lot", "47.14"), ("b", "1450.00")]
        text = run_cli("status", str(seed_campaign), "--lot", f"b={url}").stdout
        assert "total 1497.14 USD for 2 lots" in text and "summarise-ft-2026-12" in text and "read-only" in text
    finally:
        server.close()
        engine.close()

    after = json.loads(run_cli("status", str(seed_campaign), "--lot", f"b={url}", "--json").stdout)
    [lot] = after["lots"]
    assert not lot["reachable"] and lot["error"] and lot["snapshot"]["campaign"] == "summarise-ft-2026-12"
    assert not any(a["rule"] == "lot-unreachable" for a in after["alerts"])  # silent for seconds, not 60
    text = run_cli("status", str(seed_campaign), "--lot", f"b={url}").stdout
    assert "NOT ANSWERING" in text and "summarise-ft-2026-12" in text

    # a minute later (the kept reading's times moved back by 61 s: what a minute's wait would leave)
    cache = seed_campaign / ".cockpit" / "lots" / "b.json"
    kept = json.loads(cache.read_text())
    for key in ("fetched_at", "failing_since"):
        kept[key] = iso(datetime.fromisoformat(kept[key]) - timedelta(seconds=61))
    cache.write_text(json.dumps(kept))
    late = run_cli("status", str(seed_campaign), "--lot", f"b={url}", "--json")
    alerts = [a for a in json.loads(late.stdout)["alerts"] if a["rule"] == "lot-unreachable"]
    assert late.returncode == 1 and len(alerts) == 1 and alerts[0]["run"] is None and "lot b" in alerts[0]["message"]
    logged = [e for e in RunLog(seed_campaign).read().events if e["type"] == "alert" and e.get("rule") == "lot-unreachable"]
    assert len(logged) == 1  # logged once, like every built-in alert
    run_cli("status", str(seed_campaign), "--lot", f"b={url}", "--json")
    assert len([e for e in RunLog(seed_campaign).read().events if e["type"] == "alert" and e.get("rule") == "lot-unreachable"]) == 1


def test_status_lot_flag_errors_are_usage_errors(seed_campaign):
    result = run_cli("status", str(seed_campaign), "--lot", "b")
    assert result.returncode == 2 and "--lot wants NAME=URL" in result.stderr


# ---------------------------------------------------------------- the TUI


async def until(pilot, condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the cockpit")
        await pilot.pause(0.05)


async def test_tui_shows_both_lots_and_keeps_the_second_after_its_server_stops(seed_campaign, b200_campaign):
    from cockpit.tui.app import CockpitApp
    from cockpit.tui.lots import LotPane, LotsLine, LotsScreen

    clock = Clock(NOW)
    server, remote_engine, _ = serve_campaign(b200_campaign, clock)
    campaign = load_campaign(seed_campaign)
    lots = OtherLots([LotWatcher(LotSource("b", server.url), campaign_dir=seed_campaign, clock=clock, interval=0.1)]).start()
    engine = Engine(campaign, clock=clock, gpus=NoGpus(), extra_alerts=lots.alerts)
    app = CockpitApp(campaign, engine, engine.log, clock=clock, lots=lots, refresh_seconds=0.2)
    try:
        async with app.run_test(size=(100, 32)) as pilot:
            line = app.query_one(LotsLine)
            await until(pilot, lambda: "b: 1450.00 USD" in str(line.render()))
            assert "this lot: 47.14 USD" in str(line.render()) and "total 1497.14 USD for 2 lots" in str(line.render())
            await pilot.press("o")
            await until(pilot, lambda: isinstance(app.screen, LotsScreen))
            pane = app.screen.query_one(LotPane)
            await until(pilot, lambda: "summarise-ft-2026-12" in str(pane.render()))
            assert "read-only: decisions on this lot are recorded on the box that owns its run log" in str(pane.render())

            server.close()  # the other lot's watcher stops
            await until(pilot, lambda: "NOT ANSWERING" in str(pane.render()))
            assert "summarise-ft-2026-12" in str(pane.render())  # its last reading, still shown
            assert not any(a.rule == "lot-unreachable" for a in app.snapshot.alerts)
            clock.advance(61)
            await until(pilot, lambda: any(a.rule == "lot-unreachable" for a in app.snapshot.alerts))
            await until(pilot, lambda: "NOT ANSWERING for 61 s" in str(pane.render()))
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, LotsScreen))
            await until(pilot, lambda: "NOT ANSWERING" in str(line.render()))
    finally:
        lots.close()
        engine.close()
        remote_engine.close()
    logged = [e for e in RunLog(seed_campaign).read().events if e["type"] == "alert" and e.get("rule") == "lot-unreachable"]
    assert len(logged) == 1 and logged[0]["key"] == "lot-unreachable:b"


async def test_the_help_lists_o_when_other_lots_are_shown_and_only_then(seed_campaign):
    from cockpit.tui.app import CockpitApp
    from cockpit.tui.screens import HelpScreen

    clock = Clock(NOW)
    campaign = load_campaign(seed_campaign)
    lots = OtherLots([LotWatcher(LotSource("b", "http://127.0.0.1:9"), campaign_dir=seed_campaign, clock=clock, interval=60)])
    engine = Engine(campaign, clock=clock, gpus=NoGpus())
    app = CockpitApp(campaign, engine, engine.log, clock=clock, lots=lots, refresh_seconds=0.2)
    try:
        async with app.run_test(size=(100, 32)) as pilot:
            await pilot.pause()
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen))
            keys = [key.key for key in app.screen.keys]
            assert keys.index("o") == keys.index("l") + 1
            other = next(key for key in app.screen.keys if key.key == "o")
            assert other.description == "Other lots" and "read-only" in other.detail
    finally:
        lots.close()
        engine.close()
