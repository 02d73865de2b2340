"""Mixtral-8x7B, a mixture of experts, serves a short trace on the roofline at tensor parallelism 2 on H100s, holds
the KV tokens its 8 KV heads allow, and serves one on the shipped A100 clock, whose H100 fit prices it there."""
from __future__ import annotations

from calibrate.parts.host_model import host_model_path
from sim.experiment.config import clock_for, load_experiment
from sim.experiment.run import run_one

PROFILE = host_model_path("vllm-a100-2024-05").parents[2] / "calibrate" / "profiles" / "a100-80gb.yaml"


def experiment(tmp_path, model: str = "mixtral-8x7b", cost_model: str = "roofline"):
    path = tmp_path / f"{model}.yaml"
    path.write_text(f"model: {model}\nhardware: h100-sxm\ntensor_parallel: 2\nkv_cache_gib: 8\n"
                    f"cost_model: {cost_model}\n"
                    "workload: {dataset: sharegpt-standin, arrival: poisson, duration_s: 20}\n"
                    "systems: [{preset: vllm, name: vllm, max_num_batched_tokens: null}]\n"
                    "rates: [1.0]\nwarmup_s: 0\n")
    return load_experiment(path)


def test_mixtral_serves_a_short_trace_on_the_roofline_at_tp_2(tmp_path):
    exp = experiment(tmp_path)
    assert exp.model.num_experts == 8 and "roofline(h100-sxm, tp=2" in clock_for(exp, exp.systems[0]).source
    summary = run_one(exp, exp.systems[0], exp.rates[0], 0).summary
    assert summary["num_requests"] > 0 and summary["num_unfinished"] == 0
    assert 0 < summary["ttft_mean_s"] < summary["latency_mean_s"]


def test_mixtral_holds_as_many_kv_tokens_as_mistral_of_its_attention(tmp_path):
    # the same 32 layers of 8 KV heads of 128: the same KV bytes per token, so the same pool in the same GiB
    mixtral, mistral = experiment(tmp_path), experiment(tmp_path, "mistral-7b")
    system = mixtral.systems[0]
    assert mixtral.model.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2
    assert mixtral.kv_pool(system).num_slots == mistral.kv_pool(system).num_slots > 0


def test_mixtral_serves_a_short_trace_on_the_shipped_transfer_profile(tmp_path):
    exp = experiment(tmp_path, cost_model=f"{{kind: transfer, path: {PROFILE}}}")
    source = clock_for(exp, exp.systems[0]).source
    assert "h100-sxm's own fit" in source and "8 experts, 2 a token" in source
    summary = run_one(exp, exp.systems[0], exp.rates[0], 0).summary
    assert summary["num_requests"] > 0 and summary["num_unfinished"] == 0
    assert 0 < summary["ttft_mean_s"] < summary["latency_mean_s"]
