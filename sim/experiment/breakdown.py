"""Where a run's time went: each iteration's breakdown as columns of its iterations file, their shares in its
summary, and its trace events (sim/experiment/trace_events.py).

Columns, after the iterations file's own: `device_s` and `host_s` (the cost model's two parts; with `swap_s`
they add up to duration_s), then `device_<kind>_s` for each kernel kind and `host_<term>_s` for each host term
the cost model priced (calibrate/clock/breakdown.py), 0 where an iteration had none of it. The summary's shares are
each column's total over the run's total duration_s: `share_device`, `share_host`, `share_swap`, and
`share_device_<kind>`, `share_host_<term>`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from calibrate.clock.breakdown import IterationTime
from sim.core.breakdown import BreakdownRecorder


class ReplicaRun(Protocol):
    """What a replica's run (sim.core.replica_run.ReplicaRun) tells of its iterations."""

    index: int
    num_iterations: int
    iteration_ends: Sequence[float]

PARTS = ("device_s", "host_s", "swap_s")


def recorded_steps(clock: BreakdownRecorder, runs: Sequence[ReplicaRun]) -> list[IterationTime]:
    """Every recorded iteration's breakdown, in the order of the run's merged records: each replica's in the order
    it ran them (the ones it priced, less one cut off by the horizon), a fleet's by end time then replica, as
    sim.core.merge.merged_records orders its records."""
    per_replica = []
    for run in runs:
        steps = clock.replica_steps(run.index)
        if len(steps) < run.num_iterations:
            raise RuntimeError(f"replica {run.index} recorded {run.num_iterations} iterations but priced "
                               f"{len(steps)}: its clock did not see every iteration")
        per_replica.append(steps[:run.num_iterations])
    steps = [step for part in per_replica for step in part]
    if len(runs) == 1:
        return steps
    ends = np.concatenate([np.asarray(run.iteration_ends, dtype=float) for run in runs])
    return [steps[i] for i in np.argsort(ends, kind="stable")]


def breakdown_columns(steps: Sequence[IterationTime]) -> dict[str, np.ndarray]:
    """The iterations' breakdown columns (the module's docstring), kinds and terms in the order first priced."""
    kinds = list(dict.fromkeys(kind for step in steps for kind in step.device))
    terms = list(dict.fromkeys(term for step in steps for term in step.host))
    columns = {
        "device_s": np.array([step.device_s for step in steps], dtype=float),
        "host_s": np.array([step.host_s for step in steps], dtype=float),
        "swap_s": np.array([step.swap_s for step in steps], dtype=float),
    }
    for kind in kinds:
        columns[f"device_{kind}_s"] = np.array([step.device.get(kind, 0.0) for step in steps], dtype=float)
    for term in terms:
        columns[f"host_{term}_s"] = np.array([step.host.get(term, 0.0) for step in steps], dtype=float)
    return columns


def breakdown_shares(columns: dict[str, np.ndarray], durations: np.ndarray) -> dict[str, float]:
    """Each column's share of the run's busy time (the iterations' total duration_s); NaN for a run that ran none."""
    total = float(np.sum(durations))
    return {f"share_{name[:-2]}": (float(np.sum(column)) / total if total > 0 else float("nan"))
            for name, column in columns.items()}
