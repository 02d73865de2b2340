"""The mixed attention rows of an LLMServingSim bundle (a prefill chunk and decodes in one call), which no fit sees,
predicted as a cost model prices a chunked-prefill step: the decodes' part plus the prefill's part, each with its
own latency (calibrate/clock/roofline.py `_fitted_attention`). The decodes' part is the waves' where the fit has
them and the sheet gives the SM count, else the bytes-and-latency row.

vLLM runs both in one kernel launch, so the sum charges two latencies and two grids where the GPU ran one: its
error says how far the cost model's split of a mixed step is from the measured kernel.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from calibrate.hardware.hardware import HardwareSpec
from calibrate.parts.attention_fit import AttentionFit, AttentionWork, decode_grid

if TYPE_CHECKING:
    from calibrate.tables.bundle_attention import BundleAttention


def predict_mixed(fit: AttentionFit, attention: BundleAttention, hw: HardwareSpec) -> np.ndarray:
    """Each mixed row's seconds: its decodes' part plus its prefill's part."""
    rows, shape = attention.mixed, attention.table.shape
    work = AttentionWork.of_table(shape)
    if fit.waves is not None and hw.sm_count is not None:
        decode = fit.waves.decode_time(decode_grid(shape), hw, rows["batch"], rows["context"])
    else:
        decode = fit.decode_time(work, hw, rows["batch"].to_numpy(float) * rows["context"].to_numpy(float))
    return decode + fit.prefill_time(work, hw, rows["chunk"], rows["cached"])


def mixed_errors(fit: AttentionFit, attentions: list[BundleAttention], hw: HardwareSpec) -> dict:
    """Mean and p95 |relative error| and the signed mean over every mixed row, and the rows judged."""
    predicted = np.concatenate([predict_mixed(fit, a, hw) for a in attentions])
    time_s = np.concatenate([a.mixed["time_s"].to_numpy() for a in attentions])
    signed = (predicted - time_s) / time_s
    return {"mean": float(np.abs(signed).mean()), "p95": float(np.quantile(np.abs(signed), 0.95)),
            "signed_mean": float(signed.mean()), "rows": int(len(signed))}
