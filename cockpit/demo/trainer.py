"""The demo's toy trainer: a real, small training run that `cockpit demo` starts as a background
process, and the two helpers (`prepare_demo`, `launch_runs`) that set the demo campaign up.

Softmax regression on a generated three-class corpus, in plain Python (no numpy, no torch), with
Adam, a step learning-rate schedule, a seeded RNG (input dropout) and a data position. It reports
through `RunReporter`, evaluates macro-F1 on a held-out set, saves complete checkpoints (model,
optimizer, step, scheduler, RNG, data position; the npz layout that cockpit/resume/verify.py documents
as the "Demo checkpoint format", written without numpy) and verifies its own resume: a fresh process
reloads the first checkpoint and trains K steps, and the run reports `resume_verified` only when
those steps match its own, bit for bit.

    python -m cockpit.demo.trainer --campaign DIR --run ctrl-r1 --step-seconds 0.5
    python -m cockpit.demo.trainer --verify-resume DIR/runs/ctrl-r1/checkpoints/step-50.npz --steps 5

Logits are kept to the float16 range, as under mixed-precision autocast on a GPU: past ±65504
they overflow to infinity and the loss becomes NaN. That is how a too-high learning rate usually
ends on a real box, and how `--diverge` (a learning rate that grows tenfold every 6 steps) ends here.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import random
import re
import signal
import site
import struct
import subprocess
import sys
import time
import tomllib
import zipfile
from array import array
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from cockpit.feed.reporter import RUN_ID_ENV, RunReporter

CLASSES = ("negative", "neutral", "positive")
VOCABULARY = 24
HALF_MAX = 65504.0  # the largest float16: logits beyond it overflow as they would under autocast
# --diverge: a step schedule that multiplies the rate by 10 every 6 steps (a decay written as
# growth). The loss falls for ~25 steps, then climbs, and the logits overflow near step 48.
DIVERGE_GAMMA, DIVERGE_STEP_SIZE = 10.0, 6
DEFAULT_LR, DEFAULT_LR_STEP_SIZE, DEFAULT_LR_GAMMA = 0.003, 200, 0.5
SHORT_CONTEXT = 96  # --truncate-essential: shorter than the corpus's long essential documents
REVIEW_STORY, REVIEW_VERDICT = 100, 60  # the long test reviews: the verdict lies past SHORT_CONTEXT
RUNS_FILE = "runs.toml"  # how `cockpit demo` starts each run of the demo campaign
DEFAULT_STEPS = 600


# ---------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Document:
    id: str
    tokens: tuple[int, ...]
    label: int
    essential: bool = False  # an input the campaign's question depends on (truncating it is a stop)


def make_corpus(seed: int = 1234, train_size: int = 480, test_size: int = 120) -> tuple[list[Document], list[Document]]:
    """A deterministic three-class corpus of token sequences: each class prefers its own words.

    A few long documents (150–190 tokens) are among the training inputs, one of them essential,
    so a short context truncates real inputs. A few test documents are long reviews whose first
    100 tokens tell the story in words of every class and whose verdict comes last: a model that
    reads only the first 96 tokens cannot see the verdict, so its predictions differ from the
    control's (and `close` sees two deliverables, not one duplicated)."""
    rng = random.Random(seed)
    # Each class boosts six words; two of them are shared with a neighbour, so classes overlap.
    preferred = {0: [0, 1, 2, 3, 4, 5], 1: [4, 5, 8, 9, 10, 11], 2: [10, 11, 14, 15, 16, 17]}
    weights = {}
    for label, words in preferred.items():
        row = [1.0] * VOCABULARY
        for word in words:
            row[word] = 2.2
        weights[label] = row
    long_documents = {7: True, 130: False, 301: False}  # index → essential
    long_reviews = {5, 29, 53, 77, 101}  # test indexes: a 100-token story, then a 60-token verdict

    def document(index: int, prefix: str) -> Document:
        label = rng.randrange(len(CLASSES))
        if prefix == "test" and index in long_reviews:
            story = rng.choices(range(VOCABULARY), k=REVIEW_STORY)
            verdict = rng.choices(range(VOCABULARY), weights=weights[label], k=REVIEW_VERDICT)
            return Document(f"{prefix}-{index:04d}", tuple(story + verdict), label)
        length = rng.randint(150, 190) if prefix == "doc" and index in long_documents else rng.randint(15, 45)
        tokens = tuple(rng.choices(range(VOCABULARY), weights=weights[label], k=length))
        essential = prefix == "doc" and long_documents.get(index, False)
        return Document(f"{prefix}-{index:04d}", tokens, label, essential)

    train = [document(i, "doc") for i in range(train_size)]
    test = [document(i, "test") for i in range(test_size)]
    return train, test


