"""Several targets at once, and no run that failed to serve its load counted as meeting one."""
from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from engine.errors import SpecError
from servesim.cli import main
from sim.capacity.saturation import Pace
from sim.capacity.targets import TARGET_METRICS, Target, judge, parse_targets
from tests.helpers.doors import Reached, reached

SERVED = {"saturated": False, "backlog_growth": 0.0, "num_unfinished": 0, "num_ignored": 0, "num_aborted": 0,
          **Pace(0.0, 30.0, 0.0, 0.01, 0.1).as_summary()}  # a run that kept pace
FAST = {metric: 0.01 for metric in TARGET_METRICS}


def test_a_saturated_run_meets_no_target_however_low_its_tpot():
    summary = {**FAST, **SERVED, "saturated": True, "backlog_growth": 0.49}
    verdict = judge(summary, (Target("tpot_p99_s", 0.05),))
    assert verdict.held is False and verdict.why == "saturated (the backlog grew by 49% of the arrivals)"


def test_a_run_that_dropped_requests_meets_no_target():
    verdict = judge({**FAST, **SERVED, "num_ignored": 15}, (Target("normalized_latency", 1.0),))
    assert verdict.held is False and "15 requests dropped unserved" in verdict.why


def test_several_targets_are_met_together_or_not_and_each_miss_is_named():
    targets = parse_targets(["ttft_p99_s=1", "tpot_p99_s=0.05,normalized_latency=0.1"])
    assert [t.metric for t in targets] == ["ttft_p99_s", "tpot_p99_s", "normalized_latency"]
    summary = {**FAST, **SERVED, "ttft_p99_s": 3.0, "tpot_p99_s": 0.06}
    verdict = judge(summary, targets)
    assert verdict.held is False and verdict.why == "ttft_p99_s 3 > 1; tpot_p99_s 0.06 > 0.05"
    assert judge(summary, targets[2:]).held is True


def test_a_metric_given_twice_is_refused_unless_with_the_same_limit():
    with pytest.raises(SpecError, match="--target: tpot_p99_s: given twice"):
        parse_targets(["tpot_p99_s=0.05", "ttft_p90_s=2,tpot_p99_s=0.1"], "--target")
    assert parse_targets(["tpot_p99_s=0.05", "tpot_p99_s=5e-2"]) == (Target("tpot_p99_s", 0.05),)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([f"{m}=0.5" for m in TARGET_METRICS] + ["latency=1", "ttft_p99_s=-1",
                                                                                  "tpot_p99_s=nan", "x", "", ","]),
                          st.text(max_size=12)), max_size=4).map(lambda parts: [",".join(parts[:2]), *parts[2:]]))
def test_targets_parse_or_are_refused_in_one_line(texts):
    try:
        targets = parse_targets(texts)
    except SpecError as err:
        assert str(err).startswith("target: ") and "\n" not in str(err)
        return
    assert targets and len({t.metric for t in targets}) == len(targets)  # one each, duplicates folded
    assert all(t.metric in TARGET_METRICS and 0 < t.limit < math.inf for t in targets)


def test_capacity_answers_for_every_target_and_for_all_of_them(write_config, tmp_path, capsys):
    path = write_config()
    common = ["--set", "systems=[orca-oracle]", "--set", "workload.duration_s=200", "--tolerance", "0.2",
              "--rate", "3", "--jobs", "1"]
    assert main(["capacity", str(path), "--target", "ttft_p90_s=5", "--target", "normalized_latency=0.05",
                 "--out", str(tmp_path / "a"), *common]) == 0
    assert main(["capacity", str(path), "--target", "ttft_p90_s=5,normalized_latency=0.05",
                 "--out", str(tmp_path / "b"), *common]) == 0
    a = (tmp_path / "a" / "capacity.csv").read_bytes()
    assert a == (tmp_path / "b" / "capacity.csv").read_bytes()  # repeated or a comma list: the same answer
    table = pd.read_csv(tmp_path / "a" / "capacity.csv")
    assert list(table["metric"]) == ["ttft_p90_s", "normalized_latency", "all"]
    rates = dict(zip(table["metric"], table["max_rate_per_replica_rps"]))
    assert 0 < rates["all"] <= min(rates["ttft_p90_s"], rates["normalized_latency"]) * 1.2
    assert table["replicas_needed"].notna().tolist() == [False, False, True]  # replicas for the joint SLO
    assert table["limited_by"].str.startswith("at ").all()
    probes = pd.read_csv(tmp_path / "a" / "capacity_probes.csv")
    assert not probes.duplicated(["rate", "replicas"]).any()  # the searches shared their runs
    assert {"ttft_p90_s", "normalized_latency", "saturated", "dropped", "why"} <= set(probes.columns)


