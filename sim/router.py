"""Arrivals, and the router that spreads them over replicas."""
from __future__ import annotations

from engine.core.serving import ReplayRequest
from sim.replica import Replica
from sim.workload.trace import Trace


def pick_replica(replicas: list[Replica], policy: str, request_id: int) -> Replica:
    if policy == "round_robin" or len(replicas) == 1:
        return replicas[request_id % len(replicas)]
    # least_outstanding: fewest admitted-but-unfinished requests, lowest index on ties
    return min(replicas, key=lambda r: (r.outstanding, r.index))


def arrivals(env, trace: Trace, replicas: list[Replica], policy: str):
    """A SimPy process: each request reaches the router at its arrival time."""
    times = trace.arrival_s.tolist()
    prompts, outputs, ns = trace.prompt_len.tolist(), trace.output_len.tolist(), trace.n.tolist()
    prefix_len = trace.prefix_len
    widths = trace.beam_width.tolist()
    for request_id, arrival_s in enumerate(times):
        delay = arrival_s - env.now
        if delay > 0:
            yield env.timeout(delay)
        replica = pick_replica(replicas, policy, request_id)
        replica.submit(ReplayRequest(request_id, arrival_s, prompts[request_id], outputs[request_id], ns[request_id],
                                     prefix_len=prefix_len, beam_width=widths[request_id]))
    for replica in replicas:
        replica.close()
