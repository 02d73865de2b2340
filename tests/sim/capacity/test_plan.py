"""`servesim plan` end to end on a tiny plan: the fleets that meet the SLO ranked by cost, every other deployment
rejected with its reason, the same tables from the command and the API, after an interruption, and on any number of
workers."""
from __future__ import annotations

import math
import re

import pandas as pd
import pytest

import servesim
from engine.errors import SpecError
from servesim.cli import main
from sim.capacity.deploy_config import load_plan
from sim.capacity.deploy_search import search_deployments
from sim.executors.workers import Workers
from tests.helpers.plans import PLAN, write_plan


def test_the_fleets_that_meet_the_slo_are_ranked_by_cost_and_each_costs_its_gpus_at_their_price(tmp_path):
    result = servesim.plan(write_plan(tmp_path), tmp_path / "out", progress=None)
    ranked = result.ranked
    assert len(ranked) >= 2 and list(ranked["rank"]) == list(range(1, len(ranked) + 1))
    assert list(ranked["usd_per_hour"]) == sorted(ranked["usd_per_hour"]), "cheapest first"
    prices = {"a100-40gb": 1.48, "a10": 0.86, "l4": 0.80}
    for row in ranked.to_dict("records"):
        assert row["gpus"] == row["replicas"] * row["tensor_parallel"]
        assert row["usd_per_hour"] == pytest.approx(row["gpus"] * prices[row["hardware"]])
        assert row["replicas"] == math.ceil(6 / row["rate_per_replica_rps"]), "the replicas the total rate needs"
        assert row["ttft_p90_s"] <= 2 and row["tpot_p90_s"] <= 0.2
        assert row["usd_per_million_output_tokens"] > 0 and row["usd_per_gpu_hour"] == prices[row["hardware"]]
    best = ranked.iloc[0]
    assert (best["model"], best["workload"], best["engine"]) == (
        "opt-13b", "sharegpt-standin, poisson arrivals", "vllm mixed, 256 seqs, 2560 tokens")
    assert best["cost_model"].startswith("transfer") and best["fleet"] == "colocated"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "plan.csv", "plan_pareto.png", "plan_probes", "plan_rejected.csv", "resolved.yaml"]
    written = pd.read_csv(tmp_path / "out" / "plan.csv")
    shown = ["rank", "hardware", "tensor_parallel", "replicas", "usd_per_hour", "rate_per_replica_rps"]
    pd.testing.assert_frame_equal(written[shown], ranked[shown], check_dtype=False)


def test_every_deployment_not_ranked_is_rejected_with_the_check_that_refused_it(tmp_path):
    plan = PLAN.replace("  keep_within: 10\n", "  keep_within: 0\n  batch: [{}, {max_num_batched_tokens: 1024}]\n")
    result = servesim.plan(write_plan(tmp_path, plan), tmp_path / "out", progress=None)
    rejected = result.rejected
    by_stage = {stage: rows for stage, rows in rejected.groupby("stage")}
    fit = by_stage["fit"]
    assert sorted(zip(fit["hardware"], fit["tensor_parallel"])) == [("a10", 1), ("l4", 1)]
    assert all(re.match(r"model: opt-13b needs 23.9 GiB of weights per GPU at tensor_parallel=1, but (a10|l4) has "
                        r"22.0 GiB", reason) for reason in fit["reason"])
    assert set(by_stage["parallelism"]["tensor_parallel"]) == {3}
    assert all("tensor_parallel: 3 does not divide opt-13b's 40 attention heads" in r
               for r in by_stage["parallelism"]["reason"])
    batch = by_stage["batch"]
    assert set(batch["max_num_batched_tokens"]) == {1024}
    assert all("1024 tokens per iteration cannot prefill a 2048-token prompt" in r for r in batch["reason"])
    pruned = pd.concat([by_stage.get("bound", batch[:0]), by_stage.get("cut", batch[:0])])
    assert len(pruned), "with keep_within 0 a dearer fleet is pruned"
    assert all("over the cheapest fleet found ($" in r for r in pruned["reason"])
    assert (pruned["usd_per_hour_at_least"] > result.ranked["usd_per_hour"].min()).all()
    assert len(rejected) + len(result.ranked) == 3 * 3 * 2, "every deployment is in one table or the other"


