"""Resume verification: is a checkpoint a resume point, does it reload in a new process,
and how often should a run save given what a save costs.

Neither torch nor numpy is a cockpit dependency: the contents of a torch file are read by a
pickle scanner that imports nothing from the file (every class becomes an inert stand-in), and
the reload runs in a fresh interpreter (the training environment's, with `--python`), where
torch is imported if it is there.

Nothing is handed to an unpickler before it is vetted: the CRC-32 of every zip member (torch's own
zip reader checks none), a safetensors header against the file's sizes, and the globals each pickle
names, read with pickletools. A global outside a short allowlist would run code and is never loaded;
a file that torch.load(weights_only=True) refuses is loaded only with --trust-checkpoint, by an
unpickler that admits nothing but the allowlisted globals found in it.

Demo checkpoint format
----------------------
The demo's toy trainer saves one uncompressed zip of `.npy` members per save, exactly what
`numpy.savez` writes (it may be written without numpy), named `step-<step>.npz` in the run's
checkpoints folder (`runs/<run-id>/checkpoints/` unless `campaign.toml` says otherwise). It
writes `step-<step>.npz.tmp` first and then `os.replace`s it, so a half-written save never
carries the final name; nothing in it needs `allow_pickle`. Keys (member names without `.npy`),
all little-endian:

- `model/<param>`            float32 arrays, one per parameter (e.g. `model/weights`, `model/bias`)
- `optimizer/<slot>/<param>` float32 arrays, the optimizer's per-parameter state (Adam:
                             `optimizer/m/<param>`, `optimizer/v/<param>`)
- `optimizer/t`              int64 0-d, the optimizer's own step count (Adam's bias correction);
                             other `optimizer/*` hyper-parameters as float64 (`optimizer/eps`, …)
- `step`                     int64 0-d, optimizer steps done; training resumes at `step + 1`
- `scheduler/last_step`      int64 0-d, the learning-rate schedule's position
- `scheduler/base_lr`        float64 0-d, the schedule's base learning rate (more `scheduler/*`
                             scalars as the schedule needs: `step_size` int64, `gamma` float64)
- `rng_state`                0-d unicode string (dtype `<U…`): the JSON of the generator's state
                             (Python's `random.getstate()` as `[version, [internal…], gauss]`, or
                             numpy's `Generator.bit_generator.state`)
- `data_position`            int64 0-d, training examples consumed since the start, across epochs
                             (each epoch's order is a permutation seeded from the seed and the
                             epoch, so the offset resumes exactly)
- `precision`                0-d unicode string `"fp32"`: no loss scaler exists or is needed

A resume point needs `model/*`, `optimizer/*` and `step`; the others are checked and their
absence explained like any other format's. Other keys (e.g. `config`) are allowed and ignored.
"""

from __future__ import annotations

import collections
import json
import math
import os
import statistics
import zipfile
from pathlib import Path
from typing import Any

from cockpit.resume.classify import classify_hf_folder, classify_npz_keys, classify_object, is_hf_checkpoint, newest_checkpoint
from cockpit.resume.reload import reload_in_new_process
from cockpit.checkpoints import CheckpointUnreadable
from cockpit.checkpoints.headers import npy_scalar, read_safetensors_header
from cockpit.checkpoints.kinds import FileKind
from cockpit.checkpoints.scan import TRUST_FLAG, Vetting, damaged_text, is_damage, plain_global, scan_torch_file, vet_file, zip_damage
from cockpit.resume.report import CHECKPOINT_SUFFIXES, DEFAULT_TIMEOUT_S, CheckpointFormat, Part, PartName, Reload, ResumeReport


# ---------------------------------------------------------------- the whole check


