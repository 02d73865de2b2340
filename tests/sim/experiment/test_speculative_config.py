"""speculative: on a system: every bad value stops with one line naming the file and the key, where it is read."""
from __future__ import annotations

import pickle

import pytest
import yaml

from engine.errors import SpecError
from sim.experiment.config import experiment_from_dict
from sim.experiment.fingerprint import system_values
from sim.experiment.kv_pool import block_bytes, kv_cache_bytes_by_rule
from tests.helpers.configs import tiny

NGRAM = "{method: ngram, num_speculative_tokens: 3, acceptance: {mean_accepted: 1.5}}"
DRAFT = "{method: draft, num_speculative_tokens: 3, draft_model: opt-125m, acceptance: {rates: [0.8, 0.6, 0.4]}}"


def experiment(tmp_path, speculative: str, system: str = "vllm", **keys):
    text = tiny(systems=f"[{{preset: {system}, name: spec, speculative: {speculative}}}]", **keys)
    return experiment_from_dict(yaml.safe_load(text), str(tmp_path / "tiny.yaml"), tmp_path)


def refused(tmp_path, speculative: str, key: str, *fragments: str, system: str = "vllm", **keys) -> str:
    with pytest.raises(SpecError) as err:
        experiment(tmp_path, speculative, system, **keys)
    message = str(err.value)
    assert "\n" not in message and "tiny.yaml" in message and f": {key}: " in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_a_speculating_system_is_read_with_its_rates_and_draft(tmp_path):
    spec = experiment(tmp_path, DRAFT).systems[0].speculative
    assert spec.method == "draft" and spec.num_speculative_tokens == 3 and spec.rates == (0.8, 0.6, 0.4)
    assert spec.draft.name == "opt-125m" and spec.expected_accepted == pytest.approx(0.8 + 0.48 + 0.192)
    mean = experiment(tmp_path, NGRAM).systems[0].speculative
    assert mean.expected_accepted == pytest.approx(1.5) and len(set(mean.rates)) == 1


def test_a_speculating_experiment_crosses_processes(tmp_path):
    # a sweep's process pool pickles each run's experiment: its speculation too, compiled (mypyc) or not
    exp = experiment(tmp_path, DRAFT)
    again = pickle.loads(pickle.dumps(exp))
    assert again.systems[0].speculative == exp.systems[0].speculative
    assert system_values(again.systems[0]) == system_values(exp.systems[0])  # what a resumed sweep compares


@pytest.mark.parametrize("k", ["0", "-1", "17", "2.5", "true", "'3'"])
def test_k_is_a_whole_number_from_1_to_16(tmp_path, k):
    refused(tmp_path, NGRAM.replace("num_speculative_tokens: 3", f"num_speculative_tokens: {k}"),
            "systems[0].speculative.num_speculative_tokens", "[1, 16]")


@pytest.mark.parametrize("mean", ["-0.1", "3.5", ".nan", "true"])
def test_a_mean_accepted_outside_0_to_k_is_refused(tmp_path, mean):
    refused(tmp_path, NGRAM.replace("1.5", mean), "systems[0].speculative.acceptance.mean_accepted", "[0, 3]")


def test_a_rate_outside_0_to_1_is_refused(tmp_path):
    refused(tmp_path, DRAFT.replace("0.6", "1.2"), "systems[0].speculative.acceptance.rates[1]", "[0, 1]")


def test_rates_are_one_per_proposed_token(tmp_path):
    refused(tmp_path, DRAFT.replace("[0.8, 0.6, 0.4]", "[0.8, 0.6]"), "systems[0].speculative.acceptance.rates",
            "3 rates")


def test_acceptance_is_a_mean_or_rates(tmp_path):
    refused(tmp_path, NGRAM.replace("mean_accepted: 1.5", "length: 2"), "systems[0].speculative.acceptance",
            "mean_accepted", "rates")


def test_an_unknown_method_or_key_is_refused(tmp_path):
    refused(tmp_path, NGRAM.replace("ngram", "medusa"), "systems[0].speculative.method", "eagle")
    refused(tmp_path, NGRAM.replace("method", "metod"), "systems[0].speculative.metod", "valid keys")


