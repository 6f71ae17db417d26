"""The host side of the live engine (psutil): which GPU process belongs to which run, the host's CPU,
memory and campaign disk, whether a run's process is still the one it reported, and a SIGTERM that
can only ever reach that process.

It knows nothing of campaign files: callers pass run ids, pids and start times.
"""

from __future__ import annotations

import os
import signal as signals
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from cockpit.common.times import iso, utc_now
from cockpit.live.process_watch import ProcessWatch

if TYPE_CHECKING:
    from cockpit.live.gpu import GpuSample

RUN_ID_VARIABLE = "COCKPIT_RUN_ID"

# A run writes its `started` event after its process began (imports, data loading): the process
# may be this much older than the event and still be the run's. A process created *after* the
# event (beyond the clock tolerance) cannot be the run's: its pid was reused.
STARTUP_ALLOWANCE_SECONDS = 900.0
START_TOLERANCE_SECONDS = 2.0

# Answers that stay true for a (pid, start): the run's own process is gone or was never this pid.
FINAL_OUTCOMES = frozenset({"ended", "reused", "not-the-run"})

# How a GPU process was tied to a run, strongest first.
MATCHED_BY = ("pid", "parent", "env", "own-pid")


def _epoch(moment: datetime | float | int) -> float:
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.timestamp()
    return float(moment)


def _at(epoch: float) -> str:
    return iso(datetime.fromtimestamp(epoch, timezone.utc))


def _duration(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True, slots=True)
class HostSample:
    """The host at one moment. `cpu_percent` is None on the first reading (psutil measures CPU
    between two calls); the load average is there from the start."""

    taken_at: datetime
    cpu_percent: float | None
    load_average_1m: float | None
    cpu_count: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    memory_percent: float | None
    disk_path: str
    disk_used_bytes: int | None
    disk_total_bytes: int | None
    disk_free_bytes: int | None
    disk_percent: float | None
    disk_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "taken_at": iso(self.taken_at),
            "cpu_percent": self.cpu_percent,
            "load_average_1m": self.load_average_1m,
            "cpu_count": self.cpu_count,
            "memory_used_bytes": self.memory_used_bytes,
            "memory_total_bytes": self.memory_total_bytes,
            "memory_percent": self.memory_percent,
            "disk_path": self.disk_path,
            "disk_used_bytes": self.disk_used_bytes,
            "disk_total_bytes": self.disk_total_bytes,
            "disk_free_bytes": self.disk_free_bytes,
            "disk_percent": self.disk_percent,
            "disk_error": self.disk_error,
        }


@dataclass(frozen=True, slots=True)
class RunProcess:
    """A run's processes on the GPUs. `gpus` is empty and `gpu_memory_bytes` None when NVML's pids
    cannot be seen from here (a container) and the run was found by its own reported pid."""

    run: str
    pids: tuple[int, ...]
    gpus: tuple[int, ...]
    gpu_memory_bytes: int | None
    matched_by: str

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "pids": list(self.pids),
            "gpus": list(self.gpus),
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "matched_by": self.matched_by,
        }


@dataclass(frozen=True, slots=True)
class OtherGpuProcess:
    """A process on a GPU that belongs to no run of this campaign (it still uses paid memory)."""

    gpu: int
    pid: int
    used_memory_bytes: int | None
    name: str | None
    user: str | None

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "pid": self.pid, "used_memory_bytes": self.used_memory_bytes, "name": self.name, "user": self.user}


@dataclass(frozen=True, slots=True)
class ProcessMap:
    """GPU processes tied to runs. `messages` carries what must be said once (the container
    notice): it is only in the map where the fact was first found."""

    runs: tuple[RunProcess, ...]
    others: tuple[OtherGpuProcess, ...]
    container: bool
    messages: tuple[str, ...] = ()

    def run(self, run_id: str) -> RunProcess | None:
        for entry in self.runs:
            if entry.run == run_id:
                return entry
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": [r.to_json() for r in self.runs],
            "others": [o.to_json() for o in self.others],
            "container": self.container,
            "messages": list(self.messages),
        }


@dataclass(frozen=True, slots=True)
class ProcessCheck:
    """Whether `pid` is still the run's process. `outcome` is one of: alive, ended, refused,
    foreign-user, reused, not-the-run, unknown-start."""

    pid: int
    ok: bool
    outcome: str
    message: str
    create_time: float | None = None


