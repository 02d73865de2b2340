"""Serve one trace in the simulator: replicas of one system over one KV pool, behind the router."""
from __future__ import annotations

import math
import os

import numpy as np
import simpy

from calibrate.clock.costmodel import CostModel
from engine.core.spec import ModelSpec
from engine.core.system import SystemSpec
from sim.core.acceptance import AcceptanceModel, AcceptanceSource
from sim.core.beams import BeamParentModel
from sim.core.client_gate import serve_gated
from sim.core.fleet import FleetSetup
from sim.core.gc_freeze import older_objects_frozen
from sim.core.independent_replicas import ReplicaPool, serve_apart
from sim.core.merge import merged_records
from sim.core.records import Records
from sim.core.replica import run_to_end
from sim.core.replica_run import ReplicaRun
from sim.core.router import arrivals
from sim.core.router_wakes import arrival_event_times
from sim.core.routers import Router, RouterSpec, make_router, router_spec
from sim.workload.beams import DEFAULT_BEAM_CONTINUE
from sim.workload.tokens import with_block_keys
from sim.workload.trace import Trace

# SERVESIM_FAST_FORWARD=0 runs every iteration on its own SimPy event (the same results, slower)
FAST_FORWARD_ENV = "SERVESIM_FAST_FORWARD"


def fast_forward_default() -> bool:
    return os.environ.get(FAST_FORWARD_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def simulate(trace: Trace, spec: ModelSpec, system: SystemSpec, cost_model: CostModel, num_gpu_blocks: int,
             num_cpu_blocks: int, *, replicas: int = 1, router: str | RouterSpec = "round_robin",
             horizon_s: float = math.inf, rng: np.random.Generator | None = None,
             beam_continue: float = DEFAULT_BEAM_CONTINUE, fast_forward: bool | None = None,
             replica_pool: ReplicaPool | None = None, router_process: bool = False,
             acceptance: AcceptanceSource | None = None, max_concurrency: int | None = None) -> Records:
    """Every request of the trace, served until all finish or the clock reaches horizon_s (requests
    still in the system then are recorded without a finish time).

    A trace with beam searches needs `rng`, the run's seeded Generator: the beams' parents are drawn
    from it (sim.core.beams, with its one parameter beam_continue). A trace without draws nothing. A speculating
    system needs it too: each replica draws the proposals accepted from a child of it (sim.core.acceptance), unless
    `acceptance` gives a lone replica's outcome of each step instead (fidelity.replay.ReplayedAcceptance: a real
    engine run's measured counts).

    router: a kind of sim.core.routers (its default parameters) or a RouterSpec. A power_of_two fleet needs `rng`
    too: its router draws from a child of it (Generator.spawn), which leaves the parent's draws as they were.
    cache_aware needs a system with prefix caching.

    fast_forward (default: on, unless the environment sets SERVESIM_FAST_FORWARD=0) runs each decode
    stretch on one SimPy event (sim/core/fast_forward.py) instead of one event per iteration; the records are
    the same either way. A cost model that cannot price iterations ahead (prices_ahead) runs step by step.

    replica_pool: processes for a fleet whose replicas share nothing (independent_replicas.py), each serving some
    of them (sim.executors.replica_pool.ProcessReplicaPool; None: all in this process); the same records with any
    number. router_process: see simulate_runs.

    max_concurrency: a client that keeps at most this many requests in flight (vLLM's bench serve
    --max-concurrency, sim/core/client_gate.py): a request that arrives while that many are sent and unfinished is
    sent when one of them finishes, and its record's arrival_s is when it was sent; it runs until every request is
    served (horizon_s must be inf). None: every request is sent at its arrival.
    """
    runs = simulate_runs(trace, spec, system, cost_model, num_gpu_blocks, num_cpu_blocks, replicas=replicas,
                         router=router, horizon_s=horizon_s, rng=rng, beam_continue=beam_continue,
                         fast_forward=fast_forward, replica_pool=replica_pool, router_process=router_process,
                         acceptance=acceptance, max_concurrency=max_concurrency)
    with older_objects_frozen():
        return merged_records(runs)


def simulate_runs(trace: Trace, spec: ModelSpec, system: SystemSpec, cost_model: CostModel, num_gpu_blocks: int,
                  num_cpu_blocks: int, *, replicas: int = 1, router: str | RouterSpec = "round_robin",
                  horizon_s: float = math.inf, rng: np.random.Generator | None = None,
                  beam_continue: float = DEFAULT_BEAM_CONTINUE, fast_forward: bool | None = None,
                  replica_pool: ReplicaPool | None = None, router_process: bool = False,
                  acceptance: AcceptanceSource | None = None, max_concurrency: int | None = None
                  ) -> list[ReplicaRun]:
    """simulate's replicas' records before they are merged (merged_records), in replica order: for a caller that
    reads a fleet's records in time order without holding them merged (sim/experiment/merged.py).

    router_process: every replica on one SimPy clock behind the router's process, even where each could take its
    arrivals itself (independent_replicas.py): the same records, slower; the reference the tests hold the
    faster way to."""
    if trace.has_beams and rng is None:
        raise ValueError("a trace with beam searches needs the run's seeded rng to choose the beams' parents")
    if system.speculative is not None and rng is None and acceptance is None:
        raise ValueError("a speculating system needs the run's seeded rng to draw the proposals accepted")
    routing = router_spec(router)
    if routing.kind == "cache_aware" and not system.prefix_caching:
        raise ValueError(f"the cache_aware router needs prefix caching, which system {system.name!r} has not")
    if fast_forward is None:
        fast_forward = fast_forward_default()
    if system.prefix_caching and trace.block_keys is None:  # its requests carry their blocks' keys
        trace = with_block_keys(trace, system.block_size)
    acceptances = replica_acceptances(system, replicas, rng, acceptance)
    stretches = fast_forward and cost_model.prices_ahead
    # a client's gate sends a request when another ends: no replica knows its arrivals ahead
    gated = check_gate(max_concurrency, horizon_s)
    fleet = FleetSetup(spec, system, cost_model, num_gpu_blocks, num_cpu_blocks, replicas, horizon_s, stretches,
                       (routing.known_ahead or replicas == 1) and not gated, acceptances)
    beams = BeamParentModel(beam_continue, rng) if trace.has_beams and rng is not None else None
    with older_objects_frozen():
        wakes = arrival_event_times(trace.arrival_s.tolist())
        if max_concurrency is not None:
            return serve_gated(trace, wakes, fleet, make_router(routing if replicas > 1 else RouterSpec(), rng), beams,
                               max_concurrency)
        # replicas that share nothing (a lone one draws its beams' parents alone too): apart, each on its own clock
        if fleet.known_ahead and (beams is None or replicas == 1) and not router_process:
            return serve_apart(trace, wakes, fleet, replica_pool, beams)
        # a lone replica takes every request, whichever the router
        return serve_together(trace, wakes, fleet, make_router(routing if replicas > 1 else RouterSpec(), rng), beams)


def check_gate(max_concurrency: int | None, horizon_s: float) -> bool:
    """Whether a client's gate holds requests back; one needs the run to serve every request, since a request
    still held back at a horizon would have been sent at no time to record."""
    if max_concurrency is None:
        return False
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, (int, np.integer)) or max_concurrency < 1:
        raise ValueError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}")
    if horizon_s != math.inf:
        raise ValueError(f"a client's gate (max_concurrency {max_concurrency}) runs until every request is served: "
                         f"horizon_s must be inf, got {horizon_s!r}")
    return True


