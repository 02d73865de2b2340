"""A measured table's numeric columns, checked row by row: a bad cell is one line naming the row, its line in the
file and the column, and what is valid there."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.errors import SpecError

if TYPE_CHECKING:
    import pandas as pd


def row_where(row: int, column: str) -> str:
    """Where a 0-based data row is: its row number and its line in the file (the header is line 1)."""
    return f"row {row + 1} (line {row + 2}), column {column}"


def checked_column(table: pd.DataFrame, column: str, source: str, low: float, whole: bool = False,
                   low_open: bool = False) -> np.ndarray:
    """The column as numbers at or above `low` (above it where `low_open`), whole where `whole`."""
    import pandas as pd

    values = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values) | ((values <= low) if low_open else (values < low))
    if whole:
        bad |= np.isfinite(values) & (values != np.round(values))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        valid = f"a whole number {bound}" if whole else f"a number {bound}"
        raise SpecError(source, row_where(row, column), f"{table[column].iloc[row]!r} is not {valid}")
    return values.astype(int) if whole else values
