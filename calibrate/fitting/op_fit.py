"""The linear part of an iteration (calibrate/parts/linear_model.py) fitted to per-operation GPU timings.

The fit is least squares on relative error, as `calibrate fit`'s. For a fixed ridge efficiency and
matmul latency, (t - latency)^p = (FLOPs/F)^p + (bytes/B)^p is linear in F^-p and B^-p: a
non-negative least squares per grid point, the best point kept, then the grid refined around it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from calibrate.clock.roofline import RooflineParams
from calibrate.hardware.hardware import HardwareSpec
from calibrate.maths.nnls import nnls
from calibrate.maths.ridge import bent_roofs, best_on_grid, ridge_exponent
from calibrate.parts.linear_model import LinearFit
from calibrate.work.layer_ops import MATMULS

RIDGE_GRID = np.round(np.arange(0.40, 0.995, 0.02), 3)  # then refined in steps of 0.002
LATENCY_GRID_S = np.arange(0.0, 12.5e-6, 1e-6)  # then refined in steps of 0.2 us


def today_roofline(params: RooflineParams | None = None) -> LinearFit:
    """The spec-sheet roofline's linear part: a hard max over the matmuls, nothing for elementwise kernels."""
    params = params or RooflineParams()
    return LinearFit(params.compute_efficiency, params.bandwidth_efficiency, params.ridge_efficiency)


def octave_weights(tokens) -> np.ndarray:
    """A weight per row so that every octave of token counts (1, 2-3, 4-7, ...) weighs the same in the fit:
    tables measure every 8 or 32 tokens, which would otherwise let 1,000-4,000-token prefills outweigh the
    decode batches of 1-64 that serving runs most."""
    octave = np.floor(np.log2(np.asarray(tokens, dtype=float))).astype(int)
    counts = np.bincount(octave - octave.min())
    return 1.0 / counts[octave - octave.min()]


def fit_linear(ops: pd.DataFrame, hw: HardwareSpec, resident: np.ndarray | None = None) -> LinearFit:
    """`resident`: per row of `ops`, a matmul that may have read its weights from the L2 (calibrate/fitting/
    l2_resident.py): their bandwidth is fitted apart (resident_bandwidth_efficiency), so that the bandwidth share is
    the HBM rows' alone; None (or no row set): every row's is one share, as before."""
    return fit_linear_on([(ops, hw)], None if resident is None else [resident])


def fit_linear_on(parts: list[tuple[pd.DataFrame, HardwareSpec]],
                  resident: list[np.ndarray] | None = None) -> LinearFit:
    """One linear part for tables measured on several GPUs: every share is of the row's own GPU's spec sheet
    and every latency is in seconds, common to all. Each GPU's octaves of token counts weigh alike, so a GPU
    with more models measured does not outweigh one with fewer. `resident`: each part's rows' L2 judgement
    (fit_linear)."""
    gemm = [(ops[ops["op"].isin(MATMULS)], hw) for ops, hw in parts]
    if all(rows.empty for rows, _ in gemm):
        raise ValueError("no matmul rows to fit")
    in_l2 = (np.concatenate([r[ops["op"].isin(MATMULS).to_numpy()] for r, (ops, _) in zip(resident, parts)])
             if resident is not None else None)
    gemm = [(rows, hw) for rows, hw in gemm if not rows.empty]
    compute = np.concatenate([rows["flops"].to_numpy(float) / hw.peak_flops for rows, hw in gemm])  # s at peak
    memory = np.concatenate([rows["weight_bytes"].to_numpy(float) / hw.hbm_bytes_per_s for rows, hw in gemm])
    time_s = np.concatenate([rows["time_s"].to_numpy(float) for rows, _ in gemm])
    weight = np.concatenate([octave_weights(rows["tokens"]) for rows, _ in gemm])
    reads = Reads.of(memory, in_l2)
    ridge, latency = _best_on_grid(compute, reads, time_s, weight, RIDGE_GRID, LATENCY_GRID_S)
    ridge, latency = _best_on_grid(compute, reads, time_s, weight,
                                   np.round(np.arange(ridge - 0.02, ridge + 0.0201, 0.002), 4),
                                   np.arange(max(latency - 1e-6, 0.0), latency + 1.01e-6, 0.2e-6))
    compute_eff, bandwidth_eff, _, l2_eff = _fit_at(compute, reads, time_s, weight, ridge, latency)
    kernels = sorted({op for ops, _ in parts for op in ops["op"].unique() if op not in MATMULS})
    elementwise = {op: _fit_elementwise([(ops[ops["op"] == op], hw) for ops, hw in parts]) for op in kernels}
    return LinearFit(float(compute_eff), float(bandwidth_eff), float(ridge), float(latency), elementwise,
                     None if l2_eff is None else float(l2_eff))


