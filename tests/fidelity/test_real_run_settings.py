"""A real run's engine settings become one Experiment and SystemSpec: its model, GPU, parallelism, served length,
KV pool (the recorded blocks exactly) and batching, on V1's scheduler; a config or --set overrides any
of them; a model or GPU servesim cannot name is a one-line error saying to give --config or --set."""
from __future__ import annotations

import json

import pytest

from engine.errors import SpecError
from fidelity.runs.read import read_run
from fidelity.runs.settings import replay_setup, v1_scheduler_settings
from tests.helpers.real_runs import BLOCK, META, write_bench_run, write_vllm_result


def _meta(**changes) -> dict:
    meta = json.loads(json.dumps(META))
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = meta
        for parent in parents:
            node = node[parent]
        node[key] = value
    return meta


def test_the_runs_settings_map_to_an_experiment(tmp_path):
    setup = replay_setup(read_run(write_bench_run(tmp_path)))
    exp, system = setup.experiment, setup.system
    assert (exp.model.name, exp.hardware.name, exp.tensor_parallel, exp.replicas) == ("llama-3.1-8b", "h100-sxm", 1, 1)
    assert exp.model.max_seq_len == 256 and exp.name == "H100-Llama"
    assert exp.kv_pool(system).num_gpu_blocks == 64  # the recorded blocks, exactly
    assert (system.kind, system.block_size, system.max_num_seqs, system.max_num_batched_tokens) == ("vllm", BLOCK, 8,
                                                                                                    64)
    assert system.prefix_caching
    assert (system.prefill_policy, system.preemption, system.watermark) == ("v1", "recompute", 0.0)
    assert system.async_scheduling == v1_scheduler_settings(read_run(write_bench_run(tmp_path)))["async_scheduling"]
    assert (exp.precision.weights, exp.precision.kv_cache) == ("bf16", "bf16")
    # no shipped profile measured an H100 whole: the A100's clock carried to it, with vLLM 0.19's engine
    assert exp.cost_model.kind == "transfer" and exp.cost_model.profile_path.name == "a100-80gb.yaml"
    assert exp.cost_model.host.stem == "vllm-0.19"
    assert setup.origins["kv_cache_gib"] == "64 blocks (the run)"


def test_data_parallel_engines_are_replicas_behind_the_least_loaded_router(tmp_path):
    meta = _meta(engine_kwargs__data_parallel_size=2, engine_kwargs__enable_expert_parallel=True)
    setup = replay_setup(read_run(write_bench_run(tmp_path, meta=meta)))
    assert setup.experiment.replicas == 2 and setup.experiment.router.kind == "least_outstanding"
    # a dense model has no experts to spread (vLLM ignores the flag for it too): said, not mapped
    assert not setup.experiment.expert_parallel and "expert_parallel" not in setup.origins
    assert any("llama-3.1-8b is dense: it has no experts to spread" in note for note in setup.notes)


def test_a_mixtures_expert_parallel_run_is_one_expert_parallel_group(tmp_path):
    moe = "Qwen/Qwen3-30B-A3B-Instruct-2507"
    meta = _meta(model=moe, engine_kwargs__model=moe, engine_kwargs__data_parallel_size=2,
                 engine_kwargs__enable_expert_parallel=True)
    setup = replay_setup(read_run(write_bench_run(tmp_path, meta=meta)))
    exp = setup.experiment
    assert exp.model.name == "qwen3-30b-a3b" and exp.replicas == 2 and exp.router.kind == "least_outstanding"
    assert exp.expert_parallel and exp.expert_parallel_group.degree == 2
    assert setup.origins["expert_parallel"] == "enable_expert_parallel (the run)"
    assert not any("expert" in note for note in setup.notes)
    assert replay_setup(read_run(write_bench_run(tmp_path, meta=meta)), overrides=["expert_parallel=false"]
                        ).experiment.expert_parallel is False


def test_unrecorded_kv_blocks_block_size_and_prefix_caching_take_the_rule_and_v1s_defaults(tmp_path):
    meta = _meta(kv_cache=None, resolved_config=None)
    setup = replay_setup(read_run(write_bench_run(tmp_path, meta=meta)))
    assert setup.system.block_size == 16 and setup.system.prefix_caching
    assert setup.experiment.kv_cache_gib is None and setup.experiment.model.max_seq_len == 131_072
    assert any("KV blocks not recorded" in note for note in setup.notes)


