"""The simulator's roofline: FasterTransformer's dense attention, and the block-size costs a config sets."""
import pytest

from engine.core.batch import Batch
from engine.errors import SpecError
from sim.experiment.config import load_experiment
from sim.experiment.run import make_cost_model


def test_fastertransformer_runs_dense_attention_in_the_simulator(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("model: opt-13b\nhardware: a100-40gb\nkv_cache_gib: 12\n"
                    "workload: {dataset: sharegpt-standin, arrival: poisson, duration_s: 120}\n"
                    "systems: [fastertransformer, orca-oracle, vllm]\nrates: [1.0]\ncost_model: roofline\n")
    exp = load_experiment(path)
    decodes = Batch(decode_seq_ids=list(range(8)), decode_context_lens=[512] * 8)
    times = {s.name: make_cost_model(exp, s).iteration_time(decodes) for s in exp.systems}
    assert times["Orca (Oracle)"] == times["vLLM"] > times["FasterTransformer"]
    assert "dense attention" in make_cost_model(exp, exp.systems[0]).source


def test_roofline_block_costs_are_set_and_checked_in_a_config(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("model: opt-13b\nhardware: a100-40gb\nkv_cache_gib: 12\n"
                    "workload: {dataset: sharegpt-standin, arrival: poisson, duration_s: 120}\n"
                    "systems: [vllm]\nrates: [1.0]\n"
                    "cost_model: {kind: roofline, block_read_overhead_tokens: 0, swap_copy_latency_s: 2.0e-6}\n")
    params = load_experiment(path).cost_model.roofline
    assert params.block_read_overhead_tokens == 0 and params.swap_copy_latency_s == 2e-6
    with pytest.raises(SpecError, match="cost_model.swap_copy_latency_s"):
        load_experiment(path, ["cost_model.swap_copy_latency_s=-1"])
    old_name = path.read_text().replace("swap_copy_latency_s", "swap_transfer_latency_s")  # its name before
    path.write_text(old_name)
    assert load_experiment(path).cost_model.roofline.swap_copy_latency_s == 2e-6
