"""The shipped dense models load into an experiment on hardware they fit and serve a short trace there on the
roofline and on the transferred A100 profile; their KV pools hold the tokens their KV heads allow."""
from __future__ import annotations

from dataclasses import replace

import pytest

from calibrate.parts.host_model import host_model_path
from engine.errors import SpecError
from sim.experiment.config import load_experiment
from sim.experiment.run import run_one

PROFILE = host_model_path("vllm-a100-2024-05").parents[2] / "calibrate" / "profiles" / "a100-80gb.yaml"
COST_MODELS = {"roofline": "roofline", "transfer": f"{{kind: transfer, path: {PROFILE}}}"}
PLACEMENTS = {  # model: (hardware, tensor_parallel) where its weights and one max-length request fit
    "llama-2-7b": ("a100-80gb", 1), "llama-2-13b": ("a100-80gb", 1), "llama-3-8b": ("a100-80gb", 1),
    "llama-3.1-8b": ("a100-80gb", 1), "mistral-7b": ("a100-80gb", 1), "qwen2.5-7b": ("a100-80gb", 1),
    "internlm-20b": ("a100-80gb", 1), "phi-2": ("a100-80gb", 1), "codellama-34b": ("h100-sxm", 4),
    "llama-2-70b": ("h100-sxm", 8), "llama-3-70b": ("h100-sxm", 4), "llama-3.1-70b": ("h100-sxm", 8),
    "qwen2.5-72b": ("h100-sxm", 8),
}


def experiment(tmp_path, model: str, cost_model: str = "roofline", kv_cache_gib: float | None = None):
    hardware, tp = PLACEMENTS[model]
    path = tmp_path / f"{model}-{hardware}-{tp}.yaml"
    kv = "" if kv_cache_gib is None else f"kv_cache_gib: {kv_cache_gib}\n"
    path.write_text(f"model: {model}\nhardware: {hardware}\ntensor_parallel: {tp}\n{kv}"
                    f"cost_model: {COST_MODELS[cost_model]}\n"
                    "workload: {dataset: sharegpt-standin, arrival: poisson, duration_s: 20}\n"
                    # the paper-era preset caps an iteration at 2560 tokens, short of these models' prompts
                    "systems: [{preset: vllm, name: vllm, max_num_batched_tokens: null}]\n"
                    "rates: [1.0]\nwarmup_s: 0\n")
    return load_experiment(path)


@pytest.mark.parametrize("cost_model", sorted(COST_MODELS))
@pytest.mark.parametrize("model", sorted(PLACEMENTS))
def test_each_model_serves_a_short_trace(tmp_path, model, cost_model):
    exp = experiment(tmp_path, model, cost_model)
    summary = run_one(exp, exp.systems[0], exp.rates[0], 0).summary
    assert summary["num_requests"] > 0 and summary["num_unfinished"] == 0
    assert 0 < summary["ttft_mean_s"] < summary["latency_mean_s"]


@pytest.mark.parametrize("gqa,mha,ratio", [("llama-3-8b", "llama-2-7b", 4), ("mistral-7b", "llama-2-7b", 4),
                                           ("qwen2.5-7b", None, 7), ("llama-2-70b", None, 8)])
def test_a_gqa_pool_holds_as_many_more_tokens_as_it_has_fewer_kv_heads(tmp_path, gqa, mha, ratio):
    exp = experiment(tmp_path, gqa, kv_cache_gib=8)
    # the MHA model of the same width and depth: a shipped one (Llama-2-7B beside Llama-3-8B) or the GQA one
    # with a KV head per query head
    dense = replace(exp, model=replace(exp.model, num_kv_heads=exp.model.num_heads)) if mha is None else \
        experiment(tmp_path, mha, kv_cache_gib=8)
    system = exp.systems[0]
    assert exp.kv_pool(system).num_slots == pytest.approx(ratio * dense.kv_pool(system).num_slots, rel=1e-3)


def test_tensor_parallelism_past_the_kv_heads_is_refused_naming_the_valid_degrees(tmp_path):
    # 7 GPUs would split the 28 query heads evenly, but not the 4 KV heads
    path = tmp_path / "qwen-tp7.yaml"
    path.write_text("model: qwen2.5-7b\nhardware: a100-80gb\ntensor_parallel: 7\n"
                    "workload: {dataset: sharegpt-standin, arrival: poisson, duration_s: 20}\nrates: [1.0]\n")
    with pytest.raises(SpecError) as err:
        load_experiment(path)
    assert "tensor_parallel: 7 does not divide qwen2.5-7b's 4 KV heads; valid: [1, 2, 4]" in str(err.value)