class Reads:
    """The matmuls' weight reads at the peak bandwidth: from HBM, and apart the rows that may have read them from
    the L2 (None: no row judged so, every read one share)."""

    def __init__(self, hbm: np.ndarray, l2: np.ndarray | None):
        self.hbm, self.l2 = hbm, l2

    @classmethod
    def of(cls, memory: np.ndarray, in_l2: np.ndarray | None) -> Reads:
        if in_l2 is None or not in_l2.any():
            return cls(memory, None)
        return cls(np.where(in_l2, 0.0, memory), np.where(in_l2, memory, 0.0))


def _best_on_grid(compute, reads: Reads, time_s, weight, ridges, latencies) -> tuple[float, float]:
    return best_on_grid(lambda ridge, latency: _fit_at(compute, reads, time_s, weight, ridge, latency)[2],
                        ridges, latencies, time_s.min(), (1.0, 0.0))


def _fit_at(compute, reads: Reads, time_s, weight, ridge: float,
            latency: float) -> tuple[float, float, float, float | None]:
    """Efficiencies at a given ridge efficiency and latency (compute, HBM, and the L2 rows' where judged), and the
    weighted mean squared relative error. A row reads from HBM or from the L2, never both, so its memory term is
    one of the two: (t - latency)^p stays linear in each share's -p-th power."""
    p = ridge_exponent(ridge)
    rest = time_s - latency
    root = np.sqrt(weight)
    columns = [(compute / rest) ** p, (reads.hbm / rest) ** p] + ([] if reads.l2 is None else [(reads.l2 / rest) ** p])
    x = np.column_stack(columns) * root[:, None]
    scale = x.max(axis=0)
    scale[scale == 0] = 1.0
    coef = nnls(x / scale, root) / scale
    if not (coef > 0).all():
        return 1.0, 1.0, np.inf, None
    compute_eff, bandwidth_eff = coef[:2] ** (-1.0 / p)
    memory = reads.hbm / bandwidth_eff
    l2_eff = None
    if reads.l2 is not None:
        l2_eff = coef[2] ** (-1.0 / p)
        memory = memory + reads.l2 / l2_eff
    predicted = latency + bent_roofs(compute / compute_eff, memory, p)
    return compute_eff, bandwidth_eff, float(np.average(((predicted - time_s) / time_s) ** 2, weights=weight)), l2_eff


def _fit_elementwise(parts: list[tuple[pd.DataFrame, HardwareSpec]]) -> tuple[float, float]:
    """(latency_s, bandwidth_efficiency): least squares on relative error, octaves weighted alike, both
    non-negative; the share of bandwidth at most 1 (a kernel faster than the peak is charged the peak)."""
    parts = [(rows, hw) for rows, hw in parts if not rows.empty]
    time_s = np.concatenate([rows["time_s"].to_numpy(float) for rows, _ in parts])
    root = np.sqrt(np.concatenate([octave_weights(rows["tokens"]) for rows, _ in parts]))
    at_peak = np.concatenate([rows["moved_bytes"].to_numpy(float) / hw.hbm_bytes_per_s for rows, hw in parts])
    x = np.column_stack([np.ones(len(time_s)), at_peak]) / time_s[:, None] * root[:, None]
    scale = x.max(axis=0)
    latency, per_peak_second = nnls(x / scale, root) / scale
    if per_peak_second < 1.0:  # faster than the peak: charge the peak and refit the latency
        per_peak_second = 1.0
        latency = max(float(nnls((root / time_s)[:, None], root * (1.0 - at_peak / time_s))[0]), 0.0)
    return float(latency), float(1.0 / per_peak_second)
