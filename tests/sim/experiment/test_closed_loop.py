"""vLLM's benchmark client in a run (sim/experiment/closed_loop.py): rate inf, a client's gate fixed or swept, and
what a gated run's records and summary say."""
from __future__ import annotations

import gzip
import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.errors import SpecError
from sim.experiment.config import load_experiment
from sim.experiment.run import run_one, trace_for
from sim.experiment.sweep import sweep
from tests.helpers.configs import tiny

ROOT = Path(__file__).resolve().parents[3]
CLOSED = tiny(rates="[inf]", systems="[vllm]", warmup_s="0",
              workload="{dataset: sharegpt-standin, num_requests: 40}")


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "closed.yaml"
    path.write_text(CLOSED)
    return path


def test_rate_inf_sends_every_request_at_once_and_serves_them_all(config):
    exp = load_experiment(config)
    run = run_one(exp, exp.systems[0], math.inf, 0)
    requests = run.request_arrays
    assert (requests["arrival_s"] == 0).all() and "sent_s" not in requests
    assert run.summary["num_requests"] == run.summary["num_measured"] == 40 and run.summary["num_unfinished"] == 0
    assert "max_concurrency" not in run.summary


def test_a_gated_runs_latencies_count_from_its_sending(config):
    exp = load_experiment(config, ["workload.max_concurrency=4"])
    run = run_one(exp, exp.systems[0], math.inf, 0)
    requests = run.request_arrays
    assert list(requests)[:4] == ["request_id", "replica", "arrival_s", "sent_s"]
    assert (requests["arrival_s"] == 0).all()  # arrived at the client at once, and sent four at a time
    sent = requests["sent_s"]
    assert (sent[:4] == 0).all() and (np.sort(sent)[4:] > 0).all()
    assert sorted(requests["finish_s"])[:36] == sorted(sent)[4:]  # each sent the instant another finished
    ttft = requests["first_token_s"] - sent
    assert run.summary["ttft_mean_s"] == pytest.approx(ttft.mean(), rel=1e-12)
    assert run.summary["max_concurrency"] == 4 and run.summary["num_unfinished"] == 0
    assert run.summary["mean_batched_requests"] <= 4


def test_a_gate_as_wide_as_the_trace_changes_no_record(tmp_path):
    path = tmp_path / "open.yaml"
    path.write_text(tiny(rates="[2]", systems="[vllm]", workload="{dataset: sharegpt-standin, duration_s: 30}",
                         max_time_factor="10"))
    exp = load_experiment(path)
    count = len(trace_for(exp, 2.0, 0))
    open_loop = run_one(exp, exp.systems[0], 2.0, 0)
    assert open_loop.summary["num_unfinished"] == 0  # a gated run serves every request: so did this one
    gated = run_one(exp.at_concurrency(count), exp.systems[0], 2.0, 0)
    assert gated.request_arrays.pop("sent_s").tolist() == open_loop.request_arrays["arrival_s"].tolist()
    assert {k: v.tolist() for k, v in gated.request_arrays.items()} == \
        {k: v.tolist() for k, v in open_loop.request_arrays.items()}
    assert repr({k: v for k, v in gated.summary.items() if k != "max_concurrency"}) == repr(open_loop.summary)


def test_a_sweep_over_concurrencies_writes_a_run_each_and_resumes(config, tmp_path):
    exp = load_experiment(config, ["concurrencies=[1, 8]", "seeds=[0, 1]"])
    summary = sweep(exp, tmp_path / "out", progress=lambda line: None, iterations="none")
    assert list(summary.columns[summary.columns.get_loc("rate"):][:3]) == ["rate", "max_concurrency", "seed"]
    assert summary[["max_concurrency", "seed"]].values.tolist() == [[1, 0], [1, 1], [8, 0], [8, 1]]
    folders = sorted(p.name for p in (tmp_path / "out" / "runs").iterdir())
    assert folders == ["vllm_rateinf_conc1_seed0", "vllm_rateinf_conc1_seed1", "vllm_rateinf_conc8_seed0",
                       "vllm_rateinf_conc8_seed1"]
    one_at_a_time = summary[summary["max_concurrency"] == 1]
    assert (one_at_a_time["mean_batched_requests"] == 1).all()
    assert (summary[summary["max_concurrency"] == 8]["throughput_rps"].values > one_at_a_time["throughput_rps"].values
            ).all()
    with gzip.open(tmp_path / "out" / "runs" / "vllm_rateinf_conc1_seed0" / "requests.csv.gz", "rt") as f:
        assert f.readline().startswith("request_id,replica,arrival_s,sent_s,first_token_s")
    lines = []
    again = sweep(exp, tmp_path / "out", progress=lines.append, iterations="none")
    assert lines == ["resuming: 4 of 4 runs already done in " + str(tmp_path / "out" / "runs")]
    pd.testing.assert_frame_equal(again, summary)


def test_the_command_sweeps_and_plots_against_concurrency(config, tmp_path, capsys):
    from servesim.cli import main

    out = tmp_path / "cmd"
    assert main(["run", str(config), "--set", "concurrencies=[1,4]", "--out", str(out), "--iterations", "none"]) == 0
    printed = capsys.readouterr().out
    assert "2 runs (1 systems x 1 rates x 2 concurrencies x 1 seeds)" in printed
    assert "rate  conc" in printed and "concurrency 4" in printed
    assert (out / "normalized_latency.png").is_file()


