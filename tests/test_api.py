"""The Python API (`import servesim`) does what its commands do, on a tiny experiment."""
from pathlib import Path

import pandas as pd
import pytest

import servesim
from engine.errors import SpecError
from tests.helpers.configs import tiny

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(tiny(systems="[vllm, orca-oracle]", rates="[2]"))
    return path


def test_every_function_is_documented_with_an_example():
    for name in servesim.__all__:
        doc = getattr(servesim, name).__doc__
        assert doc and "Example::" in doc and f"servesim.{name}(" in doc, name


def test_load_experiment_applies_overrides_and_refuses_a_bad_key(config):
    exp = servesim.load_experiment(config, ["rates=[1,3]"])
    assert exp.rates == (1.0, 3.0) and [s.name for s in exp.systems] == ["vLLM", "Orca (Oracle)"]
    with pytest.raises(SpecError, match="rates"):
        servesim.load_experiment(config, ["rates=[-1]"])


def test_simulate_is_one_run_in_memory_the_same_as_the_sweeps(config, tmp_path):
    one = servesim.simulate(config, system="vLLM")
    assert one.summary["system"] == "vLLM" and one.summary["rate"] == 2
    assert len(one.requests) == one.summary["num_requests"] and len(one.iterations) == one.summary["num_iterations"]
    summary = servesim.run(config, tmp_path / "out", jobs=1, iterations="none", progress=lambda line: None)
    row = summary[summary["system"] == "vLLM"].iloc[0]
    assert row["normalized_latency"] == one.summary["normalized_latency"]
    with pytest.raises(SpecError, match="system: 'fastertransformer' is not a system of the experiment"):
        servesim.simulate(config, system="fastertransformer")


def test_run_writes_the_sweep_and_resumes(config, tmp_path):
    out = tmp_path / "out"
    summary = servesim.run(config, out, progress=lambda line: None)
    assert list(summary["system"]) == ["vLLM", "Orca (Oracle)"]
    assert (out / "runs" / "vllm_rate2_seed0" / "iterations.parquet").exists()
    assert pd.read_csv(out / "summary.csv")["normalized_latency"].tolist() == pytest.approx(
        summary["normalized_latency"].tolist())
    lines = []
    again = servesim.run(servesim.load_experiment(config), out, progress=lines.append)
    assert lines and lines[0].startswith("resuming: 2 of 2 runs")
    pd.testing.assert_frame_equal(again, summary)


def test_capacity_finds_a_rate_and_the_replicas_for_more(config):
    table = servesim.capacity(config, "ttft_p90_s=5", rate=3, tolerance=0.3, overrides=["systems=[vllm]"])
    assert list(table.columns) == ["system", "metric", "limit", "max_rate_per_replica_rps", "target_rate_rps",
                                   "replicas_needed", "limited_by", "cost_model", "model", "hardware",
                                   "tensor_parallel", "precision", "engine", "workload"]
    [row] = table.to_dict("records")
    assert row["max_rate_per_replica_rps"] > 0 and row["replicas_needed"] >= 2
    assert (row["model"], row["hardware"], row["tensor_parallel"], row["precision"], row["workload"]) == (
        "opt-13b", "a100-40gb", 1, "fp16/fp16", "sharegpt-standin, poisson arrivals"), "the answer names its setup"
    assert row["engine"] == "vllm mixed, 256 seqs, 2560 tokens"
    with pytest.raises(SpecError, match="unknown metric"):
        servesim.capacity(config, "latency=1")


def test_reproduce_draws_a_figure_and_its_claims(tmp_path, monkeypatch):
    from sim.reproduce import scale

    # far below --quick: the wiring is under test here, the figures in tests/sim/reproduce
    monkeypatch.setattr(scale, "QUICK", scale.Scale("test", "test: 20-s traces", duration_s=20, warmup_s=5,
                                                    max_rates=1))
    table = servesim.reproduce(["fig19"], tmp_path / "rep", quick=True, progress=lambda line: None)
    assert (tmp_path / "rep" / "fig19" / "fig19.png").exists()
    assert set(table["claim"]) >= {"fig19a.crossover"} and (tmp_path / "rep" / "paper_vs_sim.md").exists()


def test_validate_proves_the_schedules_agree(tmp_path):
    pytest.importorskip("torch")
    from tests.helpers.validate_tiny import write_tiny_validation

    config = write_tiny_validation(tmp_path)
    result = servesim.validate(config, tmp_path / "val", exact=True, overrides=["experiment.rates=[4]"],
                               log=lambda line: None)
    assert result.all_exact and len(result.exact) == 5 and (tmp_path / "val" / "exact.csv").exists()


def test_a_loaded_experiment_takes_no_overrides(config):
    with pytest.raises(SpecError, match="overrides: apply to a config file"):
        servesim.simulate(servesim.load_experiment(config), overrides=["rates=[1]"])
