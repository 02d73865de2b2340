"""Tables as named numpy columns, written as CSV byte for byte as pandas writes them, without pandas.

`servesim run` keeps its records in typed columns and writes them as CSV; pandas would cost the run its
import (pandas 3 imports pyarrow whenever it is installed: together ~0.4 s and ~50 MB) for work numpy
and the csv module do. What must not change is a single byte of the files: the rules below are those of
`DataFrame.to_csv(index=False)` (pandas 3, `get_values_for_csv`), and tests/sim/experiment/test_table.py
checks them against pandas itself.

- A column's type is inferred from its values as pandas infers a column of a list of rows
  (sim/core/columns.py, which a simulation's request records are typed by too).
- float64 is written as numpy's `astype(str)` writes it (the shortest text that reads back the same
  value), NaN as an empty field; int64 and bool as `str`; an object value as `str`, None or NaN empty.
- Rows go through `csv.writer` with minimal quoting and "\n" line ends, as pandas' writer does.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TextIO

import numpy as np

from sim.core.columns import infer_column

Columns = Mapping[str, np.ndarray]  # a table: each column's values, all of one length, in column order
CSV_CHUNK_ROWS = 100_000  # rows formatted at a time: bounds the text held for a large table


def rows_to_columns(rows: Sequence[Mapping], names: Sequence[str]) -> dict[str, np.ndarray]:
    """A list of rows (dicts; a missing key is None) as columns, each inferred as pandas would."""
    return {name: infer_column([row.get(name) for row in rows]) for name in names}


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


def column_text(column: np.ndarray) -> list[str]:
    """A column's fields as to_csv writes them."""
    kind = column.dtype.kind
    if kind == "f":
        text = column.astype(str)
        text[np.isnan(column)] = ""
        return text.tolist()
    if kind in "iub":
        return column.astype(str).tolist()
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
    """`groupby(keys, sort=False)[values].mean()` as rows (the keys, then the means), groups in the order they
    first appear. Each mean is a compensated (Kahan) sum over the group's values that are not NaN, divided by
    their count, as pandas' group mean computes it, so the means are pandas' to the bit; NaN for none."""
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(*(columns[k].tolist() for k in keys))):
        groups.setdefault(key, []).append(i)
    out = []
    for key, rows in groups.items():
        row = dict(zip(keys, key))
        for name in values:
            row[name] = _kahan_mean(columns[name][rows].astype(np.float64).tolist())
        out.append(row)
    return out


def _kahan_mean(values: list[float]) -> float:
    total = compensation = 0.0
    count = 0
    for value in values:
        if value != value:  # NaN: skipped
            continue
        count += 1
        y = value - compensation
        t = total + y
        compensation = t - total - y
        if compensation != compensation:  # an infinite value: pandas drops the compensation
            compensation = 0.0
        total = t
    return total / count if count else math.nan
