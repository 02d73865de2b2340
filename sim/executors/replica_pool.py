"""A fleet's replicas served apart in worker processes (sim/core/independent_replicas.py), replica i in process
i % jobs, with the same records as in one process.

Each worker writes a replica's records to a file as soon as that replica is served (sim/core/replica_files.py),
not back through the pool's pipe, and the parent reads its columns from there as it merges the fleet's records.
The workers are a sweep's kind (sim/executors/pool.py): they leave with their parent, Ctrl-C left to it.
"""
from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sim.core.independent_replicas import raise_first_failure, serve_replicas
from sim.core.replica_files import StoredRun, read_rows, write_run
from sim.core.replica_run import ReplicaFailure, ReplicaRun
from sim.executors.pool import stop_pool, worker_pool
from sim.workload.trace import Trace

if TYPE_CHECKING:
    from sim.core.fleet import FleetSetup


class ProcessReplicaPool:
    """`jobs` worker processes (at least 2; no pool serves in this process), started for each fleet served."""

    def __init__(self, jobs: int):
        if jobs < 2:
            raise ValueError(f"a replica pool of {jobs} processes: it needs at least 2 (without one, the replicas "
                             "are served in this process)")
        self.jobs = jobs

    def serve(self, trace: Trace, wakes: list[float], fleet: FleetSetup) -> list[ReplicaRun]:
        """Every replica of the fleet, in replica order (sim.core.independent_replicas.ReplicaPool)."""
        jobs = min(self.jobs, fleet.replicas)
        # the workers' files: removed with the last run that holds this (or at once, on an error)
        folder = WorkerFiles()
        pool = worker_pool(jobs)
        try:
            parts = list(pool.map(_serve_to_files, *zip(*[(trace, wakes, fleet, range(j, fleet.replicas, jobs),
                                                            folder.path) for j in range(jobs)])))
        except BaseException:
            stop_pool(pool)
            folder.remove()
            raise
        pool.shutdown()
        try:
            raise_first_failure([item for part in parts for item in part if isinstance(item, ReplicaFailure)])
            runs = [_read_run(item, folder) for part in parts for item in part if isinstance(item, StoredRun)]
        except BaseException:
            folder.remove()
            raise
        return sorted(runs, key=lambda run: run.index)


class WorkerFiles:
    """A folder for the workers' records, removed by remove(), or when the last run holding this is let go of
    (or at exit)."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="servesim-replicas-")
        self.remove = weakref.finalize(self, shutil.rmtree, self.path, ignore_errors=True)


def _serve_to_files(trace: Trace, wakes: list[float], fleet: FleetSetup, indices: Sequence[int], folder: str
                    ) -> list[StoredRun | ReplicaFailure]:
    """serve_replicas in a worker: each replica's records go to a file in `folder`."""
    runs = serve_replicas(trace, wakes, fleet, indices,
                          keep=lambda run: write_run(run.index, run.records, run.iteration_ends, Path(folder)))
    return [run for run in runs if isinstance(run, (StoredRun, ReplicaFailure))]


def _read_run(stored: StoredRun, keep: object) -> ReplicaRun:
    """A replica's request rows and iteration ends; its columns stay in the file until the merge reads them."""
    records, ends = read_rows(stored)
    return ReplicaRun(stored.index, records, ends, stored, keep)
