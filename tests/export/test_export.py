"""The exporter: `/metrics` and `/snapshot.json` from the latest snapshot, `status --textfile`,
the deploy/ files against promtool, and a real Prometheus scraping `cockpit watch --metrics` on
the demo (skipped, with the reason, where Debian's `prometheus` package is not installed)."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cockpit.export.metrics import LabelSets, exposition
from cockpit.export.server import Address, LatestSnapshot, MetricsServer, parse_address, status_json
from cockpit.live.snapshot import AlertView, ClockView, GpuView, LotView, NvmlView, RunView, Snapshot
from cockpit.plan.load import load_campaign
from tests.conftest import ROOT, run_cli

DEPLOY = ROOT / "deploy"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
START = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)
END = START + timedelta(days=3)
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
NO_PROMETHEUS = "Debian's prometheus package is not installed (apt-get install prometheus gives /usr/bin/prometheus)"
NO_PROMTOOL = "promtool is not installed (Debian's prometheus package gives /usr/bin/promtool)"


def run(run_id: str, state: str = "running", **fields) -> RunView:
    values = dict(id=run_id, role="variant", tier="useful", state=state, step=120, total_steps=1200, loss=0.5,
                  quality=None, last={"loss": 0.5}, eta=None, last_checkpoint_at=None, resume_verified=False,
                  resume_verified_at=None, pid=None, alive=None)
    values.update(fields)
    return RunView(**values)


def snapshot(**fields) -> Snapshot:
    base = Snapshot(
        taken_at=NOW,
        lot=LotView("sentiment-lora-2026-11", None, "RTX 4090", 1, 3, Decimal("47.14"), "ORD-1", START, END),
        clock=ClockView(now=NOW, started=True, elapsed_hours=28.0, remaining_hours=44.0, window_hours=72.0, committed_hours=48.0,
                        committed_remaining_hours=20.0, uncommitted_hours=24.0, projected_finish=NOW + timedelta(hours=21),
                        retrieval_hours=1.0, fits=True),
        nvml=NvmlView(available=True, reason=None),
        gpus=(GpuView(0, "NVIDIA GeForce RTX 4090", uuid="GPU-0a1b", utilization_percent=87.0, memory_used_bytes=20 * 2**30,
                      memory_total_bytes=24 * 2**30, temperature_c=71.0, power_watts=402.5, power_limit_watts=450.0),),
        host=None,
        runs=(run("ctrl-r1", last={"loss": 0.5, "eval/macro_f1": 0.71, "lr": 0.001}),
              run("v-r64", last={"loss": math.nan}, loss=math.nan)),
        alerts=(AlertView("nan-loss", "v-r64", "v-r64: loss is NaN", NOW, 7, key="nan-loss|v-r64"),),
    )
    return replace(base, **fields)


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


@pytest.fixture
def labels(seed_campaign) -> LabelSets:
    return LabelSets.of(load_campaign(seed_campaign))


def test_the_issue_metric_names_in_base_units(labels):
    found = samples(exposition(snapshot(), labels))
    value = lambda name, **lab: found[(name, tuple(sorted(lab.items())))]  # noqa: E731
    assert value("cockpit_lot_elapsed_seconds") == 28 * 3600
    assert value("cockpit_lot_remaining_seconds") == 44 * 3600
    assert value("cockpit_plan_remaining_seconds") == 20 * 3600
    assert value("cockpit_projected_finish_timestamp_seconds") == (NOW + timedelta(hours=21)).timestamp()
    assert value("cockpit_lot_fits") == 1
    assert value("cockpit_lot_price_usd") == 47.14  # the lot's price, never an hourly rate
    assert value("cockpit_alerts_active", rule="nan-loss", run="v-r64") == 1
    assert value("cockpit_run_step", run="ctrl-r1") == 120
    assert value("cockpit_run_metric", run="ctrl-r1", metric="eval/macro_f1") == 0.71
    assert math.isnan(value("cockpit_run_metric", run="v-r64", metric="loss"))
    assert value("cockpit_run_state", run="ctrl-r1", state="running") == 1
    assert value("cockpit_run_state", run="ctrl-r1", state="stopped") == 0
    assert value("cockpit_gpu_utilization_ratio", gpu="0", uuid="GPU-0a1b") == 0.87
    assert value("cockpit_gpu_memory_used_bytes", gpu="0", uuid="GPU-0a1b") == 20 * 2**30
    assert value("cockpit_gpu_temperature_celsius", gpu="0", uuid="GPU-0a1b") == 71
    assert value("cockpit_gpu_power_watts", gpu="0", uuid="GPU-0a1b") == 402.5
    assert not any("rate" in name or "per_hour" in name for name, _ in found)


def test_labels_stay_bounded_whatever_runs_and_alerts_say(labels):
    """A metric a run invents, an alert on an undeclared rule or run, a state from nowhere: never a new label value."""
    odd = snapshot(
        runs=(run("ctrl-r1", state="weird\nstate", last={"loss": 0.1, "made/up": 1.0, "x" * 200: 2.0}),),
        alerts=(AlertView("rule-from-nowhere", "run-from-nowhere", "free text\x1b[31m", NOW, 9),
                AlertView("gpu-lost", None, "GPU 0 is lost", NOW, 10)),
    )
    found = samples(exposition(odd, labels))
    values = {value for _, label_set in found for _, value in label_set}
    assert "made/up" not in values and "x" * 200 not in values and "weird\nstate" not in values
    assert ("cockpit_alerts_active", (("rule", "other"), ("run", "other"))) in found
    assert found[("cockpit_alerts_active", (("rule", "gpu-lost"), ("run", "")))] == 1
    assert found[("cockpit_run_state", (("run", "ctrl-r1"), ("state", "other")))] == 1
    allowed = labels.runs | labels.rules | set(labels.metrics) | {"", "other", "0", "GPU-0a1b", "sentiment-lora-2026-11", "RTX 4090",
                                                                   "planned", "running", "finished", "failed", "stopped", "ended", "unreadable"}
    assert values <= allowed


def test_the_fast_text_is_what_prometheus_client_writes(labels):
    """`exposition` writes the text itself (a tenth of the time): prometheus_client parses it to the
    same families as its own `generate_latest`, quotes and newlines in label values included."""
    from prometheus_client.exposition import generate_latest

    from cockpit.export.metrics import registry_for

    odd = snapshot(lot=replace(snapshot().lot, campaign_id='say "hi"\\n', gpu_model="RTX\n4090"))
    ours, theirs = exposition(odd, labels), generate_latest(registry_for(labels, lambda: odd))
    parse = lambda text: [(f.name, f.documentation, [(s.name, s.labels, repr(s.value)) for s in f.samples])  # noqa: E731
                          for f in text_string_to_metric_families(text.decode())]
    assert parse(ours) == parse(theirs)
    assert ours == exposition(odd, labels)  # the kept label prefixes give the same text again


def test_a_lost_gpu_and_an_unknown_fit_leave_their_series_out(labels):
    lost = snapshot(gpus=(GpuView(0, "GPU", lost=True),), clock=replace(snapshot().clock, fits=None, projected_finish=None))
    found = samples(exposition(lost, labels))
    names = {name for name, _ in found}
    assert found[("cockpit_gpu_lost", (("gpu", "0"), ("uuid", "")))] == 1
    assert "cockpit_gpu_utilization_ratio" not in names and "cockpit_lot_fits" not in names
    assert "cockpit_projected_finish_timestamp_seconds" not in names


def test_the_text_is_made_at_publish_once_something_scrapes_and_only_then(labels, monkeypatch):
    import cockpit.export.server as server_module

    made = []
    monkeypatch.setattr(server_module, "exposition", lambda s, sets: made.append(s) or exposition(s, sets))
    latest = LatestSnapshot(labels)
    for hours in (44.0, 43.0):
        latest.publish(replace(snapshot(), clock=replace(snapshot().clock, remaining_hours=hours)))
    assert made == []  # nothing scrapes: nothing is rendered
    assert samples(latest.metrics())[("cockpit_lot_remaining_seconds", ())] == 43 * 3600 and len(made) == 1
    latest.publish(replace(snapshot(), clock=replace(snapshot().clock, remaining_hours=42.0)))
    assert len(made) == 2  # rendered on the tick, for the next scrape
    assert samples(latest.metrics())[("cockpit_lot_remaining_seconds", ())] == 42 * 3600 and len(made) == 2
    assert latest.json() is not None and len(made) == 2


def test_the_server_keeps_the_connection_and_answers_head_and_other_methods(labels):
    import http.client

    latest = LatestSnapshot(labels)
    server = MetricsServer(Address("127.0.0.1", 0), latest)
    try:
        latest.publish(snapshot())
        connection = http.client.HTTPConnection("127.0.0.1", server.address.port, timeout=5)
        connection.request("GET", "/metrics")
        first = connection.getresponse()
        body = first.read()
        assert first.status == 200 and first.getheader("Content-Type").startswith("text/plain; version=0.0.4")
        assert int(first.getheader("Content-Length")) == len(body) and samples(body)
        sock = connection.sock
        connection.request("HEAD", "/metrics?x=1")
        head = connection.getresponse()
        assert head.status == 200 and head.read() == b"" and int(head.getheader("Content-Length")) == len(body)
        assert connection.sock is sock  # the same connection (keep-alive, as Prometheus scrapes)
        connection.request("POST", "/metrics", body=b"x")
        post = connection.getresponse()
        assert post.status == 405 and post.getheader("Allow") == "GET, HEAD" and b"read-only" in post.read()
        connection.close()
    finally:
        server.close()


def test_metrics_address_defaults_to_loopback_and_bad_ones_are_usage_errors():
    assert str(parse_address("9464")) == "127.0.0.1:9464"
    assert str(parse_address(":9464")) == "127.0.0.1:9464"
    assert str(parse_address("0.0.0.0:9464")) == "0.0.0.0:9464"
    assert str(parse_address("[::1]:9464")) == "[::1]:9464"
    for bad in ("", "host:9464", "127.0.0.1:0", "127.0.0.1:99999", "127.0.0.1:port"):
        with pytest.raises(Exception) as raised:
            parse_address(bad)
        assert "--metrics" in str(raised.value)


def test_server_serves_the_latest_snapshot_and_never_ticks(labels):
    latest = LatestSnapshot(labels)
    server = MetricsServer(Address("127.0.0.1", 0), latest)
    try:
        with pytest.raises(urllib.error.HTTPError) as early:
            urllib.request.urlopen(server.url + "/metrics", timeout=5)
        assert early.value.code == 503  # before the first tick: no snapshot, and none is made up
        first = snapshot()
        latest.publish(first)
        body = urllib.request.urlopen(server.url + "/metrics", timeout=5).read()
        assert samples(body)[("cockpit_lot_remaining_seconds", ())] == 44 * 3600
        assert urllib.request.urlopen(server.url + "/snapshot.json", timeout=5).read().decode() == status_json(first) + "\n"
        latest.publish(replace(first, clock=replace(first.clock, remaining_hours=43.0)))
        body = urllib.request.urlopen(server.url + "/metrics", timeout=5).read()
        assert samples(body)[("cockpit_lot_remaining_seconds", ())] == 43 * 3600
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(server.url + "/nothing", timeout=5)
        assert missing.value.code == 404
    finally:
        server.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str, timeout: float = 5) -> bytes:
    return urllib.request.urlopen(url, timeout=timeout).read()


def wait_for(url: str, seconds: float = 30) -> bytes:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return get(url)
        except (OSError, urllib.error.HTTPError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def start_watch(directory: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cockpit", "watch", str(directory), "--headless", "--metrics", f"127.0.0.1:{port}"],
        env={**os.environ, "COCKPIT_NVML": "off", "NO_COLOR": "1"}, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def stop(process: subprocess.Popen) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return (out or "") + (err or "")


def test_watch_metrics_serves_metrics_and_exactly_status_json(seed_campaign):
    port = free_port()
    watch = start_watch(seed_campaign, port)
    try:
        body = wait_for(f"http://127.0.0.1:{port}/metrics")
        assert b"cockpit_lot_remaining_seconds" in body and b"cockpit_lot_price_usd 47.14" in body
        served = json.loads(wait_for(f"http://127.0.0.1:{port}/snapshot.json"))
        status = json.loads(run_cli("status", str(seed_campaign), "--json").stdout)
        assert served.keys() == status.keys()
        for key in ("campaign", "lot", "window_hours", "committed_hours", "runs", "nvml"):
            assert served[key] == status[key] if key != "runs" else [r["id"] for r in served[key]] == [r["id"] for r in status[key]]
    finally:
        output = stop(watch)
    assert f"metrics on http://127.0.0.1:{port}/metrics" in output
    assert "watch stopped" in output


def test_watch_metrics_on_a_port_in_use_says_so(seed_campaign):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_cli("watch", str(seed_campaign), "--headless", "--metrics", f"127.0.0.1:{port}")
    assert result.returncode == 1, result.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in result.stderr and "Traceback" not in result.stderr


def test_watch_metrics_bad_address_is_a_usage_error(seed_campaign):
    result = run_cli("watch", str(seed_campaign), "--headless", "--metrics", "somewhere:abc")
    assert result.returncode == 2 and "--metrics wants ADDR:PORT" in result.stderr


def test_status_textfile_writes_the_metrics_atomically(seed_campaign, tmp_path):
    target = tmp_path / "textfile" / "cockpit.prom"
    target.parent.mkdir()
    target.write_text("old\n")
    result = run_cli("status", str(seed_campaign), "--textfile", str(target))
    assert result.returncode in (0, 1), result.stderr
    found = samples(target.read_bytes())
    assert ("cockpit_lot_price_usd", ()) in found and ("cockpit_lot_window_seconds", ()) in found
    assert found[("cockpit_lot_window_seconds", ())] == 72 * 3600
    assert sorted(p.name for p in target.parent.iterdir()) == ["cockpit.prom"]  # no temporary left behind
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_status_textfile_refuses_a_name_node_exporter_would_ignore(seed_campaign, tmp_path):
    result = run_cli("status", str(seed_campaign), "--textfile", str(tmp_path / "cockpit.txt"))
    assert result.returncode == 2 and ".prom" in result.stderr
    assert not (seed_campaign / "runlog.jsonl").exists()  # refused before anything was read or written
    result = run_cli("status", str(seed_campaign), "--textfile", str(tmp_path / "missing" / "cockpit.prom"))
    assert result.returncode == 1 and "must exist" in result.stderr and "Traceback" not in result.stderr


# ---------------------------------------------------------------- deploy/ against promtool


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
def test_alerting_rules_pass_promtool_check_and_their_unit_tests():
    check = subprocess.run([PROMTOOL, "check", "rules", str(DEPLOY / "prometheus" / "cockpit.rules.yml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run([PROMTOOL, "test", "rules", "cockpit.rules.test.yml"], cwd=DEPLOY / "prometheus", capture_output=True, text=True)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    config = subprocess.run([PROMTOOL, "check", "config", "prometheus.yml"], cwd=DEPLOY / "prometheus", capture_output=True, text=True)
    assert config.returncode == 0, config.stdout + config.stderr


def dashboard_queries() -> list[str]:
    board = json.loads((DEPLOY / "grafana" / "cockpit.json").read_text())
    return [target["expr"].replace("$lot", ".*") for panel in board["panels"] for target in panel.get("targets", [])]


def test_dashboard_reads_only_metrics_the_exporter_serves(labels):
    served = {name for name, _ in samples(exposition(snapshot(), labels))}
    import re

    for query in dashboard_queries():
        for name in re.findall(r"\bcockpit_[a-z_]+", query):
            assert name in served, f"the dashboard reads {name}, which the exporter does not serve"


# ---------------------------------------------------------------- a real Prometheus on the demo


def prometheus_query(base: str, query: str) -> tuple[float, list[dict]]:
    answer = json.loads(get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query})))
    assert answer["status"] == "success", answer
    return time.time(), answer["data"]["result"]


def demo_pids(output: str) -> list[int]:
    return [int(p) for p in output.split("(pids ")[1].split(")")[0].split(", ")]


@pytest.mark.skipif(PROMETHEUS is None, reason=NO_PROMETHEUS)
def test_a_real_prometheus_scraping_watch_metrics_on_the_demo(tmp_path):
    demo = tmp_path / "demo"
    made = run_cli("demo", str(demo), "--no-tui")
    assert made.returncode == 0, made.stderr
    pids = demo_pids(made.stdout)
    exporter, web = free_port(), free_port()
    scrape_seconds = 2
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {scrape_seconds}s\n  evaluation_interval: {scrape_seconds}s\n"
        f"rule_files:\n  - {DEPLOY / 'prometheus' / 'cockpit.rules.yml'}\n"
        f"scrape_configs:\n  - job_name: cockpit\n    static_configs:\n      - targets: ['127.0.0.1:{exporter}']\n        labels:\n          lot: a\n"
    )
    watch = start_watch(demo, exporter)
    prometheus = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{web}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    base = f"http://127.0.0.1:{web}"
    try:
        end = datetime.fromisoformat(json.loads(wait_for(f"http://127.0.0.1:{exporter}/snapshot.json"))["lot"]["end"])
        wait_for(f"{base}/-/ready", 60)
        deadline, result = time.monotonic() + 60, []
        while not result and time.monotonic() < deadline:
            asked, result = prometheus_query(base, "cockpit_lot_remaining_seconds")
            time.sleep(0.5)
        assert result, "Prometheus never scraped cockpit_lot_remaining_seconds"
        remaining = float(result[0]["value"][1])
        expected = end.timestamp() - asked
        # the sample is at most a scrape interval old, and the snapshot it read at most a tick (1 s) older
        assert abs(remaining - expected) <= scrape_seconds + 1.5, (remaining, expected)
        assert result[0]["metric"]["lot"] == "a"

        deadline, nan_alert = time.monotonic() + 150, []
        while not nan_alert and time.monotonic() < deadline:
            _, nan_alert = prometheus_query(base, 'cockpit_alerts_active{rule="nan-loss",run="v-hot-lr"}')
            time.sleep(1)
        assert nan_alert and float(nan_alert[0]["value"][1]) == 1, "the NaN run's alert never reached Prometheus"

        for query in dashboard_queries():  # every dashboard query is valid PromQL on real data
            prometheus_query(base, query)
        rules = json.loads(get(f"{base}/api/v1/rules"))
        assert rules["status"] == "success"
        loaded = [rule for group in rules["data"]["groups"] for rule in group["rules"]]
        assert {rule["name"] for rule in loaded} >= {"CockpitProjectedFinishPastLotEnd", "CockpitAlertActive", "CockpitRunDied"}
        assert all(rule["health"] != "err" for rule in loaded), loaded
    finally:
        prometheus.terminate()
        try:
            prometheus.wait(timeout=15)
        except subprocess.TimeoutExpired:
            prometheus.kill()
        stop(watch)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def test_demo_no_tui_refuses_metrics_and_says_how(tmp_path):
    result = run_cli("demo", str(tmp_path / "demo"), "--no-tui", "--metrics", "127.0.0.1:9464")
    assert result.returncode == 2 and "cockpit watch DIR --headless --metrics" in result.stderr
    assert not (tmp_path / "demo").exists()  # refused before anything was made or started


def test_each_gpu_is_labelled_with_its_index_and_uuid_from_the_readings(seed_campaign):
    from cockpit.live.engine import Engine
    from cockpit.live.gpu_source import SimulatedGpus

    campaign = load_campaign(seed_campaign)
    engine = Engine(campaign, clock=lambda: NOW, gpus=SimulatedGpus(2, "RTX 4090", None, memory_total_bytes=24 * 2**30))
    try:
        found = samples(exposition(engine.tick(), LabelSets.of(campaign)))
    finally:
        engine.close()
    gpus = {dict(label_set)["uuid"] for name, label_set in found if name == "cockpit_gpu_utilization_ratio"}
    assert gpus == {"GPU-simulated-0000", "GPU-simulated-0001"}
    assert found[("cockpit_gpu_memory_total_bytes", (("gpu", "1"), ("uuid", "GPU-simulated-0001")))] == 24 * 2**30


HEALTH = {"serial": "1650924060000", "counters": {
    "ecc_corrected": 3, "ecc_uncorrected": 1, "remapped_correctable": 2, "remapped_uncorrectable": 1,
    "remap_pending": True, "remap_failed": False, "pcie_replays": 12, "power_slowdown_s": 41.5,
    "thermal_slowdown_s": 0.25, "energy_j": 123456.5},
    "since_start": {"ecc_corrected": 1}}


def test_gpu_health_counters_are_exported_in_base_units_with_their_types(labels):
    gpu = replace(snapshot().gpus[0], health=HEALTH)
    text = exposition(snapshot(gpus=(gpu,)), labels)
    found = samples(text)
    value = lambda name, **lab: found[(name, tuple(sorted({"gpu": "0", "uuid": "GPU-0a1b", **lab}.items())))]  # noqa: E731
    assert value("cockpit_gpu_ecc_errors_total", type="corrected") == 3  # NVML's raw count, not the delta since the start
    assert value("cockpit_gpu_ecc_errors_total", type="uncorrected") == 1
    assert value("cockpit_gpu_remapped_rows", cause="correctable") == 2
    assert value("cockpit_gpu_remapped_rows", cause="uncorrectable") == 1
    assert value("cockpit_gpu_row_remap_pending") == 1 and value("cockpit_gpu_row_remap_failed") == 0
    assert value("cockpit_gpu_pcie_replays_total") == 12
    assert value("cockpit_gpu_slowdown_seconds_total", reason="power") == 41.5
    assert value("cockpit_gpu_slowdown_seconds_total", reason="thermal") == 0.25
    assert value("cockpit_gpu_energy_joules_total") == 123456.5
    types = {f.name: f.type for f in text_string_to_metric_families(text.decode())}
    assert types["cockpit_gpu_ecc_errors"] == types["cockpit_gpu_energy_joules"] == "counter"
    assert types["cockpit_gpu_slowdown_seconds"] == types["cockpit_gpu_pcie_replays"] == "counter"
    assert types["cockpit_gpu_remapped_rows"] == types["cockpit_gpu_row_remap_pending"] == "gauge"
    assert b"# TYPE cockpit_gpu_ecc_errors_total counter\n" in text


def test_a_health_field_the_gpu_does_not_report_is_absent_never_zero(labels):
    """An older GPU: retired pages instead of remapped rows, no ECC, no energy counter."""
    old = {"counters": {"retired_pages_single": 4, "retired_pages_double": 0, "power_slowdown_s": 2.0}}
    gpus = (replace(snapshot().gpus[0], health=old), GpuView(1, "GPU", uuid="GPU-none"), GpuView(2, "GPU", lost=True, health=HEALTH))
    found = samples(exposition(snapshot(gpus=gpus), labels))
    health = {(name, dict(lab).get("gpu")) for name, lab in found if name.startswith(("cockpit_gpu_ecc", "cockpit_gpu_re", "cockpit_gpu_row",
                                                                                      "cockpit_gpu_pcie", "cockpit_gpu_slow", "cockpit_gpu_energy"))}
    assert health == {("cockpit_gpu_retired_pages", "0"), ("cockpit_gpu_slowdown_seconds_total", "0")}
    assert found[("cockpit_gpu_retired_pages", (("cause", "single_bit"), ("gpu", "0"), ("uuid", "GPU-0a1b")))] == 4
    assert ("cockpit_gpu_slowdown_seconds_total", (("gpu", "0"), ("reason", "thermal"), ("uuid", "GPU-0a1b"))) not in found


def test_the_fast_text_matches_prometheus_client_with_health_counters(labels):
    from prometheus_client.exposition import generate_latest

    from cockpit.export.metrics import registry_for

    with_health = snapshot(gpus=(replace(snapshot().gpus[0], health=HEALTH),))
    ours, theirs = exposition(with_health, labels), generate_latest(registry_for(labels, lambda: with_health))
    parse = lambda text: [(f.name, f.type, f.documentation, [(s.name, s.labels, repr(s.value)) for s in f.samples])  # noqa: E731
                          for f in text_string_to_metric_families(text.decode())]
    assert parse(ours) == parse(theirs)


def test_the_simulated_gpus_health_counters_reach_the_metrics(seed_campaign):
    """Through the engine and the fake GPUs `demo --gpu-fault` uses: an injected ECC error shows as a counter."""
    from cockpit.live.engine import Engine
    from cockpit.live.fake_gpus import FakeGpus

    campaign = load_campaign(seed_campaign)
    moment = [NOW]
    fake = FakeGpus(1, clock=lambda: moment[0])
    engine = Engine(campaign, clock=lambda: moment[0], gpus=fake, signal_runs=False)
    try:
        engine.tick()
        fake.inject("ecc", 0)
        moment[0] += timedelta(seconds=5)
        found = samples(exposition(engine.tick(), LabelSets.of(campaign)))
    finally:
        engine.close()
    key = lambda **lab: tuple(sorted({"gpu": "0", "uuid": "GPU-simulated-0000", **lab}.items()))  # noqa: E731
    assert found[("cockpit_gpu_ecc_errors_total", key(type="uncorrected"))] == 2
    assert found[("cockpit_gpu_row_remap_failed", key())] == 1
    assert ("cockpit_gpu_energy_joules_total", key()) in found