def replica_acceptances(system: SystemSpec, replicas: int, rng: np.random.Generator | None,
                        given: AcceptanceSource | None) -> tuple[AcceptanceSource, ...]:
    """Each replica's outcome of its speculating steps: `given` for a lone replica, else draws from a child of the
    run's Generator (spawned only where the system speculates: a run without speculation draws what it always did)."""
    spec = system.speculative
    if given is not None:
        if spec is None:
            raise ValueError(f"an acceptance source was given, but system {system.name!r} does not speculate")
        if replicas != 1:
            raise ValueError(f"an acceptance source replays one replica's steps, but the fleet has {replicas}")
        return (given,)
    if spec is None or rng is None:
        return ()
    return tuple(AcceptanceModel(spec, child) for child in rng.spawn(replicas))


def serve_together(trace: Trace, wakes: list[float], fleet: FleetSetup, router: Router,
                   beams: BeamParentModel | None) -> list[ReplicaRun]:
    """The fleet on one SimPy clock, behind the router's process."""
    env, fast_forward = simpy.Environment(), fleet.stretches(wakes)
    replicas = [fleet.replica(env, i, fast_forward, beams) for i in range(fleet.replicas)]
    env.process(arrivals(env, trace, replicas, router))
    try:
        run_to_end(env, replicas)
    finally:
        if beams is not None:
            beams.settle()
    return [ReplicaRun(r.index, r.core.records, r.iteration_ends) for r in replicas]


