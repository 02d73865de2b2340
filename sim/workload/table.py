"""Small CSV tables of numbers, read so that every error names the file, the row and the column.

Rows are numbered from 1 over data rows (the header and `#` comment lines do not count); the
message also gives the file line, so a user can jump straight to it.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import SpecError

# the largest whole numbers a float64 holds exactly: 2**53 (the CSV's numbers are parsed as floats)
MAX_COUNT = 2**53


@dataclass(frozen=True)
class Table:
    source: str
    header: tuple[str, ...]      # column names as written, stripped
    rows: list[list[str]]        # data rows as text
    lines: list[int]             # 1-based file line of each data row
    comments: tuple[str, ...]    # leading `#` lines, without the `#`

    def where(self, row_index: int) -> str:
        """Key naming a data row (0-based index in, 1-based row out)."""
        return f"row {row_index + 1}"

    def line_of(self, row_index: int) -> int:
        return self.lines[row_index]


def read_table(path: str | Path) -> Table:
    source = str(path)
    text = _read_text(path, source)
    lines = text.splitlines()
    comments, first = _leading_comments(lines)
    if first >= len(lines):
        raise SpecError(source, "", "empty file: expected a header line of column names, then data rows")
    header = tuple(name.strip() for name in next(csv.reader([lines[first]])))
    rows, row_lines = _data_rows(lines, first + 1, len(header), source)
    if not rows:
        raise SpecError(source, "", f"no data rows after the header {list(header)}")
    return Table(source, header, rows, row_lines, tuple(comments))


def _read_text(path: str | Path, source: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise SpecError(source, "", "file not found") from None
    except IsADirectoryError:
        raise SpecError(source, "", "is a folder; give the path of a CSV file") from None
    except UnicodeDecodeError as e:
        raise SpecError(source, "", f"not a UTF-8 text file ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise SpecError(source, "", f"cannot read it: {e.strerror or e}") from None


def _leading_comments(lines: list[str]) -> tuple[list[str], int]:
    comments, i = [], 0
    while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("#")):
        if lines[i].strip():
            comments.append(lines[i].lstrip()[1:].strip())
        i += 1
    return comments, i


def _data_rows(lines: list[str], start: int, width: int, source: str) -> tuple[list[list[str]], list[int]]:
    rows, row_lines = [], []
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    for row in reader:
        if not "".join(row).strip():  # a blank line, or only blank cells
            continue
        line = start + reader.line_num  # 1-based line of this row in the file
        if len(row) != width:
            raise SpecError(source, f"row {len(rows) + 1}",
                            f"(line {line}) has {len(row)} fields; the header has {width}")
        rows.append(row)
        row_lines.append(line)
    return rows, row_lines


def find_columns(table: Table, forms: dict[str, tuple[str, ...]]) -> tuple[str, list[int]]:
    """The first accepted form whose columns are all present (case-insensitive), and their indices."""
    lowered = [name.lower() for name in table.header]
    for form, columns in forms.items():
        if all(c.lower() in lowered for c in columns):
            return form, [lowered.index(c.lower()) for c in columns]
    accepted = "; ".join(",".join(cols) for cols in forms.values())
    best = max(forms.values(), key=lambda cols: sum(c.lower() in lowered for c in cols))
    missing = [c for c in best if c.lower() not in lowered]
    raise SpecError(table.source, f"column {missing[0]}",
                    f"missing; found columns {list(table.header)}; accepted forms: {accepted}")


def optional_column(table: Table, name: str) -> int | None:
    lowered = [c.lower() for c in table.header]
    return lowered.index(name.lower()) if name.lower() in lowered else None


def column_text(table: Table, index: int) -> list[str]:
    return [row[index].strip() for row in table.rows]


def numeric_column(table: Table, index: int, *, integer: bool) -> np.ndarray:
    """A column of non-negative numbers; whole numbers when `integer` (12.0 is accepted as 12)."""
    name = table.header[index]
    cells = column_text(table, index)
    try:
        values = np.array(cells, dtype=np.float64)
    except ValueError:
        values = None
    if values is None or not np.isfinite(values).all():
        bad = next(i for i, cell in enumerate(cells) if not _is_finite_number(cell))
        raise row_error(table, bad, name, f"{cells[bad]!r} is not a number")
    negative = np.flatnonzero(values < 0)
    if negative.size:
        raise row_error(table, negative[0], name, f"{cells[negative[0]]} is negative; values must be >= 0")
    if integer:
        fractional = np.flatnonzero(values != np.floor(values))
        if fractional.size:
            i = fractional[0]
            raise row_error(table, i, name, f"{cells[i]} is not a whole number of tokens")
        # checked as a number before it is an integer: a float past this cast to int64 wraps around,
        # and two counts this size still add up inside int64 (prompt + output against max_seq_len)
        huge = np.flatnonzero(values >= MAX_COUNT)
        if huge.size:
            i = huge[0]
            raise row_error(table, i, name, f"{cells[i]} is more than a count is read as (at most "
                            f"{MAX_COUNT - 1:,}, far past any model's max_seq_len)")
        return values.astype(np.int64)
    return values


def check_sorted(table: Table, values: np.ndarray, name: str) -> None:
    earlier = np.flatnonzero(np.diff(values) < 0)
    if earlier.size:
        i = earlier[0] + 1
        raise row_error(table, i, name, f"{table.rows[i][table.header.index(name)].strip()} is earlier than "
                         f"the row before it; rows must be in arrival order")


def _is_finite_number(cell: str) -> bool:
    try:
        return bool(np.isfinite(float(cell)))
    except ValueError:
        return False


def row_error(table: Table, row_index: int, column: str, message: str) -> SpecError:
    row_index = int(row_index)
    return SpecError(table.source, table.where(row_index),
                     f"(line {table.line_of(row_index)}) column {column}: {message}")