@dataclass(frozen=True, slots=True)
class SignalResult:
    """What `terminate_run` did. `outcome` is "sent" when the signal left, else why not: refused,
    ended, foreign-user, reused, not-the-run, unknown-start, vanished, denied."""

    pid: int
    signal: str
    sent: bool
    outcome: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "signal": self.signal, "sent": self.sent, "outcome": self.outcome, "message": self.message}


@dataclass(slots=True)
class _Known:
    """What is cached about a GPU process while NVML keeps listing it."""

    ancestors: tuple[int, ...]
    run_env: str | None
    name: str | None
    user: str | None


# ---------------------------------------------------------------------------------------------


class HostProcesses:
    """Host sampling and process safety over psutil. `psutil_module` is injectable so tests pass a
    fake; `uid` is the user whose processes may be signalled (default: the cockpit's own)."""

    def __init__(
        self,
        psutil_module: ModuleType | Any | None = None,
        *,
        uid: int | None = None,
        clock: Any = utc_now,
        use_pidfd: bool | None = None,
        identity: Mapping[str, str | None] | None = None,
    ):
        if psutil_module is None:
            import psutil as psutil_module
        self._ps = psutil_module
        self._uid = os.getuid() if uid is None else uid
        self._clock = clock
        real = getattr(psutil_module, "__name__", "") == "psutil" and isinstance(psutil_module, ModuleType)
        # A pidfd pins the process itself, so a pid reused between the check and the signal
        # cannot receive it. Only with the real psutil: a fake's pids are not this machine's.
        self._use_pidfd = (real and hasattr(os, "pidfd_open") and hasattr(signals, "pidfd_send_signal")) if use_pidfd is None else use_pidfd
        self._cpu_primed = False
        self._cpu_count: int | None = None
        self._known: dict[int, _Known] = {}
        self._container = False
        self._identity = dict(identity) if identity is not None else None
        self._watch: ProcessWatch[ProcessCheck] = ProcessWatch()

    def close(self) -> None:
        """Release the pidfds that watch runs' processes (watching resumes if asked again)."""
        self._watch.close()

    def watched(self) -> int:
        """How many runs' processes are watched through a pidfd now."""
        return self._watch.watched()

    def one_look(self) -> AbstractContextManager[None]:
        """Checks made within look at every watched run process in one poll (the engine's tick)."""
        return self._watch.one_look()

    @property
    def container(self) -> bool:
        """True once NVML's pids were found absent from this process table."""
        return self._container

    @property
    def identity(self) -> dict[str, str | None]:
        """This cockpit's host name and pid namespace: where the pids it looks up mean something."""
        if self._identity is None:
            from cockpit.feed.reporter import process_identity  # stdlib only: the reporter's own

            self._identity = process_identity()
        return self._identity

    def sees(self, started: Mapping[str, Any]) -> bool | None:
        """Whether the pid of a `started` event can be judged here: True when its host and pid
        namespace are this cockpit's, False when they name another host or namespace (a training
        container, another box), None when the event names neither (a writer older than these
        fields: its pid is judged as before, on this host)."""
        if "host" not in started and "pid_ns" not in started:
            return None
        own = self.identity
        return started.get("host") == own.get("host") and started.get("pid_ns") == own.get("pid_ns")

    # -- host

    def host(self, campaign_dir: str | Path) -> HostSample:
        ps = self._ps
        cpu: float | None
        try:
            cpu = float(ps.cpu_percent(interval=None))
        except Exception:
            cpu = None
        if not self._cpu_primed:
            self._cpu_primed = True
            cpu = None  # the first reading compares with nothing
        try:
            load = float((getattr(ps, "getloadavg", None) or os.getloadavg)()[0])
        except Exception:
            load = None
        count = self._cpu_count
        if count is None:  # asked once: the box's CPUs do not change under a running cockpit
            try:
                count = self._cpu_count = ps.cpu_count()
            except Exception:
                count = None
        try:
            memory = ps.virtual_memory()
            total = int(memory.total)
            used = total - int(memory.available)
            memory_percent = float(memory.percent)
        except Exception:
            total = used = None
            memory_percent = None
        path = str(campaign_dir)
        disk_error = None
        try:
            disk = ps.disk_usage(path)
            disk_values = (int(disk.used), int(disk.total), int(disk.free), float(disk.percent))
        except OSError as error:
            disk_values = (None, None, None, None)
            disk_error = f"cannot read the disk usage of {path}: {error.strerror or error}"
        return HostSample(
            taken_at=self._clock(),
            cpu_percent=cpu,
            load_average_1m=load,
            cpu_count=count,
            memory_used_bytes=used,
            memory_total_bytes=total,
            memory_percent=memory_percent,
            disk_path=path,
            disk_used_bytes=disk_values[0],
            disk_total_bytes=disk_values[1],
            disk_free_bytes=disk_values[2],
            disk_percent=disk_values[3],
            disk_error=disk_error,
        )

    # -- GPU processes to runs

    def map_gpu_processes(
        self,
        samples: Iterable[GpuSample],
        run_pids: Mapping[str, int],
        run_ids: Iterable[str] | None = None,
    ) -> ProcessMap:
        """Tie the GPU processes of `samples` to runs: by the pid a run reported in its `started`
        event (or a child of it), then by COCKPIT_RUN_ID in the process's environment. `run_ids`,
        when given, limits environment matches to this campaign's runs."""
        entries: list[tuple[int, int, int | None]] = []
        for sample in samples:
            for process in getattr(sample, "processes", None) or ():
                entries.append((sample.index, process.pid, process.used_memory_bytes))
        messages: list[str] = []
        if not self._container and entries:
            pids = sorted({pid for _, pid, _ in entries})
            memory_in_use = any(used is None or used > 0 for _, _, used in entries)
            if memory_in_use and not any(self._exists(pid) for pid in pids):
                self._container = True
                self._known.clear()
                shown = ", ".join(str(pid) for pid in pids[:5]) + (" …" if len(pids) > 5 else "")
                messages.append(
                    f"NVML reports GPU processes (pids {shown}) that this machine's process table does not show: "
                    "the cockpit seems to run in a container with its own pids (or /proc hides them); "
                    "runs are followed by the pids they report instead"
                )
        if self._container:
            return ProcessMap(self._runs_by_own_pid(run_pids), (), True, tuple(messages))

        allowed = None if run_ids is None else set(run_ids)
        by_pid = {int(pid): run for run, pid in run_pids.items() if isinstance(pid, int) and not isinstance(pid, bool)}
        found: dict[str, dict[str, Any]] = {}
        others: list[OtherGpuProcess] = []
        seen: set[int] = set()
        for gpu, pid, used in entries:
            seen.add(pid)
            run, how = by_pid.get(pid), "pid"
            known = None
            if run is None:
                known = self._about(pid)
                if known is not None:
                    parent = next((p for p in known.ancestors if p in by_pid), None)
                    if parent is not None:
                        run, how = by_pid[parent], "parent"
                    elif known.run_env and (allowed is None or known.run_env in allowed):
                        run, how = known.run_env, "env"
            if run is None:
                others.append(OtherGpuProcess(gpu, pid, used, known.name if known else None, known.user if known else None))
                continue
            slot = found.setdefault(run, {"pids": [], "gpus": [], "memory": 0, "unknown": 0, "how": how})
            if pid not in slot["pids"]:
                slot["pids"].append(pid)
            if gpu not in slot["gpus"]:
                slot["gpus"].append(gpu)
            if used is None:
                slot["unknown"] += 1
            else:
                slot["memory"] += used
            if MATCHED_BY.index(how) < MATCHED_BY.index(slot["how"]):
                slot["how"] = how
        # Forget processes NVML no longer lists: their pids may come back as other processes.
        for pid in list(self._known):
            if pid not in seen:
                del self._known[pid]
        runs = tuple(
            RunProcess(
                run=run,
                pids=tuple(slot["pids"]),
                gpus=tuple(sorted(slot["gpus"])),
                gpu_memory_bytes=slot["memory"] if slot["memory"] or not slot["unknown"] else None,
                matched_by=slot["how"],
            )
            for run, slot in found.items()
        )
        return ProcessMap(runs, tuple(others), False, tuple(messages))

    def _runs_by_own_pid(self, run_pids: Mapping[str, int]) -> tuple[RunProcess, ...]:
        out = []
        for run, pid in run_pids.items():
            if isinstance(pid, int) and not isinstance(pid, bool) and pid > 1 and self._exists(pid):
                out.append(RunProcess(run, (pid,), (), None, "own-pid"))
        return tuple(out)

    def _exists(self, pid: int) -> bool:
        try:
            return bool(self._ps.pid_exists(pid))
        except Exception:
            return False

    def _about(self, pid: int) -> _Known | None:
        """Ancestry, COCKPIT_RUN_ID, name and owner of a GPU process, read once while it lives."""
        if pid in self._known:
            return self._known[pid]
        ps = self._ps
        try:
            process = ps.Process(pid)
        except (ps.NoSuchProcess, ps.AccessDenied, ValueError):
            return None
        try:
            ancestors = tuple(int(p.pid) for p in process.parents())
        except (ps.NoSuchProcess, ps.AccessDenied):
            ancestors = ()
        try:
            run_env = process.environ().get(RUN_ID_VARIABLE) or None
        except (ps.NoSuchProcess, ps.AccessDenied):
            run_env = None  # another user's process, or a zombie: its environment is closed to us
        try:
            name = process.name()
        except (ps.NoSuchProcess, ps.AccessDenied):
            name = None
        try:
            user = process.username()
        except (ps.NoSuchProcess, ps.AccessDenied, KeyError):
            user = None
        known = _Known(ancestors, run_env, name, user)
        self._known[pid] = known
        return known

    # -- is this still the run's process?

    def check(
        self,
        pid: int,
        started_at: datetime | float | None,
        *,
        same_user: bool = False,
        tolerance_s: float = START_TOLERANCE_SECONDS,
        startup_allowance_s: float = STARTUP_ALLOWANCE_SECONDS,
    ) -> ProcessCheck:
        """Whether `pid` is the process that reported `started_at`. Without a start time only
        existence is checked. `same_user` also requires the cockpit's own uid.

        Asked every tick for every run, so answers are kept (`ProcessWatch`): a final one (ended,
        reused, not-the-run) for good, a live one while a pidfd on that very process says it runs.
        """
        key = (pid, None if started_at is None else _epoch(started_at), tolerance_s, startup_allowance_s, same_user)
        final = self._watch.final(key)
        if final is not None:
            return final
        running, answer = self._watch.still_running(key)
        if running:
            return answer  # type: ignore[return-value]
        if running is False:
            ended = ProcessCheck(pid, False, "ended", f"process {pid} has ended")
            self._watch.remember_final(key, ended)
            return ended
        pidfd = None
        if self._use_pidfd and not same_user and self._refusal(pid) is None:
            try:
                pidfd = os.pidfd_open(pid)  # before the lookup: the lookup then judges the pinned process
            except OSError:
                pidfd = None  # gone (the lookup below says so), or old kernel, seccomp, out of fds
        check = self._inspect(pid, started_at, same_user, tolerance_s, startup_allowance_s)[0]
        if pidfd is not None:
            if check.ok:
                self._watch.watch(key, pidfd, check)
            else:
                os.close(pidfd)
        if check.outcome in FINAL_OUTCOMES:
            self._watch.remember_final(key, check)
        return check

    def is_alive(
        self,
        pid: int,
        started_at: datetime | float | None = None,
        *,
        tolerance_s: float = START_TOLERANCE_SECONDS,
        startup_allowance_s: float = STARTUP_ALLOWANCE_SECONDS,
    ) -> bool:
        return self.check(pid, started_at, tolerance_s=tolerance_s, startup_allowance_s=startup_allowance_s).ok

    def _refusal(self, pid: Any) -> str | None:
        if isinstance(pid, bool) or not isinstance(pid, int):
            return f"pid {pid!r} is not a process id"
        if pid <= 1:
            # 0 and negative pids name process groups; 1 is init.
            return f"pid {pid} is never signalled (it names init or a process group)"
        if pid == os.getpid():
            return f"pid {pid} is the cockpit itself"
        return None

    def _inspect(
        self, pid: int, started_at: datetime | float | None, same_user: bool, tolerance_s: float, startup_allowance_s: float
    ) -> tuple[ProcessCheck, Any]:
        refusal = self._refusal(pid)
        if refusal:
            return ProcessCheck(pid, False, "refused", refusal), None
        ps = self._ps
        try:
            process = ps.Process(pid)
            status = process.status()
            if status == getattr(ps, "STATUS_ZOMBIE", "zombie"):
                return ProcessCheck(pid, False, "ended", f"process {pid} has ended (a zombie waiting for its parent)"), None
            if same_user:
                try:
                    owner = int(process.uids().real)
                except ps.AccessDenied:
                    return ProcessCheck(pid, False, "foreign-user", f"pid {pid} cannot be inspected (access denied): not ours"), None
                if owner != self._uid:
                    return (
                        ProcessCheck(pid, False, "foreign-user", f"pid {pid} belongs to another user (uid {owner}, not {self._uid})"),
                        None,
                    )
            created = float(process.create_time())
        except ps.NoSuchProcess:  # ZombieProcess is one too
            return ProcessCheck(pid, False, "ended", f"process {pid} has ended"), None
        except ps.AccessDenied:
            return ProcessCheck(pid, False, "foreign-user", f"pid {pid} cannot be inspected (access denied): not ours"), None
        if started_at is None:
            return ProcessCheck(pid, True, "alive", f"process {pid} is running", created), process
        start = _epoch(started_at)
        if created > start + tolerance_s:
            return (
                ProcessCheck(
                    pid, False, "reused",
                    f"pid {pid} was started at {_at(created)}, not at the run's start ({_at(start)}): pid reused",
                    created,
                ),
                None,
            )
        if created < start - startup_allowance_s - tolerance_s:
            return (
                ProcessCheck(
                    pid, False, "not-the-run",
                    f"pid {pid} was started at {_at(created)}, {_duration(start - created)} before the run reported "
                    f"its start ({_at(start)}): not the run's process",
                    created,
                ),
                None,
            )
        return ProcessCheck(pid, True, "alive", f"process {pid} is the run's (started {_at(created)})", created), process

    # -- the only signal the cockpit sends

    def terminate_run(
        self,
        pid: int,
        run_started_at: datetime | float | None,
        *,
        tolerance_s: float = START_TOLERANCE_SECONDS,
        startup_allowance_s: float = STARTUP_ALLOWANCE_SECONDS,
        sig: int = signals.SIGTERM,
    ) -> SignalResult:
        """Send SIGTERM to `pid` only if it exists, is owned by this user and was started when the
        run said it started. Never another pid, never a process group, never retried."""
        name = signals.Signals(sig).name
        refusal = self._refusal(pid)
        if refusal:
            return SignalResult(pid if isinstance(pid, int) else -1, name, False, "refused", refusal)
        if run_started_at is None:
            return SignalResult(
                pid, name, False, "unknown-start",
                f"the run's start time is unknown: pid {pid} cannot be told apart from a reused pid, so no signal was sent",
            )
        pidfd = None
        if self._use_pidfd:
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                return SignalResult(pid, name, False, "ended", f"process {pid} has ended")
            except OSError:
                pidfd = None  # old kernel or seccomp: psutil's own reuse check still guards the signal
        try:
            check, process = self._inspect(pid, run_started_at, True, tolerance_s, startup_allowance_s)
            if not check.ok:
                return SignalResult(pid, name, False, check.outcome, check.message)
            try:
                if pidfd is not None:
                    signals.pidfd_send_signal(pidfd, sig)
                else:
                    process.send_signal(sig)
            except (ProcessLookupError, self._ps.NoSuchProcess):
                return SignalResult(
                    pid, name, False, "vanished",
                    f"process {pid} ended between the check and the signal; no signal was sent to any other process",
                )
            except (PermissionError, self._ps.AccessDenied):
                return SignalResult(pid, name, False, "denied", f"the system refused to signal pid {pid} (permission denied)")
            return SignalResult(pid, name, True, "sent", f"{name} sent to pid {pid}, the run's process (started {_at(check.create_time)})")
        finally:
            if pidfd is not None:
                os.close(pidfd)


def is_alive(pid: int, started_at: datetime | float | None = None, **kwargs: Any) -> bool:
    """Whether `pid` runs and (given `started_at`) is the process that reported that start."""
    return HostProcesses().is_alive(pid, started_at, **kwargs)


def terminate_run(pid: int, run_started_at: datetime | float | None, **kwargs: Any) -> SignalResult:
    """SIGTERM to a run's own process, with every safety check of `HostProcesses.terminate_run`."""
    return HostProcesses().terminate_run(pid, run_started_at, **kwargs)
