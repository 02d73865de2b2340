"""One simulated run: an experiment's system at one rate and seed."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from calibrate.clock.costmodel import CostModel
from engine.core.records import DROPPED_COLUMNS, ITERATION_COLUMNS
from engine.core.system import SystemSpec
from engine.errors import Unservable
from sim.core.breakdown import BreakdownRecorder
from sim.core.merge import merged_records
from sim.core.records import Records, request_arrays
from sim.core.replica_run import ReplicaRun
from sim.core.simulate import simulate_runs
from sim.executors.replica_pool import ProcessReplicaPool
from sim.experiment.breakdown import breakdown_columns, breakdown_shares, recorded_steps
from sim.experiment.closed_loop import CONCURRENCY_COLUMN, with_sent_times
from sim.experiment.config import Experiment, clock_for
from sim.experiment.merged import MergedIterations
from sim.experiment.metrics import SUMMARY_METRICS, kv_shares, load_imbalance, summarize
from sim.experiment.speculation_records import speculation_columns
from sim.experiment.split_run import (
    prefill_replicas,
    serve_split_trace,
    split_cost_source,
    split_setup,
    transfer_metrics,
)
from sim.experiment.token_stream import Schedule
from sim.workload.config import build_trace
from sim.workload.trace import Trace

if TYPE_CHECKING:
    import pandas as pd

# what ran, then what it measured: summary.csv's columns, in this order whether a row was simulated
# now or read back from an earlier run's summary.json (whose keys are sorted)
RUN_COLUMNS = ("experiment", "system", "model", "hardware", "tensor_parallel", "replicas", "workload", "cost_model",
               "rate", "seed")
SUMMARY_COLUMNS = RUN_COLUMNS + SUMMARY_METRICS
# a run's summary also keeps its cost model's whole description (CostModel.source), which summary.csv's cost_model
# column gives in a few words: the command writes it once per system to cost_models.txt beside the summary
COST_MODEL_SOURCE = "cost_model_source"


@dataclass
class RunResult:
    """A run's summary row and its records as numpy columns (what its files are written from: a fleet's
    iterations merged as they are read, sim/experiment/merged.py), or as pandas frames (requests, iterations:
    built, and pandas imported, when first asked for)."""

    summary: dict
    request_arrays: dict[str, np.ndarray]
    iteration_arrays: Mapping[str, np.ndarray]

    @cached_property
    def requests(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.request_arrays, copy=False)

    @cached_property
    def iterations(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame({name: self.iteration_arrays[name] for name in ITERATION_COLUMNS}, copy=False)
    # requests dropped unserved (engine.core.records.DroppedRecord: ignored by vLLM's separate or chunked
    # policy, or aborted), as recorded
    dropped_values: list[tuple] = field(default_factory=list)
    # the run as vLLM's benchmark would have saved it (sim/experiment/vllm_bench.py): only where the experiment
    # asks for it (vllm_bench)
    vllm_bench: dict | None = None

    @cached_property
    def dropped(self) -> pd.DataFrame | None:
        """The dropped requests as a frame, or None where none was (pandas imported only then)."""
        if not self.dropped_values:
            return None
        import pandas as pd

        return pd.DataFrame(self.dropped_values, columns=list(DROPPED_COLUMNS))


def make_cost_model(exp: Experiment, system: SystemSpec) -> CostModel:
    """The cost model a run of `system` prices its iterations with (calibrate/cost_models/registry.py, through
    clock_for)."""
    return clock_for(exp, system)


def trace_for(exp: Experiment, rate: float, seed: int, rng: np.random.Generator | None = None) -> Trace:
    """The same requests for every system at a given rate and seed (drawn from `rng`, the run's
    Generator, when given: it is seeded with `seed`)."""
    rng = np.random.default_rng(seed) if rng is None else rng
    return build_trace(exp.workload, rate, exp.model.max_seq_len, rng)


def simulate_trace(exp: Experiment, system: SystemSpec, trace: Trace, cost_model: CostModel | None = None,
                   rng: np.random.Generator | None = None, fast_forward: bool | None = None,
                   jobs: int = 1, rate: float | None = None) -> tuple[Records, float]:
    """Serve a trace on exp.replicas replicas; returns the records and the horizon used. `rng` is the
    run's Generator, which a trace of beam searches draws their parents from (sim.core.beams); fast_forward and
    jobs: processes for the replicas, where they share nothing (sim/executors/replica_pool.py); fast_forward as
    sim.core.simulate's."""
    runs, horizon_s = serve_trace(exp, system, trace, cost_model, rng, fast_forward, jobs, rate)
    return merged_records(runs), horizon_s