def test_the_api_refuses_what_the_command_refuses(write_config, tmp_path):
    path = write_config()
    for kwargs, named in [({"tolerance": 1.5}, "tolerance"), ({"rate": math.inf}, "rate"),
                          ({"rate": 1e12}, "rate"), ({"seed": -1}, "seed"), ({"seed": 0.5}, "seed"),
                          ({"rate": "2"}, "rate")]:
        with pytest.raises(SpecError, match=f"^{named}: "):  # named as the API's keyword, the command's flag
            servesim.capacity(path, "normalized_latency=0.1", **kwargs)
    with pytest.raises(SpecError, match="^target: tpot_p99_s: given twice"):
        servesim.capacity(path, ["tpot_p99_s=0.05", "tpot_p99_s=0.1"])


def test_a_tpot_target_alone_stops_where_the_server_falls_behind(write_config):
    """Orca (Oracle) on the small experiment serves about 1.4 req/s. A saturated server's TPOT stays low, and at
    2.5 req/s it still drains within twice the trace: only the measured backlog stops the search near 1.4."""
    table = servesim.capacity(write_config(), "tpot_p99_s=1", tolerance=0.1,
                              overrides=["systems=[orca-oracle]", "workload.duration_s=300"])
    [row] = table.to_dict("records")
    assert 1.0 < row["max_rate_per_replica_rps"] < 1.6
    assert "saturated" in row["limited_by"]


def test_a_horizon_cut_at_the_traces_end_still_finds_a_rate(write_config):
    """With max_time_factor 1 the last arrivals are always unfinished at the horizon: that is no saturation, so
    the search still finds the rate (before, every rate failed and the answer was 0 without a reason)."""
    table = servesim.capacity(write_config(), "normalized_latency=0.2", tolerance=0.2,
                              overrides=["systems=[vllm]", "workload.duration_s=200", "max_time_factor=1"])
    assert table["max_rate_per_replica_rps"][0] > 0.5


VALUES = [None, 0, -1, 0.5, 1, 2, 7, 1e-20, 0.05, 0.99, 1.5, 1e12, math.inf, -math.inf, math.nan, "2", True, [1]]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tolerance=st.sampled_from(VALUES), rate=st.sampled_from(VALUES), seed=st.sampled_from(VALUES),
       targets=st.lists(st.sampled_from(["ttft_p99_s=1", "tpot_p99_s=0.05", "tpot_p99_s=0.1", "x=1", 3]),
                        min_size=0, max_size=3))
def test_the_apis_arguments_are_searched_or_refused_naming_one(write_config, monkeypatch, tolerance, rate, seed,
                                                             targets):
    import sim.capacity.plan

    monkeypatch.setattr(sim.capacity.plan, "run_jobs", reached)
    try:
        servesim.capacity(write_config(), targets, rate=rate, seed=seed, tolerance=tolerance)
    except Reached:
        assert isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0
        assert isinstance(tolerance, (int, float)) and 1e-15 < tolerance < 1
        assert rate is None or 0 < rate < 1e12
        limits = {}
        for text in targets:
            metric, limit = text.split("=")
            assert limits.setdefault(metric, limit) == limit and metric != "x"
        assert targets
        return
    except SpecError as err:
        assert str(err).split(":")[0] in ("tolerance", "rate", "seed", "target") and "\n" not in str(err)
