"""`servesim validate --run PATH`: read a real run, replay it exactly in the simulator on its settings, and write
both side by side (outputs.py). The steps are the package's modules, in order; this one joins them."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from engine.errors import SpecError
from fidelity.runs.comparison import Row, summary_rows
from fidelity.runs.names import MODEL_NAMES
from fidelity.runs.outputs import write_outputs
from fidelity.runs.per_request import request_frame, simulated_latencies
from fidelity.runs.read import read_run
from fidelity.runs.real_run import VLLM_BENCH, RealRun
from fidelity.runs.replay_trace import ReplayTrace, replay_trace
from fidelity.runs.series import real_series, side_by_side, simulated_series
from fidelity.runs.settings import ReplaySetup, replay_setup
from fidelity.runs.simulated import SimulatedRun, simulate_replay
from fidelity.runs.token_gaps import gaps, token_times
from sim.experiment.output import check_out_dir
from sim.workload.config import build_trace


@dataclass(frozen=True, eq=False)
class RunValidation:
    run: RealRun
    setup: ReplaySetup
    replay: ReplayTrace
    simulated: SimulatedRun
    requests: pd.DataFrame
    summary: list[Row]
    series: pd.DataFrame
    out_dir: Path
    arrivals: str  # where the replayed arrivals came from


def default_out_dir(name: str) -> Path:
    return Path("results") / "validation" / name


def validate_run(run_path: str | Path, *, workload: str | Path | None = None, config: str | Path | None = None,
                 overrides: list[str] | None = None, out_dir: str | Path | None = None,
                 log: Callable[[str], None] = lambda line: None) -> RunValidation:
    started = time.perf_counter()
    run = read_run(run_path, workload)
    setup = replay_setup(run, config, overrides)
    if run.format == VLLM_BENCH:
        check_model_id(run, setup)
    arrivals, arrival_source = replay_arrivals(run, setup)
    system = setup.system
    replay = replay_trace(run, system.block_size if system.prefix_caching else None, arrivals)
    folder = check_out_dir(Path(out_dir) if out_dir else default_out_dir(setup.experiment.name))
    log(f"read {len(run.requests)} requests in {time.perf_counter() - started:.1f} s; simulating them "
        f"({int(run.requests.output_len.sum()):,} output tokens) ...")
    # the real run was over by its last arrival plus its longest latency: the horizon's scale
    simulated = simulate_replay(setup, replay, float(replay.trace.arrival_s[-1] + np.nanmax(run.requests.e2e_s)))
    log(f"simulated in {simulated.elapsed_s:.1f} s")
    times = token_times(simulated.requests, simulated.iterations)
    sim_metrics = {**simulated_latencies(simulated.requests), "itl": _pooled(gaps(times))}
    real_metrics = {"ttft": run.requests.ttft_s, "tpot": run.requests.tpot_s, "e2e": run.requests.e2e_s}
    if run.requests.itl_s is not None:
        real_metrics["itl"] = _pooled(list(run.requests.itl_s))
    rows = summary_rows(real_metrics, sim_metrics)
    series = side_by_side(real_series(run), simulated_series(simulated.requests, simulated.iterations, times,
                                                             simulated.pool_slots))
    requests = request_frame(run, simulated.requests)
    result = RunValidation(run, setup, replay, simulated, requests, rows, series, folder, arrival_source)
    write_outputs(folder, requests, rows, series, title(result), run_json(result, time.perf_counter() - started))
    return result


def check_model_id(run: RealRun, setup: ReplaySetup) -> None:
    """A vllm bench result names its model; where servesim knows it, the config must simulate that model."""
    known = MODEL_NAMES.get(run.settings.model_id or "")
    simulated = setup.experiment.model.name
    if known is not None and known != simulated:
        raise SpecError(setup.origins.get("model", "--config"), "model", (
            f"{simulated}, but {run.source} ran {run.settings.model_id} (servesim's {known}); simulate the model that "
            "ran"))


def replay_arrivals(run: RealRun, setup: ReplaySetup) -> tuple[np.ndarray | None, str]:
    """The run's own arrivals where it recorded them; else the config workload's first len(run) arrivals (its
    arrival process at its first rate and seed), never ones made up here."""
    if run.arrivals_recorded:
        return None, "recorded"
    exp = setup.experiment
    if not setup.config_workload:
        raise SpecError(run.source, "arrivals", f"{run.notes[0]}; give --config CONFIG with a workload (its arrival "
                        "process at its first rate and seed gives them)")
    drawn = build_trace(exp.workload, exp.rates[0], exp.model.max_seq_len, np.random.default_rng(exp.seeds[0]))
    if len(drawn) < len(run.requests):
        raise SpecError(setup.origins.get("workload", "--config"), "workload", (
            f"draws {len(drawn)} arrivals at rate {exp.rates[0]:g}, fewer than the run's {len(run.requests)} "
            "requests; lengthen it (workload.duration_s)"))
    return drawn.arrival_s[:len(run.requests)], (f"the config's workload ({exp.workload.arrival} at "
                                                 f"{exp.rates[0]:g} req/s, seed {exp.seeds[0]}): not recorded")


def title(result: RunValidation, separator: str = "\n") -> str:
    """What was compared with what: the run, then the simulated system and deployment."""
    exp = result.setup.experiment
    replicas = f"{exp.replicas} x " if exp.replicas > 1 else ""
    return (f"{result.run.name} ({result.run.format}){separator}real vs simulated {result.setup.system.name} on "
            f"{exp.model.name}, {replicas}{exp.tensor_parallel} x {exp.hardware.name}")


def run_json(result: RunValidation, elapsed_s: float) -> dict:
    run, setup, sim = result.run, result.setup, result.simulated
    exp, system = setup.experiment, setup.system
    pool = exp.kv_pool(system)
    keys = ("from the run's token ids" if result.replay.trace.block_keys is not None else
            "each request's own (no token ids)" if system.prefix_caching else "none (no prefix caching)")
    return {
        "run": {"path": run.source, "format": run.format, "name": run.name, "requests": len(run.requests),
                "failed": run.failed, "settings": run.settings,
                "workload": None if run.workload is None else {"path": run.workload.path,
                                                               "sha256": run.workload.sha256},
                "notes": list(run.notes)},
        "replay": {"arrivals": result.arrivals, "prefix_cache_keys": keys, "model": exp.model.name,
                   "max_model_len": exp.model.max_seq_len, "hardware": exp.hardware.name,
                   "tensor_parallel": exp.tensor_parallel, "replicas": exp.replicas, "router": exp.router.kind,
                   "system": system, "num_gpu_blocks": pool.num_gpu_blocks, "num_cpu_blocks": pool.num_cpu_blocks,
                   "cost_model": sim.cost_model, "origins": setup.origins, "notes": list(setup.notes),
                   "horizon_s": sim.horizon_s, "dropped": sim.dropped, "unfinished": sim.unfinished},
        "summary": [row for row in result.summary],
        "elapsed_s": elapsed_s,
    }


def _pooled(per_request: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(per_request) if per_request else np.empty(0)
