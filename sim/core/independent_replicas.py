"""A fleet whose replicas share nothing, simulated one replica at a time.

Behind the round-robin router request i goes to replica i % n whatever the replicas do, and without beam
searches (whose parents are drawn from the run's one Generator, in the order the replicas ask) no replica
reads another's state. Each replica can then be simulated alone, over its own requests, handed over at
the very times the shared router would hand them (its wakes, to the bit): the same decisions and records,
and faster, since one replica's state stays in the CPU's caches where 64 interleaved ones did not, and
replicas can be served in several processes at once.

One thing alone cannot reproduce: an iteration ending at exactly the time the router hands the replica a
request. Which of the two SimPy processes then runs first depends on event ids that differ between the
shared simulation and the replica's own. Where that happens (a float tie: rare) serve_apart gives up and
the caller simulates the fleet together. That tie is the one fallback: an error in a replica is raised, the
one the shared simulation would meet first (the earliest in simulated time), and an error of this path's own
is raised too, not hidden behind a second simulation.
"""
from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import simpy

from engine.core.records import ITERATION_TYPECODES
from sim.core.fast_forward import Alarm
from sim.core.replica import Replica, run_to_end
from sim.core.router import trace_requests
from sim.executors.pool import stop_pool, worker_pool
from sim.experiment.records import Records
from sim.workload.trace import Trace

if TYPE_CHECKING:
    from sim.core.simulate import FleetSetup


@dataclass
class ReplicaRun:
    """What one replica's simulation leaves: its records, and when each of its iterations ended (to merge a
    fleet's records in time order)."""

    index: int
    records: Records
    iteration_ends: Sequence[float]


@dataclass
class ReplicaFailure:
    """A replica whose simulation raised `error` at simulated time `at_s` (picklable: it may come from a worker)."""

    index: int
    at_s: float
    error: Exception


def serve_apart(trace: Trace, wakes: list[float], fleet: FleetSetup, jobs: int = 1) -> list[ReplicaRun] | None:
    """Every replica simulated alone, in `jobs` processes (replica i in process i % jobs); None only when one of
    them ended an iteration exactly when a request reached it (see the module's docstring). A replica that fails
    raises its error; when several do, the one the shared simulation meets first: the earliest in simulated time
    (at the same instant, the lowest replica)."""
    jobs = max(1, min(jobs, fleet.replicas))
    if jobs == 1:
        served = serve_replicas(trace, wakes, fleet, range(fleet.replicas))
        if served is None:
            return None
        return _raise_first_failure(served)
    pool = worker_pool(jobs)  # as a sweep's: workers that leave with their parent, Ctrl-C left to it
    try:
        parts = list(pool.map(_serve_packed, *zip(*[(trace, wakes, fleet, range(j, fleet.replicas, jobs))
                                                     for j in range(jobs)])))
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown()
    if any(part is None for part in parts):
        return None
    _raise_first_failure([item for part in parts for item in part if isinstance(item, ReplicaFailure)])
    runs = []
    for part in parts:  # each replica's bytes let go of as soon as its columns hold them
        while part:
            runs.append(_unpacked(part.pop()))
    return sorted(runs, key=lambda run: run.index)


def _raise_first_failure(served: list) -> list[ReplicaRun]:
    failures = [item for item in served if isinstance(item, ReplicaFailure)]
    if failures:
        raise min(failures, key=lambda failure: (failure.at_s, failure.index)).error
    return served


def serve_replicas(trace: Trace, wakes: list[float], fleet: FleetSetup, indices: Sequence[int]
                   ) -> list[ReplicaRun | ReplicaFailure] | None:
    """These replicas of the fleet, one at a time, each on its own clock; None at an arrival tie. A replica
    that raises is a ReplicaFailure, and the others are still served: one of theirs may come first."""
    fast_forward, runs = fleet.stretches(wakes), []
    for index in indices:
        env = simpy.Environment()
        replica = fleet.replica(env, index, fast_forward)
        own_wakes = wakes[index::fleet.replicas]
        env.process(replica_arrivals(env, trace, replica, range(index, len(trace), fleet.replicas), own_wakes))
        failure = None
        try:
            run_to_end(env, [replica])
        except Exception as error:  # the shared simulation meets it too, unless another replica's comes first
            failure = ReplicaFailure(index, env.now, error)
        if not set(own_wakes).isdisjoint(replica.iteration_ends):
            return None
        runs.append(failure or ReplicaRun(index, replica.core.records, replica.iteration_ends))
    return runs


# a ReplicaRun between processes: its index, request rows, iteration columns and ends as bytes
PackedRun = tuple[int, list[tuple], list[bytes], bytes]


def _serve_packed(trace: Trace, wakes: list[float], fleet: FleetSetup, indices: Sequence[int]
                  ) -> list[PackedRun | ReplicaFailure] | None:
    runs = serve_replicas(trace, wakes, fleet, indices)
    if runs is None:
        return None
    return [run if isinstance(run, ReplicaFailure) else
            (run.index, run.records.request_values, [bytes(column) for column in run.records.iteration_columns],
             array("d", run.iteration_ends).tobytes()) for run in runs]


def _unpacked(packed: PackedRun) -> ReplicaRun:
    index, request_values, columns, ends = packed
    records = Records()
    records.request_values = request_values
    records.set_iteration_columns([_array(code, data) for code, data in zip(ITERATION_TYPECODES, columns)])
    return ReplicaRun(index, records, _array("d", ends))


def _array(typecode: str, data: bytes) -> array:
    values = array(typecode)
    values.frombytes(data)
    return values


def replica_arrivals(env: simpy.Environment, trace: Trace, replica: Replica, request_ids: range,
                     wakes: list[float]):
    """A SimPy process: the router of sim.core.router.arrivals as one replica sees it, handing it each of its
    requests at the time the shared router would (an absolute time: now + (wake - now) need not be wake)."""
    for request, wake in zip(trace_requests(trace, request_ids), wakes):
        if wake > env.now:
            yield Alarm(env, wake, lambda _: None)
        replica.submit(request)
    replica.close()
