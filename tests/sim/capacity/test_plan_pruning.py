"""What `servesim plan` rules out, and on what grounds: the roofline's bound on a replica's rate holds the answers a
search finds, a search stops where going on cannot change the fleet, and a deployment no rate serves says why."""
from __future__ import annotations

import dataclasses
import math

import pytest

import servesim
from engine.core.batch import BatchShape
from sim.capacity.bound import decode_tokens_per_request, roofline, unpadded
from sim.capacity.candidates import build, candidates
from sim.capacity.deploy_config import load_plan
from sim.capacity.deploy_search import Cut, _decided, _prepare, capped, fewest_units
from sim.capacity.saturation import Pace
from sim.capacity.search import Probe, rate_search
from sim.capacity.targets import TARGET_METRICS
from sim.experiment.config import clock_for, load_experiment
from tests.helpers.configs import tiny
from tests.helpers.plans import write_plan

SERVED = {"saturated": False, "backlog_growth": 0.0, "num_unfinished": 0, "num_ignored": 0, "num_aborted": 0,
          **Pace(0.0, 30.0, 0.0, 0.01, 0.1).as_summary()}


def summary(ttft: float, **served) -> dict:
    return {**{metric: 0.01 for metric in TARGET_METRICS}, **SERVED, **served, "ttft_p90_s": ttft, "num_measured": 500}


def drive(search, held_below: float) -> tuple[list[float], object]:
    """A search answered as a replica that holds every rate under `held_below`: the rates it asked, its result."""
    asked = []
    try:
        point = next(search)
        while True:
            asked.append(point[0])
            point = search.send(point[0] < held_below)
    except StopIteration as end:
        return asked, end.value


def test_a_search_stops_once_every_rate_left_needs_as_many_replicas():
    alone, answer = drive(rate_search(1.0, 0.01, 1), 6.3)
    stopped, settled = drive(capped(rate_search(1.0, 0.01, 1), 50.0, lambda rate: 0.0, math.inf), 6.3)
    assert stopped == alone[:len(stopped)] and len(stopped) < len(alone), "the same path, cut short"
    assert math.ceil(50 / settled) == math.ceil(50 / answer) == 8, "the same fleet"
    one, rate = drive(capped(rate_search(1.0, 0.01, 1), 50.0, lambda rate: 0.0, math.inf), 1e9)
    assert one == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0] and rate == 64.0, "a replica holding the total rate is all"


def test_a_search_stops_at_the_first_rate_over_the_slo_that_prices_the_fleet_over_the_cutoff():
    usd = {8.0: 70.0, 6.0: 90.0}
    asked, result = drive(capped(rate_search(1.0, 0.01, 1), 50.0, lambda rate: usd.get(rate, 0.0), 80.0), 5.0)
    assert asked == [1.0, 2.0, 4.0, 8.0, 6.0] and result == Cut(6.0), "8 prices it under the cutoff, 6 over"
    assert fewest_units(50.0, 6.0) == 9 and fewest_units(50.0, 12.5) == 5 and fewest_units(50.0, math.inf) == 1


@pytest.fixture
def prepared(tmp_path):
    """The tiny plan's first deployment (a100-40gb at tensor parallelism 1), ready to search."""
    plan = load_plan(write_plan(tmp_path))
    built = build(plan, candidates(plan)[0])
    ready, refused = _prepare(plan, built, plan.prices.of("a100-40gb", "test"), 200.0, tmp_path)
    assert refused is None
    return plan, ready


def test_a_deployment_no_rate_serves_says_whether_it_fell_behind_missed_the_slo_or_measured_nothing(prepared):
    plan, ready = prepared
    behind = [Probe(r, 1, summary(0.1, saturated=True, backlog_growth=0.2)) for r in (1.0, 0.25)]
    outcome = _decided(plan, ready, behind, 0.0, math.inf)
    assert outcome.stage == "saturated" and outcome.reason.startswith(
        "falls behind even at 0.25 req/s, the lowest probed (saturated (the backlog grew by 20% of the arrivals)")
    missed = [Probe(r, 1, summary(5.0)) for r in (1.0, 0.25)]
    outcome = _decided(plan, ready, missed, 0.0, math.inf)
    assert (outcome.stage, outcome.reason) == ("slo", "misses the SLO at every rate down to 0.25 req/s "
                                                      "(ttft_p90_s 5 > 2)")
    blind = [Probe(1.0, 1, summary(math.nan, num_measured=0))]
    outcome = _decided(plan, ready, blind, 0.0, math.inf)
    assert outcome.stage == "unmeasured" and "lower warmup_s or raise workload.duration_s" in outcome.reason


def test_a_fleet_past_max_replicas_is_rejected_and_one_pruned_mid_search_says_where(prepared):
    plan, ready = prepared
    held = [Probe(0.5, 1, summary(0.1))]
    few = _decided(dataclasses.replace(plan, max_replicas=4), ready, held, 0.5, math.inf)
    assert few.stage == "replicas" and few.reason == ("holds 0.5 req/s a replica: 12 for 6 req/s, more than "
                                                      "plan.max_replicas 4")
    over = [Probe(1.0, 1, summary(0.1)), Probe(2.0, 1, summary(5.0))]
    cut = _decided(dataclasses.replace(plan, keep_within=0.0), ready, over, 1.0, best=5.0)
    assert cut.stage == "cut" and cut.reason == (
        "over the SLO at 2 req/s a replica (ttft_p90_s 5 > 2), so at least 4 for 6 req/s: at least $5.92/h, over "
        "the cheapest fleet found ($5.00/h)")
    assert _decided(plan, ready, over, 1.0, best=5.0).stage == "ranked", "within keep_within (10): ranked"


def test_the_roofline_bounds_the_rate_a_search_finds_and_the_clock_only_adds_time(write_config):
    exp = load_experiment(write_config(tiny(systems="[vllm]", rates="[1]")))
    system = exp.systems[0]
    found = servesim.capacity(exp, "tpot_p90_s=1", tolerance=0.05, progress=None)
    bound = roofline(exp, system).rate_bound(decode_tokens_per_request(exp, 4.0, 0))
    assert 0 < found["max_rate_per_replica_rps"].iloc[0] <= bound / 1.5, "the answer stays under the bound without "
    "its slack"
    clock = clock_for(exp, system)
    fastest = unpadded(clock)
    for b in (1, 16, 200):
        shortest = fastest.step_time(BatchShape((), (2,) * b, 0, 0, b))
        assert shortest <= clock.step_time(BatchShape((), (2,) * b, 0, 0, b)), "padding only adds time"
        assert shortest <= clock.step_time(BatchShape((), (700,) * b, 0, 0, b))
        assert shortest <= clock.step_time(BatchShape((512,), (2,) * b, 0, 0, b + 1))
    assert 0 < roofline(exp, system).fastest_step_s <= fastest.step_time(BatchShape((), (2,), 0, 0, 1))
