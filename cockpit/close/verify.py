"""Every announced check on a deliverable: the run not stopped and no alert left open on it, not
rejected by a person, present, not empty, nothing in a temporary folder, the expected ids, the
adapter's base revision, reloads by type (or by its own command), and content distinct from the
other accepted ones. A verdict lists each check; the deliverable is accepted when none failed."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cockpit.close.figures import display_path, plural, sha256_file, stop_cause
from cockpit.close.reloaders import (
    ADAPTER_CONFIG,
    FORMATS_BY_SUFFIX,
    RELOAD_TIMEOUT_S,
    Preloaded,
    detect_format,
    have_module,
    reload_file,
    run_reload_command,
    torch_reload_many,
)
from cockpit.close.temp_folders import TempFolders
from cockpit.plan.campaign import Campaign, Deliverable
from cockpit.record.runlog import RecordedState

CLOSE_SOURCE = "close"  # the source of the `rejected` events a closing records
CONFIG_SCAN_MAX_BYTES = 1 << 20  # config-like files larger than this are data, not manifests
FOLDER_FILES_CHECKED = 500  # files of a folder deliverable reloaded one by one, at most
NAMES_SHOWN = 5  # files named in a cause
# Config-like files scanned for paths into temporary folders: inside a folder deliverable, and
# the deliverable itself when it is one of these (a small manifest).
CONFIG_SUFFIXES = frozenset({".json", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".conf"})
FOLDER_CONFIG_SUFFIXES = CONFIG_SUFFIXES | {".txt"}

# A branch or alias moves: only a fixed revision (a commit hash, a tag) lets the base be fetched
# again as it was: an adapter without its exact base revision cannot be reloaded later.
MOVING_REVISIONS = frozenset({"main", "master", "head", "latest"})
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin", "adapter_model.pt")

CHECK_ORDER = (
    "run_not_stopped",
    "no_open_alert",
    "not_rejected_by_person",
    "present",
    "not_empty",
    "not_temporary",
    "expected_ids",
    "base_revision",
    "reloads",
    "distinct",
)



# ---------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Check:
    """One announced check on a deliverable: passed (True), failed (False), or not applicable (None)."""

    name: str
    ok: bool | None
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class FileEntry:
    """A file of a deliverable: where it is, how big, its sha256."""

    path: str  # relative to the campaign folder when inside it, else absolute
    size_bytes: int
    sha256: str


@dataclass
class DeliverableVerdict:
    deliverable: Deliverable
    format: str | None = None
    real_path: str | None = None
    checks: list[Check] = field(default_factory=list)
    sha256: str | None = None  # of the file, or of a folder's sorted relative paths and contents
    size_bytes: int | None = None
    files: list[FileEntry] = field(default_factory=list)
    accepted_by_person: dict[str, Any] | None = None
    adapter: dict[str, Any] | None = None  # base, revision, task type: for RELOAD.md

    @property
    def id(self) -> str:
        return self.deliverable.id

    @property
    def accepted(self) -> bool:
        return all(check.ok is not False for check in self.checks)

    @property
    def cause(self) -> str | None:
        failed = [check.detail for check in self.checks if check.ok is False]
        return "; ".join(failed) if failed else None

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def set(self, name: str, ok: bool | None, detail: str) -> None:
        self.checks = [c for c in self.checks if c.name != name]
        self.checks.append(Check(name, ok, detail))
        self.checks.sort(key=lambda c: CHECK_ORDER.index(c.name))



# The expected-ids check, handed in by the closing: it lives with the reader of id files (the ids
# module), and sets the verdict's `expected_ids` check for (verdict, campaign, deliverable path).
IdsCheck = Callable[[DeliverableVerdict, Campaign, Path], None]


# ---------------------------------------------------------------- alerts that hold a deliverable back


# Alerts that ask for a decision about the campaign, not about what a run produced: listed among
# the closing's alerts, but they hold no deliverable back (the pilot decision falls due on the
# pilot run, whose output it says nothing about).
NOT_ABOUT_OUTPUT = frozenset({"pilot-due"})



def about_output(alert: Mapping[str, Any]) -> bool:
    return alert.get("rule") not in NOT_ABOUT_OUTPUT


def open_alert_text(alert: Mapping[str, Any]) -> str:
    """"open alert: RULE: message", as a rejection cause says it."""
    message = str(alert.get("message") or "").strip()
    return f"open alert: {alert.get('rule')}" + (f": {message}" if message else "")



# ---------------------------------------------------------------- one deliverable


def walk_files(folder: Path) -> list[Path]:
    """Every file under `folder`, following links to folders once, sorted by relative path."""
    files: list[Path] = []
    seen: set[str] = set()
    for current, dirs, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(current)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        for name in names:
            files.append(Path(current) / name)
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())


def _content(path: Path, base: Path) -> tuple[str, int, list[FileEntry]]:
    """sha256 and size of a file, or of a folder (its sorted relative paths and their contents)."""
    if path.is_file():
        digest, size = sha256_file(path), path.stat().st_size
        return digest, size, [FileEntry(display_path(path, base), size, digest)]
    digest = hashlib.sha256()
    entries: list[FileEntry] = []
    total = 0
    for file in walk_files(path):
        if not file.is_file():
            continue
        relative = file.relative_to(path).as_posix()
        file_digest = sha256_file(file)
        size = file.stat().st_size
        digest.update(relative.encode("utf-8") + b"\0" + file_digest.encode("ascii") + b"\n")
        entries.append(FileEntry(display_path(file, base), size, file_digest))
        total += size
    return digest.hexdigest(), total, entries


def verify_deliverable(
    campaign: Campaign,
    deliverable: Deliverable,
    *,
    state: RecordedState,
    temp: TempFolders,
    check_ids: IdsCheck,
    reload_timeout: float = RELOAD_TIMEOUT_S,
    preloaded: Preloaded | None = None,
) -> DeliverableVerdict:
    """Every announced check on one deliverable (all but `distinct`, which needs the others)."""
    base = campaign.directory
    verdict = DeliverableVerdict(deliverable)
    verdict.accepted_by_person = next(
        (e for e in reversed(state.accepted) if e.get("deliverable") == deliverable.id), None
    )

    if deliverable.run is not None:
        stop = state.stop_of(deliverable.run)
        if stop is not None:
            why = stop_cause(stop.get("rule"), stop.get("reason"), label_reason=True)
            verdict.set(
                "run_not_stopped", False,
                f"run '{deliverable.run}' was stopped ({why}); an interrupted run does not become an accepted deliverable",
            )
        else:
            verdict.set("run_not_stopped", True, f"run '{deliverable.run}' was not stopped")
        # An alert no person looked at may be the reason the output is wrong (a truncated essential
        # input, a run that died): it stands against the run's deliverables until acknowledged.
        open_alerts = [a.event for a in state.active_alerts if a.event.get("run") == deliverable.run and about_output(a.event)]
        if open_alerts:
            verdict.set("no_open_alert", False, "; ".join(open_alert_text(e) for e in open_alerts))
        else:
            verdict.set("no_open_alert", True, f"no open alert on run '{deliverable.run}'")
    person_rejection = next(
        (
            e for e in reversed(state.rejected)
            # a closing's own record of its verdict is not a person's rejection: a fixed file passes the next closing
            if e.get("deliverable") == deliverable.id and e.get("source") != CLOSE_SOURCE
        ),
        None,
    )
    if person_rejection is not None:
        reason = person_rejection.get("reason") or person_rejection.get("text") or "no reason given"
        verdict.set("not_rejected_by_person", False, f"rejected by {person_rejection.get('who', 'a person')}: {reason}")

    path = base / deliverable.path
    shown = deliverable.path
    if not path.exists():
        if path.is_symlink():
            target = os.readlink(path)
            verdict.set("present", False, f"missing: {shown} is a link to {target}, which does not exist")
        else:
            verdict.set("present", False, f"missing: {shown} does not exist")
        return verdict
    real = Path(os.path.realpath(path))
    verdict.real_path = str(real)
    verdict.set("present", True, f"{shown} is there")
    verdict.format = detect_format(path)

    # not empty
    try:
        verdict.sha256, verdict.size_bytes, verdict.files = _content(path, base)
    except OSError as error:
        verdict.set("not_empty", False, f"{shown} cannot be read: {error.strerror}")
        return verdict
    if path.is_dir() and not verdict.files:
        verdict.set("not_empty", False, f"empty: the folder {shown} holds no file")
        return verdict
    if verdict.size_bytes == 0:
        verdict.set("not_empty", False, f"empty: {shown} is 0 bytes")
        return verdict
    empty_inside = [f.path for f in verdict.files if f.size_bytes == 0]
    if path.is_dir() and empty_inside:
        verdict.set("not_empty", False, f"empty file{'s' if len(empty_inside) > 1 else ''} inside {shown}: {', '.join(empty_inside[:NAMES_SHOWN])}")
    else:
        verdict.set("not_empty", True, f"{verdict.size_bytes} bytes" + (f" in {plural(len(verdict.files), 'file')}" if path.is_dir() else ""))

    _check_temporary(verdict, path, real, temp)
    if deliverable.expect_ids:
        check_ids(verdict, campaign, path)
    if verdict.format == "adapter" or deliverable.kind.value == "adapter":
        _check_adapter_revision(verdict, path)
    _check_reload(verdict, campaign, path, reload_timeout, preloaded)
    return verdict


def _check_temporary(verdict: DeliverableVerdict, path: Path, real: Path, temp: TempFolders) -> None:
    shown = verdict.deliverable.path
    root = temp.root_of(real)
    if root is not None:
        how = f" (a link to {real})" if real != Path(os.path.abspath(path)) else f" ({real})"
        verdict.set(
            "not_temporary", False,
            f"{shown} is in a temporary folder{how}, under {root}: the box loses it when the lot ends; move it to a lasting folder",
        )
        return
    problems: list[str] = []
    if path.is_dir():
        for file in walk_files(path)[: FOLDER_FILES_CHECKED * 4]:
            file_real = Path(os.path.realpath(file))
            inner_root = temp.root_of(file_real)
            if inner_root is not None:
                problems.append(f"{display_path(file, path)} is a link into {inner_root} ({file_real})")
                continue
            if file.suffix.lower() in FOLDER_CONFIG_SUFFIXES or file.name.upper().startswith("MANIFEST"):
                problems.extend(_config_mentions(file, path, temp))
    elif path.suffix.lower() in CONFIG_SUFFIXES or path.name.upper().startswith("MANIFEST"):
        problems.extend(_config_mentions(path, path.parent, temp))
    if problems:
        verdict.set(
            "not_temporary", False,
            "paths into a temporary folder: " + "; ".join(problems[:3])
            + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
            + "; write lasting paths (or hub ids) instead",
        )
    else:
        verdict.set("not_temporary", True, "no path into a temporary folder")


def _config_mentions(file: Path, relative_to: Path, temp: TempFolders) -> list[str]:
    try:
        if file.stat().st_size > CONFIG_SCAN_MAX_BYTES:
            return []
        text = file.read_bytes().decode("utf-8", "replace")
    except OSError:
        return []
    name = display_path(file, relative_to) if file != relative_to else file.name
    return [f"{name} mentions {written}" for written in temp.mentions(text)]


def _check_adapter_revision(verdict: DeliverableVerdict, path: Path) -> None:
    config_path = path / ADAPTER_CONFIG if path.is_dir() else path.parent / ADAPTER_CONFIG
    if not config_path.is_file():
        verdict.set(
            "base_revision", False,
            f"no {ADAPTER_CONFIG} beside the adapter: record base_model_name_or_path and the exact revision of the base",
        )
        return
    try:
        config = json.loads(config_path.read_bytes().decode("utf-8-sig"))
    except OSError as error:
        verdict.set("base_revision", False, f"{ADAPTER_CONFIG} cannot be read: {error.strerror or error}")
        return
    except (UnicodeDecodeError, ValueError, RecursionError):
        verdict.set("base_revision", False, f"{ADAPTER_CONFIG} is not valid JSON")
        return
    if not isinstance(config, dict):
        verdict.set("base_revision", False, f"{ADAPTER_CONFIG} is not a JSON object")
        return
    base = config.get("base_model_name_or_path")
    revision = config.get("revision")
    verdict.adapter = {
        "base": base if isinstance(base, str) else None,
        "revision": revision if isinstance(revision, str) else None,
        "task_type": config.get("task_type") if isinstance(config.get("task_type"), str) else None,
    }
    if not isinstance(base, str) or not base.strip():
        verdict.set("base_revision", False, f"{ADAPTER_CONFIG} does not record base_model_name_or_path: record the base model")
    elif not isinstance(revision, str) or not revision.strip():
        verdict.set(
            "base_revision", False,
            f"{ADAPTER_CONFIG} records the base {base} but no revision: keep the exact revision of the base (a commit hash)",
        )
    elif revision.strip().lower() in MOVING_REVISIONS:
        verdict.set(
            "base_revision", False,
            f"{ADAPTER_CONFIG} records revision '{revision}', a branch that moves: keep the exact revision of the base (a commit hash)",
        )
    else:
        verdict.set("base_revision", True, f"base {base} at revision {revision}")


def _check_reload(
    verdict: DeliverableVerdict, campaign: Campaign, path: Path, timeout: float, preloaded: Preloaded | None
) -> None:
    deliverable = verdict.deliverable
    if deliverable.reload:
        ok, detail = run_reload_command(deliverable.reload, campaign.directory, timeout)
        verdict.set("reloads", ok, detail)
        return
    hint = f"; add reload = \"...\" to [[deliverable]] '{deliverable.id}', a command that exits 0 when it reloads"
    if verdict.format == "adapter":
        weights = [path / name for name in ADAPTER_WEIGHTS if (path / name).is_file()]
        config_ok, config_detail = reload_file(path / ADAPTER_CONFIG, timeout)  # an unreadable file is a cause, not a crash
        if not config_ok:
            verdict.set("reloads", False, config_detail)
            return
        if not weights:
            verdict.set("reloads", False, f"no adapter weights in {deliverable.path} ({' or '.join(ADAPTER_WEIGHTS[:2])})")
            return
        ok, detail = reload_file(weights[0], timeout, preloaded)
        if ok is False:
            verdict.set("reloads", False, detail)
        elif ok is None:
            verdict.set("reloads", False, f"the adapter weights cannot be checked here: {detail}{hint}")
        else:
            verdict.set("reloads", True, f"{ADAPTER_CONFIG} parses; {weights[0].name}: {detail}")
        return
    if verdict.format == "folder":
        checked, unchecked, failures = 0, [], []
        for file in walk_files(path):
            if not file.is_file() or file.name.startswith("."):
                continue
            if checked + len(failures) >= FOLDER_FILES_CHECKED:
                break
            ok, detail = reload_file(file, timeout, preloaded)
            if ok is True:
                checked += 1
            elif ok is False:
                failures.append(detail)
            else:
                unchecked.append(file.name)
        if failures:
            verdict.set("reloads", False, "; ".join(failures[:3]) + (f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""))
        elif checked == 0:
            verdict.set("reloads", False, f"nothing in {deliverable.path} could be reloaded here ({plural(len(unchecked), 'file')} of types without a reader){hint}")
        else:
            extra = f"; not checked here: {', '.join(unchecked[:NAMES_SHOWN])}" if unchecked else ""
            verdict.set("reloads", True, f"{plural(checked, 'file')} reload by type{extra}")
        return
    ok, detail = reload_file(path, timeout, preloaded)
    if ok is None:
        verdict.set("reloads", False, f"not reloaded: {detail}{hint}")
    else:
        verdict.set("reloads", ok, detail)


def _torch_files(campaign: Campaign) -> list[Path]:
    """The torch files the deliverables' type checks will load, to load them in one process."""
    found: list[Path] = []
    for d in campaign.model.deliverables:
        if d.reload:
            continue
        path = campaign.directory / d.path
        if path.is_file() and FORMATS_BY_SUFFIX.get(path.suffix.lower()) == "torch":
            found.append(path)
        elif path.is_dir():
            inside = [f for f in walk_files(path) if f.is_file() and FORMATS_BY_SUFFIX.get(f.suffix.lower()) == "torch"]
            found.extend(inside[:FOLDER_FILES_CHECKED])
    return list(dict.fromkeys(found))


def verify_deliverables(
    campaign: Campaign,
    *,
    state: RecordedState,
    temp: TempFolders,
    check_ids: IdsCheck,
    reload_timeout: float = RELOAD_TIMEOUT_S,
) -> list[DeliverableVerdict]:
    """Every deliverable in file order; identical content counts once (the first one keeps it)."""
    preloaded = torch_reload_many(_torch_files(campaign), reload_timeout) if have_module("torch") else None
    verdicts = [
        verify_deliverable(
            campaign, d, state=state, temp=temp, check_ids=check_ids, reload_timeout=reload_timeout, preloaded=preloaded
        )
        for d in campaign.model.deliverables
    ]
    first_with: dict[str, str] = {}
    for verdict in verdicts:
        if not verdict.accepted or verdict.sha256 is None:
            continue
        earlier = first_with.get(verdict.sha256)
        if earlier is not None:
            verdict.set("distinct", False, f"same content as {earlier}: identical content counts once")
        else:
            first_with[verdict.sha256] = verdict.id
            verdict.set("distinct", True, "no other accepted deliverable has the same content")
    return verdicts

