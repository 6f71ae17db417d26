"""The reload in a fresh process: the checkpoint loaded by a child interpreter, bounded in time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from cockpit.resume.report import DEFAULT_TIMEOUT_S, FileReload, Reload, _RESULT_MARK
from cockpit.resume.scan import TRUST_FLAG, Vetting, _plain_global, allowlisted_global, needs_trust_message, numpy_array_global, vet_file, would_run_code_message


# ---------------------------------------------------------------- the reload in a fresh process

_RELOAD_SCRIPT = r"""
import json, os, struct, sys, time, zipfile
jobs = json.loads(sys.argv[1])
try:
    os.nice(10)
except Exception:
    pass
out = {"torch": None, "torch_error": None, "results": []}
torch = None
if any(j["kind"] == "torch" for j in jobs):
    try:
        import torch
        out["torch"] = torch.__version__
    except Exception as e:
        out["torch_error"] = type(e).__name__ + ": " + str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__

def short(e):
    text = str(e).strip()
    line = text.splitlines()[0] if text else ""
    for l in text.splitlines():
        if "WeightsUnpickler error:" in l:
            cause = l.split("WeightsUnpickler error:", 1)[1].strip()
            line = cause or "the object record inside does not parse"
            break
    line = line.split(". ")[0][:300]
    return type(e).__name__ + (": " + line if line else "")

def count_tensors(obj):
    n, stack, seen = 0, [obj], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if torch is not None and torch.is_tensor(x):
            n += 1
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple, set)):
            stack.extend(x)
        elif hasattr(x, "__dict__") and not isinstance(x, type):
            stack.extend(vars(x).values())  # a pickled module or optimizer object
    return n

def load_safetensors_by_hand(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        size = 0
        while True:  # read every byte, in chunks: the memory stays flat whatever the file's size
            chunk = f.read(1 << 24)
            if not chunk:
                break
            size += len(chunk)
    for name, e in header.items():
        a, b = e["data_offsets"]
        if not (0 <= a <= b <= size):
            raise ValueError("tensor %r lies past the end of the data" % name)
    return len(header)

def allowlist_pickle(admit):
    # a pickle module whose Unpickler resolves only the globals the cockpit vetted in the file
    import pickle as std, types
    admit = set(admit)

    class Unpickler(std.Unpickler):
        def find_class(self, module, name):
            full = module + "." + name
            if full not in admit and not (module == "torch._tensor" and "torch.tensor." + name in admit):
                raise std.UnpicklingError("would run code: " + full + " is not in the allowlist")
            return super().find_class(module, name)

    module = types.ModuleType("cockpit_allowlist_pickle")
    module.Unpickler = Unpickler
    module.UnpicklingError = std.UnpicklingError
    module.load = lambda f, **kw: Unpickler(f, **kw).load()
    return module

def resolve(names):
    import importlib
    found = []
    for full in names:
        module, _, attr = full.rpartition(".")
        try:
            found.append(getattr(importlib.import_module(module), attr))
        except Exception:
            pass
    return found

def refused(e):
    text = str(e)
    return "Unsupported global" in text or "Weights only load failed" in text

for job in jobs:
    path, kind = job["path"], job["kind"]
    r = {"path": path, "ok": False}
    try:
        if kind == "torch":
            if torch is None:
                r["error"] = "torch is not installed"
            else:
                mmap = job.get("mmap", False)
                t = time.perf_counter()
                try:
                    numpy_names = job.get("numpy_safe") or []
                    safe_globals = getattr(getattr(torch, "serialization", None), "safe_globals", None)
                    if numpy_names and safe_globals is not None:
                        # what the Hugging Face Trainer does for its rng_state files: numpy's arrays only
                        with safe_globals(resolve(numpy_names)):
                            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
                    else:
                        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
                    r.update(ok=True, weights_only=True, seconds=time.perf_counter() - t, tensor_count=count_tensors(obj))
                except Exception as e:
                    r["weights_only_error"] = short(e)
                    if not refused(e):
                        r["error"] = short(e)
                    elif not job.get("trust"):
                        r["refused"] = True  # never retried without --trust-checkpoint
                        r["error"] = short(e)
                    else:
                        r["refused"] = r["retried"] = True
                        t = time.perf_counter()
                        try:
                            obj = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap,
                                             pickle_module=allowlist_pickle(job.get("admit") or []))
                            r.update(ok=True, weights_only=False, seconds=time.perf_counter() - t, tensor_count=count_tensors(obj))
                        except Exception as e2:
                            r["error"] = short(e2)
                obj = None
        elif kind == "npz":
            try:
                import numpy
            except Exception:
                numpy = None
            t = time.perf_counter()
            if numpy is not None:
                with numpy.load(path, allow_pickle=False) as z:
                    count = 0
                    for key in z.files:
                        z[key]
                        count += 1
                r["reader"] = "numpy " + numpy.__version__
            else:
                with zipfile.ZipFile(path) as z:
                    count = 0
                    for name in z.namelist():
                        with z.open(name) as m:
                            while m.read(1 << 20):
                                pass
                        count += 1
                r["reader"] = "zipfile (numpy is not installed: every array read and CRC-checked)"
            r.update(ok=True, seconds=time.perf_counter() - t, tensor_count=count)
        elif kind == "safetensors":
            t = time.perf_counter()
            reader = None
            if torch is not None:
                try:
                    from safetensors.torch import load_file
                    r["tensor_count"] = len(load_file(path, device="cpu"))
                    reader = "safetensors"
                except ImportError:
                    pass
            if reader is None:
                r["tensor_count"] = load_safetensors_by_hand(path)
                reader = "by hand (header checked, every byte read)"
            r.update(ok=True, seconds=time.perf_counter() - t, reader=reader)
    except Exception as e:
        r["error"] = short(e)
    out["results"].append(r)