def horizon_of(exp: Experiment, trace: Trace, rate: float | None = None) -> float:
    """When a run stops simulating: max_time_factor times the trace's span (or the warm-up, or a second). A run at
    rate inf, or behind a client's gate, serves every request, as vLLM's benchmark waits for every one: its
    requests are counted, and their span says nothing of how long they take."""
    if exp.workload.all_at_once(rate) or exp.workload.max_concurrency is not None:
        return math.inf
    span = float(trace.arrival_s[-1]) if len(trace) else 0.0
    return max(span, exp.warmup_s, 1.0) * exp.max_time_factor


def serve_trace(exp: Experiment, system: SystemSpec, trace: Trace, cost_model: CostModel | None = None,
                rng: np.random.Generator | None = None, fast_forward: bool | None = None,
                jobs: int = 1, rate: float | None = None) -> tuple[list[ReplicaRun], float]:
    """simulate_trace's replicas' records, not merged yet (sim.core.simulate.simulate_runs), and the horizon (`rate`:
    the trace's, where it may be inf: horizon_of)."""
    cost_model = cost_model or make_cost_model(exp, system)
    pool = exp.kv_pool(system)
    horizon_s = horizon_of(exp, trace, rate)
    runs = simulate_runs(trace, exp.model, system, cost_model, pool.num_gpu_blocks, pool.num_cpu_blocks,
                         replicas=exp.replicas, router=exp.router, horizon_s=horizon_s, rng=rng,
                         beam_continue=exp.workload.beam_continue, fast_forward=fast_forward,
                         replica_pool=ProcessReplicaPool(jobs) if jobs > 1 else None,
                         max_concurrency=exp.workload.max_concurrency)
    return runs, horizon_s


def run_one(exp: Experiment, system: SystemSpec, rate: float, seed: int, jobs: int = 1) -> RunResult:
    """One run; `jobs` processes serve a fleet's replicas where they share nothing (the same results). A fleet's
    iterations are read merged, a column or a row group at a time, not held merged (sim/experiment/merged.py).

    A request found unservable (engine.errors.Unservable) stops the run with an error that begins with the
    run's system, rate and seed: the scheduler that finds it knows its pool, not which of a sweep's systems
    (and so which `systems[i]` keys, or swap_space_gib for which) the user has to change."""
    named: Unservable | None = None
    try:
        return _run_one(exp, system, rate, seed, jobs)
    except Unservable as err:
        named = type(err)(f"{run_label(system, rate, seed)}: {err}")
    # raised outside the handler, so with no context: a worker's error crosses to the parent pickled, and
    # the scheduler's message once is enough
    raise named


def run_label(system: SystemSpec, rate: float, seed: int) -> str:
    """The run an error was found in, as its progress line names it."""
    return f"{system.name} at rate {rate:g}, seed {seed}"


def _run_one(exp: Experiment, system: SystemSpec, rate: float, seed: int, jobs: int) -> RunResult:
    rng = np.random.default_rng(seed)  # the run's one Generator: the trace, then the beams' parents
    trace = trace_for(exp, rate, seed, rng)
    if exp.split is not None:
        return _run_split(exp, system, trace, rate, seed, rng)
    cost_model = make_cost_model(exp, system)
    # a breakdown is kept by clocks in this process: the replicas are served here too
    clock = BreakdownRecorder(cost_model) if exp.breakdown else cost_model
    # a breakdown is kept by clocks, and speculation's counts by the records, of replicas served in this process
    in_process = exp.breakdown or system.speculative is not None
    runs, horizon_s = serve_trace(exp, system, trace, clock, rng, jobs=1 if in_process else jobs, rate=rate)
    requests, dropped = requests_of(runs)
    gate: dict[str, int] = {}
    if exp.workload.max_concurrency is not None:  # when each request arrived at the client, and was sent
        requests, dropped = with_sent_times(requests, dropped, trace)
        gate[CONCURRENCY_COLUMN] = exp.workload.max_concurrency
    iterations: Mapping[str, np.ndarray] = (runs[0].records.iteration_arrays() if len(runs) == 1 and
                                            runs[0].stored is None else MergedIterations(runs))
    shares: dict[str, float] = {}
    if isinstance(clock, BreakdownRecorder):
        parts = breakdown_columns(recorded_steps(clock, runs))
        iterations = {**{name: iterations[name] for name in ITERATION_COLUMNS}, **parts}
        shares = breakdown_shares(parts, iterations["duration_s"])
    if system.speculative is not None:
        iterations = {**{name: iterations[name] for name in iterations}, **speculation_columns(runs)}
    metrics = summarize(requests, iterations, pool_slots=exp.kv_pool(system).num_slots,
                        warmup_s=exp.warmup_s, horizon_s=horizon_s, dropped=dropped, replicas=exp.replicas)
    summary = {**summary_head(exp, system, trace, exp.replicas, cost_model, rate, seed), **gate, **metrics, **shares,
               COST_MODEL_SOURCE: cost_model.source}
    bench = _vllm_bench(exp, system, rate, seed, requests, iterations, dropped, horizon_s, Schedule.of(system))
    return RunResult(summary, requests, iterations, dropped, bench)


