"""An answer carries its setup: capacity.csv names the model, the GPU, its tensor parallelism, the number formats, the
engine, the clock and the workload of each row, and resolved.yaml beside it is the config as the command read it."""
from __future__ import annotations

import pandas as pd

from servesim.cli import main
from sim.experiment.config import load_experiment
from sim.experiment.setup import SETUP_COLUMNS, engine_label
from tests.helpers.configs import tiny


def test_capacity_csv_names_the_setup_after_its_old_columns_and_resolved_yaml_reloads_as_the_run(write_config,
                                                                                              tmp_path, capsys):
    out = tmp_path / "cap"
    config = write_config(tiny(systems="[vllm]", rates="[1]"))
    assert main(["capacity", str(config), "--target", "ttft_p90_s=1", "--tolerance", "0.3", "--out", str(out),
                 "--set", "precision={weights: fp8, kv_cache: fp16}", "--set", "cost_model=roofline"]) == 0
    table = pd.read_csv(out / "capacity.csv")
    old = ["system", "metric", "limit", "max_rate_per_replica_rps", "limited_by", "cost_model"]
    assert list(table.columns) == old + list(SETUP_COLUMNS), "the columns it had keep their place; the setup follows"
    [row] = table.to_dict("records")
    assert (row["model"], row["hardware"], row["tensor_parallel"], row["precision"]) == (
        "opt-13b", "a100-40gb", 1, "fp8/fp16")
    assert row["workload"] == "sharegpt-standin, poisson arrivals" and row["cost_model"].startswith("roofline")
    resolved = out / "resolved.yaml"
    assert resolved.read_text().startswith(f"# {config}, with --set precision=")
    again = load_experiment(resolved)
    assert again.precision.weights == "fp8" and again.cost_model.kind == "roofline", "the overrides are in it"
    assert row["engine"] == engine_label(again.systems[0]) == "vllm mixed, 256 seqs, 2560 tokens"
