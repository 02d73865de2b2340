"""`servesim validate --run` end to end on a hand-written run: exit 0 and every file written with what it should
hold; a user's error is exit 2 and one line, with nothing written; flags of the engine's validation are refused
beside --run; a result without arrivals replays only with a config's workload."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from fidelity.runs.outputs import FILES
from servesim.cli import main
from tests.helpers.real_runs import META, TIMES, write_bench_run, write_vllm_result


def test_a_run_is_validated_end_to_end(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["validate", "--run", str(write_bench_run(tmp_path)), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert "TTFT   mean" in printed and "real vs simulated vLLM V1 on llama-3.1-8b, 1 x h100-sxm" in printed
    requests = pd.read_csv(out / "requests.csv")
    assert len(requests) == 4 and requests["real_ttft_s"].tolist() == [f - q for q, _, f, _ in TIMES]
    assert requests["sim_ttft_s"].gt(0).all() and requests["sim_e2e_s"].ge(requests["sim_ttft_s"]).all()
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 20 and list(summary.columns) == ["metric", "statistic", "real_ms", "sim_ms", "error_pct"]
    mean_ttft = summary[(summary.metric == "ttft") & (summary.statistic == "mean")].iloc[0]
    assert mean_ttft.real_ms == requests["real_ttft_s"].mean() * 1000
    expected = (mean_ttft.sim_ms - mean_ttft.real_ms) / mean_ttft.real_ms * 100
    assert mean_ttft.error_pct == pytest.approx(expected, rel=1e-12)
    series = pd.read_csv(out / "series.csv")
    assert series["real_prompt_tokens_per_s"].tolist()[:2] == [27.0, 5.0] and series["sim_running"].notna().any()
    run = json.loads((out / "run.json").read_text())
    assert run["run"]["settings"]["num_gpu_blocks"] == 64 and run["replay"]["num_gpu_blocks"] == 64
    assert run["replay"]["system"]["prefill_policy"] == "v1" and run["replay"]["arrivals"] == "recorded"
    assert run["replay"]["prefix_cache_keys"] == "from the run's token ids" and run["replay"]["unfinished"] == 0


def test_a_users_error_is_exit_2_in_one_line_and_writes_nothing(tmp_path, capsys):
    meta = json.loads(json.dumps(META))
    meta["hardware"] = {"device_name": "NVIDIA Imaginary GPU"}
    out = tmp_path / "out"
    assert main(["validate", "--run", str(write_bench_run(tmp_path, meta=meta)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: ") and err.count("\n") == 1 and "--set hardware=" in err
    assert not out.exists()


def test_the_engines_flags_and_a_positional_config_are_refused_beside_run(tmp_path, capsys):
    run = str(write_bench_run(tmp_path))
    for extra, named in ((["--exact"], "--exact"), (["--repeats", "2"], "--repeats"), (["x.yaml"], "CONFIG")):
        assert main(["validate", "--run", run, *extra]) == 2
        assert named in capsys.readouterr().err
    assert main(["validate"]) == 2
    assert "give a validation CONFIG, or --run PATH" in capsys.readouterr().err


def test_a_result_without_arrivals_replays_only_with_a_configs_workload(tmp_path, capsys):
    result = str(write_vllm_result(tmp_path / "r.json", drop=("start_times",)))
    engine = ["--set", "hardware=h100-sxm", "--set", "systems=[{preset: vllm, prefill_policy: chunked}]"]
    assert main(["validate", "--run", result, *engine, "--out", str(tmp_path / "a")]) == 2
    assert "arrivals were not recorded" in capsys.readouterr().err
    config = tmp_path / "exp.yaml"
    config.write_text("workload: {arrival: poisson, duration_s: 10}\nrates: [2]\nseeds: [3]\n")
    out = tmp_path / "b"
    assert main(["validate", "--run", result, "--config", str(config), *engine, "--out", str(out)]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["replay"]["arrivals"].startswith("the config's workload (poisson at 2 req/s, seed 3)")
    summary = pd.read_csv(out / "summary.csv")
    assert summary[summary.metric == "itl"].real_ms.notna().all()  # vLLM's bench records its gaps


def test_a_result_is_simulated_on_the_model_it_ran(tmp_path, capsys):
    result = str(write_vllm_result(tmp_path / "r.json"))
    engine = ["--set", "hardware=h100-sxm", "--set", "systems=[{preset: vllm, prefill_policy: chunked}]"]
    assert main(["validate", "--run", result, *engine, "--set", "model=llama-2-7b", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "model: llama-2-7b, but" in err and "ran meta-llama/Llama-3.1-8B (servesim's llama-3.1-8b)" in err
