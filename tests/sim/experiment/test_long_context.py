"""Long contexts: the example serves Vidur's Arxiv-Summarization lengths on Llama-3.1-8B, 32k-token prompts are
admitted and served by chunked prefill, and a token cap the one-iteration prefill policies cannot honour is
refused at load time in one line that names chunked prefill."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import SpecError
from sim.experiment.config import load_experiment
from sim.experiment.run import run_one

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "configs/examples/long_context_llama31_8b.yaml"
TINY = ["workload.duration_s=8", "rates=[1]", "warmup_s=1"]


def served(exp):
    result = run_one(exp, exp.systems[0], exp.rates[0], 0)
    return result.summary, result.request_arrays


def test_the_example_serves_arxiv_summaries_on_llama31_8b():
    exp = load_experiment(EXAMPLE, TINY)
    assert exp.model.max_seq_len == 131_072 and exp.workload.dataset == "arxiv-summarization"
    summary, requests = served(exp)
    assert summary["num_requests"] > 0 and summary["num_unfinished"] == 0 and summary["num_ignored"] == 0
    assert requests["prompt_len"].mean() > 1000       # long prompts, split over 2,048-token iterations


def test_32k_token_prompts_are_admitted_and_prefilled_in_chunks(tmp_path):
    lengths = tmp_path / "long.csv"
    lengths.write_text("prompt_len,output_len\n32768,8\n32000,16\n")
    exp = load_experiment(EXAMPLE, [*TINY, f"workload.dataset={lengths}", "rates=[0.5]"])
    summary, requests = served(exp)
    assert summary["num_requests"] >= 2 and summary["num_unfinished"] == 0 and summary["num_ignored"] == 0
    assert set(requests["prompt_len"].tolist()) == {32768, 32000}
    # no iteration prefills more than the 2,048-token budget: the prompts took at least this many
    assert summary["num_iterations"] >= requests["prompt_len"].sum() / 2048


@pytest.mark.parametrize("policy", ["mixed", "separate"])
def test_a_cap_below_the_models_length_is_refused_naming_chunked_prefill(policy):
    with pytest.raises(SpecError) as caught:
        load_experiment(EXAMPLE, [f"systems=[{{preset: vllm, prefill_policy: {policy}}}]"])
    text = str(caught.value)
    assert "long_context_llama31_8b.yaml" in text and "systems[0].max_num_batched_tokens" in text
    assert "131072-token prompt" in text and "prefill_policy: chunked" in text and "\n" not in text


def test_the_one_iteration_policies_run_with_a_cap_that_holds_the_model():
    exp = load_experiment(EXAMPLE, [*TINY, "systems=[{preset: vllm, prefill_policy: mixed, "
                                    "max_num_batched_tokens: null}]"])
    summary, _ = served(exp)
    assert summary["num_unfinished"] == 0 and summary["num_ignored"] == 0


def test_a_request_past_the_models_positions_is_still_dropped_by_the_generator(tmp_path):
    lengths = tmp_path / "mixed.csv"
    lengths.write_text("prompt_len,output_len\n131000,72\n32768,8\n")   # 131,072 in all: not under the max
    exp = load_experiment(EXAMPLE, [*TINY, f"workload.dataset={lengths}", "rates=[0.5]"])
    summary, requests = served(exp)
    assert set(requests["prompt_len"].tolist()) == {32768} and summary["num_ignored"] == 0


def test_max_model_len_caps_the_served_length_so_a_small_gpus_pool_is_accepted():
    # a 4 GiB pool holds 32,768 tokens of Llama-3.1-8B: less than its 131,072-token context, as vLLM would refuse
    small = ["kv_cache_gib=4", "systems=[{preset: vllm, prefill_policy: chunked, max_num_batched_tokens: 2048}]"]
    with pytest.raises(SpecError, match="less than one 131072-token request"):
        load_experiment(EXAMPLE, [*TINY, *small])
    exp = load_experiment(EXAMPLE, [*TINY, *small, "max_model_len=32768"])
    assert exp.model.max_seq_len == 32768 and exp.model.name == "llama-3.1-8b"
    assert exp.kv_pool(exp.systems[0]).num_slots == 32768


@pytest.mark.parametrize("cap", [1, 131_073, "long", True])
def test_a_max_model_len_outside_the_models_context_is_refused_naming_the_key(cap):
    with pytest.raises(SpecError) as caught:
        load_experiment(EXAMPLE, [*TINY, f"max_model_len={cap}"])
    assert "max_model_len" in str(caught.value) and "\n" not in str(caught.value)
