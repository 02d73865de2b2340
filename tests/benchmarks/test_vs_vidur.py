"""benchmarks/peers/vs_vidur.py's parts that need neither Vidur, the network nor /work/shared: the trace it
exports (the run's own requests, in Vidur's trace-replay columns and units), the attention stand-in
(Vidur's attention-file columns on its profiler's grid, priced by servesim's cost model), the offline
dataset layout, Vidur's command line, and the skip when Vidur or the measurements are missing."""
from __future__ import annotations

import dataclasses
import json
import lzma

import numpy as np
import pandas as pd
import pytest

from benchmarks.peers import vs_vidur
from benchmarks.peers.vidur_attention import COLUMNS as ATTENTION_COLUMNS
from benchmarks.peers.vidur_attention import attention_table, seq_lengths
from benchmarks.peers.vidur_profiles import Datasets, repo_folder, write_datasets
from benchmarks.peers.vidur_run import VidurRun, trained_models, vidur_command, vidur_env
from benchmarks.peers.vidur_trace import COLUMNS as TRACE_COLUMNS
from benchmarks.peers.vidur_trace import DATE, servesim_trace, vidur_trace_frame, write_vidur_trace
from benchmarks.speed.run_speed import ROOT, TRACES
from engine.core.batch import BatchShape
from servesim.cli import main as servesim
from sim.experiment.config import load_experiment
from sim.experiment.run import make_cost_model
from sim.workload.trace import Trace

CONFIG = ROOT / "configs" / "quickstart.yaml"
# the benchmark's llama-7b run, two minutes long so that the test runs it whole
SHORT = ["workload.duration_s=120", "systems=[vllm]", "rates=[2]", "warmup_s=10", *TRACES["llama-7b"]]


def test_the_exported_trace_is_the_runs_requests(tmp_path):
    out = tmp_path / "run"
    assert servesim(["run", str(CONFIG), "--out", str(out), "--jobs", "1", "--iterations", "none",
                     *[arg for s in SHORT for arg in ("--set", s)]]) == 0
    (requests_file,) = (out / "runs").glob("*/requests.csv.gz")
    requests = pd.read_csv(requests_file).sort_values("request_id")
    exported = pd.read_csv(write_vidur_trace(servesim_trace(CONFIG, SHORT), tmp_path / "trace.csv"))
    assert tuple(exported.columns) == TRACE_COLUMNS
    assert len(exported) == len(requests) > 100  # one row per request
    assert (exported["Date"] == DATE).all()
    # seconds, to the last digit, in the run's order; token counts as the run served them
    np.testing.assert_array_equal(exported["Time"].to_numpy(), requests["arrival_s"].to_numpy())
    np.testing.assert_array_equal(exported["PromptTokenCount"].to_numpy(), requests["prompt_len"].to_numpy())
    np.testing.assert_array_equal(exported["CompletionTokenCount"].to_numpy(), requests["output_len"].to_numpy())


def test_a_trace_vidur_cannot_replay_is_refused():
    samples = Trace(np.array([0.0, 1.0]), np.array([10, 20]), np.array([5, 5]), n=np.array([1, 2]))
    with pytest.raises(ValueError, match="parallel samples"):
        vidur_trace_frame(samples)


@pytest.fixture(scope="module")
def llama_vllm():
    exp = load_experiment(CONFIG, SHORT)
    return exp, make_cost_model(exp, exp.systems[0])


def small_table(exp, cost):
    model = exp.model
    identity = dict(n_embd=model.hidden_size, n_q_head=model.num_heads, n_kv_head=model.num_kv_heads,
                    block_size=16, num_tensor_parallel_workers=1, max_model_len=512)
    return attention_table(cost, model.num_layers, identity, max_seq_len=512, max_batch_size=4, max_chunk_size=512)


def test_the_attention_stand_in_has_vidurs_columns_and_grid(llama_vllm):
    exp, cost = llama_vllm
    table = small_table(exp, cost)
    assert tuple(table.columns) == ATTENTION_COLUMNS
    decode, prefill = table[~table["is_prefill"]], table[table["is_prefill"]]
    lengths = [n for n in seq_lengths(512) if n > 0]  # 32, 64, ..., 480: below the context, as Vidur profiles
    assert lengths == list(range(32, 512, 32))
    assert len(decode) == len(lengths) * 4 and set(decode["batch_size"]) == {1, 2, 3, 4}
    assert (decode["prefill_chunk_size"] == 0).all() and decode["time_stats.attn_prefill.median"].isna().all()
    assert (prefill["batch_size"] == 1).all() and prefill["time_stats.attn_decode.median"].isna().all()
    assert ((prefill["prefill_chunk_size"] + prefill["kv_cache_size"]) <= 512).all()
    assert (table["time_stats.attn_kv_cache_save.median"] == 0).all()  # servesim charges no separate KV write
    assert not table.duplicated(["batch_size", "prefill_chunk_size", "kv_cache_size"]).any()


