"""A fleet whose replicas share nothing, simulated one replica at a time.

Behind the round-robin router request i goes to replica i % n whatever the replicas do, and without beam
searches (whose parents are drawn from the run's one Generator, in the order the replicas ask) no replica
reads another's state. Each replica can then be simulated alone, over its own requests, which it takes itself
(sim/core/known_arrivals.py) at the very times the shared router would hand them (its wakes, to the bit) and in
the same order against its iterations' ends, a tie included: the same decisions and records, and faster, since
one replica's state stays in the CPU's caches where 64 interleaved ones did not, and no SimPy event is spent on
an iteration or an arrival. One replica is the fleet of one, beam searches or not. An error in a replica is
raised, the one the shared simulation would meet first (the earliest in simulated time).

Replicas can also be served in several processes at once: whoever runs the simulation passes in a ReplicaPool
(sim/executors/replica_pool.py), which serves some of them in each of its processes with serve_replicas.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import simpy

from sim.core.known_arrivals import KnownArrivals
from sim.core.replica import run_to_end
from sim.core.replica_files import StoredRun
from sim.core.replica_run import ReplicaFailure, ReplicaRun
from sim.core.router import trace_requests
from sim.core.router_wakes import RouterWakes
from sim.workload.trace import Trace

if TYPE_CHECKING:
    from sim.core.beams import BeamParentModel
    from sim.core.fleet import FleetSetup


class ReplicaPool(Protocol):
    """Serves a fleet's replicas apart in other processes, each replica as serve_replicas serves it, and returns
    their runs in replica order; raises the error of the replica that failed first (raise_first_failure)."""

    def serve(self, trace: Trace, wakes: list[float], fleet: FleetSetup) -> list[ReplicaRun]: ...


def serve_apart(trace: Trace, wakes: list[float], fleet: FleetSetup, pool: ReplicaPool | None = None,
                beams: BeamParentModel | None = None) -> list[ReplicaRun]:
    """Every replica simulated alone: in this process, or in `pool`'s processes for a fleet of several. A replica
    that fails raises its error; when several do, the one the shared simulation meets first: the earliest in
    simulated time (at the same instant, the lowest replica). beams: the beam searches' parents, for a fleet of
    one (several replicas draw from one Generator in the order of the shared clock)."""
    if pool is not None and fleet.replicas > 1:
        return pool.serve(trace, wakes, fleet)
    try:
        return raise_first_failure(serve_replicas(trace, wakes, fleet, range(fleet.replicas), beams=beams))
    finally:
        if beams is not None:
            beams.settle()


def raise_first_failure(served: Sequence[object]) -> list[ReplicaRun]:
    """The runs, once no replica failed; else the error of the one that failed first in simulated time."""
    failures = [item for item in served if isinstance(item, ReplicaFailure)]
    if failures:
        raise min(failures, key=lambda failure: (failure.at_s, failure.index)).error
    return [item for item in served if isinstance(item, ReplicaRun)]


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
