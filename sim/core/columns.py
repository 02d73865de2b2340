"""A column of Python values as a typed numpy array: the type a table's column is written by
(sim/experiment/table.py) and a simulation's request records are kept in (sim/core/records.py).

The type follows from the values: all bools -> bool, all ints -> int64, ints, floats and None -> float64
(None is NaN: a column of numbers with one missing stays numeric), anything else -> object.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def infer_column(values: Sequence) -> np.ndarray:
    """A list of one column's values as a typed array (the module's doc)."""
    kinds = {type(value) for value in values}
    if kinds and kinds <= {bool, np.bool_}:
        return np.array(values, dtype=bool)
    if kinds and kinds <= {int, np.int64}:
        return np.array(values, dtype=np.int64)
    if kinds and kinds <= {int, float, np.int64, np.float64, type(None)} and kinds & {float, np.float64, int, np.int64}:
        return np.array([math.nan if value is None else value for value in values], dtype=np.float64)
    column = np.empty(len(values), dtype=object)
    column[:] = list(values)
    return column
