"""A replica's records in a file: how a worker process hands a replica it served back to its parent.

The iteration columns (ITERATION_TYPECODES' order), then the iteration ends, then the request rows (served, and
dropped unserved) pickled. A pickled result sent back through a pool's pipe would be a second copy of the records
in the worker and a third in the parent; from a file, the parent reads the request rows and the ends at once, and
each iteration column only as a fleet's records are merged (read_column_into).
"""
from __future__ import annotations

import pickle
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.core.records import ITERATION_TYPECODES
from sim.core.records import Records


@dataclass(frozen=True)
class StoredRun:
    """A replica's records a worker wrote to a file for its parent (write_run): what the parent needs to read it."""

    index: int
    path: str
    num_iterations: int


def write_run(index: int, records: Records, iteration_ends: Sequence[float], folder: Path) -> StoredRun:
    """Replica `index`'s records and when each of its iterations ended, written to a file in `folder`."""
    path = folder / f"replica-{index}.bin"
    columns = records.iteration_columns
    with open(path, "wb") as out:
        for column in columns:
            column.tofile(out)
        array("d", iteration_ends).tofile(out)
        pickle.dump((records.request_values, records.dropped_values), out, protocol=pickle.HIGHEST_PROTOCOL)
    return StoredRun(index, str(path), len(columns[0]))


def read_rows(stored: StoredRun) -> tuple[Records, array]:
    """The replica's request rows (its records, without iteration columns) and its iteration ends; the columns stay
    in the file."""
    records = Records()
    with open(stored.path, "rb") as source:
        source.seek(_column_offset(len(ITERATION_TYPECODES), stored.num_iterations))
        ends = array("d")
        if stored.num_iterations:
            ends.fromfile(source, stored.num_iterations)
        records.request_values, records.dropped_values = pickle.load(source)
    return records, ends


def read_column_into(stored: StoredRun, i: int, out: np.ndarray, start: int = 0) -> None:
    """Iteration column i (ITERATION_TYPECODES' order) read into `out`: its len(out) values from `start`."""
    with open(stored.path, "rb") as source:
        source.seek(_column_offset(i, stored.num_iterations) + start * out.itemsize)
        if source.readinto(memoryview(out).cast("B")) != out.nbytes:
            raise OSError(f"{stored.path}: replica {stored.index}'s records end early")


def _column_offset(i: int, num_iterations: int) -> int:
    """Where iteration column i starts in a replica's file (the ends follow the last column)."""
    return num_iterations * sum(array(code).itemsize for code in ITERATION_TYPECODES[:i])
