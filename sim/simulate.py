"""Serve one trace in the simulator: replicas of one system over one KV pool, behind the router."""
from __future__ import annotations

import gc
import math
import os
from array import array
from contextlib import contextmanager

import numpy as np
import simpy

from calibrate.costmodel import CostModel
from engine.core.factory import make_scheduler
from engine.core.spec import ModelSpec
from engine.core.system import SystemSpec
from sim.apart import serve_apart
from sim.beams import DEFAULT_BEAM_CONTINUE, BeamParentModel
from sim.fastforward import FastForward, arrival_event_times
from sim.records import Records
from sim.replica import ClockFault, Replica
from sim.router import arrivals
from sim.workload.trace import Trace

# SERVESIM_FAST_FORWARD=0 runs every iteration on its own SimPy event (the same results, slower)
FAST_FORWARD_ENV = "SERVESIM_FAST_FORWARD"


def fast_forward_default() -> bool:
    return os.environ.get(FAST_FORWARD_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def simulate(trace: Trace, spec: ModelSpec, system: SystemSpec, cost_model: CostModel, num_gpu_blocks: int,
             num_cpu_blocks: int, *, replicas: int = 1, router: str = "round_robin",
             horizon_s: float = math.inf, rng: np.random.Generator | None = None,
             beam_continue: float = DEFAULT_BEAM_CONTINUE, fast_forward: bool | None = None) -> Records:
    """Every request of the trace, served until all finish or the clock reaches horizon_s (requests
    still in the system then are recorded without a finish time).

    A trace with beam searches needs `rng`, the run's seeded Generator: the beams' parents are drawn
    from it (sim.beams, with its one parameter beam_continue). A trace without draws nothing.

    fast_forward (default: on, unless the environment sets SERVESIM_FAST_FORWARD=0) runs each decode
    stretch on one SimPy event (sim/fastforward.py) instead of one event per iteration; the records are
    the same either way. A cost model that cannot price iterations ahead (prices_ahead) runs step by step.
    """
    with older_objects_frozen():
        return _simulate(trace, spec, system, cost_model, num_gpu_blocks, num_cpu_blocks, replicas, router,
                         horizon_s, rng, beam_continue, fast_forward)


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


def _simulate(trace: Trace, spec: ModelSpec, system: SystemSpec, cost_model: CostModel, num_gpu_blocks: int,
              num_cpu_blocks: int, replicas: int, router: str, horizon_s: float, rng: np.random.Generator | None,
              beam_continue: float, fast_forward: bool | None) -> Records:
    if trace.has_beams and rng is None:
        raise ValueError("a trace with beam searches needs the run's seeded rng to choose the beams' parents")
    beams = BeamParentModel(beam_continue, rng) if trace.has_beams and rng is not None else None
    if fast_forward is None:
        fast_forward = fast_forward_default()
    wakes = arrival_event_times(trace.arrival_s.tolist())
    known = router == "round_robin" or replicas == 1  # sim.router.pick_replica: request i to replica i % n
    forward = None
    if fast_forward and cost_model.prices_ahead:
        forward = FastForward(wakes, horizon_s, [wakes[i::replicas] for i in range(replicas)] if known else None)

    def make_replica(env: simpy.Environment, index: int) -> Replica:
        return Replica(env, index, make_scheduler(system, spec, num_gpu_blocks, num_cpu_blocks), cost_model,
                       Records(), horizon_s, beams, forward)

    if replicas > 1 and known and beams is None:  # replicas that share nothing: one at a time (sim/apart.py)
        fleet = serve_apart(trace, wakes, replicas, make_replica)
        if fleet is not None:
            return merged_records(fleet)
    env = simpy.Environment()
    fleet = [make_replica(env, i) for i in range(replicas)]
    env.process(arrivals(env, trace, fleet, router))
    run_to_end(env, fleet)
    return merged_records(fleet)


def run_to_end(env: simpy.Environment, fleet: list[Replica]) -> None:
    """Run the simulation until nothing is left to happen, then record what the horizon left unfinished."""
    try:
        env.run()
    except ClockFault as fault:
        raise fault.args[0] from None
    for replica in fleet:
        replica.core.record_unfinished()
        replica.core.close()


def merged_records(fleet: list[Replica]) -> Records:
    """One replica's records as they are; a fleet's in the order its iterations ended, simultaneous ends by
    replica (each replica keeps its own records, since a stretch writes its iterations when it ends)."""
    if len(fleet) == 1:
        return fleet[0].core.records
    records = Records()
    for replica in fleet:
        records.request_values.extend(replica.core.records.request_values)
    ends = np.concatenate([np.asarray(r.iteration_ends, dtype=float) for r in fleet])
    order = np.argsort(ends, kind="stable")
    records.set_iteration_columns([merged_column(parts, order)
                                   for parts in zip(*(r.core.records.iteration_columns for r in fleet))])
    return records


def merged_column(parts: tuple[array, ...], order: np.ndarray) -> array:
    """One iteration column of every replica, end to end, then taken in `order`."""
    merged = array(parts[0].typecode)
    merged.frombytes(np.concatenate([np.frombuffer(part, dtype=part.typecode) for part in parts])[order].tobytes())
    return merged
