"""The run reporter writes SPEC §1.2 lines and never raises into the training loop."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import warnings
from decimal import Decimal
from fractions import Fraction

import pytest

from cockpit.feed import reporter as reporter_module
from cockpit.feed.reporter import (
    RUN_ID_ENV,
    ReporterWarning,
    RunReporter,
    config_sha256,
    metric_value,
    process_identity,
)


class FakeTensor:
    """What a 0-d torch tensor offers the reporter: `.item()`."""

    def __init__(self, value):
        self.value = value

    def item(self):
        return self.value


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_run_writes_every_spec_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative checkpoint path is read as open() reads it
    config = {"lr": 2e-4, "rank": 16, "corpus": "v3"}
    clock = iter(range(1764489600, 1764489700))
    with RunReporter(tmp_path, "ctrl-r1", config, clock=lambda: float(next(clock))) as report:
        report.log(1200, loss=2.31, **{"eval/macro_f1": 0.61})
        report.checkpoint(tmp_path / "runs/ctrl-r1/checkpoints/step-1200.pt", 12.4, 1048576)
        report.resume_verified("runs/ctrl-r1/checkpoints/step-1200.pt", 31.0)
        report.truncated("doc-991", essential=True)
    got = lines(tmp_path / "runs" / "ctrl-r1" / "metrics.jsonl")
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    assert got == [
        {"ts": 1764489600.0, "event": "started", "pid": os.getpid(), **process_identity(),
         "config_sha256": hashlib.sha256(canonical.encode()).hexdigest()},
        {"ts": 1764489601.0, "step": 1200, "loss": 2.31, "eval/macro_f1": 0.61},
        {"ts": 1764489602.0, "event": "checkpoint", "path": "runs/ctrl-r1/checkpoints/step-1200.pt",
         "seconds": 12.4, "bytes": 1048576},
        {"ts": 1764489603.0, "event": "resume_verified", "path": "runs/ctrl-r1/checkpoints/step-1200.pt", "seconds": 31.0},
        {"ts": 1764489604.0, "event": "truncated", "input": "doc-991", "essential": True},
        {"ts": 1764489605.0, "event": "finished", "status": "ok"},
    ]


def test_started_names_the_host_and_pid_namespace_where_its_pid_means_something(tmp_path, monkeypatch):
    import socket

    with RunReporter(tmp_path, "r") as report:
        pass
    started = lines(report.path)[0]
    assert started["host"] == socket.gethostname()
    if os.path.exists("/proc/self/ns/pid"):
        assert started["pid_ns"] == os.readlink("/proc/self/ns/pid") and started["pid_ns"].startswith("pid:[")

    def no_proc(path):
        raise FileNotFoundError(path)

    monkeypatch.setattr(reporter_module.os, "readlink", no_proc)  # no /proc (not Linux): said as null, quietly
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with RunReporter(tmp_path, "s") as report:
            pass
    assert lines(report.path)[0]["pid_ns"] is None and lines(report.path)[0]["pid"] == os.getpid()


def test_config_hash_ignores_key_order_and_is_null_without_config(tmp_path):
    assert config_sha256({"a": 1, "b": [1, 2]}) == config_sha256({"b": [1, 2], "a": 1})
    assert config_sha256({"a": 1}) != config_sha256({"a": 2})
    with RunReporter(tmp_path, "r") as report:
        pass
    assert lines(report.path)[0]["config_sha256"] is None


def test_non_finite_values_are_bare_literals_and_tensors_become_numbers(tmp_path):
    with RunReporter(tmp_path, "r") as report:
        report.log(FakeTensor(3), loss=FakeTensor(math.nan), grad=math.inf, low=-math.inf,
                   lr=Decimal("0.5"), frac=Fraction(1, 4), note="warm", flag=True, nothing=None)
    text = report.path.read_text().splitlines()[1]
    assert '"loss": NaN' in text and '"grad": Infinity' in text and '"low": -Infinity' in text
    line = json.loads(text)
    assert line["step"] == 3 and math.isnan(line["loss"])
    assert (line["lr"], line["frac"], line["note"], line["flag"], line["nothing"]) == (0.5, 0.25, "warm", True, None)


def test_numpy_scalars_are_plain_numbers():
    numpy = pytest.importorskip("numpy")
    assert metric_value(numpy.float32(0.5)) == 0.5 and type(metric_value(numpy.int64(7))) is int
    assert metric_value(numpy.array([1.0, 2.0])) == "[1. 2.]"  # not a scalar: its text, never an error


def test_a_metric_dict_and_reserved_names(tmp_path):
    with RunReporter(tmp_path, "r") as report:
        with pytest.warns(ReporterWarning, match="reserved"):
            report.log(5, {"eval/macro_f1": 0.7, "event": "oops"}, loss=1.0)
    assert lines(report.path)[1] == {"ts": lines(report.path)[1]["ts"], "step": 5, "eval/macro_f1": 0.7, "loss": 1.0}


def test_an_exception_writes_failed_and_propagates(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with RunReporter(tmp_path, "r") as report:
            report.log(1, loss=1.0)
            1 / 0
    assert lines(report.path)[-1]["event"] == "finished"
    assert {k: v for k, v in lines(report.path)[-1].items() if k != "ts"} == {
        "event": "finished", "status": "failed", "error": "ZeroDivisionError"}


def test_sys_exit_zero_is_a_normal_end(tmp_path):
    with pytest.raises(SystemExit):
        with RunReporter(tmp_path, "r") as report:
            raise SystemExit(0)
    assert lines(report.path)[-1]["status"] == "ok"


def test_run_id_is_in_the_environment_for_child_processes(tmp_path, monkeypatch):
    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    with RunReporter(tmp_path, "v-r16"):
        assert os.environ[RUN_ID_ENV] == "v-r16"
    assert RUN_ID_ENV not in os.environ


def test_a_full_disk_warns_once_and_the_loop_goes_on(tmp_path, monkeypatch):
    real_write = os.write
    disk = {"full": False}

    def write(fd, data):
        if disk["full"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(reporter_module.os, "write", write)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with RunReporter(tmp_path, "r") as report:
            report.log(1, loss=1.0)
            disk["full"] = True
            for step in range(2, 52):  # fifty steps on a full disk: the loop never notices
                report.log(step, loss=float(step))
            report.checkpoint(tmp_path / "ckpt", 1.0, 10)
            assert report.pending_lines == 51
            disk["full"] = False
            report.log(52, loss=52.0)  # space again: the kept lines go first, in order
    reporter_warnings = [w for w in caught if issubclass(w.category, ReporterWarning)]
    assert len(reporter_warnings) == 1
    assert "No space left on device" in str(reporter_warnings[0].message)
    steps = [line.get("step") for line in lines(report.path) if "step" in line]
    assert steps == list(range(1, 53))
    assert lines(report.path)[-1]["event"] == "finished"


def test_an_unopenable_file_does_not_raise(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(reporter_module.os, "open", refuse)
    with pytest.warns(ReporterWarning, match="Permission denied"):
        with RunReporter(tmp_path, "r") as report:
            report.log(1, loss=1.0)
    assert report.pending_lines == 3  # started, the step, finished: kept, never raised


def test_warnings_as_errors_still_never_raise(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reporter_module.os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with RunReporter(tmp_path, "r") as report:
            report.log(1, loss=1.0)
    assert "cannot write" in capsys.readouterr().err


def test_the_folder_removed_mid_run_is_recreated(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: recreating is the normal path
        with RunReporter(tmp_path, "r") as report:
            report.log(1, loss=1.0)
            shutil.rmtree(tmp_path / "runs")
            report.log(2, loss=0.5)  # not into the deleted file's ghost inode
    got = lines(tmp_path / "runs" / "r" / "metrics.jsonl")
    assert [line.get("step", line.get("event")) for line in got] == [2, "finished"]


def test_a_torn_last_line_stays_apart(tmp_path):
    path = tmp_path / "runs" / "r" / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"ts": 1, "step": 9, "loss": 0.')  # a previous process killed mid-line
    with RunReporter(tmp_path, "r"):
        pass
    raw = path.read_text().splitlines()
    assert raw[0] == '{"ts": 1, "step": 9, "loss": 0.'
    assert json.loads(raw[1])["event"] == "started"


def test_metrics_path_override_and_checkpoint_paths(tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere" / "model.pt"
    with RunReporter(tmp_path, "r", metrics_path="logs/r.jsonl") as report:
        report.checkpoint(outside, None, None)
    got = lines(tmp_path / "logs" / "r.jsonl")
    assert got[1]["path"] == str(outside)  # outside the campaign: absolute
    assert "seconds" not in got[1] and "bytes" not in got[1]


def test_finish_by_hand_is_not_repeated(tmp_path):
    report = RunReporter(tmp_path, "r")
    report.start()
    report.log(1, loss=1.0)
    report.finish("stopped")
    report.finish("ok")
    assert [line.get("status") for line in lines(report.path) if line.get("event") == "finished"] == ["stopped"]


def test_a_run_id_is_required(tmp_path):
    with pytest.raises(ValueError, match="run's id"):
        RunReporter(tmp_path, "")


def test_the_feed_refuses_the_run_ids_the_plan_refuses():
    """The feed keeps its own copy of the run id rule (it imports nothing else of cockpit): both agree."""
    from cockpit.feed import reporter
    from cockpit.plan import campaign, values

    assert reporter.ID_PATTERN == values.ID_PATTERN and reporter.ID_RULE == values.ID_RULE
    with pytest.raises(ValueError) as feed_error:
        reporter.RunReporter("/tmp", "a/../x")
    with pytest.raises(ValueError) as plan_error:
        campaign.run_path("/tmp", "a/../x", "metrics.jsonl")
    assert str(feed_error.value) == str(plan_error.value)


def test_the_old_import_paths_still_give_the_feed():
    """Training code written before the package layout imports cockpit.reporter and cockpit.callbacks."""
    from cockpit import callbacks as old_callbacks
    from cockpit import reporter as old_reporter
    from cockpit.feed import callbacks, reporter

    assert old_reporter.RunReporter is reporter.RunReporter and old_reporter.RUN_ID_ENV == reporter.RUN_ID_ENV
    assert old_callbacks.attach_to_trainer is callbacks.attach_to_trainer
    assert old_callbacks.TrainerReporting is callbacks.TrainerReporting
