"""`servesim run --vllm-bench` writes each run as `vllm bench serve --save-result --save-detailed` saves one: vLLM's
field names in its order, its units (per-request lists in seconds, figures in ms), its definitions over the
simulated records; read back by plain json and by servesim's reader of real vLLM results; failed requests (cut off
by the horizon) counted as vLLM counts them; --goodput checked at the door, naming the flag and its form."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import servesim
from engine.core.system import SystemSpec
from engine.errors import SpecError
from fidelity.runs.vllm_bench import read_vllm_bench
from servesim.cli import main
from sim.core.simulate import simulate
from sim.experiment.config import load_experiment
from sim.experiment.token_stream import Schedule, chunk_times
from sim.experiment.vllm_bench import bench_duration, client_view
from sim.workload.trace import Trace
from tests.helpers.configs import tiny
from tests.helpers.simulation import MODEL, ROOFLINE, random_trace

# vllm/benchmarks/serve.py (vllm-project/vllm 009e6d4a): main_async's header, then benchmark()'s result, then
# process_one_metric's figures for --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 90,95,99
VLLM_HEAD = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts")
VLLM_TRAFFIC = ("request_rate", "burstiness", "max_concurrency")
VLLM_RESULT = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
               "request_goodput", "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts",
               "itls", "latencies", "start_times", "queue_times", "generated_texts", "errors",
               "max_output_tokens_per_s", "max_concurrent_requests", "rtfx")
VLLM_FIGURES = tuple(f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el")
                     for stat in ("mean", "median", "std", "p90", "p95", "p99"))
# servesim's own keys, where vLLM puts a run's --metadata (after num_prompts)
METADATA = ("simulator", "experiment", "system", "hardware", "num_gpus", "seed", "goodput_ms",
            "request_throughput_per_gpu", "request_goodput_per_gpu", "output_throughput_per_gpu",
            "total_token_throughput_per_gpu", "itl_placed_requests")
RUN = "runs/vllm_rate2_seed0"


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(textwrap.dedent(tiny(systems="[vllm]", rates="[2]", warmup_s="0", max_time_factor="10")))
    return path


def run(config: Path, out: Path, *options: str) -> Path:
    assert main(["run", str(config), "--out", str(out), "--jobs", "1", "--no-plots", *options]) == 0
    return out / RUN


def test_the_file_has_vllms_fields_in_vllms_order_and_servesims_where_vllm_puts_metadata(config, tmp_path):
    result = json.loads((run(config, tmp_path / "out", "--vllm-bench") / "vllm_bench.json").read_text())
    assert tuple(result) == VLLM_HEAD + METADATA + VLLM_TRAFFIC + VLLM_RESULT + VLLM_FIGURES
    assert result["request_goodput"] is None and result["max_concurrency"] is None and result["burstiness"] == 1.0
    assert result["label"] == "vLLM" and result["model_id"] == "opt-13b" and result["request_rate"] == 2.0
    assert len(result["date"]) == len("20250101-120000") and result["date"][8] == "-"


def test_the_figures_are_vllms_definitions_over_the_simulated_requests_in_vllms_units(config, tmp_path):
    folder = run(config, tmp_path / "out", "--goodput", "ttft:200", "tpot:60")
    result = json.loads((folder / "vllm_bench.json").read_text())
    requests = pd.read_csv(folder / "requests.csv.gz")
    summary = json.loads((folder / "summary.json").read_text())
    assert result["completed"] == len(requests) == summary["num_requests"] and result["failed"] == 0
    ttft = requests.first_token_s - requests.arrival_s
    latency = requests.finish_s - requests.arrival_s
    assert result["ttfts"] == ttft.tolist() and result["latencies"] == latency.tolist()  # seconds, exactly
    assert result["start_times"] == requests.arrival_s.tolist()
    assert result["output_lens"] == requests.output_len.tolist()
    gaps = [np.array(g) for g in result["itls"]]
    assert [len(g) for g in gaps] == (requests.output_len - 1).tolist()  # one chunk a token without speculation
    assert np.allclose([g.sum() for g in gaps], latency - ttft, rtol=0, atol=1e-9)
    assert result["itl_placed_requests"] == int((requests.num_preemptions > 0).sum())
    # the same definitions as summary.csv's, with no warm-up left out
    assert result["mean_ttft_ms"] == pytest.approx(summary["ttft_mean_s"] * 1000, rel=1e-12)
    assert result["mean_tpot_ms"] == pytest.approx(summary["tpot_mean_s"] * 1000, rel=1e-12)
    assert result["p99_itl_ms"] == pytest.approx(np.percentile(np.concatenate(gaps), 99) * 1000, rel=1e-12)
    assert result["duration"] == pytest.approx(summary["makespan_s"], rel=1e-15)
    tpot = (latency - ttft) / (requests.output_len - 1)
    good = int(((ttft <= 0.2) & (tpot.where(requests.output_len > 1, 0.0) <= 0.06)).sum())
    assert 0 < good < len(requests) and result["goodput_ms"] == {"ttft": 200.0, "tpot": 60.0}
    assert result["request_goodput"] == pytest.approx(good / result["duration"], rel=1e-12)
    assert result["output_throughput"] == pytest.approx(requests.output_len.sum() / result["duration"], rel=1e-12)


def test_servesims_reader_of_real_vllm_results_reads_a_simulated_one_back(config, tmp_path):
    folder = run(config, tmp_path / "out", "--vllm-bench")
    back = read_vllm_bench(folder / "vllm_bench.json")
    requests = pd.read_csv(folder / "requests.csv.gz")
    assert back.failed == 0 and back.arrivals_recorded and back.settings.model_id == "opt-13b"
    real = back.requests
    assert real.prompt_len.tolist() == requests.prompt_len.tolist()
    assert np.array_equal(real.arrival_s, requests.arrival_s - requests.arrival_s.min())
    assert np.array_equal(real.ttft_s, requests.first_token_s - requests.arrival_s)
    tpot = (requests.finish_s - requests.first_token_s) / (requests.output_len - 1)
    assert np.allclose(real.tpot_s, tpot.where(requests.output_len > 1), rtol=1e-12, atol=0, equal_nan=True)
    assert np.allclose(real.e2e_s, requests.finish_s - requests.arrival_s, rtol=1e-12, atol=0)


def test_requests_unfinished_at_the_horizon_failed_as_vllm_records_a_failure(tmp_path):
    # twice the rate the pool serves, cut off at the trace's end: the last arrivals are still running
    path = tmp_path / "cut.yaml"
    path.write_text(tiny(systems="[vllm]", rates="[8]", warmup_s="0", max_time_factor="1", kv_cache_gib="2"))
    folder = run(path, tmp_path / "out", "--vllm-bench").parent / "vllm_rate8_seed0"
    result = json.loads((folder / "vllm_bench.json").read_text())
    requests = pd.read_csv(folder / "requests.csv.gz")
    unfinished = requests.finish_s.isna()
    assert unfinished.any() and result["failed"] == int(unfinished.sum())
    assert result["completed"] + result["failed"] == result["num_prompts"] == len(requests)
    failed = [i for i, error in enumerate(result["errors"]) if error]
    assert failed == np.flatnonzero(unfinished).tolist()
    assert all("horizon" in result["errors"][i] for i in failed)
    assert {(result["output_lens"][i], result["ttfts"][i], result["latencies"][i]) for i in failed} == {(0, 0.0, 0.0)}
    assert all(result["itls"][i] == [] for i in failed)
    # the horizon (at max_time_factor 1 the last arrival): the benchmark was still waiting on them
    assert result["duration"] == requests.arrival_s.max()
    assert read_vllm_bench(folder / "vllm_bench.json").failed == result["failed"]


def test_a_request_dropped_unserved_failed_in_its_place_among_those_sent():
    base = random_trace(2, count=40)
    output = base.output_len.copy()
    output[[3, 17]] = MODEL.max_seq_len  # with their prompts over the model's max_seq_len: ignored
    trace = Trace(base.arrival_s, base.prompt_len, output, base.n, source="test")
    system = SystemSpec("separate", "vllm", prefill_policy="separate")
    records = simulate(trace, MODEL, system, ROOFLINE, 400, 400)
    requests, iterations, dropped = records.request_arrays(), records.iteration_arrays(), records.dropped_values
    view = client_view(requests, chunk_times(requests, iterations, Schedule(prompt_only=True)), dropped, 1e9)
    assert [i for i, error in enumerate(view.errors) if error] == [3, 17] and "ignored" in view.errors[3]
    assert view.prompt_len.tolist() == trace.prompt_len.tolist() and view.start_s.tolist() == trace.arrival_s.tolist()
    assert view.output_len[[3, 17]].tolist() == [0, 0] and view.latency_s[[3, 17]].tolist() == [0.0, 0.0]
    assert bench_duration(requests, dropped, 1e9) == max(requests["finish_s"].max(), *(row[4] for row in dropped))


def test_n_sequences_stream_a_chunk_each_a_step(config):
    one = servesim.simulate(config, overrides=["vllm_bench=true", "workload.n=2"])
    requests, result = one.request_arrays, one.vllm_bench
    assert result["output_lens"] == (2 * requests["output_len"]).tolist()
    for gaps, output in zip(result["itls"], requests["output_len"]):
        assert len(gaps) == 2 * output - 1 and gaps.count(0.0) == output  # n - 1 zeros a step, the first's too


def test_a_rerun_writes_the_file_where_asked_for_and_removes_a_stale_one(config, tmp_path):
    out = tmp_path / "out"
    bench = run(config, out, "--vllm-bench") / "vllm_bench.json"
    bench.unlink()
    assert run(config, out, "--vllm-bench") == bench.parent and bench.exists()  # the same config, the file missing
    run(config, out)  # another config (no vllm_bench): simulated again, its file removed
    assert not bench.exists()
    assert servesim.simulate(config).vllm_bench is None


@pytest.mark.parametrize("pairs, words", [
    (["ttft=500"], "'ttft=500' is not METRIC:MS"),
    (["ttft:500", "itl:20"], "'itl:20' names no metric of ['ttft', 'tpot', 'e2el']"),
    (["ttft:fast"], "'ttft:fast' gives 'fast', not a number of milliseconds >= 0"),
    (["tpot:-1"], "'tpot:-1' gives '-1', not a number"),
    (["e2el:nan"], "'e2el:nan' gives 'nan'"),
    (["ttft:1", "ttft:2"], "'ttft:2' gives ttft a second time"),
    (["ttft:1:2"], "'ttft:1:2' gives '1:2'"),
])
def test_a_bad_goodput_is_refused_in_one_line_naming_the_flag_and_its_form(config, tmp_path, capsys, pairs, words):
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out), "--no-plots", "--goodput", *pairs]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: --goodput: ") and err.count("\n") == 1, err
    assert words in err and "METRIC:MS pairs" in err and "e.g. ttft:500 tpot:50" in err
    assert not out.exists()


@pytest.mark.parametrize("value, key, words", [
    ("{itl: 20}", "goodput.itl", "unknown key; valid keys are ['e2el', 'tpot', 'ttft']"),
    ("{ttft: -5}", "goodput.ttft", "must be a number of milliseconds >= 0, got -5"),
    ("{ttft: .inf}", "goodput.ttft", "got inf"),
    ("[ttft:500]", "goodput", "must be a mapping of objectives in ms"),
    ("{}", "goodput", "must be a mapping of objectives in ms"),
])
def test_a_bad_goodput_in_a_config_is_refused_naming_the_file_and_key(tmp_path, value, key, words):
    path = tmp_path / "tiny.yaml"
    path.write_text(tiny(goodput=value))
    with pytest.raises(SpecError) as refused:
        load_experiment(path)
    assert f"tiny.yaml: {key}: " in str(refused.value) and words in str(refused.value)


def test_goodput_in_a_config_implies_the_file(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(tiny(goodput="{e2el: 30000}"))
    exp = load_experiment(path)
    assert exp.vllm_bench and exp.goodput == (("e2el", 30000.0),)
    path.write_text(tiny(vllm_bench="maybe"))
    with pytest.raises(SpecError, match="vllm_bench: must be true or false"):
        load_experiment(path)

