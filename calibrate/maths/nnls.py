"""Non-negative least squares (Lawson & Hanson 1974), so calibration needs no SciPy."""
from __future__ import annotations

import numpy as np


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None, tol: float = 1e-12) -> np.ndarray:
    """argmin ||a x - b|| subject to x >= 0."""
    m, n = a.shape
    max_iter = max_iter or 30 * n
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = a.T @ (b - a @ x)
    for _ in range(max_iter):
        if passive.all() or w[~passive].max(initial=-np.inf) <= tol:
            break
        j = np.argmax(np.where(passive, -np.inf, w))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > tol).all():
                x = z
                break
            blocking = passive & (z <= tol)
            alpha = np.min(x[blocking] / (x[blocking] - z[blocking]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        w = a.T @ (b - a @ x)
    return x


def relative_nnls(columns: np.ndarray, time_s: np.ndarray) -> np.ndarray:
    """Coefficients >= 0 minimising the sum of squared relative errors of columns @ coef against time_s; columns
    are scaled to 1 so that a term in bytes and one in seconds weigh alike in the solver."""
    x = columns / time_s[:, None]
    scale = x.max(axis=0)
    scale[scale == 0] = 1.0
    return nnls(x / scale, np.ones(len(time_s))) / scale