def test_the_attention_stand_in_is_servesims_cost_per_layer_in_ms(llama_vllm):
    exp, cost = llama_vllm
    table = small_table(exp, cost).set_index(["batch_size", "prefill_chunk_size", "kv_cache_size"])
    layers = exp.model.num_layers
    decode_ms = table.loc[(3, 0, 256), "time_stats.attn_decode.median"]
    assert decode_ms == pytest.approx(cost.decode_attention_time(BatchShape(decode_context_lens=(256,) * 3))
                                      * 1e3 / layers)
    prefill_ms = table.loc[(1, 128, 256), "time_stats.attn_prefill.median"]
    assert prefill_ms == pytest.approx(cost.prefill_attention_time(BatchShape((128,), prefill_cached_lens=(256,)))
                                       * 1e3 / layers)
    # more decodes, longer contexts cost more; a plain prompt's attention grows with it, at most as its square (its
    # pairs of tokens; short prompts are dominated by the measured kernels' latency and bytes)
    assert table.loc[(4, 0, 256), "time_stats.attn_decode.median"] > decode_ms
    assert table.loc[(3, 0, 480), "time_stats.attn_decode.median"] > decode_ms
    full = table.loc[(1, 256, 0), "time_stats.attn_prefill.median"] / table.loc[(1, 128, 0),
                                                                               "time_stats.attn_prefill.median"]
    assert 1.0 < full < 4.0


def test_the_datasets_lie_where_an_offline_snapshot_download_finds_them(tmp_path):
    mlp, attention, all_reduce = b"num_tokens,t\n1,2\n", b"batch_size\n1\n", b"size\n1024\n"
    datasets = write_datasets(tmp_path, "meta-llama/Llama-2-7b-hf", "a100", "a100_dgx", mlp, attention, all_reduce)
    folder = repo_folder(tmp_path, "compute", datasets.compute)
    assert folder.parent == tmp_path / "profiling_data" / "compute"
    assert folder.name == "datasets--" + datasets.compute.replace("/", "--")
    snapshot = folder / "snapshots" / (folder / "refs" / "main").read_text()
    assert json.loads((snapshot / "config.json").read_text()) == {"model": "meta-llama/Llama-2-7b-hf",
                                                                  "device_sku": "a100"}
    assert lzma.decompress((snapshot / "mlp.csv.xz").read_bytes()) == mlp
    assert lzma.decompress((snapshot / "attention.csv.xz").read_bytes()) == attention
    network = repo_folder(tmp_path, "network", datasets.network)
    network_snapshot = network / "snapshots" / (network / "refs" / "main").read_text()
    assert json.loads((network_snapshot / "config.json").read_text()) == {"sku": "a100_dgx"}
    # the same inputs, the same names; new inputs, a new name (Vidur caches its models by the name)
    again = write_datasets(tmp_path, "meta-llama/Llama-2-7b-hf", "a100", "a100_dgx", mlp, attention, all_reduce)
    other = write_datasets(tmp_path, "meta-llama/Llama-2-7b-hf", "a100", "a100_dgx", mlp, b"batch_size\n2\n",
                           all_reduce)
    assert again == datasets and other.compute != datasets.compute and other.network == datasets.network


def test_vidurs_command_carries_the_deployment(tmp_path):
    run = VidurRun(tmp_path / "python", tmp_path / "trace.csv", Datasets("org/compute", "org/network"),
                   tmp_path / "cache", tmp_path / "out", num_blocks=7851, block_size=16, watermark=0.01,
                   max_tokens_in_batch=2560)
    command = vidur_command(run)
    flags = dict(zip(command[3::2], command[4::2]))
    assert command[:3] == [str(tmp_path / "python"), "-m", "vidur.main"]
    assert flags["--cache_config_num_blocks"] == "7851" and flags["--cache_config_block_size"] == "16"
    assert flags["--replica_scheduler_config_type"] == "vllm"
    assert flags["--vllm_scheduler_config_max_tokens_in_batch"] == "2560"
    assert flags["--trace_request_generator_config_trace_file"] == str(tmp_path / "trace.csv")
    assert flags["--random_forrest_execution_time_predictor_config_model_profiling_dataset"] == "org/compute"
    native = "--random_forrest_execution_time_predictor_config_use_native_execution_time_predictor"
    assert native not in command and native in vidur_command(dataclasses.replace(run, native_predictor=True))
    assert vidur_env()["HF_HUB_OFFLINE"] == "1"
    assert trained_models("x\nINFO Trained model attn_decode and found\nINFO Trained model add\n") == 2


@pytest.fixture
def measurements(tmp_path):
    for name in (vs_vidur.MLP_FILE, vs_vidur.ALL_REDUCE_FILE):
        (tmp_path / "m" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "m" / name).write_text("x\n")
    return tmp_path / "m"


def test_it_skips_where_vidur_cannot_be_found(tmp_path, measurements, capsys):
    with pytest.raises(SystemExit) as stop:
        vs_vidur.main(["--vidur-python", str(tmp_path / "no-venv" / "python"), "--measurements", str(measurements)])
    assert stop.value.code == 0
    message = capsys.readouterr().out
    assert message.startswith("vs_vidur: skipped: vidur cannot be imported") and "pip install vidur==" in message


def test_it_skips_where_the_measurements_are_missing(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        vs_vidur.main(["--measurements", str(tmp_path / "nowhere")])
    assert stop.value.code == 0
    assert "skipped: no " in capsys.readouterr().out
