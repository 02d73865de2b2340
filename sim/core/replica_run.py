"""What one replica's simulation leaves: its records and when each of its iterations ended, or its error."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.core.records import Records
from sim.core.replica_files import StoredRun, read_column_into


@dataclass
class ReplicaRun:
    """A replica's records, and when each of its iterations ended (to merge a fleet's records in time order). A
    replica served in a worker process left its iteration columns in a file (`stored`, sim/core/replica_files.py;
    `records` then holds its request rows alone), read column by column as the fleet's records are merged; `keep`
    holds the file's folder, removed when the last run holding it is let go of."""

    index: int
    records: Records
    iteration_ends: Sequence[float]
    stored: StoredRun | None = None
    keep: object = None

    @property
    def num_iterations(self) -> int:
        return len(self.iteration_ends)

    def column_into(self, i: int, out: np.ndarray, start: int = 0) -> None:
        """Iteration column i (ITERATION_TYPECODES' order) copied into `out`: its len(out) values from `start`."""
        if self.stored is None:
            column = self.records.iteration_columns[i]
            out[:] = np.frombuffer(column, dtype=column.typecode)[start:start + len(out)]
            return
        read_column_into(self.stored, i, out, start)


@dataclass
class ReplicaFailure:
    """A replica whose simulation raised `error` at simulated time `at_s` (picklable: it may come from a worker)."""

    index: int
    at_s: float
    error: Exception
