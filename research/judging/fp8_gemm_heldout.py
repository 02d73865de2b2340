"""The FP8 GEMM fit judged on rows it never saw, beside today's spec-sheet roofline on the same rows.

Two ways to hold rows out of one kernel's table:
- the largest batch: every row at or past the largest M timed without quantization (a fit on the smaller Ms
  predicts the larger ones: where prefills go);
- each weight shape (N, K) in turn: a fit on the other shapes predicts every row of this one; each row is
  predicted once, and the figures pool all of them.
A held-out row enters nothing of the fit that predicts it. The roofline is how the simulator priced a W8A8 matmul
before this fit: the larger of its FLOPs at 68% of the sheet's FP8 rate and its FP8 weights at 76% of HBM
bandwidth (RooflineParams' defaults), no latency, no activation bytes, no quantization.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibrate.clock.roofline import RooflineParams
from calibrate.hardware.hardware import HardwareSpec
from calibrate.parts.fp8_gemm import Fp8GemmFit, fp8_rate
from calibrate.work.fp8_gemms import FP8_BYTES, gemm_flops
from research.judging.fp8_gemm_fit import Held, fit_fp8_gemms
from research.judging.gemm_table import GemmRow

P95 = 95
FREE = Held()  # every share fitted
ROOFLINE = RooflineParams()  # its defaults: how W8A8 was priced before


@dataclass(frozen=True)
class FoldErrors:
    """Held-out rows, each one's prediction by the fit that never saw it and the roofline's, and those fits."""
    name: str
    what: str  # how the fold reads in a sentence: "at the largest M"
    rows: list[GemmRow]
    predicted_s: np.ndarray
    roofline_s: np.ndarray
    fits: list[Fp8GemmFit]

    @property
    def errors(self) -> np.ndarray:
        return _ape(self.predicted_s, self.rows)

    @property
    def roofline_errors(self) -> np.ndarray:
        return _ape(self.roofline_s, self.rows)

    def summary(self) -> dict:
        """The fold's figures as the fit file stores them."""
        return {"what": self.what, "rows": len(self.rows), "mean": _round(self.errors.mean()),
                "p95": _round(np.percentile(self.errors, P95)), "roofline_mean": _round(self.roofline_errors.mean()),
                "roofline_p95": _round(np.percentile(self.roofline_errors, P95))}


def largest_m(rows: list[GemmRow], hw: HardwareSpec, held: Held = FREE) -> FoldErrors:
    """Every row at or past the largest M timed without quantization, predicted by a fit on the others (the
    shares `held` gives kept, as fit_fp8_gemms keeps them)."""
    cut = max(row.m for row in rows if not row.quantizes)
    out = [row for row in rows if row.m >= cut]
    fit = fit_fp8_gemms([row for row in rows if row.m < cut], hw, held)
    return FoldErrors("largest_m", f"at M >= {cut}", out, predict(fit, out, hw), roofline_time(out, hw), [fit])


def each_shape(rows: list[GemmRow], hw: HardwareSpec, held: Held = FREE) -> FoldErrors:
    """Every row predicted by a fit on the other weight shapes, one shape held out at a time."""
    out, predicted, fits = [], [], []
    for shape in sorted({row.shape for row in rows}):
        fit = fit_fp8_gemms([row for row in rows if row.shape != shape], hw, held)
        these = [row for row in rows if row.shape == shape]
        out += these
        predicted.append(predict(fit, these, hw))
        fits.append(fit)
    return FoldErrors("each_shape", "across weight shapes", out, np.concatenate(predicted),
                      roofline_time(out, hw), fits)


def predict(fit: Fp8GemmFit, rows: list[GemmRow], hw: HardwareSpec) -> np.ndarray:
    m, n, k = (np.array([getattr(r, key) for r in rows], dtype=float) for key in ("m", "n", "k"))
    return fit.time(m, n, k, np.array([r.quantizes for r in rows]), hw)


def roofline_time(rows: list[GemmRow], hw: HardwareSpec, params: RooflineParams = ROOFLINE) -> np.ndarray:
    """Today's W8A8 roofline per GEMM: max(FLOPs at its compute share of the FP8 rate, FP8 weights at its share
    of HBM bandwidth)."""
    m, n, k = (np.array([getattr(r, key) for r in rows], dtype=float) for key in ("m", "n", "k"))
    compute = gemm_flops(m, n, k) / (fp8_rate(hw) * params.compute_efficiency)
    weights = FP8_BYTES * n * k / (hw.hbm_bytes_per_s * params.bandwidth_efficiency)
    return np.maximum(compute, weights)


def _ape(predicted_s: np.ndarray, rows: list[GemmRow]) -> np.ndarray:
    measured = np.array([row.time_s for row in rows])
    return np.abs(predicted_s - measured) / measured


def _round(share: float) -> float:
    return round(float(share), 4)
