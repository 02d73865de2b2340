"""The engine model's serial host work fitted on real runs (fidelity/runs/engine_fit.py): the fit recovers known
coefficients from runs the simulator made with them, and a run left out is never seen (poisoned, the fit on the
others does not move)."""
from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest

from calibrate.parts.host_model import EngineMechanisms, HostModel, save_host_model
from fidelity.runs.engine_fit import (
    fit,
    fit_run,
    judged_errors,
    leave_one_run_out,
    with_serial,
)
from fidelity.runs.per_request import simulated_latencies
from fidelity.runs.simulated import simulate_replay
from tests.helpers.real_runs import META, write_bench_run

BASE = HostModel("test-engine", "a test engine: nothing measured", "this test", "none",
                 {"schedule": {"per_iteration_s": 2e-4}}, engine=EngineMechanisms(overlap=True))
TRUTH = {"per_iteration_s": 4e-3, "per_prefill_token_s": 0.0}


def synthetic_run(tmp_path, name: str, seed: int):
    """A run of 30 requests whose 'real' latencies are the simulator's own under TRUTH's serial work."""
    rng = np.random.default_rng(seed)
    count = 30
    prompts = [[int(t) for t in rng.integers(1, 1000, int(n))] for n in rng.integers(20, 60, count)]
    outputs = [int(n) for n in rng.integers(5, 20, count)]
    arrivals = np.cumsum(rng.exponential(0.05, count))
    workload = [{"input_toks": len(ids), "output_toks": out, "arrival_time_ns": int(at * 1e9), "input_tok_ids": ids}
                for ids, out, at in zip(prompts, outputs, arrivals)]
    requests = [{"request_id": f"r{i}", "input_toks": len(ids), "output_toks": out, "arrival_time": 1.0 + at,
                 "queued_ts": 10.0 + at, "scheduled_ts": 10.0 + at, "first_token_ts": 10.1 + at,
                 "last_token_ts": 10.2 + at + 0.01 * out}
                for i, (ids, out, at) in enumerate(zip(prompts, outputs, arrivals))]
    meta = copy.deepcopy(META)
    meta["engine_kwargs"]["max_num_batched_tokens"] = 256
    meta["resolved_config"]["scheduler_config"]["max_num_batched_tokens"] = 256
    meta["kv_cache"]["num_gpu_blocks"] = 4096
    root = tmp_path / name
    root.mkdir()
    case = fit_run(name, write_bench_run(root, requests=requests, workload=workload, meta=meta, hashed=False))
    truth = save_host_model(with_serial(BASE, TRUTH), tmp_path / f"{name}-truth.yaml")
    exp = case.setup.experiment
    setup = replace(case.setup, experiment=replace(exp, cost_model=replace(exp.cost_model, host=truth)))
    real = simulated_latencies(simulate_replay(setup, case.replay, case.real_end_s).requests)
    return replace(case, real={metric: real[metric] for metric in ("ttft", "tpot", "e2e")})


def test_the_fit_recovers_the_serial_work_the_runs_were_made_with(tmp_path):
    runs = [synthetic_run(tmp_path, "a", 0), synthetic_run(tmp_path, "b", 1)]
    fitted = fit(runs, BASE)
    assert fitted["per_iteration_s"] == pytest.approx(TRUTH["per_iteration_s"], rel=0.25)
    path = save_host_model(with_serial(BASE, fitted), tmp_path / "fitted.yaml")
    assert max(abs(e) for run in runs for e in judged_errors(run, path).values()) < 0.02


@pytest.mark.slow
def test_a_run_left_out_is_never_seen_by_the_fit_on_the_others(tmp_path):
    runs = [synthetic_run(tmp_path, name, seed) for seed, name in enumerate("abc")]
    folds = leave_one_run_out(runs, BASE)
    poisoned = [replace(run, real={m: v * 100 for m, v in run.real.items()}) if run.name == "b" else run
                for run in runs]
    again = leave_one_run_out(poisoned, BASE)
    held_b = [fold for fold in again if fold.held_out == "b"][0]
    assert held_b.coefficients == [fold for fold in folds if fold.held_out == "b"][0].coefficients
    assert all(abs(e) > 0.9 for e in held_b.errors.values()), "its errors are measured against its own (poisoned) run"
    others = [fold for fold in again if fold.held_out != "b"]
    assert any(fold.coefficients != orig.coefficients for fold, orig in zip(others, folds)), (
        "the folds that fit on b do see it")
