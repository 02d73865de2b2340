"""Capacity planning finds the knee the sweep shows, and enough replicas to move it."""
import pandas as pd
import pytest

from servesim.cli import main
from sim.capacity.search import Target, max_rate, probe, replicas_for
from sim.capacity.targets import judge
from sim.experiment.config import load_experiment
from sim.experiment.run import run_one


def held(summary: dict, target: Target) -> bool | None:
    return judge(summary, (target,)).held


@pytest.fixture
def exp(write_config):
    return load_experiment(write_config(), ["systems=[orca-oracle]", "workload.duration_s=300"])


def test_max_rate_is_the_knee(exp):
    system = exp.systems[0]
    target = Target("normalized_latency", 0.1)
    rate, probes = max_rate(exp, system, target, start=0.5, rel_tol=0.05)
    assert 0.5 < rate < 4
    assert any(held(p.summary, target) for p in probes) and any(not held(p.summary, target) for p in probes)
    # the answer holds, and 10% more does not
    assert held(probe(exp, system, rate, 1, 0).summary, target)
    assert not held(probe(exp, system, rate * 1.1, 1, 0).summary, target)


def test_more_replicas_hold_a_rate_one_cannot(exp):
    system = exp.systems[0]
    target = Target("normalized_latency", 0.1)
    single, _ = max_rate(exp, system, target, start=0.5, rel_tol=0.1)
    needed, probes = replicas_for(exp, system, target, rate=3 * single, per_replica_rate=single)
    assert needed >= 2
    assert held(probes[-1].summary, target) or any(p.replicas == needed and held(p.summary, target) for p in probes)
    assert not any(p.replicas == needed - 1 and held(p.summary, target) for p in probes)


def test_capacity_cli_writes_table(write_config, tmp_path):
    out = tmp_path / "cap"
    path = write_config()
    assert main(["capacity", str(path), "--target", "ttft_p90_s=5", "--out", str(out),
                 "--set", "systems=[vllm]", "--set", "workload.duration_s=200", "--tolerance", "0.2"]) == 0
    table = pd.read_csv(out / "capacity.csv")
    assert list(table["system"]) == ["vLLM"] and table["max_rate_per_replica_rps"][0] > 0


def test_capacity_cli_rejects_unknown_metric(write_config, capsys):
    assert main(["capacity", str(write_config()), "--target", "latency=1"]) == 2
    assert "normalized_latency" in capsys.readouterr().err


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_router_spreads_requests_over_replicas(exp, router):
    import dataclasses

    two = dataclasses.replace(exp, replicas=2, router=router)
    result = run_one(two, exp.systems[0], 2.0, 0)
    per_replica = result.requests.groupby("replica").size()
    assert set(per_replica.index) == {0, 1}
    assert abs(per_replica[0] - per_replica[1]) <= 0.2 * per_replica.sum()
    assert set(result.iterations["replica"]) == {0, 1}
