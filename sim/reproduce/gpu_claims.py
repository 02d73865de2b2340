"""Claims a GPU measures (Fig. 18a's kernel latency), predicted here by the cost model instead.

Fig. 18a times PagedAttention's decode kernel against FasterTransformer's dense one at batch 8 and
32, context 64-256. The cost model's counterpart: the attention share of a decode iteration over
16-token blocks, against the same with one block holding each whole sequence (as a dense kernel
reads it). A cost model whose attention does not depend on block size predicts no overhead.
"""
from __future__ import annotations

from collections.abc import Callable

from calibrate.costmodel import CostModel
from calibrate.hardware import load_hardware
from calibrate.roofline import RooflineCostModel
from engine.core.batch import BatchShape
from engine.specs.loader import load_model_spec

BATCHES = (8, 32)
CONTEXTS = (64, 128, 256)
PAGED_BLOCK_SIZE = 16


def opt13b_a100_roofline(block_size: int) -> CostModel:
    return RooflineCostModel(load_model_spec("opt-13b"), load_hardware("a100-40gb"), block_size=block_size)


def _attention_s(cost_model: CostModel, batch: int, context: int) -> float:
    """A decode iteration's time less the same iteration with nothing to attend to."""
    full = cost_model.iteration_time(BatchShape(decode_context_lens=(context,) * batch))
    bare = cost_model.iteration_time(BatchShape(decode_context_lens=(0,) * batch))
    return full - bare


def kernel_overhead_prediction(cost_model_for: Callable[[int], CostModel] = opt13b_a100_roofline
                               ) -> dict[tuple[int, int], float]:
    """Predicted paged-over-dense attention overhead, a fraction, by (batch, context) of Fig. 18a;
    `cost_model_for(block_size)` gives the cost model at a block size."""
    paged = cost_model_for(PAGED_BLOCK_SIZE)
    overheads = {}
    for context in CONTEXTS:
        dense = cost_model_for(context)
        for batch in BATCHES:
            overheads[batch, context] = _attention_s(paged, batch, context) / _attention_s(dense, batch, context) - 1
    return overheads
