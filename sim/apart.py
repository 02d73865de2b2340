"""A fleet whose replicas share nothing, simulated one replica at a time.

Behind the round-robin router request i goes to replica i % n whatever the replicas do, and without beam
searches (whose parents are drawn from the run's one Generator, in the order the replicas ask) no replica
reads another's state. Each replica can then be simulated alone, over its own requests, handed over at
the very times the shared router would hand them (its wakes, to the bit): the same decisions and records,
and faster, since one replica's state stays in the CPU's caches where 64 interleaved ones did not.

One thing alone cannot reproduce: an iteration ending at exactly the time the router hands the replica a
request. Which of the two SimPy processes then runs first depends on event ids that differ between the
shared simulation and the replica's own. Where that happens (a float tie: rare) serve_apart gives up and
the caller simulates the fleet together.
"""
from __future__ import annotations

from collections.abc import Callable

import simpy

from engine.core.serving import ReplayRequest
from sim.fastforward import Alarm
from sim.replica import Replica
from sim.workload.trace import Trace


def serve_apart(trace: Trace, wakes: list[float], num_replicas: int,
                make_replica: Callable[[simpy.Environment, int], Replica]) -> list[Replica] | None:
    """Every replica simulated alone (make_replica builds replica `index` in a fresh environment); None
    when one of them ended an iteration exactly when a request reached it (see the module's docstring)."""
    from sim.simulate import run_to_end  # the one way a simulation ends; simulate imports this module

    fleet = []
    for index in range(num_replicas):
        env = simpy.Environment()
        replica = make_replica(env, index)
        own_wakes = wakes[index::num_replicas]
        env.process(replica_arrivals(env, trace, replica, range(index, len(trace), num_replicas), own_wakes))
        run_to_end(env, [replica])
        if not set(own_wakes).isdisjoint(replica.iteration_ends):
            return None
        fleet.append(replica)
    return fleet


def replica_arrivals(env: simpy.Environment, trace: Trace, replica: Replica, request_ids: range,
                     wakes: list[float]):
    """A SimPy process: the router of sim.router.arrivals as one replica sees it, handing it each of its
    requests at the time the shared router would (an absolute time: now + (wake - now) need not be wake)."""
    times, prompts, outputs = trace.arrival_s.tolist(), trace.prompt_len.tolist(), trace.output_len.tolist()
    ns, widths = trace.n.tolist(), trace.beam_width.tolist()
    for request_id, wake in zip(request_ids, wakes):
        if wake > env.now:
            yield Alarm(env, wake, lambda _: None)
        replica.submit(ReplayRequest(request_id, times[request_id], prompts[request_id], outputs[request_id],
                                     ns[request_id], prefix_len=trace.prefix_len, beam_width=widths[request_id]))
    replica.close()
