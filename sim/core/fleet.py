"""What every replica of a simulation is built from, and the replicas built from it."""
from __future__ import annotations

from dataclasses import dataclass

import simpy

from calibrate.clock.costmodel import CostModel
from engine.core.factory import make_scheduler
from engine.core.spec import ModelSpec
from engine.core.system import SystemSpec
from sim.core.acceptance import AcceptanceSource
from sim.core.beams import BeamParentModel
from sim.core.breakdown import BreakdownRecorder
from sim.core.fast_forward import FastForward
from sim.core.known_arrivals import KnownArrivals
from sim.core.records import Records
from sim.core.replica import Replica


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
    # a speculating system's: each replica's outcome of its steps (sim.core.acceptance), by its place in the fleet;
    # else none
    acceptances: tuple[AcceptanceSource, ...] = ()
    # the index of its first replica: a split fleet numbers its decode replicas after its prefill replicas
    first_index: int = 0

    def stretches(self, wakes: list[float]) -> FastForward | None:
        """What runs the replicas' decode stretches, or None where they go step by step."""
        if not self.fast_forward:
            return None
        n = self.replicas
        return FastForward(wakes, self.horizon_s, [wakes[i::n] for i in range(n)] if self.known_ahead else None)

    def replica(self, env: simpy.Environment, index: int, fast_forward: FastForward | None,
                beams: BeamParentModel | None = None, arrivals: KnownArrivals | None = None,
                records: Records | None = None) -> Replica:
        """Replica `index`; with `arrivals`, alone on `env`, taking them itself (KnownArrivals); writing into
        `records` where given (a client's gate watches them: sim/core/client_gate.py), else records of its own."""
        scheduler = make_scheduler(self.system, self.spec, self.num_gpu_blocks, self.num_cpu_blocks)
        cost_model = self.cost_model
        if isinstance(cost_model, BreakdownRecorder):  # each replica keeps its own iterations' breakdowns
            cost_model = cost_model.for_replica(index)
        acceptance = self.acceptances[index - self.first_index] if self.system.speculative is not None else None
        return Replica(env, index, scheduler, cost_model, Records() if records is None else records, self.horizon_s,
                       beams, fast_forward, arrivals, acceptance)
