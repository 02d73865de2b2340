"""A bundle's linear part fitted with the L2 rule (calibrate/fitting/l2_resident.py) and held out.

The rows whose matmuls may have read their weights from the L2 get a bandwidth share of their own in the fit, so that
the share the cost model prices a real model with is the HBM rows'. Each held-out judge predicts a row as it was
measured (the L2 rows at their own share: they are what the profile measured), and is kept twice: on every row, and
on the rows a real model's layer reads from HBM (`from_hbm`): the matmuls no L2 could hold, and the layers whose
every matmul is one of them. A sheet without l2_cache_bytes judges no row in the L2: the fit and judges are
calibrate/judging/op_import.py's.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from calibrate.fitting.l2_resident import l2_resident
from calibrate.fitting.op_fit import fit_linear
from calibrate.hardware.hardware import HardwareSpec
from calibrate.judging.op_import import Errors, with_errors
from calibrate.parts.linear_model import LinearFit
from calibrate.work.layer_ops import MATMULS

KEYS = ["model", "tp", "tokens"]


def resident(ops: pd.DataFrame, hw: HardwareSpec) -> np.ndarray:
    return l2_resident(ops, hw)


def bundle_fit(ops: pd.DataFrame, hw: HardwareSpec) -> LinearFit:
    """The linear part, its L2 rows' bandwidth apart."""
    return fit_linear(ops, hw, resident(ops, hw))


def as_measured(ops: pd.DataFrame, fit: LinearFit, in_l2: np.ndarray) -> pd.DataFrame:
    """`ops` with each L2 row's weight bytes scaled so that the fit's HBM share prices them at its L2 share (where
    it has one: a fit that saw no L2 row prices every row at HBM's)."""
    if fit.resident_bandwidth_efficiency is None or not in_l2.any():
        return ops
    scale = np.where(in_l2, fit.bandwidth_efficiency / fit.resident_bandwidth_efficiency, 1.0)
    return ops.assign(weight_bytes=ops["weight_bytes"].to_numpy(float) * scale)


def predicted(fit: LinearFit, ops: pd.DataFrame, hw: HardwareSpec, in_l2: np.ndarray) -> tuple[np.ndarray,
                                                                                                pd.DataFrame]:
    """(each op's seconds, each layer's) as measured."""
    measured = as_measured(ops, fit, in_l2)
    return fit.predict_ops(measured, hw), fit.predict_layers(measured, hw)


def bundle_heldout(ops: pd.DataFrame, hw: HardwareSpec, by: str, fit_on=bundle_fit) -> Errors:
    """Every row predicted by a fit (`fit_on`: with the L2 rule, or without it) on the other values of `by`."""
    in_l2 = resident(ops, hw)
    ops_s, layers = np.zeros(len(ops)), []
    for value in sorted(ops[by].unique()):
        test = (ops[by] == value).to_numpy()
        fit = fit_on(ops[~test], hw)
        ops_s[test], layer_s = predicted(fit, ops[test], hw, in_l2[test])
        layers.append(layer_s)
    return with_errors(ops, pd.concat(layers, ignore_index=True), ops_s, hw)


def bundle_in_sample(fit: LinearFit, ops: pd.DataFrame, hw: HardwareSpec) -> Errors:
    ops_s, layers = predicted(fit, ops, hw, resident(ops, hw))
    return with_errors(ops, layers, ops_s, hw)


def from_hbm(errors: Errors, hw: HardwareSpec) -> dict | None:
    """`errors` summed up on the rows a real model reads from HBM: the matmuls no L2 could hold, per operation, and
    per iteration the layers all of whose matmuls are such (where any is); None where the sheet judged no row in the
    L2 (every row is then one)."""
    in_l2 = resident(errors.ops, hw)
    if not in_l2.any():
        return None
    ops = errors.ops[~in_l2 & errors.ops["op"].isin(MATMULS).to_numpy()]
    out = {"matmuls": _spread(ops["predicted_s"], ops["time_s"]),
           "per_op": {op: float(rows["ape"].mean()) for op, rows in ops.groupby("op", sort=False)}}
    touched = errors.ops.assign(in_l2=in_l2).groupby(KEYS, as_index=False)["in_l2"].any()
    layers = errors.layers.merge(touched, on=KEYS, how="left")
    layers = layers[~layers["in_l2"].fillna(False).astype(bool)]
    if not layers.empty:
        out["per_iteration"] = _spread(layers["predicted_s"], layers["time_s"])
    return out


def _spread(predicted, time_s) -> dict:
    signed = (np.asarray(predicted, dtype=float) - np.asarray(time_s, dtype=float)) / np.asarray(time_s, dtype=float)
    return {"mape": float(np.abs(signed).mean()), "p95_ape": float(np.quantile(np.abs(signed), 0.95)),
            "signed_mean": float(signed.mean()), "rows": int(len(signed))}


def l2_rows(ops: pd.DataFrame, hw: HardwareSpec) -> dict:
    """What the profile keeps of the rule: the L2 judged by, and how many matmul rows fit in it of how many."""
    return {"l2_cache_bytes": hw.l2_cache_bytes, "matmul_rows_in_l2": int(resident(ops, hw).sum()),
            "matmul_rows": int(ops["op"].isin(MATMULS).sum())}
