"""The demo's toy model: a generated three-class corpus, softmax regression with Adam, a step
learning-rate schedule, a seeded RNG (input dropout) and a data position, in plain Python (no numpy,
no torch), and its complete checkpoints (model, optimizer, step, scheduler, RNG, data position; the
npz layout that cockpit/resume/verify.py documents as the "Demo checkpoint format", written without
numpy). `cockpit.demo.trainer` runs it as a reporting training process.

Logits are kept to the float16 range, as under mixed-precision autocast on a GPU: past ±65504
they overflow to infinity and the loss becomes NaN. That is how a too-high learning rate usually
ends on a real box, and how `--diverge` (a learning rate that grows tenfold every 6 steps) ends here.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import random
import struct
import sys
import zipfile
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLASSES = ("negative", "neutral", "positive")
VOCABULARY = 24
HALF_MAX = 65504.0  # the largest float16: logits beyond it overflow as they would under autocast
# --diverge: a step schedule that multiplies the rate by 10 every 6 steps (a decay written as
# growth). The loss falls for ~25 steps, then climbs, and the logits overflow near step 48.
DIVERGE_GAMMA, DIVERGE_STEP_SIZE = 10.0, 6
DEFAULT_LR, DEFAULT_LR_STEP_SIZE, DEFAULT_LR_GAMMA = 0.003, 200, 0.5
SHORT_CONTEXT = 96  # --truncate-essential: shorter than the corpus's long essential documents
REVIEW_STORY, REVIEW_VERDICT = 100, 60  # the long test reviews: the verdict lies past SHORT_CONTEXT
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