def features(tokens: tuple[int, ...]) -> list[float]:
    """Word frequencies, scaled so a document's features sum to 4."""
    counts = [0.0] * VOCABULARY
    for token in tokens:
        counts[token] += 1.0
    scale = 4.0 / max(len(tokens), 1)
    return [c * scale for c in counts]


# ---------------------------------------------------------------- model, optimizer, schedule


def _zeros() -> dict[str, Any]:
    return {"weights": [[0.0] * VOCABULARY for _ in CLASSES], "bias": [0.0] * len(CLASSES)}


def logits(model: dict[str, Any], x: list[float]) -> list[float]:
    values = []
    for row, bias in zip(model["weights"], model["bias"]):
        z = bias + sum(w * v for w, v in zip(row, x))  # sum, not fsum: inf - inf must give NaN, not raise
        if abs(z) > HALF_MAX:  # float16 overflow (NaN stays NaN)
            z = math.copysign(math.inf, z)
        values.append(z)
    return values


def log_softmax(z: list[float]) -> list[float]:
    top = max(z)
    total = sum(math.exp(v - top) for v in z)  # inf - inf is NaN: an overflowed logit poisons it
    return [v - top - math.log(total) if total > 0 else math.nan for v in z]


def predict(model: dict[str, Any], x: list[float]) -> int:
    z = logits(model, x)
    best, best_value = 0, -math.inf
    for index, value in enumerate(z):
        if value > best_value:  # NaN never wins: a poisoned model predicts class 0
            best, best_value = index, value
    return best


