"""One GPU's measured attention from its LLMServingSim bundles: the attention fit (calibrate/parts/attention_fit.py)
on every bundle's and tp degree's pure decode and pure prefill rows together, and the mixed term
(calibrate/parts/attention_mixed.py) on their mixed rows (a prefill chunk and decodes in one call) beside the
prefill part that fit prices, where the GPU's sheet gives its SM count; with its held-out errors.

Beside the A100's judges (the longest contexts and largest chunks held out, a 5-fold split, in sample) it keeps two
more in `heldout`: `by_table`, each table (a model at a tp degree: a layer shape) predicted by a fit on the other
tables alone, which is what pricing a model the GPU never measured asks of it; and `mixed`, the mixed rows judged
(calibrate/judging/mixed_attention.py): the mixed term with the longest decode contexts held out, beside the decode
and prefill parts added (the cost model's price of a mixed step without the term) and the roofline.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from calibrate.hardware.hardware import HardwareSpec
from calibrate.judging.mixed_attention import fits_mixed, mixed_errors, mixed_rows, predict_launch, predict_sum
from calibrate.parts.attention_fit import AttentionFit, fit_attention, heldout_errors, predict, predict_waves
from calibrate.parts.attention_mixed_fit import fit_mixed
from calibrate.tables.bundle_attention import BundleAttention


def bundle_attention_fit(attentions: dict[str, BundleAttention], hw: HardwareSpec, source: str) -> AttentionFit:
    """`attentions`: each table's rows by its label (model and tp degree)."""
    tables = [a.table for a in attentions.values()]
    fit = with_mixed(fit_attention(tables, hw), list(attentions.values()), hw)
    heldout = {**heldout_errors(tables, hw), "by_table": by_table(attentions, hw),
               "mixed": mixed_errors(fit, list(attentions.values()), hw)}
    shapes = "; ".join(f"{label}: {a.table.shape.q_heads} query and {a.table.shape.kv_heads} KV heads per GPU, head "
                       f"dim {a.table.shape.head_dim}" for label, a in attentions.items())
    rows = "pure decode and prefill rows" + (", and the mixed rows," if fit.mixed is not None else "")
    measured = f"LLMServingSim attention.csv, {rows} of {shapes}; block size {tables[0].shape.block_size}"
    return replace(fit, heldout=heldout, source=f"{measured}; {source}" if source else measured)


def with_mixed(fit: AttentionFit, attentions: list[BundleAttention], hw: HardwareSpec) -> AttentionFit:
    """`fit` with the mixed term fitted on the tables' mixed rows, where there are any and the sheet gives the SMs."""
    if not fits_mixed(attentions, hw):
        return fit
    return replace(fit, mixed=fit_mixed(mixed_rows(fit, attentions, hw), hw))


def by_table(attentions: dict[str, BundleAttention], hw: HardwareSpec) -> dict:
    """Each table's mean |error| per kind, fitted on the other tables alone (none where there is one table); its
    mixed rows, where it has any, by the mixed term and as the decode and prefill parts added (`mixed_sum`)."""
    out: dict[str, dict] = {}
    if len(attentions) < 2:
        return out
    for label, held in attentions.items():
        fit = fit_without(attentions, label, hw)
        decode, prefill = predict(fit, held.table, hw)
        errors = {"decode": _mean(decode, held.table.decode), "prefill": _mean(prefill, held.table.prefill)}
        if fit.waves is not None:
            errors["decode_waves"] = _mean(predict_waves(fit, held.table, hw), held.table.decode)
        if len(held.mixed):
            if fit.mixed is not None:
                errors["mixed"] = _mean(predict_launch(fit, held, hw), held.mixed)
            errors["mixed_sum"] = _mean(predict_sum(fit, held, hw), held.mixed)
        out[label] = errors
    return out


def fit_without(attentions: dict[str, BundleAttention], label: str, hw: HardwareSpec) -> AttentionFit:
    """The fit (pure rows and mixed term) on every table but `label`'s."""
    others = [a for name, a in attentions.items() if name != label]
    return with_mixed(fit_attention([a.table for a in others], hw), others, hw)


def _mean(predicted: np.ndarray, rows) -> float:
    measured = rows["time_s"].to_numpy()
    return float(np.mean(np.abs(predicted - measured) / measured))
