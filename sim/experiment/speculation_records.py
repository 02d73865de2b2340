"""A speculating run's iteration columns of its own: each iteration's tokens proposed and accepted
(engine.core.records.SPECULATIVE_COLUMNS), in the order of the run's merged records."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.core.records import SPECULATIVE_COLUMNS
from sim.core.replica_run import ReplicaRun


def speculation_columns(runs: Sequence[ReplicaRun]) -> dict[str, np.ndarray]:
    """Each replica's pairs in the order it ran them, a fleet's by end time then replica, as
    sim.core.merge.merged_records orders the iterations (the replicas are served in this process: run.py)."""
    pairs: list[tuple[int, int]] = []
    for run in runs:
        values = run.records.speculation_values
        if len(values) != run.num_iterations:
            raise RuntimeError(f"replica {run.index} recorded {run.num_iterations} iterations but {len(values)} "
                               "speculation counts")
        pairs.extend(values)
    table = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if len(runs) > 1:
        ends = np.concatenate([np.asarray(run.iteration_ends, dtype=float) for run in runs])
        table = table[np.argsort(ends, kind="stable")]
    return {name: np.ascontiguousarray(table[:, i]) for i, name in enumerate(SPECULATIVE_COLUMNS)}
