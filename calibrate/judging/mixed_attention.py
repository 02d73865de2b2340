"""The mixed attention rows of an LLMServingSim bundle (a prefill chunk and decodes in one call), judged three ways:

  launch    the prefill part (the pure rows' fit) plus the mixed term (calibrate/parts/attention_mixed.py) fitted on
            the mixed rows: the longest decode contexts held out from a fit on the others (and, where there are
            several tables, each table from a fit on the others: calibrate/judging/bundle_attention_fit.by_table)
  sum       the decodes' part plus the prefill's part, each with its own latency, as the cost model priced a
            chunked-prefill step before the mixed term (the decodes in waves where the fit has them and the sheet
            gives the SM count): never fitted on mixed rows
  roofline  RooflineParams' defaults on the same rows (calibrate/judging/roofline_attention.py)
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from calibrate.hardware.hardware import HardwareSpec
from calibrate.judging.roofline_attention import roofline_mixed
from calibrate.parts.attention_fit import HELD_OUT_SHARE, AttentionFit, AttentionWork, decode_grid
from calibrate.parts.attention_mixed import MixedGrid
from calibrate.parts.attention_mixed_fit import MixedRows, fit_mixed

if TYPE_CHECKING:
    from calibrate.tables.bundle_attention import BundleAttention


def mixed_grid(attention: BundleAttention) -> MixedGrid:
    shape = attention.table.shape
    return MixedGrid.of_heads(shape.q_heads, shape.kv_heads, shape.head_dim)


def prefill_part(fit: AttentionFit, attention: BundleAttention, hw: HardwareSpec) -> np.ndarray:
    rows = attention.mixed
    return fit.prefill_time(AttentionWork.of_table(attention.table.shape), hw, rows["chunk"], rows["cached"])


def predict_sum(fit: AttentionFit, attention: BundleAttention, hw: HardwareSpec) -> np.ndarray:
    """Each mixed row's seconds as its decodes' part plus its prefill's part."""
    rows, shape = attention.mixed, attention.table.shape
    if fit.waves is not None and hw.sm_count is not None:
        decode = fit.waves.decode_time(decode_grid(shape), hw, rows["batch"], rows["context"])
    else:
        work = AttentionWork.of_table(shape)
        decode = fit.decode_time(work, hw, rows["batch"].to_numpy(float) * rows["context"].to_numpy(float))
    return decode + prefill_part(fit, attention, hw)


def predict_launch(fit: AttentionFit, attention: BundleAttention, hw: HardwareSpec) -> np.ndarray:
    """Each mixed row's seconds as its prefill part plus the fit's mixed term."""
    if fit.mixed is None:
        raise ValueError("the fit has no mixed term")
    rows = attention.mixed
    return prefill_part(fit, attention, hw) + fit.mixed.decode_time(mixed_grid(attention), hw, rows["batch"],
                                                                    rows["context"], rows["chunk"])


def mixed_rows(fit: AttentionFit, attentions: list[BundleAttention], hw: HardwareSpec,
               masks: list[np.ndarray] | None = None) -> list[MixedRows]:
    """Each table's mixed rows (those its mask keeps) with their prefill part as `fit` prices it."""
    out = []
    for i, attention in enumerate(attentions):
        keep = np.ones(len(attention.mixed), dtype=bool) if masks is None else masks[i]
        out.append(MixedRows(attention.mixed[keep], mixed_grid(attention), prefill_part(fit, attention, hw)[keep]))
    return out


def fits_mixed(attentions: list[BundleAttention], hw: HardwareSpec) -> bool:
    """Whether a mixed term can be fitted: mixed rows, and the SM count their waves are counted over."""
    return hw.sm_count is not None and any(len(a.mixed) for a in attentions)


def region_masks(attentions: list[BundleAttention]) -> list[np.ndarray]:
    """The held-out region of each table: its mixed rows at HELD_OUT_SHARE of its longest decode context and above."""
    return [(a.mixed["context"] >= HELD_OUT_SHARE * a.mixed["context"].max()).to_numpy() for a in attentions]


def region_fit(fit: AttentionFit, attentions: list[BundleAttention], hw: HardwareSpec):
    """The mixed term fitted on every mixed row outside the held-out region (beside `fit`'s prefill part)."""
    return fit_mixed(mixed_rows(fit, attentions, hw, [~m for m in region_masks(attentions)]), hw)


def errors(predicted: np.ndarray, time_s: np.ndarray) -> dict:
    signed = (predicted - time_s) / time_s
    return {"mean": float(np.abs(signed).mean()), "p95": float(np.quantile(np.abs(signed), 0.95)),
            "signed_mean": float(signed.mean()), "rows": int(len(signed))}


def mixed_errors(fit: AttentionFit, attentions: list[BundleAttention], hw: HardwareSpec) -> dict:
    """The judges of the module docstring on every mixed row and on the held-out region: the launch's where `fit`
    has a mixed term, the sum's and the roofline's always."""
    time_s = np.concatenate([a.mixed["time_s"].to_numpy() for a in attentions])
    region = np.concatenate(region_masks(attentions))
    bounds = sorted({int(HELD_OUT_SHARE * a.mixed["context"].max()) for a in attentions})
    judged = {"region": f"contexts >= {bounds[0]}" + (f"-{bounds[-1]} (each table's own)" if len(bounds) > 1 else "")}
    for way, predicted in (("sum", np.concatenate([predict_sum(fit, a, hw) for a in attentions])),
                           ("roofline", np.concatenate([roofline_mixed(a.mixed, a.table.shape, hw)
                                                        for a in attentions]))):
        judged[way] = {"in_sample": errors(predicted, time_s), "heldout_region": errors(predicted[region],
                                                                                      time_s[region])}
    if fit.mixed is not None:
        held = replace(fit, mixed=region_fit(fit, attentions, hw))
        predicted = np.concatenate([predict_launch(held, a, hw) for a in attentions])
        everywhere = np.concatenate([predict_launch(fit, a, hw) for a in attentions])
        judged.update(heldout_region=errors(predicted[region], time_s[region]),
                      trained_region=errors(predicted[~region], time_s[~region]),
                      in_sample=errors(everywhere, time_s))
    return judged
