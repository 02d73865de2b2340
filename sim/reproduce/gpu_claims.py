"""Claims a GPU measures (Fig. 18a's kernel latency), predicted here by the cost model instead.

Fig. 18a times PagedAttention's decode kernel against FasterTransformer's dense one at batch 8 and
32, context 64-256. The cost model's counterpart: the attention share of a decode iteration over
16-token blocks, against the same with one block holding each whole sequence (as a dense kernel
reads it). A cost model whose attention does not depend on block size predicts no overhead.
"""
from __future__ import annotations

from calibrate.hardware import load_hardware
from calibrate.roofline import RooflineCostModel
from engine.core.batch import BatchShape
from engine.specs.loader import load_model_spec

BATCHES = (8, 32)
CONTEXTS = (64, 128, 256)
PAGED_BLOCK_SIZE = 16


def _attention_s(cost_model: RooflineCostModel, batch: int, context: int) -> float:
    """A decode iteration's time less the same iteration with nothing to attend to."""
    full = cost_model.iteration_time(BatchShape(decode_context_lens=(context,) * batch))
    bare = cost_model.iteration_time(BatchShape(decode_context_lens=(0,) * batch))
    return full - bare


def kernel_overhead_prediction(model: str = "opt-13b", hardware: str = "a100-40gb") -> tuple[float, float]:
    """The lowest and highest predicted paged-over-dense attention overhead, as fractions."""
    spec, hw = load_model_spec(model), load_hardware(hardware)
    paged = RooflineCostModel(spec, hw, block_size=PAGED_BLOCK_SIZE)
    overheads = []
    for context in CONTEXTS:
        dense = RooflineCostModel(spec, hw, block_size=context)
        overheads += [_attention_s(paged, b, context) / _attention_s(dense, b, context) - 1 for b in BATCHES]
    return min(overheads), max(overheads)
