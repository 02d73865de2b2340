"""The spec-sheet roofline's default attention (RooflineCostModel without a measured fit, at RooflineParams'
shares) on one layer's measured rows, for judging a fit beside it: decode the K/V bytes read plus the paged
kernel's per-block term at the bandwidth share, prefill the causal FLOPs at the compute share plus the cached K/V
read, and a mixed step (a chunk and decodes in one call) the two added, as the roofline prices a chunked-prefill step.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from calibrate.clock.roofline import RooflineParams
from calibrate.hardware.hardware import HardwareSpec
from calibrate.parts.attention_fit import AttentionWork

if TYPE_CHECKING:
    import pandas as pd

    from calibrate.tables.attention_table import AttentionShape


DEFAULTS = RooflineParams()


def roofline_decode(batch, context, shape: AttentionShape, hw: HardwareSpec) -> np.ndarray:
    batch, context = np.asarray(batch, dtype=float), np.asarray(context, dtype=float)
    blocks = batch * np.ceil(context / shape.block_size)
    tokens = batch * context + blocks * DEFAULTS.block_read_overhead_tokens
    bandwidth = hw.hbm_bytes_per_s * DEFAULTS.bandwidth_efficiency
    return tokens * AttentionWork.of_table(shape).kv_bytes_per_token / bandwidth


def roofline_prefill(chunk, cached, shape: AttentionShape, hw: HardwareSpec) -> np.ndarray:
    n, c = np.asarray(chunk, dtype=float), np.asarray(cached, dtype=float)
    hidden = shape.q_heads * shape.head_dim
    bandwidth = hw.hbm_bytes_per_s * DEFAULTS.bandwidth_efficiency
    return (2 * n * (n + 2 * c) * hidden / (hw.peak_flops * DEFAULTS.compute_efficiency)
            + c * AttentionWork.of_table(shape).kv_bytes_per_token / bandwidth)


def roofline_mixed(rows: pd.DataFrame, shape: AttentionShape, hw: HardwareSpec) -> np.ndarray:
    """Mixed rows (chunk, cached, batch, context) as the roofline prices a chunked-prefill step."""
    return (roofline_decode(rows["batch"], rows["context"], shape, hw)
            + roofline_prefill(rows["chunk"], rows["cached"], shape, hw))
