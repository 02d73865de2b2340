"""Which rows of a one-layer profile may have read their weights from the L2 rather than from HBM.

LLMServingSim's profiler times a model cut to one decoder layer (calibrate/tables/llmservingsim_bundle.py), each
module over repeated forwards: a matmul whose weights and activations together fit in the GPU's L2 may find its
weights still there at the next repetition, and read them faster than HBM allows (Qwen3-30B-A3B's 17-21 MB attention
matmuls on the RTX PRO 6000's 128 MB at up to 1.4 x its 1,597 GB/s). A real model's layers read 10^9-10^11 bytes of
weights an iteration, which no L2 holds: every matmul reads them from HBM. So the rows that fit cannot tell the HBM
bandwidth share, and the fit keeps their bandwidth apart (calibrate/fitting/op_fit.py); the cost model prices a
model with the HBM share alone. The rule is a necessary condition, judged from the sheet's l2_cache_bytes: a row
that fits may still have read from HBM (other modules' traffic evicts it), one that does not cannot have read from
the L2. A sheet without l2_cache_bytes judges no row resident.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from calibrate.hardware.hardware import HardwareSpec
from calibrate.work.layer_ops import MATMULS

if TYPE_CHECKING:
    import pandas as pd


def l2_resident(ops: pd.DataFrame, hw: HardwareSpec) -> np.ndarray:
    """Per row: a matmul whose weights and activations (activation_bytes, where the table gives them) fit in the L2."""
    if hw.l2_cache_bytes is None or "activation_bytes" not in ops:
        return np.zeros(len(ops), dtype=bool)
    touched = ops["weight_bytes"].to_numpy(float) + ops["activation_bytes"].to_numpy(float)
    return (ops["op"].isin(MATMULS).to_numpy() & (touched <= hw.l2_cache_bytes))
