"""The paper's two micro-ablations as a cost model prices them (for `servesim reproduce` and benchmarks/):

- Fig. 18a: decode attention of one layer, the paged kernel against a dense one, at batch 8 and 32 and
  contexts 64-256 (the roofline: dense reads the K/V; paged adds its work per KV block).
- Fig. 19a: what a preempted sequence costs to bring back, by block size: recomputing it (a prefill of
  its tokens, the same at every block size), or swapping its blocks out and in (a latency per copy plus
  the bytes, so small blocks pay many copies).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from calibrate.clock.costmodel import CostModel
from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.hardware.hardware import HardwareSpec
from engine.core.batch import BatchShape
from engine.core.blocks import blocks_for
from engine.core.spec import ModelSpec

FIG18A_BATCHES = (8, 32)
FIG18A_CONTEXTS = (64, 128, 256)
FIG19A_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_PARAMS = RooflineParams()
FIG19A_TOKENS = 512  # the sequence preempted: ShareGPT's mean prompt + output is ~450-500 tokens (Fig. 11)


@dataclass(frozen=True)
class KernelLatency:
    batch: int
    context: int
    block_size: int
    dense_s: float  # one layer's decode attention, dense kernel
    paged_s: float  # the same through block tables

    @property
    def ratio(self) -> float:
        return self.paged_s / self.dense_s


def kernel_latency(model: ModelSpec, hw: HardwareSpec, batch: int, context: int, block_size: int = 16,
                   params: RooflineParams = DEFAULT_PARAMS, tp: int = 1, dtype_bytes: int = 2) -> KernelLatency:
    decodes = BatchShape(decode_context_lens=(context,) * batch)
    per_layer = []
    for paged in (False, True):
        roofline = RooflineCostModel(model, hw, tp, dtype_bytes, block_size, params, paged=paged)
        per_layer.append(roofline.decode_attention_time(decodes) / model.num_layers)
    return KernelLatency(batch, context, block_size, *per_layer)


def fig18a_frame(model: ModelSpec, hw: HardwareSpec, block_size: int = 16,
                 params: RooflineParams = DEFAULT_PARAMS) -> pd.DataFrame:
    """Fig. 18a's shapes: batch, context, dense_us, paged_us, ratio (one layer, as the paper timed)."""
    rows = []
    for batch in FIG18A_BATCHES:
        for context in FIG18A_CONTEXTS:
            k = kernel_latency(model, hw, batch, context, block_size, params)
            rows.append({"batch": batch, "context": context, "block_size": block_size,
                         "dense_us": k.dense_s * 1e6, "paged_us": k.paged_s * 1e6, "ratio": k.ratio})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class PreemptionCost:
    block_size: int
    recompute_s: float  # a prefill of the sequence's tokens
    swap_out_s: float
    swap_in_s: float

    @property
    def swap_in_out_s(self) -> float:
        return self.swap_out_s + self.swap_in_s


def preemption_cost(cost_model: CostModel, tokens: int, block_size: int) -> PreemptionCost:
    """Bringing back a preempted `tokens`-long sequence under `cost_model` (at `block_size`): the re-prefill
    recompute runs, against its blocks moved out and later in again (each way the same copies)."""
    recompute = cost_model.iteration_time(BatchShape(prefill_lens=(tokens,)))
    swap = cost_model.swap_time(blocks_for(tokens, block_size))
    return PreemptionCost(block_size, recompute, swap, swap)


def fig19a_frame(cost_at: Callable[[int], CostModel], tokens: int = FIG19A_TOKENS,
                 block_sizes: tuple[int, ...] = FIG19A_BLOCK_SIZES) -> pd.DataFrame:
    """Fig. 19a's curves: block_size, recompute_ms, swap_in_ms, swap_out_ms, swap_in_out_ms, for a cost
    model at each block size (`cost_at(block_size)`, e.g. `roofline_at(opt13b, a100)`)."""
    rows = []
    for block_size in block_sizes:
        c = preemption_cost(cost_at(block_size), tokens, block_size)
        rows.append({"block_size": block_size, "tokens": tokens, "recompute_ms": c.recompute_s * 1e3,
                     "swap_in_ms": c.swap_in_s * 1e3, "swap_out_ms": c.swap_out_s * 1e3,
                     "swap_in_out_ms": c.swap_in_out_s * 1e3})
    return pd.DataFrame(rows)


def roofline_at(model: ModelSpec, hw: HardwareSpec, tp: int = 1, dtype_bytes: int = 2,
                params: RooflineParams = DEFAULT_PARAMS) -> Callable[[int], CostModel]:
    """The roofline of (model, hw) at a given block size."""
    return lambda block_size: RooflineCostModel(model, hw, tp, dtype_bytes, block_size, params)