@pytest.mark.parametrize("field,value,key,reason", [
    ("model", "org/unknown-7b", "model", "no shipped model is known for 'org/unknown-7b'"),
    ("hardware", {"device_name": "NVIDIA Imaginary GPU"}, "hardware", "'NVIDIA Imaginary GPU'"),
])
def test_an_unknown_model_or_gpu_is_one_line_saying_to_give_config_or_set(tmp_path, field, value, key, reason):
    meta = _meta(**{field: value})
    run = read_run(write_bench_run(tmp_path, meta=meta))
    with pytest.raises(SpecError) as caught:
        replay_setup(run)
    text = str(caught.value)
    assert text.startswith(f"{run.source}: {key}: ") and reason in text and "\n" not in text
    assert "--config" in text and f"--set {key}=" in text


def test_a_gpu_llmservingsim_names_maps_to_the_sheet_of_that_name_where_one_is_shipped(tmp_path):
    run_dir = write_bench_run(tmp_path, meta=_meta(hardware=None))
    (run_dir / "config.json").write_text(json.dumps({"nodes": [{"instances": [{"hardware": "RTXPRO6000"}]}]}))
    run = read_run(run_dir)
    assert run.settings.gpu_name == "RTXPRO6000" and "LLMServingSim's name" in run.settings.gpu_name_from
    # the Server Edition (its runs' 1,597 GB/s), priced by its own measured device clock
    setup = replay_setup(run)
    assert setup.experiment.hardware.name == "rtx-pro-6000-server"
    assert setup.experiment.cost_model.profile_path.name == "rtx-pro-6000-server.yaml"
    (run_dir / "config.json").write_text(json.dumps({"nodes": [{"instances": [{"hardware": "H100"}]}]}))
    assert replay_setup(read_run(run_dir)).experiment.hardware.name == "h100-sxm"


def test_a_config_and_set_override_the_runs_settings(tmp_path):
    run = read_run(write_bench_run(tmp_path))
    config = tmp_path / "exp.yaml"
    config.write_text("name: mine\nhardware: a100-80gb\nkv_cache_gib: 2\n"
                      "systems: [{preset: vllm, prefill_policy: chunked, max_num_batched_tokens: 512}]\n")
    setup = replay_setup(run, config, ["tensor_parallel=2"])
    exp = setup.experiment
    assert (exp.name, exp.hardware.name, exp.tensor_parallel, exp.kv_cache_gib) == ("mine", "a100-80gb", 2, 2)
    assert setup.system.name == "vLLM" and setup.system.max_num_batched_tokens == 512
    assert setup.origins["hardware"] == str(config) and setup.origins["tensor_parallel"] == str(config)


def test_a_bad_value_the_run_gave_is_refused_naming_the_run_and_one_the_config_gave_naming_the_config(tmp_path):
    run = read_run(write_bench_run(tmp_path, meta=_meta(engine_kwargs__tensor_parallel_size=3)))
    with pytest.raises(SpecError, match=r"Llama \(its settings as servesim maps them\): tensor_parallel: 3 does not"):
        replay_setup(run)
    with pytest.raises(SpecError, match=r"^command line \(--set\): tensor_parallel: 5 does not"):
        replay_setup(run, None, ["tensor_parallel=5"])


def test_a_vllm_result_needs_its_engine_from_a_config(tmp_path):
    run = read_run(write_vllm_result(tmp_path / "r.json"))
    with pytest.raises(SpecError, match=r"r.json: hardware: the run does not record its GPU; give --config"):
        replay_setup(run)
    with pytest.raises(SpecError, match=r"r.json: max_num_seqs: not recorded"):
        replay_setup(run, None, ["hardware=h100-sxm"])
    setup = replay_setup(run, None, ["hardware=h100-sxm", "systems=[{preset: vllm, prefill_policy: chunked}]"])
    assert setup.experiment.model.name == "llama-3.1-8b"  # its model_id, mapped
