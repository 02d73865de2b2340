"""memory_saving (the paper's Fig. 15) in summary.csv, and a shared-prefix run (Fig. 16) end to end."""
import pandas as pd
import pytest

from engine.core.records import ITERATION_COLUMNS, REQUEST_COLUMNS
from engine.errors import SpecError
from sim.experiment.config import load_experiment
from sim.experiment.metrics import memory_saving, summarize
from sim.experiment.run import run_one

PREFIX_EXPERIMENT = """
name: prefix
model: llama-13b
hardware: a100-40gb
kv_cache_gib: 8
workload:
  dataset: wmt16-en-de-standin
  prefix_tokens: 80
  duration_s: 90
systems: [orca-oracle, vllm]
rates: [4]
warmup_s: 10
"""


def iterations(rows):
    """Iteration records with only the columns memory_saving and the warm-up read set."""
    frame = pd.DataFrame(0, index=range(len(rows)), columns=list(ITERATION_COLUMNS))
    for column, values in zip(("start_s", "duration_s", "unshared_blocks", "saved_blocks"), zip(*rows)):
        frame[column] = values
    return frame


def test_memory_saving_is_the_ratio_of_time_integrals():
    # 1 s with 5 of 10 blocks saved, 3 s with 2 of 20: (5 + 6) / (10 + 60), not the mean of 50% and 10%
    frame = iterations([(0.0, 1.0, 10, 5), (1.0, 3.0, 20, 2)])
    assert memory_saving(frame) == pytest.approx(11 / 70)
    assert memory_saving(iterations([(0.0, 1.0, 0, 0)])) == 0.0, "nothing held, nothing shared: 0"
    assert memory_saving(iterations([])) == 0.0


def test_summary_counts_iterations_after_the_warm_up():
    requests = pd.DataFrame([[0, 0, 70.0, 71.0, 75.0, 10, 5, 1, 0]], columns=list(REQUEST_COLUMNS))
    frame = iterations([(10.0, 1.0, 10, 9), (60.0, 1.0, 10, 1), (61.0, 1.0, 30, 3)])
    summary = summarize(requests, frame, pool_slots=100, warmup_s=60.0, horizon_s=200.0)
    assert summary["memory_saving"] == pytest.approx(4 / 40)


@pytest.fixture
def prefix_experiment(write_config):
    return load_experiment(write_config(PREFIX_EXPERIMENT))


def test_a_shared_prefix_run_end_to_end(prefix_experiment):
    exp = prefix_experiment
    orca, vllm = (run_one(exp, system, 4.0, 0) for system in exp.systems)
    for result in (orca, vllm):
        assert "stand-in" in result.summary["workload"]
        assert "shared prefix of 80 tokens" in result.summary["workload"]
        assert result.summary["num_unfinished"] == 0
    assert orca.summary["memory_saving"] == 0.0
    # 80 tokens = 5 blocks kept once for k running requests: each table holds 5 prefix blocks and
    # 3-5 of its own (input ~35 tokens and output ~31), so the saving is (k - 1) 5 / (k (5 + own))
    assert 0.3 < vllm.summary["memory_saving"] < 0.6
    # the prefix's KV is computed once by vLLM, in every request by Orca
    computed = {name: r.iterations["num_prefill_tokens"].sum() for name, r in (("orca", orca), ("vllm", vllm))}
    prompts = orca.requests["prompt_len"].sum()
    assert computed["orca"] == prompts
    assert computed["vllm"] == prompts - 80 * (len(vllm.requests) - 1)


def test_nothing_is_shared_without_a_prefix_at_n_1(prefix_experiment):
    from dataclasses import replace
    exp = replace(prefix_experiment, workload=replace(prefix_experiment.workload, prefix_tokens=0))
    result = run_one(exp, exp.systems[1], 4.0, 0)
    assert result.summary["memory_saving"] == 0.0 and result.iterations["saved_blocks"].max() == 0


def test_parallel_samples_share_their_prompt(prefix_experiment):
    from dataclasses import replace
    exp = replace(prefix_experiment, workload=replace(prefix_experiment.workload, prefix_tokens=0, n=2))
    result = run_one(exp, exp.systems[1], 4.0, 0)
    # two samples: at most the prompt's blocks of one of them are saved, never half of everything
    assert 0 < result.summary["memory_saving"] < 0.5


@pytest.mark.parametrize("value", [2046, 5000])
def test_a_prefix_longer_than_the_model_allows(write_config, value):
    path = write_config(PREFIX_EXPERIMENT.replace("prefix_tokens: 80", f"prefix_tokens: {value}"))
    with pytest.raises(SpecError) as err:
        load_experiment(path)
    message = str(err.value)
    assert str(path) in message and "workload.prefix_tokens" in message and "2048" in message, message
    assert "at most 2045" in message and "\n" not in message


def test_a_run_saved_before_the_column_existed_is_simulated_again(write_config, tmp_path):
    import json

    from servesim.cli import main
    path, out = write_config(), tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--set", "systems=[vllm]"]) == 0
    marker = out / "runs" / "vllm_rate0.5_seed0" / "summary.json"
    old = json.loads(marker.read_text())
    del old["memory_saving"]  # as an earlier servesim wrote it
    marker.write_text(json.dumps(old))
    assert main(["run", str(path), "--out", str(out), "--set", "systems=[vllm]"]) == 0
    assert "memory_saving" in json.loads(marker.read_text())
    assert pd.read_csv(out / "summary.csv")["memory_saving"].tolist() == [0.0]