def verify_resume(
    path: str | Path, *, python: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, reload: bool = True,
    trust: bool = False,
) -> ResumeReport:
    """Inspect a checkpoint (file or folder) and reload it in a fresh process.

    Nothing is unpickled before every file is vetted (CRC-32, sizes, the globals its pickles name);
    a damaged file is no resume point and is not reloaded. `trust` (--trust-checkpoint) lets a file
    that torch.load(weights_only=True) refuses load with only allowlisted globals admitted."""
    given = str(path)
    target = Path(path)
    if not target.exists():
        report = ResumeReport(path=given, checkpoint=None, format=CheckpointFormat.unknown)
        report.problem = f"no such file or folder: {given}"
        return report
    notes: list[str] = []
    if target.is_dir() and not is_hf_checkpoint(target):
        chosen, count = newest_checkpoint(target)
        if chosen is None:
            report = ResumeReport(path=given, checkpoint=None, format=CheckpointFormat.unknown)
            report.problem = (
                f"no checkpoint in {given}: looked for checkpoint-N/ folders and "
                + ", ".join(f"*{s}" for s in CHECKPOINT_SUFFIXES) + " files"
            )
            return report
        if count > 1:
            notes.append(f"the newest of {count} checkpoints in {given}: {chosen.name}")
        target = chosen
    before = _fingerprint(target)
    report = ResumeReport(path=given, checkpoint=str(target), format=CheckpointFormat.unknown, trusted=trust)
    report.notes.extend(notes)
    if target.is_dir():
        files = classify_hf_folder(target, report)
    elif target.suffix == ".npz" or _looks_like_npz(target):
        files = _inspect_npz(target, report)
    elif target.suffix == ".safetensors":
        files = _inspect_safetensors(target, report)
    else:
        files = _inspect_torch(target, report)
    unreadable = []
    for file, kind in files:
        vetting = report.vetting.get(str(file))
        if vetting is None:
            vetting = report.vetting[str(file)] = vet_file(file, kind)
        if vetting.damaged:
            unreadable.append(vetting.damaged if len(files) == 1 else f"{Path(file).name}: {vetting.damaged}")
    for cause in unreadable:
        if is_damage(cause.split(": ", 1)[1] if len(files) > 1 else cause) and cause not in report.damaged:
            report.damaged.append(cause)
    if reload and files and unreadable:
        # nothing is unpickled that could not be vetted, and damaged bytes would load as garbage
        report.reload = Reload(tried=False, error=unreadable[0])
    elif reload and files:
        report.reload = reload_in_new_process(files, python=python, timeout=timeout, trust=trust, vetting=report.vetting)
        _explain_reload(report)
    elif reload:
        report.reload = Reload(tried=False, error=report.problem or "nothing here to reload")
    if report.reload.ok and report.reload.tensor_count is not None and report.format != CheckpointFormat.huggingface:
        report.tensor_count = report.reload.tensor_count
    told = any(f.unsafe_globals for f in report.reload.files)
    if report.foreign_globals and not told and not report.reload.ok:
        shown = report.foreign_globals
        report.notes.append(
            "it holds objects beyond tensors and plain values (" + ", ".join(shown[:6]) + (" …" if len(shown) > 6 else "")
            + f"): torch.load(weights_only=True), the default since torch 2.6, will refuse it, and the cockpit "
            f"loads it otherwise only with {TRUST_FLAG}"
        )
    if not report.reload.ok and before is not None and _fingerprint(target) != before:
        report.notes.append("the checkpoint changed while it was checked: a save is under way; check again when it ends")
    return report


def _fingerprint(path: Path) -> tuple[int, int] | None:
    try:
        if path.is_dir():
            stats = [p.stat() for p in path.iterdir() if p.is_file()]
            return (sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0))
        stat = path.stat()
        return (stat.st_size, stat.st_mtime_ns)
    except OSError:
        return None


