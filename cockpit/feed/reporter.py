"""The run reporter: how a Python training loop tells the cockpit what it is doing.

It writes the metrics stream's lines to `runs/<run-id>/metrics.jsonl` with the standard library only, so a
training environment needs nothing but this file. A full disk or a vanished folder never raises
into the training loop: the reporter warns once, keeps the unwritten lines in memory (bounded) and
writes them when it can again.

    from cockpit.feed.reporter import RunReporter

    with RunReporter("/srv/campaign", "ctrl-r1", config=vars(args)) as report:
        for step, batch in enumerate(loader, start=1):
            loss = train_step(batch)
            report.log(step, loss=loss, lr=scheduler.get_last_lr()[0])
            if step % 1000 == 0:
                started = time.monotonic()
                torch.save(state, path)
                report.checkpoint(path, time.monotonic() - started, os.path.getsize(path))
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import numbers
import os
import re
import socket
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["RunReporter", "ReporterWarning", "config_sha256", "process_identity", "RUN_ID_ENV"]

RUN_ID_ENV = "COCKPIT_RUN_ID"
RESERVED = frozenset({"ts", "step", "event"})
BACKLOG_LINES = 10_000  # lines kept while the disk refuses them: a few MB at most
FILE_MODE = 0o644


def process_identity() -> dict[str, str | None]:
    """Where a pid means something: the host name and the pid namespace (`/proc/self/ns/pid`,
    e.g. "pid:[4026531836]"). Either is None where it cannot be read (no /proc: not Linux)."""
    try:
        host: str | None = socket.gethostname() or None
    except OSError:
        host = None
    try:
        namespace: str | None = os.readlink("/proc/self/ns/pid")
    except (OSError, AttributeError):
        namespace = None
    return {"host": host, "pid_ns": namespace}


# The run id rule of cockpit.plan.campaign (ID_PATTERN, ID_RULE), copied: the feed runs inside the
# training loop and imports nothing else of cockpit. tests/feed/test_reporter.py checks both agree.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
ID_RULE = "a letter or digit, then up to 63 letters, digits, '.', '_' or '-'"
_ID = re.compile(ID_PATTERN)


def _metrics_path(directory: Path, run_id: str) -> Path:
    """runs/<run id>/metrics.jsonl in the campaign folder; an id that is not a plain name is refused
    (a plain name has no separator and no `..`, so the path stays inside the campaign folder)."""
    if _ID.fullmatch(run_id) is None:
        text = repr(run_id)
        shown = text if len(text) <= 60 else f"{text[:59]}… ({len(text)} characters)"
        raise ValueError(
            f"{shown} is not a run id: write {ID_RULE} (the pattern {ID_PATTERN}), e.g. \"ctrl-r1\"; "
            "a path derived from it could leave the campaign folder"
        )
    return directory / "runs" / run_id / "metrics.jsonl"

class ReporterWarning(RuntimeWarning):
    """The reporter could not write its metrics file; training went on."""


def config_sha256(config: Any) -> str | None:
    """sha256 of the config's canonical JSON (sorted keys, no spaces); None when there is no config.

    Mappings, dataclasses, argparse namespaces and objects with `to_dict()`/`model_dump()` are
    hashed by content; values JSON cannot hold (paths, enums) by their text."""
    if config is None:
        return None
    text = json.dumps(_plain_config(config), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str, allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _plain_config(config: Any) -> Any:
    if isinstance(config, Mapping):
        return {str(k): _plain_config(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return [_plain_config(v) for v in config]
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return _plain_config(dataclasses.asdict(config))
    for method in ("model_dump", "to_dict"):  # pydantic models, Hugging Face TrainingArguments
        if callable(getattr(config, method, None)):
            return _plain_config(getattr(config, method)())
    if hasattr(config, "__dict__") and not isinstance(config, type) and type(config).__module__ == "argparse":
        return _plain_config(vars(config))
    return config


def metric_value(value: Any) -> Any:
    """A metric as JSON can hold it: tensors and numpy scalars become Python numbers.

    Non-finite floats stay floats (json writes the bare NaN/Infinity literals the cockpit reads
    as non-finite); strings, booleans and None are kept; anything else is written as its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    item = getattr(value, "item", None)
    if callable(item):  # a torch tensor, a numpy scalar or 0-d array
        try:
            return metric_value(item())
        except Exception:  # a tensor with several elements: fall through to float()/text
            pass
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Number):
        try:
            return float(value)
        except (TypeError, ValueError, OverflowError):
            return str(value)
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return str(value)