sys.stdout.write("\n@@cockpit-reload@@" + json.dumps(out) + "\n")
"""


def reload_in_new_process(
    files: list[tuple[Path, str]], python: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, *,
    trust: bool = False, vetting: dict[str, Vetting] | None = None,
) -> Reload:
    """Load each file in a fresh interpreter (CPU only, niced) and time the loads.

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
        vet = vetting.get(str(path)) or (vet_file(path, kind) if kind == "torch" else Vetting())
        if kind == "torch" and vet.would_run_code:
            kept.append(FileReload(
                path=str(path), ok=False, error=would_run_code_message(vet.would_run_code),
                unsafe_globals=vet.would_run_code, would_run_code=vet.would_run_code,
            ))
            continue
        job = {"path": str(path), "kind": kind, "mmap": kind == "torch" and _needs_mmap(path)}
        if kind == "torch":
            job.update(trust=trust, admit=[g for g in vet.globals if allowlisted_global(g)], needs_trust=vet.needs_trust)
            if Path(path).name.startswith("rng_state") and vet.needs_trust and all(numpy_array_global(g) for g in vet.needs_trust):
                job["numpy_safe"] = vet.needs_trust
        jobs.append(job)
    if not jobs:
        return _gather(result, kept, files)
    env = dict(os.environ)
    env.update({"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
    started = time.perf_counter()
    try:
        completed = subprocess.run(
            [python, "-c", _RELOAD_SCRIPT, json.dumps(jobs)],
            capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        result.process_seconds = time.perf_counter() - started
        result.files = kept
        result.error = f"the reload did not finish within {timeout:g} s (stopped); a larger timeout or a faster disk is needed"
        return result
    except OSError as error:
        result.files = kept
        result.error = f"cannot start {python}: {error.strerror or error}"
        return result
    result.process_seconds = time.perf_counter() - started
    marker = completed.stdout.rfind(_RESULT_MARK)
    result.files = kept
    if marker < 0:
        if completed.returncode < 0:
            result.error = f"the reload process was killed by signal {-completed.returncode} (out of memory is the usual cause)"
        else:
            tail = (completed.stderr or completed.stdout).strip().splitlines()
            result.error = f"the reload process failed (exit {completed.returncode})" + (f": {tail[-1][:300]}" if tail else "")
        return result
    try:
        payload = json.loads(completed.stdout[marker + len(_RESULT_MARK):].strip().splitlines()[0])
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
            named = ", ".join(dict.fromkeys(_plain_global(g) for g in entry.unsafe_globals[:6])) or "objects beyond tensors"
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


def _gather(result: Reload, entries: list[FileReload], files: list[tuple[Path, str]]) -> Reload:
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


