"""`split`: a prefill pool and a decode pool, each with its own replicas, GPU, tensor parallelism, KV cache and
system, the KV link between them and what a full decode pool does; every error one line naming the key. A split
run's summary has the KV moves' columns, and its load imbalance is the router's, over the prefill pool."""
import numpy as np
import pytest

from engine.errors import SpecError
from servesim.cli import main
from sim.experiment.config import load_experiment
from sim.experiment.run import run_one
from sim.experiment.split_run import SPLIT_COLUMNS, kv_copy_price, split_setup
from tests.helpers.configs import tiny

SPLIT = "{prefill: {replicas: 1}, decode: {replicas: 2}}"


def test_a_split_reads_its_pools_and_their_defaults(write_config):
    text = tiny(split="{prefill: {replicas: 2, hardware: h100-sxm, kv_cache_gib: 20, system: vllm}, "
                      "decode: {replicas: 3, tensor_parallel: 2}, kv_link: {kind: infiniband}, "
                      "on_decode_full: recompute}", systems="[vllm]")
    exp = load_experiment(write_config(text))
    split = exp.split
    assert (split.prefill.replicas, split.decode.replicas, split.replicas) == (2, 3, 5)
    assert split.prefill.hardware.name == "h100-sxm" and split.decode.hardware is None
    assert split.decode.tensor_parallel == 2 and split.on_decode_full == "recompute"
    setup = split_setup(exp, exp.systems[0], 100.0)
    assert setup.prefill.num_gpu_blocks != setup.decode.num_gpu_blocks  # 20 GiB on one, 12 on the other
    # the copy: the prompt's KV (all layers, K and V, fp16) over the H100's 50 GB/s NIC a GPU, one GPU each side
    # is the smaller pool's parallelism (1); 20 us of latency
    tokens = 1000
    expected = 20e-6 + tokens * exp.model.kv_bytes_per_token(2) / 50e9
    assert kv_copy_price(exp, split)(tokens) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("split, key, words", [
    ("[1, 1]", "split", "mapping"),
    ("{prefill: {replicas: 1}}", "split.decode", "missing"),
    ("{prefill: {replicas: 1}, decode: {replicas: 1}, links: nvlink}", "split.links", "valid keys"),
    ("{prefill: {replicas: 0}, decode: {replicas: 1}}", "split.prefill.replicas", ""),
    ("{prefill: {replicas: 1, gpus: 2}, decode: {replicas: 1}}", "split.prefill.gpus", "valid keys"),
    ("{prefill: {replicas: 1}, decode: {replicas: 1, hardware: tpu}}", "split.decode.hardware", ""),
    ("{prefill: {replicas: 1}, decode: {replicas: 1}, on_decode_full: drop}", "split.on_decode_full", "hold"),
    ("{prefill: {replicas: 1}, decode: {replicas: 1}, kv_link: smoke}", "split.kv_link", ""),
    ("{prefill: {replicas: 1, tensor_parallel: 3}, decode: {replicas: 1}}", "split.prefill.tensor_parallel",
     "does not divide"),
    ("{prefill: {replicas: 1}, decode: {replicas: 1, kv_cache_gib: 500}}", "split.decode.kv_cache_gib", "fit"),
    # a pool's check names the pool's key where the pool has it, else the experiment's: no split.decode.model
    ("{prefill: {replicas: 1}, decode: {replicas: 1, hardware: l4, kv_cache_gib: null}}", "split.decode",
     "GiB of weights per GPU"),
])
def test_errors_are_one_line_naming_the_key(write_config, split, key, words):
    with pytest.raises(SpecError) as caught:
        load_experiment(write_config(tiny(split=split)))
    message = str(caught.value)
    assert "\n" not in message and f": {key}: " in message and words in message, message


def test_a_split_counts_its_replicas_per_pool(write_config):
    with pytest.raises(SpecError, match="replicas: a split fleet counts its replicas per pool"):
        load_experiment(write_config(tiny(split=SPLIT, replicas="2")))


def test_a_split_run_summarizes_its_kv_moves_and_the_prefill_pools_balance(write_config):
    exp = load_experiment(write_config(tiny(split=SPLIT, systems="[vllm]")))
    result = run_one(exp, exp.systems[0], 2.0, 0)
    summary = result.summary
    assert summary["replicas"] == 3 and (summary["prefill_replicas"], summary["decode_replicas"]) == (1, 2)
    assert set(SPLIT_COLUMNS) <= set(summary)
    assert summary["kv_copy_mean_s"] > 0 and summary["recomputed_share"] == 0.0
    assert summary["load_imbalance"] == 1.0  # one prefill replica: the router's pool is balanced
    assert set(np.unique(result.requests["replica"])) == {1, 2}  # requests end on the decode replicas
    assert result.summary["num_unfinished"] == 0