class RunReporter:
    """Writes one run's metrics stream. Use it as a context manager around the training loop.

    On enter it writes `started` (pid, host, pid_ns, config_sha256) and sets COCKPIT_RUN_ID for child processes;
    on exit `finished` with status "ok", or "failed" with the exception's type name when the block
    raised (the exception still propagates). Every line is appended with one write and reaches
    the file before the call returns; checkpoints and the end are fsynced as well.
    """

    def __init__(
        self,
        campaign_dir: str | os.PathLike[str],
        run_id: str,
        config: Any = None,
        *,
        metrics_path: str | os.PathLike[str] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        if not run_id or not isinstance(run_id, str):
            raise ValueError("run_id must be the run's id in campaign.toml, e.g. \"ctrl-r1\"")
        self.campaign_dir = Path(campaign_dir)
        self.run_id = run_id
        self.config = config
        # A relative metrics path resolves against the campaign folder, as in campaign.toml.
        if metrics_path is not None:
            self.path = self.campaign_dir / metrics_path
        else:
            self.path = _metrics_path(self.campaign_dir, run_id)  # an id such as "a/../x" would write outside the campaign
        self._clock = clock
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._backlog: deque[bytes] = deque()
        self._dropped = 0
        self._warned = False
        self._failing = False
        self._started = False
        self._finished = False
        self._previous_run_id: str | None = None

    # ------------------------------------------------------------ the context manager

    def __enter__(self) -> "RunReporter":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if not self._finished:
                if exc_type is None or (exc_type is SystemExit and getattr(exc, "code", 1) in (0, None)):
                    self.finish("ok")
                else:
                    self.finish("failed", error=exc_type.__name__)
        finally:
            self._restore_run_id()
        return False  # never swallow the training loop's exception

    # ------------------------------------------------------------ what a loop reports

    def start(self) -> None:
        """Write `started` (done by `with`; call it yourself when you cannot use a block)."""
        if self._started:
            return
        self._started = True
        self._previous_run_id = os.environ.get(RUN_ID_ENV)
        os.environ[RUN_ID_ENV] = self.run_id  # child processes (data workers, evals) carry it
        try:
            digest = config_sha256(self.config)
        except Exception as error:  # a config that cannot be walked (a cycle): say so, go on
            self._warn(f"cannot hash the run's config ({type(error).__name__}: {error}); config_sha256 is null")
            digest = None
        # host and pid_ns say where the pid means something: the cockpit judges it only from there
        self._event("started", {"pid": os.getpid(), **process_identity(), "config_sha256": digest})

    def log(self, step: Any, metrics: Mapping[str, Any] | None = None, /, **more: Any) -> None:
        """One metric line: `report.log(1200, loss=2.31)` or `report.log(1200, {"eval/macro_f1": 0.61})`."""
        values = {**(metrics or {}), **more}
        clash = RESERVED.intersection(values)
        if clash:
            self._warn(f"metric names {sorted(clash)} are reserved by the metrics format and were left out")
        line: dict[str, Any] = {"ts": self._clock(), "step": metric_value(step)}
        for name, value in values.items():
            if name not in RESERVED:
                line[str(name)] = metric_value(value)
        self._write(line)

    def checkpoint(self, path: str | os.PathLike[str], seconds: float | None = None,
                   bytes: int | None = None) -> None:  # noqa: A002 - the SPEC's field name
        """A checkpoint was written to `path` in `seconds`, `bytes` in size (fsynced).

        A relative path is taken from the current directory, as `open()` takes it; the line holds
        it relative to the campaign folder when it lies inside, else absolute."""
        fields: dict[str, Any] = {"path": self._path_text(path)}
        if seconds is not None:
            fields["seconds"] = metric_value(seconds)
        if bytes is not None:
            fields["bytes"] = metric_value(bytes)
        self._event("checkpoint", fields, sync=True)

    def resume_verified(self, path: str | os.PathLike[str], seconds: float | None = None) -> None:
        """The checkpoint at `path` was reloaded in a fresh process and resumed the run exactly."""
        fields: dict[str, Any] = {"path": self._path_text(path)}
        if seconds is not None:
            fields["seconds"] = metric_value(seconds)
        self._event("resume_verified", fields, sync=True)

    def truncated(self, input_id: str, essential: bool) -> None:
        """An input was cut to fit (an essential one trips the campaign's `truncated` rule)."""
        self._event("truncated", {"input": str(input_id), "essential": bool(essential)})

    def finish(self, status: str = "ok", *, error: str | None = None) -> None:
        """Write `finished` (done by `with`), fsync and close the file."""
        if self._finished:
            return
        self._finished = True
        fields: dict[str, Any] = {"status": status}
        if error:
            fields["error"] = error
        self._event("finished", fields, sync=True)
        self.close()

    def close(self) -> None:
        with self._lock:
            self._close_quietly()

    @property
    def pending_lines(self) -> int:
        """Lines not yet on disk because writing failed (they are retried with the next line)."""
        return len(self._backlog)

    # ------------------------------------------------------------ writing

    def _event(self, name: str, fields: dict[str, Any], sync: bool = False) -> None:
        self._write({"ts": self._clock(), "event": name, **fields}, sync=sync)

    def _path_text(self, path: str | os.PathLike[str]) -> str:
        """A checkpoint path the cockpit can open: relative to the campaign folder when inside it."""
        absolute = os.path.abspath(os.fspath(path))
        try:
            relative = os.path.relpath(absolute, os.path.abspath(self.campaign_dir))
        except ValueError:
            return absolute
        return absolute if relative.startswith(os.pardir) else relative

    def _write(self, line: dict[str, Any], sync: bool = False) -> None:
        try:
            data = (json.dumps(line, allow_nan=True, default=str, ensure_ascii=False) + "\n").encode("utf-8")
        except Exception as error:  # e.g. a circular value: never the loop's problem
            self._warn(f"cannot encode a metrics line ({type(error).__name__}: {error}); it was left out")
            return
        with self._lock:
            if len(self._backlog) >= BACKLOG_LINES:  # the oldest unwritten line gives way
                self._backlog.popleft()
                self._dropped += 1
            self._backlog.append(data)
            try:
                self._flush_backlog(sync)
            except OSError as error:
                self._failing = True
                self._close_quietly()
                self._warn(f"cannot write {self.path}: {error.strerror or error}; training goes on, "
                           f"up to {BACKLOG_LINES} lines are kept and retried with the next one")
            except Exception as error:  # anything else the OS layer throws: same promise
                self._failing = True
                self._close_quietly()
                self._warn(f"cannot write {self.path}: {type(error).__name__}: {error}; training goes on")
            else:
                if self._failing:
                    self._failing = False
                    lost = f", {self._dropped} lines lost" if self._dropped else ""
                    self._note(f"cockpit reporter: writing {self.path} works again{lost}")

    def _flush_backlog(self, sync: bool) -> None:
        fd = self._open()
        while self._backlog:
            data = self._backlog.popleft()  # taken first: a signal right after the write must not repeat it
            try:
                written = os.write(fd, data)
            except BaseException:  # not written (a full disk, or a signal handler that raised)
                self._backlog.appendleft(data)
                raise
            if written != len(data):  # a short write (disk filled up mid-line): end the torn line
                self._backlog.appendleft(data)
                os.write(fd, b"\n")
                raise OSError(errno.ENOSPC, "short write")
        if sync:
            os.fsync(fd)

    def _open(self) -> int:
        """The open file, reopened (and its folder recreated) when it was deleted under us."""
        if self._fd is not None:
            try:
                if os.fstat(self._fd).st_nlink > 0:
                    return self._fd
            except OSError:
                pass
            self._close_quietly()  # removed with its folder: writing on would feed a ghost inode
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            size = os.fstat(fd).st_size
            if size:  # a previous writer killed mid-line: start ours on a line of its own
                with open(self.path, "rb") as handle:
                    handle.seek(size - 1)
                    if handle.read(1) != b"\n":
                        os.write(fd, b"\n")
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        return fd

    def _close_quietly(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def _warn(self, message: str) -> None:
        """Once per reporter: a full disk every step must not flood the training log."""
        if self._warned:
            return
        self._warned = True
        try:
            warnings.warn(f"cockpit reporter ({self.run_id}): {message}", ReporterWarning, stacklevel=4)
        except Exception:  # warnings turned into errors (-W error): still never raise into the loop
            self._note(f"cockpit reporter ({self.run_id}): {message}")

    @staticmethod
    def _note(message: str) -> None:
        try:
            print(message, file=sys.stderr, flush=True)
        except Exception:
            pass

    def _restore_run_id(self) -> None:
        if self._previous_run_id is None:
            os.environ.pop(RUN_ID_ENV, None)
        else:
            os.environ[RUN_ID_ENV] = self._previous_run_id

