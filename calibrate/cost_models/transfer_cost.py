"""The transfer cost model on hardware it was not measured on: in each regime, the linear part that every measured
GPU held out in turn showed beats the spec-sheet roofline there, the roofline elsewhere; and says which.

On the measured chip itself the measured model prices every regime (held-out models judge it there). Elsewhere the
regime of a batch is its token count against the target GPU's own ridge (calibrate/parts/transfer.py), and which fit
prices it is the shipped choice (calibrate/profiles/carry/held-out-gpus.yaml, calibrate/cost_models/carry_file.py:
a carry only in a regime where it beat the roofline, mean and worst, on every GPU held out from it). Attention,
copies and swaps are priced alike in every regime (the profile's measured attention carried by its shares, else the
roofline's), the all-reduce as measured, and the engine's host work is carried as measured.
"""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np

from calibrate.clock.breakdown import IterationTime
from calibrate.clock.costmodel import BatchLike, CostModel
from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.cost_models.carry_file import shipped_choice
from calibrate.hardware.hardware import HardwareSpec
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.transfer import RegimeChoice, regime_of, same_chip
from engine.core.spec import ModelSpec


class RegimeCostModel(CostModel):
    """Each iteration priced by the model its regime on `hw` is chosen for: `carried`'s (regime -> a model with a
    measured linear part) where the choice carries, the roofline elsewhere."""

    def __init__(self, carried: dict[str, RooflineCostModel], roofline: RooflineCostModel, hw: HardwareSpec,
                 choice: RegimeChoice, dtype_bytes: int = 2):
        self.carried, self.roofline, self.hw, self.choice = carried, roofline, hw, choice
        self.dtype_bytes = dtype_bytes
        self.models: list[RooflineCostModel] = []  # each distinct model once: the carried ones, then the roofline
        for model in [*carried.values(), roofline]:
            if all(model is not seen for seen in self.models):
                self.models.append(model)
        self.prices_ahead = all(model.prices_ahead for model in self.models)
        self.source = f"{roofline.source}; by regime on {hw.name}: {choice.describe()}"

    @property
    def charge_host(self) -> bool:
        return self.roofline.charge_host

    @charge_host.setter
    def charge_host(self, value: bool) -> None:
        for model in self.models:
            model.charge_host = value

    def charge_block_reads(self, overhead_tokens: float) -> None:
        for model in self.models:
            model.charge_block_reads(overhead_tokens)
        self.source += f"; a paged block read costs {overhead_tokens:g} tokens' K/V more (config)"

    def name_host_terms(self, terms) -> None:
        for model in self.models:
            model.name_host_terms(terms)

    def model_for(self, batch: BatchLike) -> CostModel:
        regime = regime_of(batch.num_tokens, self.hw, self.dtype_bytes, latency=self.choice.fine)
        return self.carried.get(regime, self.roofline)

    def iteration_time(self, batch: BatchLike) -> float:
        return self.model_for(batch).iteration_time(batch)

    def decode_iteration_times(self, batch: BatchLike, num_steps: int) -> np.ndarray:
        # every step of a decode stretch runs the same tokens, so the same regime
        return self.model_for(batch).decode_iteration_times(batch, num_steps)

    def swap_time(self, num_blocks: int) -> float:
        return self.roofline.swap_time(num_blocks)

    def breakdown(self, batch: BatchLike) -> IterationTime:
        swaps = batch.num_swap_blocks
        return replace(self.model_for(batch).breakdown(batch), swap_s=self.swap_time(swaps) if swaps else 0.0)

    def device_time(self, batch: BatchLike) -> float:
        return self.model_for(batch).device_time(batch)

    def host_time(self, batch: BatchLike) -> float:
        return self.model_for(batch).host_time(batch)

    def decode_attention_time(self, batch: BatchLike) -> float:
        return self.roofline.decode_attention_time(batch)

    def prefill_attention_time(self, batch: BatchLike) -> float:
        return self.roofline.prefill_attention_time(batch)


def by_regime(measured_model: RooflineCostModel, path: str | Path, measured: HardwareSpec, model: ModelSpec,
              hardware: HardwareSpec, tp: int, dtype_bytes: int, block_size: int, paged: bool,
              host: dict | None, choice: RegimeChoice | None = None) -> CostModel:
    """`measured_model` itself on the measured chip; elsewhere by regime as `choice` (default: the shipped one,
    calibrate/cost_models/carry_file.py) chose: each regime it carries priced with its carried fit (a regime
    without one: `measured_model`'s own), the roofline with the host work the rest."""
    if same_chip(measured, hardware):
        return measured_model
    choice = choice or shipped_choice()
    with_linear = partial(_sibling, measured_model, model, hardware, tp, dtype_bytes, block_size, paged, host)
    roofline = with_linear(None)
    roofline.source = _roofline_source(roofline, Path(path).name, measured, tp)
    if not choice.use_transfer:
        roofline.source += f"; by regime: {choice.describe()}"
        return roofline
    return RegimeCostModel(_carried_models(choice, measured_model, with_linear), roofline, hardware, choice,
                           dtype_bytes)


def _sibling(measured_model: RooflineCostModel, model: ModelSpec, hardware: HardwareSpec, tp: int, dtype_bytes: int,
             block_size: int, paged: bool, host: dict | None, fit: LinearFit | None) -> RooflineCostModel:
    """The target's roofline with `fit` as its linear part (None: the spec sheet's) and all else `measured_model`'s:
    the all-reduce as measured (its latency fixed, its bandwidth-bound part at the target's links); measured
    attention carried by its shares of the sheet in every regime, unjudged off its GPU (the regimes judge the
    linear part only); a mixture's expert parallelism."""
    return RooflineCostModel(model, hardware, tp, dtype_bytes, block_size, RooflineParams(), linear=fit,
                             all_reduce=measured_model.all_reduce_table, host=host, paged=paged,
                             attention=measured_model.attention, expert_parallel=measured_model.expert_parallel)


def _roofline_source(roofline: RooflineCostModel, name: str, measured: HardwareSpec, tp: int) -> str:
    hardware, group = roofline.hw, roofline.expert_parallel
    comm = (f", all-reduce measured on {tp} GPUs of {measured.name}, scaled to {hardware.name}'s NVLink"
            if roofline.all_reduce_table is not None else "")
    carried = (f", attention measured on {measured.name} carried by its shares (unjudged here)"
               if roofline.attention is not None else "")
    return (f"roofline({hardware.name}, tp={tp}){comm}{carried}{', host work in series' if roofline.host else ''}"
            f"{f', {group.describe()}' if group is not None else ''}: {name} was measured on {measured.name}")


def _carried_models(choice: RegimeChoice, measured_model: RooflineCostModel, with_linear) -> dict:
    """regime -> the model that prices it where the choice carries: one model per distinct carried fit."""
    made: list[tuple[LinearFit, RooflineCostModel]] = []
    carried = {}
    for regime in choice.use_transfer:
        if regime not in choice.carried:
            carried[regime] = measured_model
            continue
        fit = choice.carried[regime].fit
        model = next((m for f, m in made if f == fit), None)
        if model is None:
            model = with_linear(fit)
            made.append((fit, model))
        carried[regime] = model
    return carried
