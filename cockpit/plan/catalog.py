"""The rental provider's catalogue of lots: a price per lot (GPU model, duration), never per hour."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

CENT = Decimal("0.01")


@dataclass(frozen=True)
class LotOffer:
    """One catalogue line: a lot of `days` days for one price, whatever it holds."""

    gpu_model: str
    days: int
    gpus: int
    price_usd: Decimal


@dataclass(frozen=True)
class GpuModel:
    """A catalogue GPU model: GPUs in one lot and the lots offered."""

    name: str
    gpus_per_lot: int
    offers: tuple[LotOffer, ...]


@lru_cache(maxsize=1)
def _models() -> dict[str, GpuModel]:
    text = (Path(__file__).parent / "data" / "catalog.json").read_text(encoding="utf-8")
    raw = json.loads(text)
    models: dict[str, GpuModel] = {}
    for name, entry in raw["models"].items():
        gpus = int(entry["gpus_per_lot"])
        offers = tuple(
            LotOffer(name, int(lot["days"]), gpus, Decimal(lot["price_usd"]).quantize(CENT))
            for lot in entry["lots"]
        )
        models[_key(name)] = GpuModel(name, gpus, tuple(sorted(offers, key=lambda o: o.days)))
    return models


def _key(name: str) -> str:
    return " ".join(name.split()).casefold()


def model(name: str) -> GpuModel | None:
    """The catalogue entry for a GPU model, matched without regard to case or spacing."""
    return _models().get(_key(name))


def known_models() -> list[str]:
    return [m.name for m in _models().values()]


def offers(gpu_model: str) -> tuple[LotOffer, ...]:
    """Every catalogue lot for this GPU model, shortest first (empty when none is priced)."""
    entry = model(gpu_model)
    return entry.offers if entry else ()


def price(gpu_model: str, days: int) -> Decimal | None:
    """The catalogue price of one lot, or None when the catalogue does not know it."""
    for offer in offers(gpu_model):
        if offer.days == days:
            return offer.price_usd
    return None
