"""`expert_parallel: true`: the replicas are one data-parallel group of a mixture of experts whose GPUs hold its
experts between them. Its clock, its larger KV pool (a GPU holds only its share of the experts), a short run; and
every misuse one line naming the key."""
from __future__ import annotations

import pytest

from calibrate.hardware.hardware import GIB
from engine.errors import SpecError
from engine.specs.loader import load_model_spec
from sim.capacity.plan import colocated
from sim.experiment.config import clock_for, load_experiment
from sim.experiment.kv_pool import weight_bytes_per_gpu
from sim.experiment.run import run_one

QWEN3_MOE = """\
model: qwen3-30b-a3b
max_model_len: 4096
hardware: rtx-pro-6000
replicas: 2
router: least_outstanding
expert_parallel: true
workload: {dataset: sharegpt-standin, arrival: poisson, duration_s: 10}
systems: [{preset: vllm, name: vllm, max_num_batched_tokens: null}]
rates: [2.0]
warmup_s: 0
cost_model: roofline
"""


def test_the_replicas_are_one_group_whose_clock_reads_its_own_experts_and_dispatches(write_config):
    exp = load_experiment(write_config(QWEN3_MOE))
    group = exp.expert_parallel_group
    assert exp.expert_parallel and (group.data_parallel, group.tensor_parallel, group.degree) == (2, 1, 2)
    clock = clock_for(exp, exp.systems[0])
    assert "expert parallel over 2 x 1 GPUs (EP 2)" in clock.source
    off = load_experiment(write_config(QWEN3_MOE.replace("expert_parallel: true", "expert_parallel: false")))
    assert not off.expert_parallel and off.expert_parallel_group is None
    assert "expert parallel" not in clock_for(off, off.systems[0]).source


def test_a_gpu_holds_the_rest_of_the_weights_and_half_the_experts_so_its_kv_pool_grows(write_config):
    model, precision = load_model_spec("qwen3-30b-a3b"), load_experiment(write_config(QWEN3_MOE)).precision
    experts = 48 * 128 * 3 * 2048 * 768
    assert experts == 28_991_029_248 and model.num_params() - experts == 1_541_093_376
    on = load_experiment(write_config(QWEN3_MOE))
    assert weight_bytes_per_gpu(model, precision, 1, on.expert_parallel_group) == 2 * 1_541_093_376 + experts
    assert weight_bytes_per_gpu(model, precision, 1) == 2 * model.num_params()
    off = load_experiment(write_config(QWEN3_MOE.replace("expert_parallel: true", "expert_parallel: false")))
    system = on.systems[0]
    grown = on.kv_pool(system).num_gpu_blocks - off.kv_pool(system).num_gpu_blocks
    # the memory rule's pool gains the half of the experts' 2-byte weights a GPU no longer holds: 27 GiB, in blocks
    assert experts == 27 * GIB
    assert grown == pytest.approx(experts / on.kv_pool(system).block_bytes, abs=1)


def test_a_short_run_serves_every_request(write_config):
    exp = load_experiment(write_config(QWEN3_MOE))
    summary = run_one(exp, exp.systems[0], exp.rates[0], 0).summary
    assert summary["num_requests"] > 0 and summary["num_unfinished"] == 0


def _refused(write_config, text: str, *fragments: str) -> str:
    path = write_config(text)
    with pytest.raises(SpecError) as caught:
        load_experiment(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: expert_parallel: ") and "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_a_dense_model_is_refused(write_config):
    _refused(write_config, QWEN3_MOE.replace("qwen3-30b-a3b", "llama-3-8b"), "llama-3-8b is a dense model")


def test_a_degree_that_does_not_divide_the_experts_is_refused(write_config):
    _refused(write_config, QWEN3_MOE.replace("replicas: 2", "replicas: 3"),
             "replicas x tensor_parallel = 3 x 1 = 3 GPUs", "does not divide qwen3-30b-a3b's 128 experts", "64, 128]")


def test_a_value_other_than_true_or_false_is_refused(write_config):
    _refused(write_config, QWEN3_MOE.replace("expert_parallel: true", "expert_parallel: 2"), "true or false")


def test_a_split_fleet_is_refused_saying_why(write_config):
    text = QWEN3_MOE.replace("replicas: 2\n", "") + "split: {prefill: {replicas: 1}, decode: {replicas: 1}}\n"
    _refused(write_config, text, "not supported with split", "two data-parallel groups")


def test_a_profile_cost_model_is_refused(write_config):
    text = QWEN3_MOE + "cost_model: {kind: profile, path: calibrate/profiles/h200-opt-13b.yaml}\n"
    _refused(write_config, text, "profile cost model", "roofline or transfer")


def test_a_capacity_search_is_refused(write_config):
    exp = load_experiment(write_config(QWEN3_MOE))
    with pytest.raises(SpecError, match=r"expert_parallel: a capacity search varies the replicas") as caught:
        colocated(exp, False, "")
    assert "\n" not in str(caught.value)


def test_the_cost_models_label_names_the_expert_parallel_degree(write_config):
    exp = load_experiment(write_config(QWEN3_MOE))
    assert clock_for(exp, exp.systems[0]).label == "roofline on rtx-pro-6000 (EP 2)"
    off = load_experiment(write_config(QWEN3_MOE.replace("expert_parallel: true", "expert_parallel: false")))
    assert clock_for(off, off.systems[0]).label == "roofline on rtx-pro-6000"
