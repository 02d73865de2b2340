"""Speculative decoding on a split fleet's decode pool (docs/speculative-decoding.md, docs/disaggregated.md): the
systems' `speculative` runs on the decode replicas, whose KV pool holds the proposer, and never on the prefill
replicas; a decode pool's own system speculates with its draft model loaded and its table read; a run records each
request's and each iteration's tokens proposed and accepted, as a colocated speculating run does, and the capacity
split search takes it."""
import math

import numpy as np
import pytest

from calibrate.clock.speculative_pricing import SpeculativeCostModel
from engine.core.records import SPECULATIVE_COLUMNS
from engine.errors import SpecError
from sim.capacity.plan import plan_capacity
from sim.capacity.split import split_capacity
from sim.experiment.config import load_experiment
from sim.experiment.run import run_one
from sim.experiment.split_run import split_setup
from tests.helpers.configs import tiny

EAGLE = "{method: eagle, num_speculative_tokens: 3, acceptance: {rates: [0.8, 0.6, 0.4]}}"
DRAFT = "{method: draft, num_speculative_tokens: 2, draft_model: opt-125m, acceptance: {mean_accepted: 1}}"
SPLIT = "{prefill: {replicas: 1}, decode: {replicas: 2}}"


def speculating(write_config, split: str = SPLIT, speculative: str = EAGLE, **keys):
    systems = f"[vllm, {{preset: vllm, name: eagle, speculative: {speculative}}}]"
    return load_experiment(write_config(tiny(systems=systems, rates="[2]", split=split, **keys)))


def test_the_decode_pool_speculates_and_the_prefill_pool_does_not(write_config):
    exp = speculating(write_config)
    plain, spec = (split_setup(exp, system, 100.0) for system in exp.systems)
    assert spec.prefill.system.speculative is None and spec.decode.system.speculative == exp.systems[1].speculative
    assert isinstance(spec.decode.cost_model, SpeculativeCostModel)
    assert not isinstance(spec.prefill.cost_model, SpeculativeCostModel)
    # the EAGLE head's KV rides in the decode pool's blocks alone
    assert spec.prefill.num_gpu_blocks == plain.prefill.num_gpu_blocks == plain.decode.num_gpu_blocks
    assert spec.decode.num_gpu_blocks < plain.decode.num_gpu_blocks


def test_a_decode_pools_own_system_loads_its_draft_and_reads_its_table(write_config):
    split = f"{{prefill: {{replicas: 1}}, decode: {{replicas: 1, system: {{preset: vllm, speculative: {DRAFT}}}}}}}"
    exp = load_experiment(write_config(tiny(systems="[vllm]", rates="[2]", split=split)))
    spec = split_setup(exp, exp.systems[0], 100.0).decode.system.speculative
    assert spec.draft.name == "opt-125m" and spec.expected_accepted == pytest.approx(1.0)
    table = "{method: eagle, num_speculative_tokens: 3, acceptance: {table: published, dataset: sharegpt}}"
    with pytest.raises(SpecError) as caught:
        load_experiment(write_config(tiny(systems="[vllm]", split=split.replace(DRAFT, table))))
    message = str(caught.value)
    assert "\n" not in message and ": split.decode.system.speculative.acceptance.model: " in message, message


def test_a_speculating_split_run_records_what_each_request_and_iteration_proposed(write_config):
    exp = speculating(write_config)
    plain, spec = (run_one(exp, system, 2.0, 0) for system in exp.systems)
    assert not set(SPECULATIVE_COLUMNS) & (set(plain.request_arrays) | set(plain.iteration_arrays))
    requests, iterations = spec.request_arrays, spec.iteration_arrays
    prefilling = iterations["replica"] == 0
    for name in SPECULATIVE_COLUMNS:
        assert iterations[name][prefilling].sum() == 0 < iterations[name][~prefilling].sum()
        assert requests[name].sum() == iterations[name].sum()
    decodes = iterations["num_decodes"][~prefilling].sum()
    assert iterations["accepted_tokens"].sum() / decodes == pytest.approx(0.8 + 0.48 + 0.192, rel=0.1)
    assert spec.summary["tpot_mean_s"] < plain.summary["tpot_mean_s"]  # light load: fewer, barely wider steps
    assert "decode pool: " in spec.summary["cost_model_source"] and "speculative decoding (eagle)" in \
        spec.summary["cost_model_source"]
    assert all(math.isfinite(spec.summary[k]) for k in ("kv_copy_mean_s", "ttft_mean_s", "load_imbalance"))
    again = run_one(exp, exp.systems[1], 2.0, 0)
    assert all(np.array_equal(again.iteration_arrays[k], iterations[k]) for k in iterations)


def test_the_capacity_split_search_takes_a_speculating_system(write_config):
    exp = speculating(write_config)
    plan = plan_capacity(exp, ["ttft_p90_s=0.5", "tpot_p90_s=0.2"], tolerance=0.3)
    rows = split_capacity(plan, 2)
    assert [(row["system"], row["fleet"]) for row in rows] == [("vLLM", "colocated"), ("vLLM", "1P:1D"),
                                                               ("eagle", "colocated"), ("eagle", "1P:1D")]
    assert all(row["max_rate_rps"] > 0 for row in rows)