def test_servesim_run_writes_a_split_sweep(write_config, tmp_path, capsys):
    config = write_config(tiny(split=SPLIT, systems="[vllm]", rates="[2]"))
    assert main(["run", str(config), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    assert "1 x 1 x a100-40gb prefill + 2 x 1 x a100-40gb decode" in capsys.readouterr().out
    header = (tmp_path / "out" / "summary.csv").read_text().splitlines()[0].split(",")
    assert header[-len(SPLIT_COLUMNS):] == list(SPLIT_COLUMNS)


@pytest.mark.parametrize("split, key", [
    ("{prefill: {replicas: 1}, decode: {replicas: 1, system: orca-max}}", "split.decode.system"),
    ("{prefill: {replicas: 1, system: fastertransformer}, decode: {replicas: 1}}", "split.prefill.system")])
def test_a_pools_own_system_is_vllm_or_refused_naming_it(write_config, split, key):
    with pytest.raises(SpecError) as caught:
        load_experiment(write_config(tiny(split=split, systems="[vllm]")))
    assert f": {key}: " in str(caught.value) and "only vLLM (kind vllm) serves in a split pool" in str(caught.value)


@pytest.mark.parametrize("workload, key, words", [
    ("{dataset: sharegpt-standin, duration_s: 30, n: 2}", "workload.n", "2 samples per request"),
    ("{dataset: sharegpt-standin, duration_s: 30, beam_width: 2}", "workload.beam_width", "2 beams per request"),
    ("{trace: beams.csv}", "workload.trace", "a request of beams.csv has 3 beams")])
def test_a_split_refuses_requests_of_several_sequences_when_read(write_config, tmp_path, workload, key, words):
    rows = [f"{i * 0.5},100,50,{3 if i == 7 else 1}" for i in range(40)]
    (tmp_path / "beams.csv").write_text("\n".join(["arrived_at,num_prefill_tokens,num_decode_tokens,beam_width",
                                                   *rows]) + "\n")
    with pytest.raises(SpecError) as caught:
        load_experiment(write_config(tiny(split=SPLIT, systems="[vllm]", workload=workload)))
    message = str(caught.value)
    assert f": {key}: {words}: a split fleet serves one sequence per request" in message, message


CACHING = "{preset: vllm, prefix_caching: true}"


@pytest.mark.parametrize("prefill_replicas", [1, 2])
def test_cache_aware_needs_the_prefill_pools_prefix_cache_with_one_replica_as_with_many(write_config,
                                                                                      prefill_replicas):
    split = f"{{prefill: {{replicas: {prefill_replicas}, system: vllm}}, decode: {{replicas: 1}}}}"
    config = write_config(tiny(split=split, systems=f"[{CACHING}]", router="cache_aware"))
    with pytest.raises(SpecError, match=r": router: cache_aware needs prefix caching, which split.prefill.system "
                                        r"\(vLLM\) has not"):
        load_experiment(config)


def test_cache_aware_routes_on_the_prefill_pools_own_caching_system(write_config):
    split = f"{{prefill: {{replicas: 2, system: {CACHING}}}, decode: {{replicas: 1}}}}"
    exp = load_experiment(write_config(tiny(split=split, systems="[vllm]", router="cache_aware", rates="[1]")))
    assert run_one(exp, exp.systems[0], 1.0, 0).summary["num_unfinished"] == 0


@pytest.mark.parametrize("pool, words", [
    # OPT-13B's 2,048-token prompts: a pool that prefills in one iteration needs a budget that holds one
    ("prefill", "cannot prefill a 2048-token prompt"),
    ("decode", "cannot prefill a 2048-token prompt"),  # a decode replica recomputes a prompt it had to drop
])
def test_a_pools_own_system_is_checked_as_the_experiments_are(write_config, pool, words):
    own = "{preset: vllm, name: small budget, max_num_batched_tokens: 512}"
    other = "prefill" if pool == "decode" else "decode"
    text = tiny(split=f"{{{pool}: {{replicas: 1, system: {own}}}, {other}: {{replicas: 1}}}}", systems="[vllm]")
    with pytest.raises(SpecError) as caught:
        load_experiment(write_config(text))
    message = str(caught.value)
    assert f": split.{pool}.system.max_num_batched_tokens: " in message and words in message, message


@pytest.mark.parametrize("pool_gpu, budget, seqs", [("h100-sxm", 8192, 1024), ("l40s", 2048, 256)])
def test_a_pools_own_v1_system_takes_its_defaults_from_the_pools_gpu(write_config, pool_gpu, budget, seqs):
    # vLLM V1 derives max_num_batched_tokens and max_num_seqs from the GPU it serves on: the pool's, not the
    # experiment's A100
    text = tiny(split=f"{{prefill: {{replicas: 1}}, decode: {{replicas: 1, hardware: {pool_gpu}, system: vllm-v1}}}}",
                systems="[vllm]", kv_cache_gib="null")
    decode = load_experiment(write_config(text)).split.decode.system
    assert (decode.max_num_batched_tokens, decode.max_num_seqs) == (budget, seqs)
