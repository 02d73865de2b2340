"""A mixed step's decodes as the roofline cost model prices them with a measured fit's mixed term
(calibrate/parts/attention_mixed.py): its constants bound for one model, tensor-parallel degree and GPU, and the
reference expression on numpy (an iteration's context sum, or a decode stretch's array of them), which
calibrate/clock/roofline_terms.MixedTerms computes on floats in the same order.

A step mixes where it has decodes and a prefill of more than one token: then its decodes cost the launch's
latencies (one, and one per wave of their blocks), its empty query blocks, their query heads' stream in waves and,
past the L2, a group's rereads; its prefills cost what they cost alone. On a sheet without the SM count the term
is not bound (the step is priced as its decode and prefill parts); without the L2, no reread is charged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calibrate.clock.roofline_terms import QUERY_ROWS_PER_BLOCK, MixedTerms
from calibrate.hardware.hardware import HardwareSpec
from calibrate.parts.attention_mixed import MixedFit, MixedGrid, equivalent_blocks, group_rounds, miss_tokens
from engine.core.spec import ModelSpec


@dataclass(frozen=True)
class MixedBound:
    """The mixed term on one model's layers on one GPU: seconds of all layers per unit of each term."""
    latency: float
    s_per_wave: float
    s_per_empty_block: float
    s_per_block_token: float  # one query head's K/V of one token, streamed
    s_per_reread_token: float  # one token's K/V of every KV head, read again past the L2; 0: none charged
    miss_tokens: float  # the mean context past which a window's stream outgrows the L2
    grid: MixedGrid
    sm_count: int
    blocks_per_sm: int
    floors: tuple[float, ...]

    def terms(self) -> MixedTerms:
        return MixedTerms(self.latency, self.s_per_wave, self.s_per_empty_block, self.s_per_block_token,
                          self.s_per_reread_token, self.miss_tokens, self.grid.q_heads,
                          self.grid.q_heads / self.grid.kv_heads, self.sm_count, self.blocks_per_sm, self.floors)


def bind_mixed(fit: MixedFit, model: ModelSpec, tp: int, hw: HardwareSpec, dtype_bytes: int) -> MixedBound | None:
    """The term's constants for `model` at `tp` on `hw`; None where the sheet gives no SM count."""
    if hw.sm_count is None:
        return None
    layers = model.num_layers
    grid = MixedGrid.of_heads(max(model.num_heads // tp, 1), max(model.num_kv_heads // tp, 1), model.head_dim,
                              dtype_bytes)
    rereads = fit.miss_bandwidth_efficiency is not None and hw.l2_cache_bytes is not None
    slots = hw.sm_count * fit.blocks_per_sm
    reread_bytes = layers * grid.kv_heads * grid.head_bytes_per_token
    per_reread = reread_bytes / (hw.hbm_bytes_per_s * fit.miss_bandwidth_efficiency) if rereads else 0.0
    return MixedBound(layers * fit.latency_s, layers * fit.wave_latency_s, layers * fit.empty_block_s,
                      layers * grid.head_bytes_per_token / (hw.hbm_bytes_per_s * fit.bandwidth_efficiency),
                      per_reread, miss_tokens(grid, slots, hw.l2_cache_bytes) if rereads else math.inf, grid,
                      hw.sm_count, fit.blocks_per_sm, tuple(fit.floors(hw.sm_count)))


def empty_query_blocks(num_decodes: int, prefill_lens, q_heads: int) -> int:
    """The launch's query blocks that exit at once: every sequence gets the longest query's blocks."""
    blocks = [math.ceil(n / QUERY_ROWS_PER_BLOCK) for n in prefill_lens]
    return (max(blocks) * (num_decodes + len(blocks)) - sum(blocks) - num_decodes) * q_heads


def reference_mixed_decode(bound: MixedBound, num_decodes: int, prefill_lens, sum_decode_context):
    """The decodes' seconds of a mixed step, for its context sum or an array of them (a decode stretch's)."""
    slots = bound.sm_count * bound.blocks_per_sm
    equivalent, waves = equivalent_blocks(num_decodes * bound.grid.q_heads, bound.sm_count, bound.blocks_per_sm,
                                          list(bound.floors))
    empty = empty_query_blocks(num_decodes, prefill_lens, bound.grid.q_heads)
    latency = bound.latency + waves * bound.s_per_wave + empty * bound.s_per_empty_block
    mean = sum_decode_context / num_decodes
    t = equivalent * mean * bound.s_per_block_token + latency
    if bound.s_per_reread_token:
        rounds = group_rounds(bound.grid, slots, num_decodes + len(prefill_lens))
        t = t + np.where(mean > bound.miss_tokens, sum_decode_context * (rounds - 1.0) * bound.s_per_reread_token,
                         0.0)
    return t