def _looks_like_npz(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        return bool(names) and all(n.endswith(".npy") for n in names)
    except (OSError, zipfile.BadZipFile):
        return False


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _inspect_torch(path: Path, report: ResumeReport) -> list[tuple[Path, FileKind]]:
    report.size_bytes = _size(path)
    report.format = CheckpointFormat.pytorch if path.suffix != ".ckpt" else CheckpointFormat.lightning
    try:
        scan = scan_torch_file(path)
    except CheckpointUnreadable as error:
        report.problem = str(error)
        report.vetting[str(path)] = Vetting(damaged=str(error))
        return [(path, FileKind.torch)]
    report.vetting[str(path)] = Vetting(damaged=damaged_text(scan.damaged) if scan.damaged else None, globals=scan.all_globals)
    report.foreign_globals = list(dict.fromkeys(plain_global(g) for g in scan.globals if not g.startswith("torch.")))
    if scan.structure_error:
        report.problem = scan.structure_error  # the globals are vetted: torch may still read it
        return [(path, FileKind.torch)]
    report.tensor_count = scan.tensor_count
    classify_object(scan.obj, report)
    return [(path, FileKind.torch)]


def _inspect_npz(path: Path, report: ResumeReport) -> list[tuple[Path, FileKind]]:
    report.size_bytes = _size(path)
    report.format = CheckpointFormat.demo
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = zip_damage(archive)
            report.vetting[str(path)] = Vetting(damaged=damaged_text(damaged) if damaged else None)
            members = [n for n in archive.namelist() if n.endswith(".npy")]
            keys = [n[:-4] for n in members]
            scalars = {
                k: npy_scalar(archive, f"{k}.npy")
                for k in keys if k in ("step", "epoch", "global_step", "data_position", "precision", "iteration")
            }
    except zipfile.BadZipFile:
        report.problem = "truncated or half-written: the archive has no end record (the save did not finish, or the copy was cut)"
        return []
    except OSError as error:
        report.problem = f"cannot read it: {error.strerror or error}"
        return []
    report.tensor_count = len(keys)
    classify_npz_keys(keys, scalars, report)
    return [(path, FileKind.npz)]


def _inspect_safetensors(path: Path, report: ResumeReport) -> list[tuple[Path, FileKind]]:
    report.format = CheckpointFormat.safetensors
    report.size_bytes = _size(path)
    try:
        header = read_safetensors_header(path)
    except CheckpointUnreadable as error:
        report.problem = str(error)
        if is_damage(str(error)):
            report.damaged.append(str(error))
        return []
    report.vetting[str(path)] = Vetting()
    report.tensor_count = header.tensor_count
    report.parts[PartName.model] = Part(True, "(the whole file)", f"{header.tensor_count} tensors")
    report.notes.append("a safetensors file holds tensors only: weights, never an optimizer or progress")
    return [(path, FileKind.safetensors)]


def _explain_reload(report: ResumeReport) -> None:
    reload = report.reload
    if report.problem is not None and reload.ok:
        report.notes.append(f"torch loads it, but its contents could not be read without torch ({report.problem})")
        report.problem = None
    refused = [f for f in reload.files if f.weights_only is False and f.ok]
    for entry in refused:
        plain = list(dict.fromkeys(plain_global(g) for g in entry.unsafe_globals))
        names = ", ".join(plain[:6]) or "non-tensor objects"
        is_hf_rng = report.format == CheckpointFormat.huggingface and Path(entry.path).name.startswith("rng_state")
        if is_hf_rng:
            report.notes.append(
                f"{Path(entry.path).name} holds numpy RNG state ({names}): plain torch.load(weights_only=True) "
                "refuses it; the Trainer allows numpy's globals when it loads it, so the resume is not affected"
            )
            continue
        if any(g.startswith("numpy") for g in entry.unsafe_globals):
            change = (
                "save RNG states as tensors (torch.get_rng_state() already is one; numpy's via "
                "torch.from_numpy on the state array, or the Generator's state as plain ints)"
            )
        else:
            change = "save state_dict()s and plain values instead of whole objects"
        report.notes.append(
            f"{Path(entry.path).name}: torch.load(weights_only=True), the default since torch 2.6, refuses it because "
            f"it holds {names}; it loaded here with weights_only=False because of {TRUST_FLAG}, only those globals "
            "admitted. To resume with the "
            f"default, {change}, or allow them before loading: "
            "torch.serialization.add_safe_globals([...the globals named...])"
        )
    for entry in reload.files:
        if entry.ok and entry.reader and ("not installed" in entry.reader or "by hand" in entry.reader):
            report.notes.append(f"{Path(entry.path).name} was read {entry.reader.replace('zipfile (', 'with zipfile (')}")
    if reload.ok:
        return
    torch_missing = any((f.error or "").startswith("torch is not installed") for f in reload.files)
    if torch_missing:
        reload.error = (
            f"torch is not installed: {reload.python} cannot import it, so the reload could not be tried (the "
            "contents were read without torch); give the training environment's interpreter with --python"
        )
        return
    if report.problem is not None and reload.error:
        reload.error = f"torch agrees: {reload.error.split('. ')[0][:200]}"


def save_seconds_from_metrics(metrics_path: Path, last: int = 20) -> float | None:
    """Median `seconds` of the last `checkpoint` events a run reported (the metrics stream's own events), if any."""
    seconds: collections.deque[float] = collections.deque(maxlen=last)
    try:
        with metrics_path.open("rb") as handle:
            for line in handle:
                if b'"checkpoint"' not in line:
                    continue
                try:
                    event = json.loads(line)
                except (ValueError, UnicodeDecodeError):
                    continue
                value = event.get("seconds") if isinstance(event, dict) and event.get("event") == "checkpoint" else None
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
                    seconds.append(float(value))
    except OSError:
        return None
    return statistics.median(seconds) if seconds else None


# ---------------------------------------------------------------- recording the verdict


def record_resume_verified(metrics_path: Path, checkpoint: str, seconds: float, ts: str) -> dict[str, Any]:
    """Append a `resume_verified` line to a run's metrics stream in one O_APPEND write."""
    event = {"ts": ts, "event": "resume_verified", "path": checkpoint, "seconds": round(seconds, 4)}
    data = json.dumps(event, ensure_ascii=False).encode("utf-8") + b"\n"
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size:
            # a writer that died mid-line left a torn line: end it, so ours stays whole
            with open(metrics_path, "rb") as reader:
                reader.seek(size - 1)
                if reader.read(1) != b"\n":
                    data = b"\n" + data
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"short write to {metrics_path} ({written} of {len(data)} bytes)")
        os.fsync(fd)
    finally:
        os.close(fd)
    return event