def step_lr(scheduler: dict[str, Any], step: int) -> float:
    """The step schedule: base_lr × gamma^⌊(step−1)/step_size⌋."""
    return scheduler["base_lr"] * scheduler["gamma"] ** ((step - 1) // scheduler["step_size"])


# ---------------------------------------------------------------- the training state


@dataclass
class Settings:
    """What the verification process needs to rebuild the same run (saved in each checkpoint)."""

    corpus_seed: int = 1234
    seed: int = 7
    batch_size: int = 16
    max_tokens: int = 512
    dropout: float = 0.1

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class State:
    settings: Settings
    model: dict[str, Any] = field(default_factory=_zeros)
    optimizer: dict[str, Any] = field(default_factory=dict)
    scheduler: dict[str, Any] = field(default_factory=dict)
    step: int = 0
    data_position: int = 0  # training examples consumed since the start, across epochs
    rng: random.Random = field(default_factory=random.Random)

    @classmethod
    def fresh(cls, settings: Settings, lr: float, step_size: int = DEFAULT_LR_STEP_SIZE,
              gamma: float = DEFAULT_LR_GAMMA) -> "State":
        return cls(
            settings=settings,
            optimizer={"kind": "adam", "betas": [0.9, 0.999], "eps": 1e-8, "t": 0, "m": _zeros(), "v": _zeros()},
            scheduler={"kind": "step", "base_lr": lr, "step_size": step_size, "gamma": gamma, "last_step": 0},
            rng=random.Random(settings.seed),
        )

    def state_dict(self) -> dict[str, Any]:
        """The whole state as plain values (what the checkpoint holds, and what `digest` hashes)."""
        version, internal, gauss = self.rng.getstate()
        return {
            "model": self.model,
            "optimizer": self.optimizer,
            "step": self.step,
            "scheduler": self.scheduler,
            "rng_state": [version, list(internal), gauss],
            "data_position": self.data_position,
            "config": self.settings.as_dict(),
        }

    def arrays(self) -> dict[str, tuple[str, Any]]:
        """The checkpoint's members in the demo format of cockpit/resume/verify.py: name → (dtype, value)."""
        members: dict[str, tuple[str, Any]] = {}
        for name in ("weights", "bias"):
            members[f"model/{name}"] = ("<f4", self.model[name])
            members[f"optimizer/m/{name}"] = ("<f4", self.optimizer["m"][name])
            members[f"optimizer/v/{name}"] = ("<f4", self.optimizer["v"][name])
        members["optimizer/t"] = ("<i8", self.optimizer["t"])
        members["optimizer/betas"] = ("<f8", list(self.optimizer["betas"]))
        members["optimizer/eps"] = ("<f8", self.optimizer["eps"])
        members["step"] = ("<i8", self.step)
        members["scheduler/last_step"] = ("<i8", self.scheduler["last_step"])
        members["scheduler/base_lr"] = ("<f8", self.scheduler["base_lr"])
        members["scheduler/step_size"] = ("<i8", self.scheduler["step_size"])
        members["scheduler/gamma"] = ("<f8", self.scheduler["gamma"])
        version, internal, gauss = self.rng.getstate()
        members["rng_state"] = ("<U", json.dumps([version, list(internal), gauss]))
        members["data_position"] = ("<i8", self.data_position)
        members["precision"] = ("<U", "fp32")
        members["config"] = ("<U", json.dumps(self.settings.as_dict(), sort_keys=True))
        return members

    @classmethod
    def from_arrays(cls, members: dict[str, Any]) -> "State":
        required = ["model/weights", "model/bias", "optimizer/m/weights", "optimizer/m/bias",
                    "optimizer/v/weights", "optimizer/v/bias", "optimizer/t", "optimizer/betas",
                    "optimizer/eps", "step", "scheduler/last_step", "scheduler/base_lr",
                    "scheduler/step_size", "scheduler/gamma", "rng_state", "data_position", "config"]
        missing = [k for k in required if k not in members]
        if missing:
            raise CheckpointError(f"the checkpoint lacks {', '.join(missing)}: it cannot resume the run exactly")
        try:
            version, internal, gauss = json.loads(members["rng_state"])
            rng = random.Random()
            rng.setstate((version, tuple(internal), gauss))
            return cls(
                settings=Settings(**json.loads(members["config"])),
                model={"weights": members["model/weights"], "bias": members["model/bias"]},
                optimizer={
                    "kind": "adam", "betas": list(members["optimizer/betas"]), "eps": members["optimizer/eps"],
                    "t": int(members["optimizer/t"]),
                    "m": {"weights": members["optimizer/m/weights"], "bias": members["optimizer/m/bias"]},
                    "v": {"weights": members["optimizer/v/weights"], "bias": members["optimizer/v/bias"]},
                },
                scheduler={"kind": "step", "base_lr": members["scheduler/base_lr"],
                           "step_size": int(members["scheduler/step_size"]), "gamma": members["scheduler/gamma"],
                           "last_step": int(members["scheduler/last_step"])},
                step=int(members["step"]),
                data_position=int(members["data_position"]),
                rng=rng,
            )
        except (TypeError, ValueError, KeyError) as error:
            raise CheckpointError(f"the checkpoint's state is malformed: {error}") from None

    def digest(self) -> str:
        """sha256 of the whole state: equal digests mean the two runs are in the same place."""
        text = json.dumps(self.state_dict(), sort_keys=True, allow_nan=True)
        return hashlib.sha256(text.encode()).hexdigest()


class CheckpointError(Exception):
    """A checkpoint that cannot resume the run; the message says why."""


def _float32(values: list[float]) -> list[float]:
    """Round to float32, the precision the parameters and Adam's moments are kept (and saved) in."""
    return array("f", values).tolist()


class Trainer:
    """One run's training: the corpus, the state, and one Adam step at a time."""

    def __init__(self, state: State):
        self.state = state
        settings = state.settings
        self.train, self.test = make_corpus(settings.corpus_seed)
        self.truncated = [d for d in self.train if len(d.tokens) > settings.max_tokens]
        self.train_x = [features(d.tokens[: settings.max_tokens]) for d in self.train]
        self.test_x = [features(d.tokens[: settings.max_tokens]) for d in self.test]
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        """The epoch's shuffled order, derived from the seed so the data position alone restores it."""
        if epoch not in self._orders:
            order = list(range(len(self.train)))
            random.Random(self.state.settings.corpus_seed * 1_000_003 + epoch).shuffle(order)
            self._orders = {epoch: order}
        return self._orders[epoch]

    def next_batch(self) -> list[int]:
        state, size = self.state, len(self.train)
        batch = []
        for _ in range(state.settings.batch_size):
            epoch, index = divmod(state.data_position, size)
            batch.append(self._order(epoch)[index])
            state.data_position += 1
        return batch

    def step(self) -> float:
        """One optimizer step; returns the batch's mean loss (NaN once the logits overflowed)."""
        state = self.state
        step = state.step + 1
        lr = step_lr(state.scheduler, step)
        keep = 1.0 - state.settings.dropout
        grad = _zeros()
        losses = []
        batch = self.next_batch()
        for index in batch:
            x = [v / keep if state.rng.random() < keep else 0.0 for v in self.train_x[index]]
            label = self.train[index].label
            log_p = log_softmax(logits(state.model, x))
            losses.append(-log_p[label])
            for c, row in enumerate(grad["weights"]):
                delta = (math.exp(log_p[c]) - (1.0 if c == label else 0.0)) / len(batch)
                grad["bias"][c] += delta
                for j, v in enumerate(x):
                    row[j] += delta * v
        self._adam(grad, lr)
        state.step = step
        state.scheduler["last_step"] = step
        return sum(losses) / len(losses)

    def _adam(self, grad: dict[str, Any], lr: float) -> None:
        opt = self.state.optimizer
        beta1, beta2 = opt["betas"]
        opt["t"] += 1
        t = opt["t"]
        correction1, correction2 = 1 - beta1**t, 1 - beta2**t

        def update(params: list[float], grads: list[float], m: list[float], v: list[float]) -> None:
            for i, g in enumerate(grads):
                m[i] = beta1 * m[i] + (1 - beta1) * g
                v[i] = beta2 * v[i] + (1 - beta2) * g * g
                params[i] -= lr * (m[i] / correction1) / (math.sqrt(v[i] / correction2) + opt["eps"])
            params[:], m[:], v[:] = _float32(params), _float32(m), _float32(v)

        model = self.state.model
        for c in range(len(CLASSES)):
            update(model["weights"][c], grad["weights"][c], opt["m"]["weights"][c], opt["v"]["weights"][c])
        update(model["bias"], grad["bias"], opt["m"]["bias"], opt["v"]["bias"])

    def evaluate(self) -> dict[str, float]:
        """Accuracy and macro-F1 on the held-out documents."""
        predicted = [predict(self.state.model, x) for x in self.test_x]
        actual = [d.label for d in self.test]
        f1s = []
        for c in range(len(CLASSES)):
            tp = sum(1 for p, a in zip(predicted, actual) if p == c and a == c)
            fp = sum(1 for p, a in zip(predicted, actual) if p == c and a != c)
            fn = sum(1 for p, a in zip(predicted, actual) if p != c and a == c)
            f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
        accuracy = sum(1 for p, a in zip(predicted, actual) if p == a) / len(actual)
        return {"eval/macro_f1": sum(f1s) / len(f1s), "eval/accuracy": accuracy}

    def predictions(self) -> list[dict[str, Any]]:
        return [
            {"id": d.id, "label": CLASSES[d.label], "predicted": CLASSES[predict(self.state.model, x)]}
            for d, x in zip(self.test, self.test_x)
        ]


# ---------------------------------------------------------------- checkpoints


def save_checkpoint(state: State, path: Path) -> int:
    """Write `step-<n>.npz` as resume.py's "Demo checkpoint format" says: an uncompressed npz
    written to `<name>.tmp`, fsynced, then renamed into place. Returns its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as handle:
        with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED) as archive:
            for name, (dtype, value) in state.arrays().items():
                archive.writestr(f"{name}.npy", _npy_bytes(dtype, value))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    try:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError:  # some filesystems refuse a directory fsync; the rename already happened
        pass
    return path.stat().st_size


def load_checkpoint(path: Path) -> State:
    try:
        with zipfile.ZipFile(path) as archive:
            members = {
                name[: -len(".npy")]: _npy_value(archive.read(name), name)
                for name in archive.namelist() if name.endswith(".npy")
            }
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror or error}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as error:
        raise CheckpointError(f"{path} is not an npz archive (damaged or truncated: {error})") from None
    return State.from_arrays(members)


# A .npy file by hand (format 1.0: magic, header length, a dict literal padded to 64 bytes, the
# data), so the demo writes archives numpy reads without numpy being installed.
_ARRAY_CODES = {"<f4": "f", "<f8": "d", "<i8": "q"}


def _npy_bytes(dtype: str, value: Any) -> bytes:
    if dtype == "<U":
        text = str(value)
        dtype, shape, payload = f"<U{max(len(text), 1)}", (), text.encode("utf-32-le") or b"\0" * 4
    else:
        if isinstance(value, list) and value and isinstance(value[0], list):
            shape, flat = (len(value), len(value[0])), [v for row in value for v in row]
        elif isinstance(value, list):
            shape, flat = (len(value),), value
        else:
            shape, flat = (), [value]
        data = array(_ARRAY_CODES[dtype], flat)
        if sys.byteorder == "big":
            data.byteswap()
        payload = data.tobytes()
    header = "{'descr': %r, 'fortran_order': False, 'shape': %r, }" % (dtype, shape)
    header += " " * ((-(10 + len(header) + 1)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + payload


def _npy_value(data: bytes, name: str) -> Any:
    """A .npy member as Python values: a number, a string, a list or a list of rows."""
    try:
        if data[:6] != b"\x93NUMPY":
            raise ValueError("no .npy magic")
        length, start = (struct.unpack("<H", data[8:10])[0], 10) if data[6] == 1 else (struct.unpack("<I", data[8:12])[0], 12)
        header = ast.literal_eval(data[start:start + length].decode("latin1"))
        dtype, shape, body = header["descr"], tuple(header["shape"]), data[start + length:]
        if header.get("fortran_order") and len(shape) > 1:
            raise ValueError("Fortran-ordered arrays are not written by the demo")
        if dtype.startswith("<U"):
            return body[: 4 * int(dtype[2:])].decode("utf-32-le").rstrip("\0")
        values = array(_ARRAY_CODES[dtype])
        count = math.prod(shape)
        values.frombytes(body[: count * values.itemsize])
        if sys.byteorder == "big":
            values.byteswap()
        flat = values.tolist()
        if len(flat) != count:
            raise ValueError(f"{len(flat)} values for shape {shape}")
    except (ValueError, KeyError, SyntaxError, IndexError, struct.error, UnicodeDecodeError) as error:
        raise CheckpointError(f"member {name} is damaged: {error}") from None
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    return [flat[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])]


def continuation(state: State, steps: int) -> dict[str, Any]:
    """What `steps` more steps from `state` produce: the losses (exactly, as float hex) and the
    digest of the state they end in. Two runs that resume identically produce the same record."""
    trainer = Trainer(state)
    losses = [trainer.step().hex() for _ in range(steps)]
    return {"from_step": state.step - steps, "steps": steps, "losses": losses,
            "state_sha256": state.digest(), "step": state.step}


@dataclass
class ResumeCheck:
    """A verification process under way: a fresh interpreter reloading `checkpoint`."""

    checkpoint: Path
    steps: int
    process: subprocess.Popen
    spawned_at: float

    @classmethod
    def spawn(cls, checkpoint: Path, steps: int) -> "ResumeCheck":
        command = [sys.executable, "-m", "cockpit.demo.trainer", "--verify-resume", str(checkpoint), "--steps", str(steps)]
        spawned_at = time.time()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, env=_child_env(), text=True)
        return cls(checkpoint, steps, process, spawned_at)

    def result(self, expected: dict[str, Any], timeout: float = 120.0) -> tuple[bool, float | None, str]:
        """(matches, seconds from spawn to the state restored, explanation)."""
        try:
            out, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            return False, None, f"the verification process did not answer within {timeout:g} s"
        if self.process.returncode != 0:
            return False, None, f"the verification process failed (exit {self.process.returncode}): {err.strip()[-500:]}"
        try:
            got = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return False, None, f"the verification process printed no result: {out[-300:]!r}"
        seconds = max(0.0, float(got.get("restored_at", self.spawned_at)) - self.spawned_at)
        for key in ("losses", "state_sha256", "step"):
            if got.get(key) != expected.get(key):
                return False, seconds, f"resumed run differs from the run that kept going ({key}: {got.get(key)!r} ≠ {expected.get(key)!r})"
        return True, seconds, "the next steps match exactly"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def verify_in_fresh_process(checkpoint: Path, expected: dict[str, Any], timeout: float = 120.0) -> tuple[bool, float | None, str]:
    """Reload `checkpoint` in a new interpreter, train as many steps as `expected` lists, compare."""
    return ResumeCheck.spawn(checkpoint, len(expected["losses"])).result(expected, timeout)


def _child_env() -> dict[str, str]:
    """The environment for a child interpreter: it imports this very copy of the cockpit.

    An installed cockpit is found anyway; a source checkout is put on PYTHONPATH (never a
    site-packages folder, which would then shadow the standard library)."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])  # the folder that holds cockpit/
    installed = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if package_root not in installed:
        env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    return env


# ---------------------------------------------------------------- a run


class Stopped(BaseException):
    """SIGTERM arrived (the cockpit's stop rule, or the user): end the run cleanly.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way (the
    reporter's own never-raise guard) can swallow it."""


def _on_sigterm(signum, frame) -> None:
    raise Stopped()


def train(
    campaign_dir: Path,
    run_id: str,
    *,
    lr: float,
    steps: int,
    step_seconds: float = 0.0,
    lr_step_size: int = DEFAULT_LR_STEP_SIZE,
    lr_gamma: float = DEFAULT_LR_GAMMA,
    settings: Settings | None = None,
    eval_every: int = 25,
    checkpoint_every: int = 50,
    verify_steps: int = 5,
    metrics_path: Path | None = None,
    checkpoints_dir: Path | None = None,
    predictions_path: Path | None = None,
    sleep=time.sleep,
) -> str:
    """Run the training, reporting to the campaign; returns the finished status ("ok", "stopped")."""
    settings = settings or Settings()
    state = State.fresh(settings, lr, lr_step_size, lr_gamma)
    trainer = Trainer(state)
    from cockpit.plan.campaign import campaign_path, run_path

    checkpoints_dir = checkpoints_dir or run_path(campaign_dir, run_id, "checkpoints")
    predictions_path = predictions_path or campaign_path(campaign_dir, "out", run_id, "predictions.jsonl")
    config = {"run": run_id, "lr": lr, "lr_step_size": lr_step_size, "lr_gamma": lr_gamma,
              "steps": steps, "eval_every": eval_every,
              "checkpoint_every": checkpoint_every, **settings.as_dict()}
    check: ResumeCheck | None = None
    expected: dict[str, Any] | None = None  # the run's own record of the steps the check replays
    own_losses: list[str] = []
    with RunReporter(campaign_dir, run_id, config, metrics_path=metrics_path) as report:
        try:
            for document in trainer.truncated:  # found while tokenising, before the first step
                report.truncated(document.id, document.essential)
            while state.step < steps:
                loss = trainer.step()
                report.log(state.step, loss=loss, lr=step_lr(state.scheduler, state.step))
                if check is not None and expected is None:
                    own_losses.append(loss.hex())
                    if len(own_losses) == check.steps:
                        expected = {"losses": own_losses, "state_sha256": state.digest(), "step": state.step}
                if check is not None and expected is not None and check.process.poll() is not None:
                    _finish_check(check, expected, report)  # the fresh process is done: no waiting
                    check = expected = None
                if state.step % eval_every == 0 or state.step == steps:
                    report.log(state.step, trainer.evaluate())
                if state.step % checkpoint_every == 0:
                    path = checkpoints_dir / f"step-{state.step}.npz"
                    started = time.monotonic()
                    size = save_checkpoint(state, path)
                    report.checkpoint(path, time.monotonic() - started, size)
                    if state.step == checkpoint_every:  # test an early save in a new process: a save that never reloads is no resume point
                        check = ResumeCheck.spawn(path, min(verify_steps, steps - state.step))
                        own_losses = []
                        if check.steps == 0:
                            expected = {"losses": [], "state_sha256": state.digest(), "step": state.step}
                if step_seconds > 0:
                    sleep(step_seconds)
            if check is not None and expected is not None:
                _finish_check(check, expected, report)  # the run ended first: wait for the answer
            _write_predictions(predictions_path, trainer.predictions())
        except Stopped:
            if check is not None:
                check.kill()
            print(f"{run_id}: stopped by SIGTERM at step {state.step}", file=sys.stderr, flush=True)
            report.finish("stopped")
            return "stopped"
    return "ok"


def _finish_check(check: ResumeCheck, expected: dict[str, Any], report: RunReporter) -> None:
    ok, seconds, why = check.result(expected)
    if ok:
        report.resume_verified(check.checkpoint, seconds)
        print(f"resume verified in a fresh process: {check.checkpoint} ({why})", file=sys.stderr, flush=True)
    else:
        print(f"resume NOT verified for {check.checkpoint}: {why}", file=sys.stderr, flush=True)


def _write_predictions(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    os.replace(temporary, path)


# ---------------------------------------------------------------- setting up `cockpit demo`


def template_files() -> dict[str, bytes]:
    """The demo campaign's files as shipped in the wheel (relative path → content)."""
    root = resources.files("cockpit").joinpath("demo", "template")
    files: dict[str, bytes] = {}

    def walk(node, prefix: str) -> None:
        for child in node.iterdir():
            name = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, name + "/")
            elif not child.name.startswith(".") and child.name != "__pycache__":
                files[name] = child.read_bytes()

    walk(root, "")
    return files


_LOT_START = re.compile(r"(?m)^(\s*start\s*=\s*)\S+(.*)$")


def prepare_demo(target_dir: str | os.PathLike[str], now: datetime) -> Path:
    """Copy the demo campaign into `target_dir` (new or empty) with the lot starting at `now`."""
    if now.tzinfo is None:
        raise ValueError("now must carry a time zone (UTC), e.g. datetime.now(timezone.utc)")
    target = Path(target_dir)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"{target} is not an empty folder; give a new or empty folder for the demo campaign")
    files = template_files()
    start = now.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = files["campaign.toml"].decode("utf-8")
    lot = re.search(r"(?m)^\s*\[lot\]\s*$", text)
    following = re.search(r"(?m)^\s*\[", text[lot.end():]) if lot else None
    end = lot.end() + following.start() if lot and following else len(text)
    if not lot or not _LOT_START.search(text, lot.end(), end):
        raise RuntimeError("the demo template's [lot] table has no start line")  # a packaging bug
    body = _LOT_START.sub(lambda m: f"{m.group(1)}{start}{m.group(2)}", text[lot.end():end], count=1)
    files["campaign.toml"] = (text[: lot.end()] + body + text[end:]).encode("utf-8")
    target.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return target.resolve()


