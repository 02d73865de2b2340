"""`servesim capacity --splits N` (sim/capacity/split.py): every prefill:decode split of at most N replicas, each
searched as a colocated replica is, its rate per GPU beside the colocated replica's, the best marked."""
import pytest

from engine.errors import SpecError
from servesim.cli import main
from sim.capacity.plan import plan_capacity
from sim.capacity.search import max_rate
from sim.capacity.split import check_splits, gpus_of, split_capacity, split_experiment, splits_of
from sim.capacity.targets import parse_targets
from sim.experiment.config import load_experiment
from tests.helpers.configs import tiny

TARGETS = ["ttft_p90_s=0.5", "tpot_p90_s=0.2"]


def test_the_splits_are_every_pair_of_at_most_n_replicas():
    assert splits_of(2) == [(1, 1)]
    assert splits_of(4) == [(1, 1), (1, 2), (2, 1), (1, 3), (2, 2), (3, 1)]


@pytest.mark.parametrize("value", [1, 17, 2.5, True])
def test_a_split_count_out_of_range_says_what_is_valid(value):
    with pytest.raises(SpecError, match="--splits: must be a whole number of replicas from 2 to 16"):
        check_splits(value, "--splits")


@pytest.mark.slow
def test_each_split_holds_what_its_own_search_finds_and_the_best_is_marked(write_config):
    split = "{prefill: {replicas: 1}, decode: {replicas: 1, tensor_parallel: 2}}"
    exp = load_experiment(write_config(tiny(systems="[vllm]", rates="[1]", tensor_parallel="1", split=split)))
    plan = plan_capacity(exp, TARGETS, tolerance=0.2)
    rows = split_capacity(plan, 3)
    assert [row["fleet"] for row in rows] == ["colocated", "1P:1D", "1P:2D", "2P:1D"]
    assert [row["gpus"] for row in rows] == [1, 3, 5, 4]  # the decode pool's replicas take 2 GPUs each
    for row in rows[1:]:
        variant = split_experiment(exp, row["prefill_replicas"], row["decode_replicas"])
        assert gpus_of(variant) == row["gpus"]
        alone, _ = max_rate(variant, exp.systems[0], parse_targets(TARGETS, "--target")[0], start=1.0, rel_tol=0.2)
        assert row["max_rate_rps"] == alone > 0
        assert row["goodput_per_gpu_rps"] == pytest.approx(row["max_rate_rps"] / row["gpus"])
    best = [row for row in rows if row["best"]]
    assert len(best) == 1 and best[0]["goodput_per_gpu_rps"] == max(r["goodput_per_gpu_rps"] for r in rows)


def test_servesim_capacity_writes_the_split_table(write_config, tmp_path, capsys):
    config = write_config(tiny(systems="[vllm]", rates="[1]"))
    out = tmp_path / "cap"
    assert main(["capacity", str(config), "--target", ",".join(TARGETS), "--splits", "2", "--tolerance", "0.3",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "prefill:decode splits of up to 2 replicas" in printed and "1P:1D" in printed
    lines = (out / "capacity_split.csv").read_text().splitlines()
    assert lines[0] == "system,fleet,prefill_replicas,decode_replicas,gpus,max_rate_rps,goodput_per_gpu_rps,best"
    assert len(lines) == 3


def test_the_api_answers_as_the_command_does(write_config):
    import servesim

    config = write_config(tiny(systems="[vllm]", rates="[1]"))
    table = servesim.split_capacity(config, TARGETS, splits=2, tolerance=0.3)
    assert table["fleet"].tolist() == ["colocated", "1P:1D"]
    with pytest.raises(SpecError, match="splits: must be a whole number"):
        servesim.split_capacity(config, TARGETS, splits=1)


def _no_search(monkeypatch) -> None:
    """Any probe, colocated or split, ends the test: a refusal must come before the first."""
    import sim.capacity.plan
    import sim.capacity.split
    from tests.helpers.doors import reached

    monkeypatch.setattr(sim.capacity.plan, "run_jobs", reached)
    monkeypatch.setattr(sim.capacity.split, "run_jobs", reached)


@pytest.mark.parametrize("keys, words", [
    ({"workload": "{dataset: sharegpt-standin, duration_s: 30, n: 2}"}, ": workload.n: 2 samples per request"),
    ({"split": "{prefill: {replicas: 1, system: {preset: vllm, prefix_caching: true}}, decode: {replicas: 1}}",
      "router": "cache_aware"}, "which systems[0] (vLLM) has not: set its prefix_caching: true, or choose another "
                                "router (the colocated replica the splits are compared with")])
def test_the_splits_are_refused_before_any_search_runs(write_config, tmp_path, monkeypatch, capsys, keys, words):
    _no_search(monkeypatch)
    config = write_config(tiny(systems="[vllm]", rates="[1]", **keys))
    assert main(["capacity", str(config), "--target", ",".join(TARGETS), "--splits", "2", "--out",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: ") and err.count("\n") == 1 and words in err, err
    import servesim

    with pytest.raises(SpecError) as caught:
        servesim.split_capacity(config, TARGETS, splits=2)
    assert words in str(caught.value)
