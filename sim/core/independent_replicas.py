"""A fleet whose replicas share nothing, simulated one replica at a time.

Behind the round-robin router request i goes to replica i % n whatever the replicas do, and without beam
searches (whose parents are drawn from the run's one Generator, in the order the replicas ask) no replica
reads another's state. Each replica can then be simulated alone, over its own requests, which it takes itself
(sim/core/known_arrivals.py) at the very times the shared router would hand them (its wakes, to the bit) and in
the same order against its iterations' ends, a tie included: the same decisions and records, and faster, since
one replica's state stays in the CPU's caches where 64 interleaved ones did not, no SimPy event is spent on an
iteration or an arrival, and replicas can be served in several processes at once. One replica is the fleet of
one, beam searches or not. An error in a replica is raised, the one the shared simulation would meet first
(the earliest in simulated time).
"""
from __future__ import annotations

import pickle
import shutil
import tempfile
import weakref
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import simpy

from engine.core.records import ITERATION_TYPECODES
from sim.core.known_arrivals import KnownArrivals
from sim.core.records import Records
from sim.core.replica import run_to_end
from sim.core.router import trace_requests
from sim.core.router_wakes import RouterWakes
from sim.executors.pool import stop_pool, worker_pool
from sim.workload.trace import Trace

if TYPE_CHECKING:
    from sim.core.beams import BeamParentModel
    from sim.core.simulate import FleetSetup


@dataclass
class ReplicaRun:
    """What one replica's simulation leaves: its records, and when each of its iterations ended (to merge a
    fleet's records in time order). A replica served in a worker process left its iteration columns in a file
    (`stored`; `records` then holds its request rows alone), read column by column as the fleet's records are
    merged; `keep` holds the file's folder, removed when the last run holding it is let go of."""

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
        with open(self.stored.path, "rb") as source:
            source.seek(_column_offset(i, self.stored.num_iterations) + start * out.itemsize)
            if source.readinto(memoryview(out).cast("B")) != out.nbytes:
                raise OSError(f"{self.stored.path}: replica {self.index}'s records end early")


@dataclass
class ReplicaFailure:
    """A replica whose simulation raised `error` at simulated time `at_s` (picklable: it may come from a worker)."""

    index: int
    at_s: float
    error: Exception


def serve_apart(trace: Trace, wakes: list[float], fleet: FleetSetup, jobs: int = 1,
                beams: BeamParentModel | None = None) -> list[ReplicaRun]:
    """Every replica simulated alone, in `jobs` processes (replica i in process i % jobs). A replica that fails
    raises its error; when several do, the one the shared simulation meets first: the earliest in simulated time
    (at the same instant, the lowest replica). beams: the beam searches' parents, for a fleet of one (several
    replicas draw from one Generator in the order of the shared clock)."""
    jobs = max(1, min(jobs, fleet.replicas))
    if jobs == 1:
        try:
            return _raise_first_failure(serve_replicas(trace, wakes, fleet, range(fleet.replicas), beams=beams))
        finally:
            if beams is not None:
                beams.settle()
    # the workers' files: removed with the last run that holds this (or at once, on an error)
    folder = WorkerFiles()
    pool = worker_pool(jobs)  # as a sweep's: workers that leave with their parent, Ctrl-C left to it
    try:
        parts = list(pool.map(_serve_to_files, *zip(*[(trace, wakes, fleet, range(j, fleet.replicas, jobs),
                                                        folder.path) for j in range(jobs)])))
    except BaseException:
        stop_pool(pool)
        folder.remove()
        raise
    pool.shutdown()
    try:
        _raise_first_failure([item for part in parts for item in part if isinstance(item, ReplicaFailure)])
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


def _raise_first_failure(served: list) -> list[ReplicaRun]:
    failures = [item for item in served if isinstance(item, ReplicaFailure)]
    if failures:
        raise min(failures, key=lambda failure: (failure.at_s, failure.index)).error
    return served


def serve_replicas(trace: Trace, wakes: list[float], fleet: FleetSetup, indices: Sequence[int],
                   keep: Callable[[ReplicaRun], ReplicaRun | StoredRun] = lambda run: run,
                   beams: BeamParentModel | None = None) -> list[ReplicaRun | StoredRun | ReplicaFailure]:
    """These replicas of the fleet, one at a time, each on its own clock. A replica that raises is a
    ReplicaFailure, and the others are still served: one of theirs may come first. `keep` takes each replica's
    run as it ends (a worker writes it to a file then, and holds one replica's records at a time, not all of its
    replicas'). beams: as serve_apart's."""
    fast_forward, runs = fleet.stretches(wakes), []
    router = fast_forward.router if fast_forward is not None else RouterWakes(wakes)  # a fleet's wakes, held once
    n = fleet.replicas
    for index in indices:
        env = simpy.Environment()
        own_wakes = fast_forward.by_replica[index] if fast_forward is not None and fast_forward.by_replica else \
            wakes[index::n]  # FastForward holds each replica's already
        arrivals = KnownArrivals(trace_requests(trace, range(index, len(trace), n)), own_wakes, router)
        replica = fleet.replica(env, index, fast_forward, beams, arrivals)
        failure = None
        try:
            run_to_end(env, [replica])
        except Exception as error:  # the shared simulation meets it too, unless another replica's comes first
            failure = ReplicaFailure(index, env.now, error)
        runs.append(failure or keep(ReplicaRun(index, replica.core.records, replica.iteration_ends)))
    return runs


@dataclass(frozen=True)
class StoredRun:
    """A ReplicaRun a worker wrote to a file for its parent (_write_run): what the parent needs to read it."""

    index: int
    path: str
    num_iterations: int


def _serve_to_files(trace: Trace, wakes: list[float], fleet: FleetSetup, indices: Sequence[int], folder: str
                    ) -> list[StoredRun | ReplicaFailure]:
    """serve_replicas in a worker: each replica's records go to a file in `folder`, not back through the pool's
    pipe (a pickled result is a second copy of the records in the worker and a third in the parent)."""
    runs = serve_replicas(trace, wakes, fleet, indices, keep=lambda run: _write_run(run, Path(folder)))
    return [run for run in runs if isinstance(run, (StoredRun, ReplicaFailure))]


def _write_run(run: ReplicaRun, folder: Path) -> StoredRun:
    """The iteration columns (ITERATION_TYPECODES' order), the iteration ends, then the request rows (served,
    and dropped unserved) pickled."""
    path = folder / f"replica-{run.index}.bin"
    columns = run.records.iteration_columns
    with open(path, "wb") as out:
        for column in columns:
            column.tofile(out)
        array("d", run.iteration_ends).tofile(out)
        pickle.dump((run.records.request_values, run.records.dropped_values), out, protocol=pickle.HIGHEST_PROTOCOL)
    return StoredRun(run.index, str(path), len(columns[0]))


def _column_offset(i: int, num_iterations: int) -> int:
    """Where iteration column i starts in a replica's file (the ends follow the last column)."""
    return num_iterations * sum(array(code).itemsize for code in ITERATION_TYPECODES[:i])


def _read_run(stored: StoredRun, keep: object) -> ReplicaRun:
    """A replica's request rows and iteration ends; its columns stay in the file until the merge reads them."""
    records = Records()
    with open(stored.path, "rb") as source:
        source.seek(_column_offset(len(ITERATION_TYPECODES), stored.num_iterations))
        ends = array("d")
        if stored.num_iterations:
            ends.fromfile(source, stored.num_iterations)
        records.request_values, records.dropped_values = pickle.load(source)
    return ReplicaRun(stored.index, records, ends, stored, keep)