def demo_run_arguments(campaign_dir: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Each run's trainer arguments from the campaign's runs.toml."""
    path = Path(campaign_dir) / RUNS_FILE
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise FileNotFoundError(f"{path}: cannot be read ({error.strerror}); it says how to start each demo run") from None
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not valid TOML: {error}") from None
    runs = raw.get("run")
    if not isinstance(runs, dict) or not runs:
        raise ValueError(f"{path}: needs one [run.ID] table per run, with args = [...]")
    arguments = {}
    for run_id, entry in runs.items():
        args = entry.get("args", []) if isinstance(entry, dict) else None
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"{path}: [run.{run_id}] → args must be a list of strings")
        arguments[run_id] = args
    return arguments


def launch_runs(campaign_dir: str | os.PathLike[str], python: str | None = None) -> list[subprocess.Popen]:
    """Start every run of the demo campaign as a background process of its own session.

    Each one runs `python -m cockpit.demo.trainer --campaign DIR --run ID ARGS` in the campaign
    folder with COCKPIT_RUN_ID set, its stdout and stderr in runs/<id>/stdout.log."""
    from cockpit.plan.campaign import run_path
    from cockpit.plan.load import load_campaign

    directory = Path(campaign_dir).resolve()
    arguments = demo_run_arguments(directory)
    known = {run.id for run in load_campaign(directory).runs}
    unknown = sorted(set(arguments) - known)
    if unknown:
        raise ValueError(f"{directory / RUNS_FILE}: {', '.join(unknown)} is no [[run]] of campaign.toml "
                         f"(runs: {', '.join(sorted(known)) or 'none'})")
    processes = []
    for run_id, args in arguments.items():
        run_dir = run_path(directory, run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        env = {**_child_env(), RUN_ID_ENV: run_id, "PYTHONUNBUFFERED": "1"}
        command = [python or sys.executable, "-m", "cockpit.demo.trainer", "--campaign", str(directory), "--run", run_id, *args]
        with open(run_dir / "stdout.log", "ab") as log:
            processes.append(subprocess.Popen(
                command, cwd=directory, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            ))
    return processes


def stop_runs(processes: list[subprocess.Popen], timeout: float = 10.0) -> None:
    """SIGTERM each run still alive (it writes `finished` "stopped"), SIGKILL what outlives `timeout`."""
    alive = [p for p in processes if p.poll() is None]
    for process in alive:
        try:
            process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for process in alive:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ---------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cockpit.demo.trainer",
        description="The cockpit demo's toy trainer: softmax regression with Adam on a generated corpus.",
    )
    parser.add_argument("--campaign", type=Path, metavar="DIR", help="the campaign folder (holds campaign.toml)")
    parser.add_argument("--run", metavar="RUN", help="the run's id in campaign.toml")
    parser.add_argument("--lr", type=float, default=DEFAULT_LR, help=f"Adam's base learning rate (default {DEFAULT_LR:g})")
    parser.add_argument("--lr-step-size", type=int, default=DEFAULT_LR_STEP_SIZE, metavar="N",
                        help=f"the schedule multiplies the rate by --lr-gamma every N steps (default {DEFAULT_LR_STEP_SIZE})")
    parser.add_argument("--lr-gamma", type=float, default=DEFAULT_LR_GAMMA, metavar="G", help=f"(default {DEFAULT_LR_GAMMA:g})")
    parser.add_argument("--steps", type=int, help="optimizer steps (default: the run's total_steps, else 600); "
                        "with --verify-resume: steps to train after the reload")
    parser.add_argument("--step-seconds", type=float, default=0.0, metavar="S", help="sleep S seconds a step so a demo run lasts minutes")
    parser.add_argument("--diverge", action="store_true", help=f"multiply the learning rate by {DIVERGE_GAMMA:g} every "
                        f"{DIVERGE_STEP_SIZE} steps: the loss becomes NaN near step 48")
    parser.add_argument("--truncate-essential", action="store_true", help=f"cut documents to {SHORT_CONTEXT} tokens, truncating an essential one")
    parser.add_argument("--max-tokens", type=int, default=512, help="context length in tokens (default 512: nothing is cut)")
    parser.add_argument("--seed", type=int, default=7, help="the RNG seed for input dropout (default 7)")
    parser.add_argument("--eval-every", type=int, default=25, metavar="N")
    parser.add_argument("--checkpoint-every", type=int, default=50, metavar="N")
    parser.add_argument("--verify-steps", type=int, default=5, metavar="K", help="steps compared after reloading the first checkpoint")
    parser.add_argument("--verify-resume", type=Path, metavar="CHECKPOINT", help="reload CHECKPOINT, train --steps steps, print the result as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.verify_resume is not None:
        if args.steps is not None and args.steps < 0:
            parser.error(f"--steps must be 0 or more with --verify-resume (got {args.steps})")
        return _verify_main(args.verify_resume, args.steps if args.steps is not None else 5)
    for name in ("steps", "eval_every", "checkpoint_every", "lr_step_size", "max_tokens"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be a positive whole number (got {value})")
    for name in ("verify_steps", "step_seconds"):
        value = getattr(args, name)
        if value < 0 or (isinstance(value, float) and not math.isfinite(value)):
            parser.error(f"--{name.replace('_', '-')} must be 0 or more (got {value})")
    if args.campaign is None or not args.run:
        parser.error("give --campaign DIR and --run RUN (or --verify-resume CHECKPOINT)")
    return _train_main(args, parser)


def _verify_main(checkpoint: Path, steps: int) -> int:
    try:
        state = load_checkpoint(checkpoint)
    except CheckpointError as error:
        print(f"cannot resume from {checkpoint}: {error}", file=sys.stderr)
        return 1
    restored_at = time.time()
    record = continuation(state, steps)
    record["restored_at"] = restored_at
    print(json.dumps(record))
    return 0


def _train_main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from cockpit.plan.campaign import CampaignError  # only the run side needs pydantic
    from cockpit.plan.load import load_campaign

    try:
        campaign = load_campaign(args.campaign)
    except CampaignError as error:
        print(f"cannot start the run: {error}", file=sys.stderr)
        return 1
    run = campaign.run(args.run)
    if run is None:
        known = ", ".join(r.id for r in campaign.runs) or "none"
        parser.error(f"no run '{args.run}' in {campaign.file} (runs: {known})")
    settings = Settings(seed=args.seed, max_tokens=SHORT_CONTEXT if args.truncate_essential else args.max_tokens)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        status = train(
            campaign.directory,
            run.id,
            lr=args.lr,
            lr_step_size=DIVERGE_STEP_SIZE if args.diverge else args.lr_step_size,
            lr_gamma=DIVERGE_GAMMA if args.diverge else args.lr_gamma,
            steps=args.steps or run.total_steps or DEFAULT_STEPS,
            step_seconds=args.step_seconds,
            settings=settings,
            eval_every=args.eval_every,
            checkpoint_every=args.checkpoint_every,
            verify_steps=args.verify_steps,
            metrics_path=run.metrics_path(campaign.directory),
            checkpoints_dir=run.checkpoints_path(campaign.directory),
        )
    except Stopped:  # before the reporter was even set up
        return 128 + signal.SIGTERM
    return 0 if status == "ok" else 128 + signal.SIGTERM


if __name__ == "__main__":
    sys.exit(main())
