"""The price table `servesim plan` costs a fleet by: dollars per GPU-hour for each GPU kind, each with where it came
from.

    gpus:
      h100-sxm: {usd_per_gpu_hour: 3.78, provider: "Lambda, 1x H100 SXM on-demand", source: URL, date: 2026-05-07}

A kind is a hardware name as configs give it (calibrate/hardware_specs). A fleet of n GPUs of a kind costs n times its
price an hour; a GPU the search would try and the table does not price is refused before anything runs.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import SpecError
from engine.specs.checks import known_keys, positive
from engine.specs.loader import read_yaml

PRICE_KEYS = ("usd_per_gpu_hour", "provider", "source", "date")


@dataclass(frozen=True)
class Price:
    """One GPU kind's price an hour, and what says so: who lists it, where, when it was read."""
    usd_per_gpu_hour: float
    provider: str = ""
    source: str = ""
    date: str = ""


@dataclass(frozen=True)
class PriceTable:
    path: str
    gpus: dict[str, Price]

    def of(self, hardware: str, searched_by: str) -> Price:
        """The price of one GPU kind; `searched_by`: the key of the search space that names it, for the error."""
        if hardware not in self.gpus:
            raise SpecError(self.path, f"gpus.{hardware}", (
                f"no price for {hardware}, which {searched_by} searches; give its usd_per_gpu_hour, or leave it out "
                f"of the search (this table prices {sorted(self.gpus) or 'nothing'})"))
        return self.gpus[hardware]


def load_prices(path: str | Path) -> PriceTable:
    """A price table file, every price checked (positive, finite) and every key known."""
    source = str(path)
    raw = read_yaml(path, "prices")
    if not isinstance(raw, dict) or not isinstance(raw.get("gpus"), dict) or not raw["gpus"]:
        raise SpecError(source, "gpus", "must be a mapping of GPU kinds (hardware names, e.g. h100-sxm) to "
                        "{usd_per_gpu_hour, provider, source, date}")
    known_keys(raw, ["gpus"], source)
    return PriceTable(source, {str(kind): _price(value, source, f"gpus.{kind}") for kind, value in raw["gpus"].items()})


def _price(raw: Any, source: str, key: str) -> Price:
    if not isinstance(raw, dict):
        raise SpecError(source, key, f"must be a mapping with keys {list(PRICE_KEYS)}, got {raw!r}")
    known_keys(raw, PRICE_KEYS, source, key)
    if "usd_per_gpu_hour" not in raw:
        raise SpecError(source, f"{key}.usd_per_gpu_hour", "missing: the price of one GPU of this kind an hour, in US$")
    texts = {name: _text(raw.get(name, ""), source, f"{key}.{name}") for name in PRICE_KEYS[1:]}
    return Price(positive(raw["usd_per_gpu_hour"], source, f"{key}.usd_per_gpu_hour"), **texts)


def _text(value: Any, source: str, key: str) -> str:
    if isinstance(value, datetime.date):  # YAML reads 2026-05-07 as a date
        return value.isoformat()
    if not isinstance(value, str):
        raise SpecError(source, key, f"must be text, got {value!r}")
    return value
