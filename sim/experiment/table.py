"""Tables as named numpy columns, and the one CSV writer every table the simulator writes goes through.

The CSV format, whichever command writes the file (a run's records and summary, a fidelity or capacity table):
- a header line of the column names, then a line a row; "\n" line ends; UTF-8;
- a field quoted only where it must be (a comma, a quote or a line end in it: `csv.QUOTE_MINIMAL`; a row of one
  empty field is written "", not as a blank line);
- a float as Python's `repr` writes it: the shortest text that reads back as the same float64 in any tool
  (0.1, 1e-05, 1e+16, inf), so nothing is lost and nothing is padded; a missing value (NaN, None) empty;
- an int as its digits, a bool as True or False, any other value as `str(value)`.
A column's type is its numpy dtype; a list of rows is typed by sim/core/columns.py (ints with a missing value
or a float among them are floats, written 1.0). A pandas frame is written through the same writer
(frame_columns), so pandas is needed to build a frame, never to write one.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

import numpy as np

from sim.core.columns import infer_column

if TYPE_CHECKING:
    import pandas as pd

Columns = Mapping[str, np.ndarray]  # a table: each column's values, all of one length, in column order
CSV_CHUNK_ROWS = 100_000  # rows formatted at a time: bounds the text held for a large table


def rows_to_columns(rows: Sequence[Mapping], names: Sequence[str]) -> dict[str, np.ndarray]:
    """A list of rows (dicts; a missing key is None) as columns, each typed by infer_column."""
    return {name: infer_column([row.get(name) for row in rows]) for name in names}


def tuples_to_columns(rows: Sequence[tuple], names: Sequence[str]) -> dict[str, np.ndarray]:
    """Rows of values in the order of names (a record's, as recorded) as columns, each typed by infer_column."""
    if not rows:
        return {name: infer_column([]) for name in names}
    return {name: infer_column(list(values)) for name, values in zip(names, zip(*rows))}


def frame_columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """A pandas frame's columns: numpy's numbers and bools as they are, anything else (text, pandas' own
    dtypes) as objects with a missing value (NaN, None, pandas' NA) as None."""
    columns = {}
    for name in frame.columns:
        series = frame[name]
        if isinstance(series.dtype, np.dtype) and series.dtype.kind in "fiub":
            columns[str(name)] = series.to_numpy()
            continue
        values = series.to_numpy(dtype=object, copy=True)
        values[series.isna().to_numpy(dtype=bool)] = None
        columns[str(name)] = values
    return columns


def num_rows(columns: Columns) -> int:
    rows = getattr(columns, "num_rows", None)  # a table that merges a column when read (sim/experiment/merged.py)
    if rows is not None:
        return int(rows)
    return len(next(iter(columns.values()))) if columns else 0


def row_groups(columns: Columns, size: int) -> Iterator[Mapping[str, np.ndarray]]:
    """The table's rows `size` at a time: slices (views) of its columns, or its own row groups where it has them
    (sim/experiment/merged.py: a fleet's records merged a row group at a time)."""
    own = getattr(columns, "row_groups", None)
    if own is not None:
        yield from own(size)
        return
    for start in range(0, num_rows(columns), size):
        yield {name: column[start:start + size] for name, column in columns.items()}


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def float_text(value: float) -> str:
    """A float's field: its shortest round-trip text (repr), or empty for NaN."""
    return "" if value != value else repr(value)


def column_text(column: np.ndarray) -> list[str]:
    """A column's fields (the module's format)."""
    kind = column.dtype.kind
    if kind == "f":
        return [float_text(value) for value in column.astype(np.float64).tolist()]
    if kind in "iub":
        return [str(value) for value in column.tolist()]
    return ["" if _is_missing(value) else str(value) for value in column.tolist()]


def write_csv_text(columns: Columns, out: TextIO) -> None:
    """The table as CSV text (a header, then a line a row) into an open text file."""
    writer = csv.writer(out, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    writer.writerow(list(columns))
    for group in row_groups(columns, CSV_CHUNK_ROWS):
        writer.writerows(zip(*(column_text(column) for column in group.values())))


class Selected(Mapping[str, np.ndarray]):
    """The rows of a table where mask is true, a column taken when it is read (the column itself where the mask
    is true everywhere): a summary that reads a few columns of a large table never copies the rest."""

    def __init__(self, columns: Columns, mask: np.ndarray):
        self.columns, self.mask, self.everywhere = columns, mask, bool(mask.all())
        self.num_rows = int(mask.sum())

    def __getitem__(self, name: str) -> np.ndarray:
        column = np.asarray(self.columns[name])
        return column if self.everywhere else column[self.mask]

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)


def group_means(columns: Columns, keys: Sequence[str], values: Sequence[str]) -> list[dict]:
    """The mean of each of `values` per distinct combination of `keys`, as rows (the keys, then the means), groups
    in the order they first appear; each mean is present_mean's."""
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(*(columns[k].tolist() for k in keys))):
        groups.setdefault(key, []).append(i)
    out = []
    for key, rows in groups.items():
        row = dict(zip(keys, key))
        for name in values:
            row[name] = present_mean(columns[name][rows].astype(np.float64).tolist())
        out.append(row)
    return out


def present_mean(values: Sequence[float]) -> float:
    """The mean of the values that are not NaN (NaN where none is). Their sum is math.fsum's, exact before its
    one rounding, so a mean never depends on the order the runs finished in; an infinite value, or a sum past
    the largest float, is added as plain floats add (inf, or NaN for inf - inf)."""
    present = [value for value in values if value == value]
    if not present:
        return math.nan
    try:
        return math.fsum(present) / len(present)
    except (OverflowError, ValueError):
        return sum(present) / len(present)
