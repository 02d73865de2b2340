"""A validation run on a tiny config writes every output file, with the documented columns."""
import json

import pandas as pd

from sim.cli import main

SUMMARY = ["system", "rate", "real_normalized_latency", "sim_normalized_latency", "normalized_latency_error",
           "real_repeat_spread", "p90_request_error", "real_mean_batched_requests", "sim_mean_batched_requests",
           "real_preemptions", "sim_preemptions", "real_throughput_tokens_per_s", "sim_throughput_tokens_per_s",
           "below_saturation", "exact_replay", "warmup_rule"]
REQUESTS = ["system", "rate", "request_id", "measured", "real_latency_s", "sim_latency_s", "latency_error",
            "real_ttft_s", "sim_ttft_s", "ttft_error", "real_normalized_latency", "sim_normalized_latency"]
SUSTAINABLE = ["system", "latency_threshold", "real_sustainable_rate", "sim_sustainable_rate",
               "sustainable_rate_error"]
FIDELITY = ["system", "max_normalized_latency_error", "max_p90_request_error", "sustainable_rate_error",
            "max_real_repeat_spread", "exact_replay"]
ITERATIONS = ["system", "rate", "repeat", "kind", "measured_s", "predicted_s", "error"]
EXACT = ["system", "rate", "repeat", "same_batches", "same_preemptions", "max_time_diff_s", "identical"]


def has_columns(path, columns):
    frame = pd.read_csv(path)
    missing = [c for c in columns if c not in frame.columns]
    assert not missing, f"{path.name} lacks {missing}"
    return frame


def test_validate_writes_every_output(tiny_validation, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["validate", str(tiny_validation()), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "targets:" in printed and "warm-up:" in printed

    summary = has_columns(out / "summary.csv", SUMMARY)
    assert len(summary) == 5 * 2  # one row per system x rate
    assert summary["exact_replay"].all()
    assert (summary["real_repeat_spread"] >= 0).all()
    assert summary["warmup_rule"].str.contains("10%").all()  # the rule used is said, row by row
    requests = has_columns(out / "requests.csv", REQUESTS)
    assert set(requests["system"]) == set(summary["system"])
    assert (requests["real_latency_s"] > 0).all() and (requests["sim_latency_s"] > 0).all()
    assert not requests["measured"].all()  # the warm-up excluded someone
    assert len(has_columns(out / "sustainable.csv", SUSTAINABLE)) == 5
    assert len(has_columns(out / "fidelity.csv", FIDELITY)) == 5
    iterations = has_columns(out / "iterations.csv", ITERATIONS)
    assert set(iterations["kind"]) >= {"prefill", "decode"}
    assert has_columns(out / "exact.csv", EXACT)["identical"].all()
    for figure in ("normalized_latency.png", "request_scatter.png"):
        assert (out / figure).read_bytes()[:4] == b"\x89PNG"
    meta = json.loads((out / "validation.json").read_text())
    assert meta["repeats"] == 2 and meta["pool"]["vLLM"]["num_gpu_blocks"] == 16
    assert "60-s rule" in meta["warmup_rule"] and meta["torch_threads"] == 1
    assert (out / "summary.txt").exists()
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary files


def test_exact_mode_only_proves_the_schedules(tiny_validation, tmp_path, capsys):
    out = tmp_path / "exact"
    args = ["validate", str(tiny_validation()), "--out", str(out), "--exact",
            "--set", "experiment.systems=[vllm, orca-pow2]", "--set", "experiment.rates=[12]"]
    assert main(args) == 0
    assert "2/2 schedules identical" in capsys.readouterr().out
    exact = pd.read_csv(out / "exact.csv")
    assert list(exact["system"]) == ["vLLM", "Orca (Pow2)"] and exact["identical"].all()
    assert not (out / "summary.csv").exists()
