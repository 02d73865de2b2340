"""`servesim plan`'s config: an experiment config (the base deployment, checked as `servesim capacity` checks it) with
a `plan:` section naming the total rate, the joint SLO, the price table and the search space.

    plan:
      rate: 50                                   # req/s the whole fleet serves
      targets: {ttft_p90_s: 2, tpot_p90_s: 0.05}
      prices: ../prices/example.yaml
      hardware: [a100-80gb, h100-sxm]
      tensor_parallel: [1, 2, 4, 8]
      batch: [{max_num_seqs: 256, max_num_batched_tokens: 8192}]
      precision: [{weights: fp16, kv_cache: fp16}, {weights: fp8, kv_cache: fp8}]

Every key is checked before anything runs, and every GPU searched must have a price.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.hardware.hardware import available_hardware
from calibrate.hardware.precision import precision_from_config
from engine.errors import SpecError
from engine.specs.arguments import Spelling
from engine.specs.checks import choice, known_keys, non_negative, number, positive, positive_int
from engine.specs.paths import resolve_path
from sim.capacity.plan import colocated, plan_capacity
from sim.capacity.prices import PriceTable, load_prices
from sim.capacity.split import MAX_SPLIT_REPLICAS
from sim.capacity.targets import Target
from sim.experiment.config import Experiment, experiment_from_dict, read_config
from sim.experiment.overrides import blamed_on_overrides

PLAN_KEYS = {
    "rate": "the total request rate the fleet serves, req/s (required)",
    "targets": "the joint SLO, {METRIC: LIMIT} or a list of METRIC=LIMIT (required)",
    "prices": "the price table's path: US$ per GPU-hour per GPU kind (required)",
    "hardware": "the GPU kinds to try (default: the config's hardware)",
    "tensor_parallel": "the tensor parallelisms to try (default: the config's)",
    "batch": "the batch limits to try, each {max_num_seqs, max_num_batched_tokens} (default: the systems' own)",
    "precision": "the number formats to try, each {weights, kv_cache} (default: the config's)",
    "splits": "also prefill:decode units of up to N replicas in all, 2 to 16 (default: colocated replicas only)",
    "keep_within": "rank every fleet up to this share dearer than the cheapest (default 0.25); dearer ones are pruned",
    "max_replicas": "the most replicas (or prefill:decode units) a fleet may have (default 256)",
    "tolerance": "relative precision of each rate search (default 0.05)",
    "seed": "the seed of every probe's trace (default 0)",
}
BATCH_KEYS = ("max_num_seqs", "max_num_batched_tokens")
DEFAULT_MAX_REPLICAS = 256
MAX_TENSOR_PARALLEL = 64  # GPUs a replica: past any server's NVLink domain


@dataclass(frozen=True)
class DeploymentSearch:
    """A checked plan: the base experiment and its raw keys, the goal, the prices and the space to search."""
    base: Experiment
    raw: dict  # the experiment's keys, overrides applied, without `plan`
    base_dir: Path
    rate: float
    targets: tuple[Target, ...]
    prices: PriceTable
    hardware: tuple[str, ...]
    tensor_parallel: tuple[int, ...]
    batches: tuple[dict, ...]  # each the batch keys it sets (empty: the system's own limits)
    precisions: tuple[dict, ...]  # each {weights, kv_cache}
    splits: int | None
    keep_within: float
    max_replicas: int
    tolerance: float
    seed: int
    section: dict  # the plan section as written, overrides applied (resolved.yaml)

    @property
    def source(self) -> str:
        return self.base.source


def load_plan(path: str | Path, overrides: list[str] | None = None) -> DeploymentSearch:
    """A plan config, read with its --set overrides and checked in whole (a SpecError naming the file and key)."""
    path = Path(path)
    source = str(path)
    raw = read_config(path, overrides)
    if not isinstance(raw, dict):
        raise SpecError(source, "", "a plan file must be a YAML mapping (an experiment with a plan: section)")
    if not isinstance(raw.get("plan"), dict):
        raise SpecError(source, "plan", f"missing, or not a mapping: give plan: with keys {sorted(PLAN_KEYS)}")
    raw = copy.deepcopy(raw)
    section = raw.pop("plan")
    with blamed_on_overrides(source, overrides or []):
        base = experiment_from_dict(raw, source, path.resolve().parent)
        colocated(base, False, "plan.splits searches prefill:decode units of the plan's GPUs")
        return _search(base, raw, section, path.resolve().parent)


def _search(base: Experiment, raw: dict, section: dict, base_dir: Path) -> DeploymentSearch:
    source = base.source
    known_keys(section, sorted(PLAN_KEYS), source, "plan")
    for key in ("rate", "targets", "prices"):
        if key not in section:
            raise SpecError(source, f"plan.{key}", f"missing: {PLAN_KEYS[key]}")
    names = Spelling(target=f"{source}: plan.targets", seed=f"{source}: plan.seed",
                     tolerance=f"{source}: plan.tolerance")
    goal = plan_capacity(base, section["targets"], None, section.get("seed", 0), section.get("tolerance", 0.05), names)
    prices = load_prices(resolve_path(_text(section["prices"], source, "plan.prices"), base_dir, source,
                                      "plan.prices", what="a price table YAML"))
    shipped = [*available_hardware(), base.hardware.name]  # the config's own GPU, whatever sheet it read
    hardware = _list(section, "hardware", [base.hardware.name], source,
                     lambda value, key: choice(value, source, key, shipped))
    for i, kind in enumerate(hardware):
        prices.of(kind, f"{source}'s plan.hardware[{i}]")
    return DeploymentSearch(
        base, raw, base_dir, positive(section["rate"], source, "plan.rate"), goal.targets, prices, hardware,
        _list(section, "tensor_parallel", [base.tensor_parallel], source,
              lambda value, key: number(value, source, key, low=1, high=MAX_TENSOR_PARALLEL, whole=True)),
        _list(section, "batch", [{}], source, lambda value, key: _batch(value, source, key)),
        _list(section, "precision", [_formats(raw, source)], source, lambda value, key: _precision(value, source, key)),
        _splits(section.get("splits"), source),
        non_negative(section.get("keep_within", 0.25), source, "plan.keep_within"),
        positive_int(section.get("max_replicas", DEFAULT_MAX_REPLICAS), source, "plan.max_replicas"),
        goal.tolerance, goal.seed, copy.deepcopy(section))


def _list(section: dict, key: str, default: list, source: str, check) -> tuple:
    """A list of the search space, each item checked, none twice; absent: `default`."""
    values = section.get(key, default)
    if not isinstance(values, list) or not values:
        raise SpecError(source, f"plan.{key}", f"must be a non-empty list ({PLAN_KEYS[key]}), got {values!r}")
    checked = [check(value, f"plan.{key}[{i}]") for i, value in enumerate(values)]
    for i, value in enumerate(checked):
        if value in checked[:i]:
            raise SpecError(source, f"plan.{key}[{i}]", f"{value!r} is given twice; give each once")
    return tuple(checked)


def _batch(value: Any, source: str, key: str) -> dict:
    if not isinstance(value, dict):
        raise SpecError(source, key, f"must be a mapping with keys from {list(BATCH_KEYS)}, got {value!r}")
    known_keys(value, BATCH_KEYS, source, key)
    return {name: positive_int(value[name], source, f"{key}.{name}") for name in BATCH_KEYS if name in value}


def _precision(value: Any, source: str, key: str) -> dict:
    if not isinstance(value, dict):
        raise SpecError(source, key, f"must be a mapping {{weights, kv_cache}}, got {value!r}")
    try:
        checked = precision_from_config(value, None, source)
    except SpecError as err:
        raise SpecError(source, err.key.replace("precision", key, 1), err.message) from None
    return {"weights": checked.weights, "kv_cache": checked.kv_cache}


def _formats(raw: dict, source: str) -> dict:
    """The config's own formats, as a plan's precision item; the legacy dtype_bytes 2 is fp16 and fp16."""
    given = raw.get("precision")
    if isinstance(given, dict):
        return {"weights": given.get("weights", "fp16"), "kv_cache": given.get("kv_cache", "fp16")}
    if raw.get("dtype_bytes", 2) != 2:
        raise SpecError(source, "dtype_bytes", "a plan searches number formats by name; give "
                        "precision: {weights, kv_cache} instead, or plan.precision")
    return {"weights": "fp16", "kv_cache": "fp16"}


def _splits(value: Any, source: str) -> int | None:
    if value is None:
        return None
    return number(value, source, "plan.splits", low=2, high=MAX_SPLIT_REPLICAS, whole=True)


def _text(value: Any, source: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(source, key, f"must be a path, got {value!r}")
    return value