@pytest.mark.parametrize("overrides, key, words", [
    (["rates=[inf]", "workload.num_requests=null", "workload.duration_s=30"], "rates[0]",
     "inf sends every request at 0 s (vLLM's --request-rate inf), so the requests must be counted, not drawn for "
     "workload.duration_s: give workload.num_requests (vLLM's --num-prompts)"),
    (["warmup_s=5"], "warmup_s", "5 s of warm-up leaves nothing to measure at rate inf, which sends every request "
     "at 0 s with no gate (workload.max_concurrency); set warmup_s: 0, as vLLM measures every request"),
    (["concurrencies=[2]", "workload.max_concurrency=2"], "concurrencies",
     "and workload.max_concurrency both set the client's gate; give a list here to sweep it, or one value there"),
    (["concurrencies=[0]"], "concurrencies[0]", "must be a positive integer, got 0"),
    (["concurrencies=[2, -1]"], "concurrencies[1]", "must be a positive integer, got -1"),
    (["concurrencies=[1.5]"], "concurrencies[0]", "must be a positive integer, got 1.5"),
    (["concurrencies=many"], "concurrencies[0]", "must be a positive integer, got 'many'"),
    (["concurrencies=[]"], "concurrencies", "must be a non-empty list of positive integers, got []"),
    (["workload.num_requests=20000000"], "workload.num_requests",
     "20,000,000 requests are more than one run simulates (10,000,000)"),
    (["rates=[1, -.inf]"], "rates[1]", "must be a positive number or inf (every request at 0 s), got -inf"),
])
def test_a_closed_loop_it_cannot_run_is_refused_in_one_line(config, overrides, key, words):
    with pytest.raises(SpecError) as caught:
        load_experiment(config, overrides)
    assert caught.value.key == key and words in caught.value.message and "\n" not in str(caught.value)


def test_inf_is_read_however_it_is_written(config):
    for value in ("inf", ".inf", "[inf]", "[.inf]", "[Infinity]"):
        assert load_experiment(config, [f"rates={value}"]).rates == (math.inf,)


def test_a_gate_before_a_split_fleet_is_refused_naming_its_key():
    path = ROOT / "configs" / "examples" / "split_llama3_70b_h100.yaml"
    for overrides, key in ((["workload.max_concurrency=8"], "workload.max_concurrency"),
                           (["concurrencies=[8]"], "concurrencies")):
        with pytest.raises(SpecError) as caught:
            load_experiment(path, overrides)
        assert caught.value.key == key
        assert "not before a split fleet's prefill pool; remove it, or split" in caught.value.message


def test_a_replay_at_rate_inf_sends_its_trace_at_once(tmp_path):
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,10\n1,20,20\n3,30,5\n")
    path = tmp_path / "r.yaml"
    path.write_text(textwrap.dedent(tiny(rates="[inf]", systems="[vllm]", warmup_s="0", workload="{trace: t.csv}")))
    exp = load_experiment(path, ["workload.max_concurrency=1"])
    run = run_one(exp, exp.systems[0], math.inf, 0)
    assert run.request_arrays["arrival_s"].tolist() == [0.0, 0.0, 0.0]
    assert run.summary["num_unfinished"] == 0 and run.summary["mean_batched_requests"] == 1


def test_the_vllm_bench_file_of_a_closed_loop_says_what_vllms_would(config):
    """vLLM writes request_rate "inf", its --max-concurrency and --burstiness, and each request's start_time (its
    sending) and client queue time (its wait at the semaphore)."""
    import json

    from sim.experiment.vllm_bench import result_bytes

    exp = load_experiment(config, ["workload.max_concurrency=3", "vllm_bench=true"])
    run = run_one(exp, exp.systems[0], math.inf, 0)
    result = json.loads(result_bytes(run.vllm_bench))
    assert (result["request_rate"], result["max_concurrency"], result["num_prompts"]) == ("inf", 3, 40)
    requests = run.request_arrays
    order = np.argsort(requests["request_id"])
    assert result["start_times"] == requests["sent_s"][order].tolist()
    assert result["queue_times"] == (requests["sent_s"] - requests["arrival_s"])[order].tolist()
    assert result["max_concurrent_requests"] <= 3 and result["failed"] == 0
    bursty = load_experiment(config, ["rates=[2]", "workload.burstiness=4", "vllm_bench=true"])
    assert run_one(bursty, bursty.systems[0], 2.0, 0).vllm_bench["burstiness"] == 4.0


def test_the_figures_are_drawn_against_what_the_sweep_varies():
    from sim.experiment.plots import x_axis

    def rows(*pairs):
        return [{"rate": rate, **({} if gate is None else {"max_concurrency": gate})} for rate, gate in pairs]

    assert x_axis(rows((1.0, None), (2.0, None)))[0] == "rate"
    assert x_axis(rows((1.0, 4), (2.0, 4)))[0] == "rate"  # one gate, rates swept
    assert x_axis(rows((1.0, 4), (1.0, 8)))[0] == "max_concurrency"
    assert x_axis(rows((math.inf, 4)))[0] == "max_concurrency"
    assert x_axis(rows((math.inf, None), (2.0, None)))[0] == "throughput_rps"  # inf has no place on an axis
