"""Serve one trace in the simulator: replicas of one system over one KV pool, behind the router."""
from __future__ import annotations

import math

import numpy as np
import simpy

from calibrate.costmodel import CostModel
from engine.core.factory import make_scheduler
from engine.core.spec import ModelSpec
from engine.core.system import SystemSpec
from sim.beams import DEFAULT_BEAM_CONTINUE, BeamParentModel
from sim.records import Records
from sim.replica import ClockFault, Replica
from sim.router import arrivals
from sim.workload.trace import Trace


def simulate(trace: Trace, spec: ModelSpec, system: SystemSpec, cost_model: CostModel, num_gpu_blocks: int,
             num_cpu_blocks: int, *, replicas: int = 1, router: str = "round_robin",
             horizon_s: float = math.inf, rng: np.random.Generator | None = None,
             beam_continue: float = DEFAULT_BEAM_CONTINUE) -> Records:
    """Every request of the trace, served until all finish or the clock reaches horizon_s (requests
    still in the system then are recorded without a finish time).

    A trace with beam searches needs `rng`, the run's seeded Generator: the beams' parents are drawn
    from it (sim.beams, with its one parameter beam_continue). A trace without draws nothing."""
    if trace.has_beams and rng is None:
        raise ValueError("a trace with beam searches needs the run's seeded rng to choose the beams' parents")
    beams = BeamParentModel(beam_continue, rng) if trace.has_beams and rng is not None else None
    env, records = simpy.Environment(), Records()
    fleet = [Replica(env, i, make_scheduler(system, spec, num_gpu_blocks, num_cpu_blocks), cost_model,
                     records, horizon_s, beams) for i in range(replicas)]
    env.process(arrivals(env, trace, fleet, router))
    try:
        env.run()
    except ClockFault as fault:
        raise fault.args[0] from None
    for replica in fleet:
        replica.core.record_unfinished()
        replica.core.close()
    return records
