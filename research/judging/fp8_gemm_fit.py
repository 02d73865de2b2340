"""An FP8 GEMM model (calibrate/parts/fp8_gemm.py) fitted to published GEMM timings of one kernel.

The GEMM on the rows timed without the input's quantization, least squares on relative error as op_fit.py
fits the 16-bit matmuls: for a fixed ridge efficiency and latency, (t - latency)^p = (c/s_c)^p + (m/s_b)^p is
linear in s_c^-p and s_b^-p, a non-negative least squares per grid point (calibrate/maths/nnls.py), the best point
kept and the grid refined around it. Unlike op_fit, a share is at most 1: s^-p = 1 + y with y >= 0, so a kernel
the rows never show compute-bound is charged the sheet's peak, not a rate past it. Where the rows never leave the
memory-bound side of the ridge they cannot tell the compute share at all (any share past the one they bound fits
them alike): a share `held` (Held) is kept at its value, and the rest fitted around it.

The quantization where a row timed it beside the same GEMM without it (the same source, kernel and shape):
their difference is a latency plus the quantization's bytes at a share of the bandwidth (at most 1), fitted
non-negatively on the error relative to the quantized row's time; the share held where `held` gives it (rows that
move a few MB cannot tell a share of 0.3 from 1).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibrate.fitting.op_fit import LATENCY_GRID_S, RIDGE_GRID
from calibrate.hardware.hardware import HardwareSpec
from calibrate.maths.nnls import nnls
from calibrate.maths.ridge import bent_roofs, best_on_grid, ridge_exponent
from calibrate.parts.fp8_gemm import Fp8GemmFit, fp8_rate
from calibrate.work.fp8_gemms import gemm_bytes, gemm_flops, quant_bytes
from research.judging.gemm_table import GemmRow


@dataclass(frozen=True)
class Held:
    """Shares the rows cannot tell, kept at these values instead of fitted (None: fitted)."""
    compute_efficiency: float | None = None
    quant_bandwidth_efficiency: float | None = None


def fit_fp8_gemms(rows: list[GemmRow], hw: HardwareSpec, held: Held = Held()) -> Fp8GemmFit:
    """The GEMM on `rows` timed without quantization, the quantization on the pairs among `rows`, each share
    `held` gives kept at its value."""
    gemms = [row for row in rows if not row.quantizes]
    if not gemms:
        raise ValueError("no GEMM rows timed without the input's quantization to fit the GEMM on")
    compute, memory, time_s = _work_at_peak(gemms, hw)
    work = (compute, memory, time_s, held.compute_efficiency)
    ridge, latency = _best_on_grid(*work, RIDGE_GRID, LATENCY_GRID_S)
    ridge, latency = _best_on_grid(*work, np.round(np.arange(ridge - 0.02, ridge + 0.0201, 0.002), 4),
                                   np.arange(max(latency - 1e-6, 0.0), latency + 1.01e-6, 0.2e-6))
    compute_eff, bandwidth_eff, _ = _fit_at(*work, ridge, latency)
    return Fp8GemmFit(compute_eff, bandwidth_eff, ridge, float(latency),
                      fit_quant(rows, hw, held.quant_bandwidth_efficiency))


def quant_pairs(rows: list[GemmRow]) -> list[tuple[GemmRow, GemmRow]]:
    """(quantized, not) rows of the same source, kernel and shape: what isolates the quantization."""
    plain = {(r.source, r.kernel, r.m, r.n, r.k): r for r in rows if not r.quantizes}
    pairs = [(r, plain.get((r.source, r.kernel, r.m, r.n, r.k))) for r in rows if r.quantizes]
    return [(quantized, alone) for quantized, alone in pairs if alone is not None]


def fit_quant(rows: list[GemmRow], hw: HardwareSpec, held: float | None = None) -> tuple[float, float] | None:
    """(latency_s, bandwidth_efficiency) of the input's quantization, the share `held` where given; None where no
    pair isolates it."""
    pairs = quant_pairs(rows)
    if not pairs:
        return None
    total = np.array([quantized.time_s for quantized, _ in pairs])
    added = total - np.array([alone.time_s for _, alone in pairs])
    at_peak = np.array([quant_bytes(q.m, q.k) for q, _ in pairs], dtype=float) / hw.hbm_bytes_per_s
    if held is not None:  # added - at_peak / share = latency
        latency = nnls((1.0 / total)[:, None], (added - at_peak / held) / total)[0]
        return float(latency), float(held)
    # added = latency + at_peak (1 + y): the share 1 / (1 + y) is at most 1
    x = np.column_stack([np.ones(len(pairs)), at_peak]) / total[:, None]
    scale = x.max(axis=0)
    latency, extra = nnls(x / scale, (added - at_peak) / total) / scale
    return float(latency), float(1.0 / (1.0 + extra))


def _work_at_peak(rows: list[GemmRow], hw: HardwareSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's compute and memory seconds at the sheet's peaks, and its measured seconds."""
    m, n, k = (np.array([getattr(r, key) for r in rows], dtype=float) for key in ("m", "n", "k"))
    return (gemm_flops(m, n, k) / fp8_rate(hw), gemm_bytes(m, n, k) / hw.hbm_bytes_per_s,
            np.array([r.time_s for r in rows]))


def _best_on_grid(compute, memory, time_s, held, ridges, latencies) -> tuple[float, float]:
    return best_on_grid(lambda ridge, latency: _fit_at(compute, memory, time_s, held, ridge, latency)[2],
                        ridges, latencies, time_s.min(), (float(ridges[0]), 0.0))


def _fit_at(compute, memory, time_s, held: float | None, ridge: float, latency: float) -> tuple[float, float, float]:
    """Shares at a given ridge efficiency and latency (the compute share `held` where given), and the mean squared
    relative error."""
    p = ridge_exponent(ridge)
    terms = np.column_stack([(compute / (time_s - latency)) ** p, (memory / (time_s - latency)) ** p])
    if held is not None:  # its term moves to the known side: 1 - (c / s_c)^p / rest^p = (m / s_b)^p / rest^p
        terms[:, 0] *= held ** -p
    fitted = terms if held is None else terms[:, 1:]
    scale = fitted.max(axis=0)
    scale[scale == 0] = 1.0
    extra = nnls(fitted / scale, 1.0 - terms.sum(axis=1)) / scale
    shares = (1.0 + extra) ** (-1.0 / p)
    compute_eff, bandwidth_eff = (held, shares[0]) if held is not None else shares
    predicted = latency + bent_roofs(compute / compute_eff, memory / bandwidth_eff, p)
    return float(compute_eff), float(bandwidth_eff), float(np.mean(((predicted - time_s) / time_s) ** 2))