def test_a_tpot_target_under_the_fastest_decode_step_is_missed_without_a_probe(tmp_path):
    plan = PLAN.replace("tpot_p90_s: 0.2", "tpot_p90_s: 0.001")
    result = servesim.plan(write_plan(tmp_path, plan), tmp_path / "out", progress=None)
    assert result.ranked.empty and not (tmp_path / "out" / "plan_probes").exists(), "nothing was simulated"
    tpot = result.rejected[result.rejected["stage"] == "tpot"]
    assert len(tpot) == 4 and all("the clock's fastest decode step (one sequence), over tpot_p90_s<=0.001" in r
                                  for r in tpot["reason"])


def test_a_gpu_searched_without_a_price_is_one_line_naming_the_key(tmp_path, capsys):
    config = write_plan(tmp_path, prices="gpus:\n  a100-40gb: {usd_per_gpu_hour: 1.48}\n  a10: {usd_per_gpu_hour: 1}\n")
    assert main(["plan", str(config), "--out", str(tmp_path / "out")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == (f"servesim: error: {tmp_path / 'prices.yaml'}: gpus.l4: no price for l4, which {config}'s "
                    "plan.hardware[2] searches; give its usd_per_gpu_hour, or leave it out of the search (this "
                    "table prices ['a10', 'a100-40gb'])")
    assert not (tmp_path / "out").exists(), "nothing written"
    with pytest.raises(SpecError, match="gpus.l4: no price for l4"):
        servesim.plan(config, tmp_path / "out", progress=None)


def test_a_bad_plan_key_or_price_is_refused_before_anything_runs(tmp_path):
    for plan, words in [(PLAN.replace("rate: 6", "rate: -1"), "plan.rate: must be a positive number"),
                        (PLAN.replace("  rate: 6\n", ""), "plan.rate: missing"),
                        (PLAN.replace("keep_within: 10", "keep_within: 10\n  budget: 3"), "plan.budget: unknown key"),
                        (PLAN.replace("[1, 2, 3]", "[1, 1]"), r"plan.tensor_parallel\[1\]: 1 is given twice"),
                        (PLAN.replace("ttft_p90_s: 2", "ttft_p91_s: 2"), "plan.targets: 'ttft_p91_s': unknown metric"),
                        (PLAN.replace("[a100-40gb, a10, l4]", "[a100-40gb, h300]"),
                         r"plan.hardware\[1\]: 'h300' is not one of"),
                        (PLAN.replace("[a100-40gb, a10, l4]", "a100-40gb"), "plan.hardware: must be a non-empty list"),
                        (PLAN.replace("targets: {ttft_p90_s: 2, tpot_p90_s: 0.2}", "targets: 5"), "plan.targets"),
                        (PLAN.replace("prices: prices.yaml", "prices: [1]"), "plan.prices: must be a path"),
                        (PLAN.replace("prices: prices.yaml", "prices: none.yaml"), "plan.prices: file 'none.yaml' not"),
                        (PLAN + "  batch: [5]\n", r"plan.batch\[0\]: must be a mapping"),
                        (PLAN + "  batch: [{max_num_seqs: 0}]\n", r"plan.batch\[0\].max_num_seqs: must be a positive"),
                        (PLAN + "  batch: [{seqs: 8}]\n", r"plan.batch\[0\].seqs: unknown key"),
                        (PLAN + "  precision: [{weights: fp9}]\n", r"precision\[0\].weights: 'fp9' is not"),
                        (PLAN + "  splits: 1\n", "plan.splits: must be an integer in \\[2, 16\\]"),
                        (PLAN + "  max_replicas: 0\n", "plan.max_replicas: must be a positive integer"),
                        (PLAN.replace("keep_within: 10", "keep_within: -1"), "plan.keep_within: must be a non-neg"),
                        (PLAN.replace("plan:\n", "plan: 3\n").split("  rate:")[0], "plan: missing, or not a mapping"),
                        (PLAN.replace("systems: [vllm]", "systems: [vllm]\nsplit: {prefill: {replicas: 1}, decode: "
                                      "{replicas: 1}}"), "split: a capacity search varies colocated replicas")]:
        with pytest.raises(SpecError, match=words):
            load_plan(write_plan(tmp_path, plan))
    with pytest.raises(SpecError, match="gpus.a10.usd_per_gpu_hour: must be a positive number"):
        load_plan(write_plan(tmp_path, prices=PRICE_LINES.replace("0.86", "0")))
    with pytest.raises(SpecError, match="gpus.a10.cost: unknown key"):
        load_plan(write_plan(tmp_path, prices=PRICE_LINES.replace("{usd_per_gpu_hour: 0.86}", "{cost: 1}")))
    with pytest.raises(SpecError, match="gpus: must be a mapping of GPU kinds"):
        load_plan(write_plan(tmp_path, prices="- 1\n"))
    with pytest.raises(SpecError, match="gpus.a10.provider: must be text"):
        load_plan(write_plan(tmp_path, prices=PRICE_LINES.replace("0.86}", "0.86, provider: [1]}")))


def test_the_command_and_the_api_refuse_a_bad_argument_in_one_line(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "none.yaml")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("servesim: error: ") and "none.yaml" in line
    config = write_plan(tmp_path)
    for call, words in [(lambda: servesim.plan(config, 5), "out_dir: must be a folder's path"),
                        (lambda: servesim.plan(config, jobs=-1), "jobs: -1: must be at least 1"),
                        (lambda: servesim.plan(config, overrides=[5]), r"overrides: \[0\]: must be a string"),
                        (lambda: servesim.plan(config, progress=5), "progress: must be a function"),
                        (lambda: servesim.plan(5), "config: must be a plan config's path")]:
        with pytest.raises(SpecError, match=words):
            call()


PRICE_LINES = ("gpus:\n  a100-40gb: {usd_per_gpu_hour: 1.48}\n  a10: {usd_per_gpu_hour: 0.86}\n"
               "  l4: {usd_per_gpu_hour: 1}\n")


def test_the_command_writes_what_the_api_returns_and_resolved_yaml_holds_the_overrides(tmp_path, capsys):
    config = write_plan(tmp_path)
    assert main(["plan", str(config), "--out", str(tmp_path / "cli"), "--set", "plan.rate=5"]) == 0
    said = capsys.readouterr().out
    assert "cheapest: " in said and "rejected: " in said and f"wrote {tmp_path / 'cli'}/plan.csv" in said
    api = servesim.plan(config, tmp_path / "api", overrides=["plan.rate=5"], progress=None)
    for name, frame in (("plan.csv", api.ranked), ("plan_rejected.csv", api.rejected)):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "api" / name).read_bytes()
        assert len(pd.read_csv(tmp_path / "cli" / name)) == len(frame)
    resolved = (tmp_path / "cli" / "resolved.yaml").read_text()
    assert resolved.startswith(f"# {config}, with --set plan.rate=5\n") and "  rate: 5\n" in resolved


def test_a_plan_interrupted_and_run_again_resumes_and_writes_the_same_tables(tmp_path):
    config = write_plan(tmp_path)
    whole = servesim.plan(config, tmp_path / "whole", progress=None)
    lines: list[str] = []

    def stop_at_the_second_search(line: str) -> None:
        lines.append(line)
        if sum(line.startswith("  [") for line in lines) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        servesim.plan(config, tmp_path / "again", progress=stop_at_the_second_search)
    assert not (tmp_path / "again" / "plan.csv").exists() and (tmp_path / "again" / "plan_probes").is_dir()
    said: list[str] = []
    again = servesim.plan(config, tmp_path / "again", progress=said.append)
    assert said[0].startswith("resuming: ") and "probes of 2 deployments already made" in said[0]
    pd.testing.assert_frame_equal(again.ranked, whole.ranked)
    pd.testing.assert_frame_equal(again.rejected, whole.rejected)


class Wide(Workers):
    """This process, handed three searches at a time: a batch's decisions must be one-at-a-time's."""
    width = 3


def test_the_decisions_are_the_same_whatever_the_searches_run_at_once(tmp_path):
    plan = load_plan(write_plan(tmp_path, PLAN.replace("keep_within: 10", "keep_within: 0")))
    one = search_deployments(plan, tmp_path / "one", Workers(), lambda line: None)
    wide = search_deployments(plan, tmp_path / "wide", Wide(), lambda line: None)
    assert [(o.stage, o.reason, o.rate, o.units) for o in one] == [(o.stage, o.reason, o.rate, o.units) for o in wide]
    assert sum(o.stage in ("bound", "cut") for o in one), "something was pruned"


def test_a_prefill_decode_unit_is_a_deployment_costed_by_all_its_gpus(tmp_path):
    plan = PLAN.replace("[a100-40gb, a10, l4]", "[a100-40gb]").replace("[1, 2, 3]", "[2]") + "  splits: 2\n"
    ranked = servesim.plan(write_plan(tmp_path, plan), tmp_path / "out", progress=None).ranked
    assert sorted(ranked["fleet"]) == ["1P:1D", "colocated"]
    unit = ranked[ranked["fleet"] == "1P:1D"].iloc[0]
    assert unit["gpus"] == unit["replicas"] * 2 * 2 and unit["usd_per_hour"] == pytest.approx(unit["gpus"] * 1.48)
