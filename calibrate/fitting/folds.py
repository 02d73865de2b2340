"""Which fold of a k-fold held-out error each row falls in: one assignment that the device part's fit
(calibrate/fitting/fit.py) and the host part's (calibrate/fitting/host_fit.py) both use."""
from __future__ import annotations

import numpy as np
import pandas as pd


def assign_folds(raw: pd.DataFrame, folds: int, seed: int) -> np.ndarray:
    """A fold number per row, stratified by iteration kind, so every kind is in every fold."""
    rng = np.random.default_rng(seed)
    fold = np.zeros(len(raw), dtype=int)
    for _, idx in raw.groupby("kind", sort=True).indices.items():
        fold[rng.permutation(idx)] = np.arange(len(idx)) % folds
    return fold
