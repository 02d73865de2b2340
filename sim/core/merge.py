"""A fleet's records merged into one: its replicas' iterations in the order they ended."""
from __future__ import annotations

from array import array

import numpy as np

from engine.core.records import ITERATION_TYPECODES
from sim.core.records import Records
from sim.core.replica_run import ReplicaRun


def merged_records(runs: list[ReplicaRun]) -> Records:
    """One replica's records as they are; a fleet's in the order its iterations ended, simultaneous ends by
    replica (each replica keeps its own records, since a stretch writes its iterations when it ends).

    Column by column: a replica served in a worker hands its column over from its file, so the fleet's
    records are held once (and one column twice, while it is ordered), not once per replica and again merged."""
    if len(runs) == 1 and runs[0].stored is None:
        return runs[0].records
    records = Records()
    for run in runs:
        records.request_values.extend(run.records.request_values)
        records.dropped_values.extend(run.records.dropped_values)
    order = np.argsort(np.concatenate([np.asarray(run.iteration_ends, dtype=float) for run in runs]), kind="stable")
    records.set_iteration_columns([merged_column(runs, i, typecode, order)
                                   for i, typecode in enumerate(ITERATION_TYPECODES)])
    return records


def merged_column(runs: list[ReplicaRun], i: int, typecode: str, order: np.ndarray) -> array:
    """Iteration column i of every replica, end to end, then taken in `order` into the merged array's own
    memory (no copy of the taken values first)."""
    joined = np.empty(len(order), dtype=typecode)
    start = 0
    for run in runs:
        run.column_into(i, joined[start:start + run.num_iterations])
        start += run.num_iterations
    merged = array(typecode, [0]) * len(order)
    if len(order):
        np.take(joined, order, out=np.frombuffer(merged, dtype=typecode))
    return merged