def _vllm_bench(exp: Experiment, system: SystemSpec, rate: float, seed: int, requests: dict[str, np.ndarray],
                iterations: Mapping[str, np.ndarray], dropped: list[tuple], horizon_s: float, schedule: Schedule
                ) -> dict | None:
    """The run's vllm_bench.json, where the experiment asks for it."""
    if not exp.vllm_bench:
        return None
    from sim.experiment.vllm_bench import vllm_bench_result

    return vllm_bench_result(exp, system, rate, seed, requests, iterations, dropped, horizon_s, schedule)


def requests_of(runs: list[ReplicaRun]) -> tuple[dict[str, np.ndarray], list[tuple]]:
    """The runs' request records as columns, and their dropped requests' rows."""
    requests = request_arrays([values for run in runs for values in run.records.request_values])
    return requests, [values for run in runs for values in run.records.dropped_values]


def summary_head(exp: Experiment, system: SystemSpec, trace: Trace, replicas: int, cost_model: CostModel,
                 rate: float, seed: int) -> dict:
    """A summary row's first columns: what ran, on what, at which rate and seed; the cost model in a few words
    (its label). Its whole description goes last in the summary, under COST_MODEL_SOURCE."""
    return {"experiment": exp.name, "system": system.name, "model": exp.model.name, "hardware": exp.hardware.name,
            "tensor_parallel": exp.tensor_parallel, "replicas": replicas, "workload": trace.source,
            "cost_model": cost_model.label or cost_model.source, "rate": rate, "seed": seed}


def _run_split(exp: Experiment, system: SystemSpec, trace: Trace, rate: float, seed: int,
               rng: np.random.Generator) -> RunResult:
    """A run on the experiment's split fleet (sim/experiment/split_run.py): the summary's KV shares are the decode
    pool's, its pool being the one the requests' tokens grow in, and the KV moves get columns of their own."""
    horizon_s = horizon_of(exp, trace, rate)
    setup = split_setup(exp, system, horizon_s)
    split_runs = serve_split_trace(exp, setup, trace, rng)
    runs = split_runs.runs
    requests, dropped = requests_of(runs)
    iterations: Mapping[str, np.ndarray] = merged_records(runs).iteration_arrays()
    if setup.decode.system.speculative is not None:  # each iteration's tokens proposed and accepted (prefill: none)
        iterations = {**iterations, **speculation_columns(runs)}
    split = exp.split
    assert split is not None
    decode_slots = setup.decode.num_gpu_blocks * setup.decode.system.block_size
    metrics = summarize(requests, iterations, pool_slots=decode_slots, warmup_s=exp.warmup_s,
                        horizon_s=horizon_s, dropped=dropped, replicas=split.replicas)
    decoding = iterations["replica"] >= split.prefill.replicas
    metrics.update(kv_shares({k: v[decoding] for k, v in iterations.items()}, decode_slots))
    # the router's balance is the prefill pool's: each request by the prefill replica it was sent to
    metrics["load_imbalance"] = load_imbalance({**requests, "replica": prefill_replicas(requests, split_runs)},
                                               split.prefill.replicas)
    summary = {
        **summary_head(exp, system, trace, split.replicas, setup.prefill.cost_model, rate, seed), **metrics,
        "prefill_replicas": split.prefill.replicas, "decode_replicas": split.decode.replicas,
        **transfer_metrics(split_runs.transfers, exp.warmup_s, trace.arrival_s, horizon_s),
        COST_MODEL_SOURCE: split_cost_source(setup),
    }
    # a request's tokens after its first come from a decode replica, which it joined after that first token
    bench = _vllm_bench(exp, system, rate, seed, requests, iterations, dropped, horizon_s,
                        Schedule.of(setup.decode.system, join_late=True))
    return RunResult(summary, requests, iterations, dropped, bench)

