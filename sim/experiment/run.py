"""One simulated run: an experiment's system at one rate and seed."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from calibrate.costmodel import CostModel
from calibrate.profile_model import ProfileCostModel, transferred_roofline
from calibrate.roofline import RooflineCostModel
from engine.core.records import DROPPED_COLUMNS
from engine.core.system import SystemSpec
from sim.core.simulate import simulate
from sim.experiment.config import Experiment
from sim.experiment.metrics import SUMMARY_METRICS, summarize
from sim.experiment.records import Records
from sim.workload.config import build_trace
from sim.workload.trace import Trace

# what ran, then what it measured: summary.csv's columns, in this order whether a row was simulated
# now or read back from an earlier run's summary.json (whose keys are sorted)
RUN_COLUMNS = ("experiment", "system", "model", "hardware", "tensor_parallel", "replicas", "workload", "cost_model",
               "rate", "seed")
SUMMARY_COLUMNS = RUN_COLUMNS + SUMMARY_METRICS


@dataclass
class RunResult:
    summary: dict
    requests: pd.DataFrame
    iterations: pd.DataFrame
    # requests dropped unserved (engine.core.records.DroppedRecord: ignored by vLLM's separate or chunked
    # policy, or aborted); None where none was
    dropped: pd.DataFrame | None = None


def make_cost_model(exp: Experiment, system: SystemSpec) -> CostModel:
    config = exp.cost_model
    if config.kind == "profile":
        return ProfileCostModel.from_profile(config.profile_path, exp.model, exp.hardware,
                                             exp.tensor_parallel, exp.dtype_bytes, system.block_size)
    # FasterTransformer ran its own dense attention kernel in the paper; vLLM and the Orca baselines the paged one
    paged = system.kind != "fastertransformer"
    if config.kind == "transfer":
        return transferred_roofline(config.profile_path, config.measured_on, exp.model, exp.hardware,
                                    exp.tensor_parallel, exp.dtype_bytes, system.block_size, paged)
    return RooflineCostModel(exp.model, exp.hardware, exp.tensor_parallel, exp.dtype_bytes,
                             system.block_size, config.roofline, paged=paged)


def trace_for(exp: Experiment, rate: float, seed: int, rng: np.random.Generator | None = None) -> Trace:
    """The same requests for every system at a given rate and seed (drawn from `rng`, the run's
    Generator, when given: it is seeded with `seed`)."""
    rng = np.random.default_rng(seed) if rng is None else rng
    return build_trace(exp.workload, rate, exp.model.max_seq_len, rng)


def simulate_trace(exp: Experiment, system: SystemSpec, trace: Trace, cost_model: CostModel | None = None,
                   rng: np.random.Generator | None = None, fast_forward: bool | None = None,
                   jobs: int = 1) -> tuple[Records, float]:
    """Serve a trace on exp.replicas replicas; returns the records and the horizon used. `rng` is the
    run's Generator, which a trace of beam searches draws their parents from (sim.core.beams); fast_forward and
    jobs (processes for the replicas, where they share nothing) as sim.core.simulate's."""
    cost_model = cost_model or make_cost_model(exp, system)
    pool = exp.kv_pool(system)
    span = float(trace.arrival_s[-1]) if len(trace) else 0.0
    horizon_s = max(span, exp.warmup_s, 1.0) * exp.max_time_factor
    records = simulate(trace, exp.model, system, cost_model, pool.num_gpu_blocks, pool.num_cpu_blocks,
                       replicas=exp.replicas, router=exp.router, horizon_s=horizon_s, rng=rng,
                       beam_continue=exp.workload.beam_continue, fast_forward=fast_forward, jobs=jobs)
    return records, horizon_s


def run_one(exp: Experiment, system: SystemSpec, rate: float, seed: int, jobs: int = 1) -> RunResult:
    """One run; `jobs` processes serve a fleet's replicas where they share nothing (the same results)."""
    rng = np.random.default_rng(seed)  # the run's one Generator: the trace, then the beams' parents
    trace = trace_for(exp, rate, seed, rng)
    cost_model = make_cost_model(exp, system)
    records, horizon_s = simulate_trace(exp, system, trace, cost_model, rng, jobs=jobs)
    requests, iterations = records.requests_frame(), records.iterations_frame()
    metrics = summarize(requests, iterations, pool_slots=exp.kv_pool(system).num_slots,
                        warmup_s=exp.warmup_s, horizon_s=horizon_s)
    summary = {
        "experiment": exp.name, "system": system.name, "model": exp.model.name, "hardware": exp.hardware.name,
        "tensor_parallel": exp.tensor_parallel, "replicas": exp.replicas, "workload": trace.source,
        "cost_model": cost_model.source, "rate": rate, "seed": seed, **metrics,
    }
    dropped = pd.DataFrame(records.dropped, columns=list(DROPPED_COLUMNS)) if records.dropped_values else None
    return RunResult(summary, requests, iterations, dropped)
