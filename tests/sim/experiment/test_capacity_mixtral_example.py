"""The Mixtral capacity example (configs/examples/capacity_mixtral_8x7b_h100.yaml) loads on the clock its comment
names, and a short trace of it runs, finishing requests (ShareGPT's long outputs may outlast so short a trace)."""
from pathlib import Path

from sim.experiment.config import clock_for, load_experiment
from sim.experiment.run import run_one

EXAMPLE = Path(__file__).resolve().parents[3] / "configs" / "examples" / "capacity_mixtral_8x7b_h100.yaml"


def test_the_example_prices_mixtral_with_the_h100s_own_fit_and_its_experts():
    exp = load_experiment(EXAMPLE)
    assert (exp.model.name, exp.hardware.name, exp.tensor_parallel) == ("mixtral-8x7b", "h100-sxm", 2)
    source = clock_for(exp, exp.systems[0]).source
    assert "h100-sxm's own fit" in source and "8 experts, 2 a token" in source
    assert "host: vllm-a100-2024-05" in source


def test_a_short_trace_of_the_example_runs():
    exp = load_experiment(EXAMPLE, ["workload.duration_s=15", "rates=[2]", "warmup_s=0"])
    summary = run_one(exp, exp.systems[0], exp.rates[0], 0).summary
    assert summary["num_requests"] > summary["num_unfinished"]
    assert 0 < summary["ttft_p90_s"] and 0 < summary["tpot_p90_s"] < summary["latency_mean_s"]
