"""The replay: a real run's trace served by the simulator on the run's settings, its records in the run's order."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from engine.core.records import ITERATION_COLUMNS
from fidelity.runs.replay_trace import ReplayTrace
from fidelity.runs.settings import ReplaySetup
from sim.core.simulate import simulate
from sim.experiment.config import clock_for

# the simulation stops at this multiple of the real run's last finish (after its first arrival), or a minute: a
# simulated engine that far behind the real one has said enough, and its unfinished requests are counted
HORIZON_FACTOR = 10.0
MIN_HORIZON_S = 60.0


@dataclass(frozen=True, eq=False)
class SimulatedRun:
    """The simulator's records of a replay. `requests`: a column per field of engine.core.records.RequestRecord, a
    row per request in the run's order (NaN times where a request was dropped or left unfinished). `iterations`:
    the iteration columns, in the order iterations ended (a fleet's replicas interleaved)."""

    requests: dict[str, np.ndarray]
    iterations: dict[str, np.ndarray]
    pool_slots: int  # KV slots of one replica
    replicas: int
    horizon_s: float
    dropped: int
    unfinished: int
    cost_model: str  # the cost model's own description
    elapsed_s: float


def simulate_replay(setup: ReplaySetup, replay: ReplayTrace, real_end_s: float) -> SimulatedRun:
    exp, system = setup.experiment, setup.system
    pool = exp.kv_pool(system)
    cost_model = clock_for(exp, system)
    horizon_s = max(HORIZON_FACTOR * real_end_s, MIN_HORIZON_S)
    started = time.perf_counter()
    records = simulate(replay.trace, exp.model, system, cost_model, pool.num_gpu_blocks, pool.num_cpu_blocks,
                       replicas=exp.replicas, router=exp.router, horizon_s=horizon_s)
    elapsed = time.perf_counter() - started
    requests = _in_run_order(records.request_arrays(), replay.order)
    iterations = {name: np.array(column) for name, column in records.iteration_arrays().items()
                  if name in ITERATION_COLUMNS}
    unfinished = int(np.isnan(requests["finish_s"]).sum()) - len(records.dropped_values)
    return SimulatedRun(requests, iterations, pool.num_slots, exp.replicas, horizon_s, len(records.dropped_values),
                        unfinished, cost_model.source, elapsed)


def _in_run_order(columns: dict[str, np.ndarray], order: np.ndarray) -> dict[str, np.ndarray]:
    """Trace request k (its request_id) is the run's request order[k]; a request with no record (dropped) keeps NaN
    times and -1 counts."""
    count = len(order)
    out = {}
    slots = order[columns["request_id"]] if len(columns["request_id"]) else np.empty(0, np.int64)
    for name, column in columns.items():
        filled = np.full(count, np.nan) if column.dtype.kind == "f" else np.full(count, -1, np.int64)
        filled[slots] = column
        out[name] = filled
    out["request_id"] = np.arange(count)
    return out
