"""The reload in a fresh process: the checkpoint loaded by a child interpreter (the program in
reload_child.py), CPU only, niced, bounded in time and in the output kept."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import cockpit
from cockpit.checkpoints.kinds import FileKind
from cockpit.checkpoints.scan import TRUST_FLAG, Vetting, allowlisted_global, needs_trust_message, numpy_array_global, plain_global, vet_file, would_run_code_message
from cockpit.common.subprocesses import run_bounded
from cockpit.resume.reload_child import RESULT_MARK
from cockpit.resume.report import DEFAULT_TIMEOUT_S, FileReload, Reload

_PACKAGE = os.path.dirname(os.path.abspath(cockpit.__file__))
_CHILD = "cockpit.resume.reload_child"
ANSWER_BYTES = 4 << 20  # the end of the child's output kept: its answer is the last line, a few hundred bytes a file



def reload_in_new_process(
    files: list[tuple[Path, FileKind]], python: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, *,
    trust: bool = False, vetting: dict[str, Vetting] | None = None,
) -> Reload:
    """Load each file in a fresh interpreter (CPU only, niced, ended with all it started when
    `timeout` runs out) and time the loads.

    A torch file is first loaded with weights_only=True; only with `trust` is one that torch refuses
    loaded again, by an unpickler that admits nothing but the globals vetted in the file. A file
    that names a global outside the allowlist (see `vetting`) is never sent to the process."""
    python = python or sys.executable
    result = Reload(tried=True, python=python)
    if not files:
        result.error = "nothing to reload"
        return result
    vetting = vetting or {}
    jobs = []
    kept: list[FileReload] = []  # refused here, before any process
    for path, kind in files:
        vet = vetting.get(str(path)) or (vet_file(path, kind) if kind == FileKind.torch else Vetting())
        if kind == FileKind.torch and vet.would_run_code:
            kept.append(FileReload(
                path=str(path), ok=False, error=would_run_code_message(vet.would_run_code),
                unsafe_globals=vet.would_run_code, would_run_code=vet.would_run_code,
            ))
            continue
        job = {"path": str(path), "kind": str(kind), "mmap": kind == FileKind.torch and _needs_mmap(path)}
        if kind == FileKind.torch:
            job.update(trust=trust, admit=[g for g in vet.globals if allowlisted_global(g)], needs_trust=vet.needs_trust)
            if Path(path).name.startswith("rng_state") and vet.needs_trust and all(numpy_array_global(g) for g in vet.needs_trust):
                job["numpy_safe"] = vet.needs_trust
        jobs.append(job)
    if not jobs:
        return _gather(result, kept, files)
    env = dict(os.environ)
    env.update({"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cockpit-reload-") as home:
        # The child is `python -m cockpit.resume.reload_child` under any interpreter (the training
        # environment's with --python, where cockpit is not installed): it finds the cockpit package
        # through a folder that holds only a link to it, never the cockpit's own site-packages,
        # whose numpy or torch would shadow the training environment's.
        os.symlink(_PACKAGE, os.path.join(home, "cockpit"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (home, os.environ.get("PYTHONPATH", "")) if p)
        try:
            finished = run_bounded(
                [python, "-m", _CHILD, json.dumps(jobs)], cwd=Path.cwd(), timeout=timeout, env=env,
                tail=ANSWER_BYTES,
            )
        except OSError as error:
            result.files = kept
            result.error = f"cannot start {python}: {error.strerror or error}"
            return result
    result.process_seconds = time.perf_counter() - started
    result.files = kept
    if finished.timed_out:
        result.error = f"the reload did not finish within {timeout:g} s (stopped); a larger timeout or a faster disk is needed"
        return result
    stdout = bytes(finished.stdout.tail).decode("utf-8", "replace")
    marker = stdout.rfind(RESULT_MARK)
    if marker < 0:
        if finished.returncode is not None and finished.returncode < 0:
            result.error = f"the reload process was killed by signal {-finished.returncode} (out of memory is the usual cause)"
        else:
            stderr = bytes(finished.stderr.tail).decode("utf-8", "replace")
            tail = (stderr or stdout).strip().splitlines()
            result.error = f"the reload process failed (exit {finished.returncode})" + (f": {tail[-1][:300]}" if tail else "")
        return result
    try:
        payload = json.loads(stdout[marker + len(RESULT_MARK):].strip().splitlines()[0])
    except (ValueError, IndexError):
        result.error = "the reload process gave an unreadable answer"
        return result
    result.torch_version = payload.get("torch")
    sent = {job["path"]: job for job in jobs}
    for raw in payload.get("results", []):
        entry = FileReload(
            path=raw.get("path", ""), ok=bool(raw.get("ok")), seconds=raw.get("seconds"),
            weights_only=raw.get("weights_only"), tensor_count=raw.get("tensor_count"),
            error=raw.get("error"), unsafe_globals=list(raw.get("unsafe_globals") or []), reader=raw.get("reader"),
        )
        job = sent.get(entry.path, {})
        if raw.get("refused"):
            entry.unsafe_globals = list(job.get("needs_trust") or [])
        if raw.get("refused") and not raw.get("retried"):
            entry.needs_trust = True
            entry.error = needs_trust_message(entry.unsafe_globals)
        elif raw.get("retried") and not entry.ok:
            named = ", ".join(dict.fromkeys(plain_global(g) for g in entry.unsafe_globals[:6])) or "objects beyond tensors"
            entry.error = (
                f"torch.load(weights_only=True) refuses it (it holds {named}), and loaded with only those "
                f"globals admitted ({TRUST_FLAG}) it fails too: {entry.error}"
            )
            if "would run code: " in (raw.get("error") or ""):
                entry.would_run_code = [raw["error"].split("would run code: ", 1)[1].split(" ")[0]]
        if entry.error == "torch is not installed":
            entry.error = f"torch is not installed for {python}"
        if raw.get("weights_only_error") and entry.ok:
            entry.error = None
        kept.append(entry)
    return _gather(result, kept, files)


def _gather(result: Reload, entries: list[FileReload], files: list[tuple[Path, FileKind]]) -> Reload:
    order = {str(path): index for index, (path, _kind) in enumerate(files)}
    result.files = sorted(entries, key=lambda f: order.get(f.path, len(order)))
    total, tensors, all_weights_only = 0.0, 0, True
    for entry in result.files:
        if entry.ok:
            total += entry.seconds or 0.0
            tensors += entry.tensor_count or 0
            if entry.weights_only is False:
                all_weights_only = False
    result.ok = bool(result.files) and len(result.files) == len(files) and all(f.ok for f in result.files)
    result.seconds = total if result.ok else None
    result.tensor_count = tensors if result.ok else None
    result.weights_only = all_weights_only if result.ok and any(f.weights_only is not None for f in result.files) else None
    failed = [f for f in result.files if not f.ok]
    if failed:
        first = failed[0]
        result.error = (f"{Path(first.path).name}: " if len(files) > 1 else "") + (first.error or "did not load")
    return result


def _needs_mmap(path: Path) -> bool:
    """Memory-map files larger than half the free memory, so the check cannot starve the run."""
    try:
        import psutil

        return zipfile.is_zipfile(path) and path.stat().st_size > psutil.virtual_memory().available // 2
    except Exception:
        return False


