"""Serve one trace in the simulator: replicas of one system over one KV pool, behind the router."""
from __future__ import annotations

import gc
import math
import os
from array import array
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import simpy

from calibrate.costmodel import CostModel
from engine.core.factory import make_scheduler
from engine.core.records import ITERATION_TYPECODES
from engine.core.spec import ModelSpec
from engine.core.system import SystemSpec
from sim.core.beams import BeamParentModel
from sim.core.breakdown import BreakdownRecorder
from sim.core.fast_forward import FastForward
from sim.core.independent_replicas import ReplicaRun, serve_apart
from sim.core.known_arrivals import KnownArrivals
from sim.core.records import Records
from sim.core.replica import Replica, run_to_end
from sim.core.router import arrivals
from sim.core.router_wakes import arrival_event_times
from sim.workload.beams import DEFAULT_BEAM_CONTINUE
from sim.workload.tokens import with_block_keys
from sim.workload.trace import Trace

# SERVESIM_FAST_FORWARD=0 runs every iteration on its own SimPy event (the same results, slower)
FAST_FORWARD_ENV = "SERVESIM_FAST_FORWARD"


def fast_forward_default() -> bool:
    return os.environ.get(FAST_FORWARD_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def simulate(trace: Trace, spec: ModelSpec, system: SystemSpec, cost_model: CostModel, num_gpu_blocks: int,
             num_cpu_blocks: int, *, replicas: int = 1, router: str = "round_robin",
             horizon_s: float = math.inf, rng: np.random.Generator | None = None,
             beam_continue: float = DEFAULT_BEAM_CONTINUE, fast_forward: bool | None = None, jobs: int = 1,
             router_process: bool = False) -> Records:
    """Every request of the trace, served until all finish or the clock reaches horizon_s (requests
    still in the system then are recorded without a finish time).

    A trace with beam searches needs `rng`, the run's seeded Generator: the beams' parents are drawn
    from it (sim.core.beams, with its one parameter beam_continue). A trace without draws nothing.

    fast_forward (default: on, unless the environment sets SERVESIM_FAST_FORWARD=0) runs each decode
    stretch on one SimPy event (sim/core/fast_forward.py) instead of one event per iteration; the records are
    the same either way. A cost model that cannot price iterations ahead (prices_ahead) runs step by step.

    jobs: processes for a fleet whose replicas share nothing (independent_replicas.py), each serving some of them; the
    same records with any number. router_process: see simulate_runs.
    """
    runs = simulate_runs(trace, spec, system, cost_model, num_gpu_blocks, num_cpu_blocks, replicas=replicas,
                         router=router, horizon_s=horizon_s, rng=rng, beam_continue=beam_continue,
                         fast_forward=fast_forward, jobs=jobs, router_process=router_process)
    with older_objects_frozen():
        return merged_records(runs)


def simulate_runs(trace: Trace, spec: ModelSpec, system: SystemSpec, cost_model: CostModel, num_gpu_blocks: int,
                  num_cpu_blocks: int, *, replicas: int = 1, router: str = "round_robin",
                  horizon_s: float = math.inf, rng: np.random.Generator | None = None,
                  beam_continue: float = DEFAULT_BEAM_CONTINUE, fast_forward: bool | None = None,
                  jobs: int = 1, router_process: bool = False) -> list[ReplicaRun]:
    """simulate's replicas' records before they are merged (merged_records), in replica order: for a caller that
    reads a fleet's records in time order without holding them merged (sim/experiment/merged.py).

    router_process: every replica on one SimPy clock behind the router's process, even where each could take its
    arrivals itself (independent_replicas.py): the same records, slower; the reference the tests hold the
    faster way to."""
    if trace.has_beams and rng is None:
        raise ValueError("a trace with beam searches needs the run's seeded rng to choose the beams' parents")
    if fast_forward is None:
        fast_forward = fast_forward_default()
    if system.prefix_caching and trace.block_keys is None:  # its requests carry their blocks' keys
        trace = with_block_keys(trace, system.block_size)
    fleet = FleetSetup(spec, system, cost_model, num_gpu_blocks, num_cpu_blocks, replicas, horizon_s,
                       fast_forward and cost_model.prices_ahead, router == "round_robin" or replicas == 1)
    beams = BeamParentModel(beam_continue, rng) if trace.has_beams and rng is not None else None
    with older_objects_frozen():
        wakes = arrival_event_times(trace.arrival_s.tolist())
        # replicas that share nothing (a lone one draws its beams' parents alone too): apart, each on its own clock
        if fleet.known_ahead and (beams is None or replicas == 1) and not router_process:
            return serve_apart(trace, wakes, fleet, jobs, beams)
        return serve_together(trace, wakes, fleet, router, beams)


@dataclass(frozen=True)
class FleetSetup:
    """What every replica of a simulation is built from (picklable: apart, replicas may be served in other
    processes)."""

    spec: ModelSpec
    system: SystemSpec
    cost_model: CostModel
    num_gpu_blocks: int
    num_cpu_blocks: int
    replicas: int
    horizon_s: float
    fast_forward: bool  # decode stretches on one event each (the cost model can price them ahead)
    known_ahead: bool  # which replica each request goes to (round robin, or one replica)

    def stretches(self, wakes: list[float]) -> FastForward | None:
        """What runs the replicas' decode stretches, or None where they go step by step."""
        if not self.fast_forward:
            return None
        n = self.replicas
        return FastForward(wakes, self.horizon_s, [wakes[i::n] for i in range(n)] if self.known_ahead else None)

    def replica(self, env: simpy.Environment, index: int, fast_forward: FastForward | None,
                beams: BeamParentModel | None = None, arrivals: KnownArrivals | None = None) -> Replica:
        """Replica `index`; with `arrivals`, alone on `env`, taking them itself (Replica.serve_known)."""
        scheduler = make_scheduler(self.system, self.spec, self.num_gpu_blocks, self.num_cpu_blocks)
        cost_model = self.cost_model
        if isinstance(cost_model, BreakdownRecorder):  # each replica keeps its own iterations' breakdowns
            cost_model = cost_model.for_replica(index)
        return Replica(env, index, scheduler, cost_model, Records(), self.horizon_s, beams, fast_forward, arrivals)


@contextmanager
def older_objects_frozen():
    """Keep the objects that exist before the simulation (modules, the trace, the config) out of the cyclic
    garbage collector's passes while it runs: a full pass over them cost ~30 ms a time on an hour's run,
    and the simulation frees its own objects by reference count. Left alone where something else froze."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def serve_together(trace: Trace, wakes: list[float], fleet: FleetSetup, router: str,
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


def merged_records(runs: list[ReplicaRun]) -> Records:
    """One replica's records as they are; a fleet's in the order its iterations ended, simultaneous ends by
    replica (each replica keeps its own records, since a stretch writes its iterations when it ends).

    Column by column: a replica served in a worker hands its column over from its file, so the fleet's
    records are held once (and one column twice, while it is ordered), not once per replica and again merged."""
    if len(runs) == 1 and runs[0].stored is None:
        return runs[0].records
    records = Records()
    for run in runs:
        records.request_values.extend(run.records.request_values)
        records.dropped_values.extend(run.records.dropped_values)
    order = np.argsort(np.concatenate([np.asarray(run.iteration_ends, dtype=float) for run in runs]), kind="stable")
    records.set_iteration_columns([merged_column(runs, i, typecode, order)
                                   for i, typecode in enumerate(ITERATION_TYPECODES)])
    return records


def merged_column(runs: list[ReplicaRun], i: int, typecode: str, order: np.ndarray) -> array:
    """Iteration column i of every replica, end to end, then taken in `order` into the merged array's own
    memory (no copy of the taken values first)."""
    joined = np.empty(len(order), dtype=typecode)
    start = 0
    for run in runs:
        run.column_into(i, joined[start:start + run.num_iterations])
        start += run.num_iterations
    merged = array(typecode, [0]) * len(order)
    if len(order):
        np.take(joined, order, out=np.frombuffer(merged, dtype=typecode))
    return merged