def test_a_draft_needs_its_model_and_only_a_draft_names_one(tmp_path):
    refused(tmp_path, DRAFT.replace(" draft_model: opt-125m,", ""), "systems[0].speculative.draft_model", "'draft'")
    refused(tmp_path, NGRAM.replace("acceptance", "draft_model: opt-125m, acceptance"),
            "systems[0].speculative.draft_model", "only by method 'draft'")


def test_a_draft_of_another_vocabulary_is_refused(tmp_path):
    refused(tmp_path, DRAFT.replace("opt-125m", "llama-2-7b"), "systems[0].speculative.draft_model", "vocabulary",
            "32000", "50272")


def test_a_draft_not_smaller_than_the_target_is_refused(tmp_path):
    refused(tmp_path, DRAFT.replace("opt-125m", "opt-13b"), "systems[0].speculative.draft_model", "not smaller")


def test_an_unknown_draft_model_is_refused(tmp_path):
    refused(tmp_path, DRAFT.replace("opt-125m", "opt-126m"), "systems[0].speculative.draft_model", "opt-125m")


@pytest.mark.parametrize("system", ["orca-max", "fastertransformer"])
def test_speculation_on_a_system_that_is_not_vllm_is_refused(tmp_path, system):
    refused(tmp_path, NGRAM, "systems[0].speculative", "vllm", system=system)


def test_speculation_with_samples_or_beams_is_refused(tmp_path):
    workload = "{dataset: sharegpt-standin, duration_s: 30, %s}"
    refused(tmp_path, NGRAM, "workload.n", "one sequence", workload=workload % "n: 2")
    refused(tmp_path, NGRAM, "workload.beam_width", "beams", workload=workload % "beam_width: 2")


def test_a_split_fleets_prefill_pool_does_not_speculate(tmp_path):
    split = f"{{prefill: {{replicas: 1, system: {{preset: vllm, speculative: {NGRAM}}}}}, decode: {{replicas: 1}}}}"
    refused(tmp_path, NGRAM, "split.prefill.system.speculative", "prefill replicas do not speculate", "decode pool",
            split=split)


def test_a_draft_takes_its_weights_and_its_kv_out_of_the_pool(tmp_path):
    plain = experiment(tmp_path, NGRAM)
    drafted = experiment(tmp_path, DRAFT)
    pool, with_draft = plain.kv_pool(plain.systems[0]), drafted.kv_pool(drafted.systems[0])
    draft = drafted.systems[0].speculative.draft
    assert with_draft.block_bytes == pool.block_bytes + block_bytes(draft, 16, 1, plain.precision)
    assert with_draft.num_gpu_blocks == 12 * 2**30 // with_draft.block_bytes < pool.num_gpu_blocks  # kv_cache_gib: 12


@pytest.mark.parametrize("method", ["eagle", "mtp"])
def test_a_head_takes_its_layer_its_projection_and_one_layer_of_kv_out_of_the_pool(tmp_path, method):
    # the pool sized by the memory rule (kv_cache_gib: null), so that the head's weights come out of it
    plain = experiment(tmp_path, NGRAM, kv_cache_gib="null")
    headed = experiment(tmp_path, NGRAM.replace("ngram", method), kv_cache_gib="null")
    pool, with_head = plain.kv_pool(plain.systems[0]), headed.kv_pool(headed.systems[0])
    h, ffn = 5120, 20480  # OPT-13B, one 16-bit GPU
    layer = 4 * h * h + 2 * h * ffn + (3 * h + h + ffn + h) + 4 * h  # QKV, out, fc1, fc2; their biases; 2 LayerNorms
    head_weights = (layer + 2 * h * h) * 2  # and the 2h x h projection; embedding and LM head are the target's
    head_kv_per_block = 2 * h * 16 * 2  # one layer's K and V of a block's 16 tokens
    assert with_head.block_bytes == pool.block_bytes + head_kv_per_block
    free = kv_cache_bytes_by_rule(plain.model, plain.hardware, 1, plain.precision)
    assert pool.num_gpu_blocks == free // pool.block_bytes
    assert with_head.num_gpu_blocks == (free - head_weights) // with_head.block_bytes < pool.num_gpu_blocks
