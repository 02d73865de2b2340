"""Arrivals, handed by the router to the replicas."""
from __future__ import annotations

from collections.abc import Iterator

from engine.core.serving import Request
from sim.core.replica import Replica
from sim.core.routers import Router
from sim.workload.trace import Trace


def trace_requests(trace: Trace, request_ids: range) -> Iterator[Request]:
    """The trace's requests of these ids, in that order, as a replica takes them."""
    ids = slice(request_ids.start, request_ids.stop, request_ids.step)  # a replica's only: not the whole trace's
    times, prompts, outputs = (trace.arrival_s[ids].tolist(), trace.prompt_len[ids].tolist(),
                               trace.output_len[ids].tolist())
    ns, widths, prefix_len = trace.n[ids].tolist(), trace.beam_width[ids].tolist(), trace.prefix_len
    keys = trace.block_keys
    if keys is not None:  # prefix caching (sim.workload.tokens.with_block_keys)
        for j, i in enumerate(request_ids):
            yield Request(i, times[j], prompts[j], outputs[j], ns[j], prefix_len=prefix_len, beam_width=widths[j],
                          block_keys=keys[i])
        return
    for j, i in enumerate(request_ids):
        yield Request(i, times[j], prompts[j], outputs[j], ns[j], prefix_len=prefix_len, beam_width=widths[j])


def arrivals(env, trace: Trace, replicas: list[Replica], router: Router):
    """A SimPy process: each request reaches the router at its arrival time, which hands it to a replica
    (sim/core/routers.py)."""
    for request in trace_requests(trace, range(len(trace))):
        delay = request.arrival_s - env.now
        if delay > 0:
            yield env.timeout(delay)
        router.pick(replicas, request).submit(request)
    for replica in replicas:
        replica.close()
