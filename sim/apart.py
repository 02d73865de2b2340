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
the caller simulates the fleet together.
"""
from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import simpy

from engine.core.records import ITERATION_TYPECODES
from sim.fastforward import Alarm
from sim.pool import stop_pool, worker_pool
from sim.records import Records
from sim.replica import Replica, run_to_end
from sim.router import trace_requests
from sim.workload.trace import Trace

if TYPE_CHECKING:
    from sim.simulate import FleetSetup


@dataclass
class ReplicaRun:
    """What one replica's simulation leaves: its records, and when each of its iterations ended (to merge a
    fleet's records in time order)."""

    index: int
    records: Records
    iteration_ends: Sequence[float]


def serve_apart(trace: Trace, wakes: list[float], fleet: FleetSetup, jobs: int = 1) -> list[ReplicaRun] | None:
    """Every replica simulated alone, in `jobs` processes (replica i in process i % jobs); None when one of
    them ended an iteration exactly when a request reached it (see the module's docstring), or failed: the
    shared simulation then raises the error it meets first in simulated time, whichever replica it is."""
    jobs = max(1, min(jobs, fleet.replicas))
    if jobs == 1:
        try:
            return serve_replicas(trace, wakes, fleet, range(fleet.replicas))
        except Exception:
            return None
    pool = worker_pool(jobs)  # as a sweep's: workers that leave with their parent, Ctrl-C left to it
    try:
        parts = list(pool.map(_serve_packed, *zip(*[(trace, wakes, fleet, range(j, fleet.replicas, jobs))
                                                     for j in range(jobs)])))
    except Exception:
        stop_pool(pool)
        return None
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown()
    if any(part is None for part in parts):
        return None
    runs = []
    for part in parts:  # each replica's bytes let go of as soon as its columns hold them
        while part:
            runs.append(_unpacked(part.pop()))
    return sorted(runs, key=lambda run: run.index)


def serve_replicas(trace: Trace, wakes: list[float], fleet: FleetSetup, indices: Sequence[int]
                   ) -> list[ReplicaRun] | None:
    """These replicas of the fleet, one at a time, each on its own clock; None at an arrival tie."""
    fast_forward, runs = fleet.stretches(wakes), []
    for index in indices:
        env = simpy.Environment()
        replica = fleet.replica(env, index, fast_forward)
        own_wakes = wakes[index::fleet.replicas]
        env.process(replica_arrivals(env, trace, replica, range(index, len(trace), fleet.replicas), own_wakes))
        run_to_end(env, [replica])
        if not set(own_wakes).isdisjoint(replica.iteration_ends):
            return None
        runs.append(ReplicaRun(index, replica.core.records, replica.iteration_ends))
    return runs


# a ReplicaRun between processes: its index, request rows, iteration columns and ends as bytes
PackedRun = tuple[int, list[tuple], list[bytes], bytes]


def _serve_packed(trace: Trace, wakes: list[float], fleet: FleetSetup, indices: Sequence[int]
                  ) -> list[PackedRun] | None:
    runs = serve_replicas(trace, wakes, fleet, indices)
    if runs is None:
        return None
    return [(run.index, run.records.request_values, [bytes(column) for column in run.records.iteration_columns],
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
    """A SimPy process: the router of sim.router.arrivals as one replica sees it, handing it each of its
    requests at the time the shared router would (an absolute time: now + (wake - now) need not be wake)."""
    for request, wake in zip(trace_requests(trace, request_ids), wakes):
        if wake > env.now:
            yield Alarm(env, wake, lambda _: None)
        replica.submit(request)
    replica.close()
