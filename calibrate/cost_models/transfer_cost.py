"""The transfer cost model on hardware it was not measured on: in each regime, the measured linear part
where a held-out GPU showed it beats the spec-sheet roofline, the roofline elsewhere; and says which.

On the measured chip itself the measured model prices every regime (held-out models judge it there).
Elsewhere the regime of a batch is its token count against the target GPU's own ridge
(calibrate/parts/transfer.py); attention, copies and swaps are the roofline's in both models, and the
engine's host work is carried as measured in both.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from calibrate.clock.breakdown import IterationTime
from calibrate.clock.costmodel import BatchLike, CostModel
from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.hardware.hardware import HardwareSpec
from calibrate.parts.transfer import REGIMES, RegimeChoice, regime_of, same_chip
from engine.core.spec import ModelSpec
from engine.errors import SpecError


class RegimeCostModel(CostModel):
    """Each iteration priced by the transfer or the roofline, as its regime on `hw` is chosen."""

    def __init__(self, transfer: RooflineCostModel, roofline: RooflineCostModel, hw: HardwareSpec,
                 choice: RegimeChoice,
                 dtype_bytes: int = 2):
        self.transfer, self.roofline, self.hw, self.choice = transfer, roofline, hw, choice
        self.dtype_bytes = dtype_bytes
        self.prices_ahead = transfer.prices_ahead and roofline.prices_ahead
        self.source = f"{transfer.source}; by regime on {hw.name}: {choice.describe()}"

    @property
    def charge_host(self) -> bool:
        return self.transfer.charge_host

    @charge_host.setter
    def charge_host(self, value: bool) -> None:
        self.transfer.charge_host = self.roofline.charge_host = value

    def charge_block_reads(self, overhead_tokens: float) -> None:
        self.transfer.charge_block_reads(overhead_tokens)
        self.roofline.charge_block_reads(overhead_tokens)
        self.source += f"; a paged block read costs {overhead_tokens:g} tokens' K/V more (config)"

    def name_host_terms(self, terms) -> None:
        self.transfer.name_host_terms(terms)
        self.roofline.name_host_terms(terms)

    def model_for(self, batch: BatchLike) -> CostModel:
        regime = regime_of(batch.num_tokens, self.hw, self.dtype_bytes, latency=self.choice.fine)
        return self.transfer if self.choice.uses_transfer(regime) else self.roofline

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


@lru_cache(maxsize=8)
def _judged_choice(path: str, mtime: float, measured_on: str) -> RegimeChoice:
    """The held-out GPU judgement of an imported profile (calibrate/judging/transfer_judge.py), once per file."""
    from calibrate.fitting.profile_file import load_profile
    from calibrate.judging.transfer_judge import choose, judge_profile

    unjudged = RegimeChoice(frozenset(), {r: "no held-out GPU measured it" for r in REGIMES})
    if not measured_on.startswith("a100"):  # the shipped held-out GPU data judges A100 fits only
        return unjudged
    try:
        return choose(judge_profile(load_profile(path)))
    except SpecError:  # the held-out GPU's rows are not installed, or not usable: nothing is judged
        return unjudged


def default_choice(path: str | Path, measured: HardwareSpec) -> RegimeChoice:
    resolved = Path(path).resolve()
    return _judged_choice(str(resolved), resolved.stat().st_mtime, measured.name)


def by_regime(measured_model: RooflineCostModel, path: str | Path, measured: HardwareSpec, model: ModelSpec,
              hardware: HardwareSpec, tp: int, dtype_bytes: int, block_size: int, paged: bool,
              host: dict | None, choice: RegimeChoice | None = None) -> CostModel:
    """`measured_model` itself on the measured chip; elsewhere the default by regime (the roofline alone,
    with the host work, where no regime uses the transfer)."""
    if same_chip(measured, hardware):
        return measured_model
    choice = choice or default_choice(path, measured)
    # the all-reduce kind carries as measured: its latency fixed, its bandwidth-bound part at the target's links
    table = measured_model.all_reduce_table
    # attention is not a regime's choice (the regimes judge the linear part): measured attention is carried by its
    # shares of the spec sheet in every regime, unjudged off the GPU it was measured on
    attention = measured_model.attention
    group = measured_model.expert_parallel  # a mixture's expert parallelism, priced alike in every regime
    roofline = RooflineCostModel(model, hardware, tp, dtype_bytes, block_size, RooflineParams(), all_reduce=table,
                                 host=host, paged=paged, attention=attention, expert_parallel=group)
    if not choice.use_transfer:
        comm = (f", all-reduce measured on {tp} GPUs of {measured.name}, scaled to {hardware.name}'s NVLink"
                if table is not None else "")
        carried = (f", attention measured on {measured.name} carried by its shares (unjudged here)"
                   if attention is not None else "")
        roofline.source = (f"roofline({hardware.name}, tp={tp}){comm}{carried}"
                           f"{', host work in series' if host else ''}"
                           f"{f', {group.describe()}' if group is not None else ''}: "
                           f"{Path(path).name} was measured on {measured.name}; by regime: {choice.describe()}")
        return roofline
    return RegimeCostModel(measured_model, roofline, hardware, choice, dtype_bytes)
