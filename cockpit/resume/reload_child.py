"""The reload's child program: `python -m cockpit.resume.reload_child JOBS`, started by
`reload_in_new_process` in a fresh interpreter, CPU only and niced, bounded in time by its parent.

JOBS is a JSON list of {"path", "kind", …} (kind: "torch", "safetensors" or "npz"); the answer is
one line on stdout after RESULT_MARK, a JSON object {"torch", "torch_error", "results"}.

It runs under the training environment's interpreter (`--python`), which may be older than the
cockpit's and lacks the cockpit's dependencies: it imports only the standard library, the loaders
it exists to try (torch, numpy, safetensors) and `cockpit.checkpoints.headers`, never the rest of
the cockpit, and its Python stays what Python 3.8 parses. Every file it is handed was vetted by
the parent first (CRC-32, safetensors sizes, the globals each pickle names).
"""

from __future__ import annotations

import json
import os
import sys
import time
import zipfile

RESULT_MARK = "@@cockpit-reload@@"
READ_CHUNK = 1 << 24  # a safetensors file is read through in chunks: the memory stays flat

torch = None  # set by main() when a job needs it and it imports


def short(error):
    """"Type: first line" of an error, torch's WeightsUnpickler cause preferred."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    for candidate in text.splitlines():
        if "WeightsUnpickler error:" in candidate:
            cause = candidate.split("WeightsUnpickler error:", 1)[1].strip()
            line = cause or "the object record inside does not parse"
            break
    line = line.split(". ")[0][:300]
    return type(error).__name__ + (": " + line if line else "")


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
    """The header checked against the sizes (the one safetensors reader), then every byte read."""
    from pathlib import Path

    from cockpit.checkpoints.headers import read_safetensors_header

    header = read_safetensors_header(Path(path))
    with open(path, "rb") as handle:
        while handle.read(READ_CHUNK):
            pass
    return header.tensor_count


def allowlist_pickle(admit):
    """A pickle module whose Unpickler resolves only the globals the cockpit vetted in the file."""
    import pickle as std
    import types

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


def refused(error):
    text = str(error)
    return "Unsupported global" in text or "Weights only load failed" in text


def reload_torch(job, result):
    if torch is None:
        result["error"] = "torch is not installed"
        return
    path = job["path"]
    mmap = job.get("mmap", False)
    started = time.perf_counter()
    try:
        numpy_names = job.get("numpy_safe") or []
        safe_globals = getattr(getattr(torch, "serialization", None), "safe_globals", None)
        if numpy_names and safe_globals is not None:
            # what the Hugging Face Trainer does for its rng_state files: numpy's arrays only
            with safe_globals(resolve(numpy_names)):
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        else:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        result.update(ok=True, weights_only=True, seconds=time.perf_counter() - started, tensor_count=count_tensors(obj))
    except Exception as error:
        result["weights_only_error"] = short(error)
        if not refused(error):
            result["error"] = short(error)
        elif not job.get("trust"):
            result["refused"] = True  # never retried without --trust-checkpoint
            result["error"] = short(error)
        else:
            result["refused"] = result["retried"] = True
            started = time.perf_counter()
            try:
                obj = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap,
                                 pickle_module=allowlist_pickle(job.get("admit") or []))
                result.update(ok=True, weights_only=False, seconds=time.perf_counter() - started, tensor_count=count_tensors(obj))
            except Exception as second:
                result["error"] = short(second)


def reload_npz(job, result):
    try:
        import numpy
    except Exception:
        numpy = None
    started = time.perf_counter()
    count = 0
    if numpy is not None:
        with numpy.load(job["path"], allow_pickle=False) as archive:
            for key in archive.files:
                archive[key]
                count += 1
        result["reader"] = "numpy " + numpy.__version__
    else:
        with zipfile.ZipFile(job["path"]) as archive:
            for name in archive.namelist():
                with archive.open(name) as member:
                    while member.read(1 << 20):
                        pass
                count += 1
        result["reader"] = "zipfile (numpy is not installed: every array read and CRC-checked)"
    result.update(ok=True, seconds=time.perf_counter() - started, tensor_count=count)


def reload_safetensors(job, result):
    started = time.perf_counter()
    reader = None
    if torch is not None:
        try:
            from safetensors.torch import load_file

            result["tensor_count"] = len(load_file(job["path"], device="cpu"))
            reader = "safetensors"
        except ImportError:
            pass
    if reader is None:
        result["tensor_count"] = load_safetensors_by_hand(job["path"])
        reader = "by hand (header checked, every byte read)"
    result.update(ok=True, seconds=time.perf_counter() - started, reader=reader)


RELOADERS = {"torch": reload_torch, "npz": reload_npz, "safetensors": reload_safetensors}


def main(argv):
    global torch
    jobs = json.loads(argv[0])
    try:
        os.nice(10)
    except Exception:
        pass
    out = {"torch": None, "torch_error": None, "results": []}
    if any(job["kind"] == "torch" for job in jobs):
        try:
            import torch as imported

            torch = imported
            out["torch"] = torch.__version__
        except Exception as error:
            first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
            out["torch_error"] = type(error).__name__ + (": " + first if first else "")
    for job in jobs:
        result = {"path": job["path"], "ok": False}
        reload = RELOADERS.get(job["kind"])
        try:
            if reload is not None:
                reload(job, result)
        except Exception as error:
            result["error"] = short(error)
        out["results"].append(result)
    sys.stdout.write("\n" + RESULT_MARK + json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
