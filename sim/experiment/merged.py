"""A fleet's iterations in the order they ended, read from its replicas' records as they are needed, never
held merged.

sim.core.merge.merged_records builds the fleet's records in memory: an hour of 64 replicas is 1.1 GB
of columns, on top of what the replicas hold (their files, where workers served them; their own records,
where this process did). A run needs less: its summary reads a few columns whole (one at a time), and its
iterations file is written a row group at a time. MergedIterations gives both, in merged_records' order
(by end time, simultaneous ends by replica, each replica's in its own order), so the same bytes come out:
- `fleet[name]`: one column, merged (as merged_records' column), held only by the caller;
- `row_groups(size)`: every column for `size` rows at a time. A replica's rows in a row group are a
  contiguous range of its own (its iterations end in the order it recorded them), read from its file or
  its records and placed where the merge puts them.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from engine.core.records import ITERATION_COLUMNS, ITERATION_TYPECODES
from sim.core.replica_run import ReplicaRun


class MergedIterations(Mapping[str, np.ndarray]):
    def __init__(self, runs: list[ReplicaRun]):
        self.runs = runs  # holds their files until this is let go of
        counts = np.array([run.num_iterations for run in runs], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(counts)])  # run r's rows: offsets[r] <= row < offsets[r + 1]
        ends = np.concatenate([np.asarray(run.iteration_ends, dtype=float) for run in runs])
        self.order = np.argsort(ends, kind="stable")  # merged row -> row of the runs end to end
        self.num_rows = len(self.order)

    def __getitem__(self, name: str) -> np.ndarray:
        i = ITERATION_COLUMNS.index(name)
        joined = np.empty(self.num_rows, dtype=ITERATION_TYPECODES[i])
        for run, start in zip(self.runs, self.offsets):
            run.column_into(i, joined[start:start + run.num_iterations])
        return joined[self.order]

    def __iter__(self) -> Iterator[str]:
        return iter(ITERATION_COLUMNS)

    def __len__(self) -> int:
        return len(ITERATION_COLUMNS)

    def row_groups(self, size: int) -> Iterator[dict[str, np.ndarray]]:
        """Every column for rows [a, a + size), a = 0, size, 2 size, ...: at most `size` rows held at a time."""
        for a in range(0, self.num_rows, size):
            rows = self.order[a:a + size]
            run_of = np.searchsorted(self.offsets, rows, side="right") - 1
            group = {name: np.empty(len(rows), dtype=code)
                     for name, code in zip(ITERATION_COLUMNS, ITERATION_TYPECODES)}
            for r in np.unique(run_of):
                at = np.flatnonzero(run_of == r)
                local = rows[at] - self.offsets[r]
                first, last = int(local.min()), int(local.max())
                for i, (name, code) in enumerate(zip(ITERATION_COLUMNS, ITERATION_TYPECODES)):
                    part = np.empty(last - first + 1, dtype=code)
                    self.runs[r].column_into(i, part, first)
                    group[name][at] = part[local - first]
            yield group

