"""A column of Python values as the numpy array pandas would make of it, so that a table written from numpy
columns (sim/experiment/table.py) has the bytes pandas' to_csv writes, and a simulation's request records
(sim/core/records.py) the types of the frame pandas would build from them.

A column's type is inferred from its values as pandas infers a column of a list of rows: all bools -> bool,
all ints -> int64, ints, floats and None -> float64 (None is NaN), anything else -> object.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def infer_column(values: Sequence) -> np.ndarray:
    """A list of one column's values as the array pandas would make of it (the module's doc)."""
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
