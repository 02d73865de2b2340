"""Saturation is measured from the backlog, not inferred from the horizon."""
from __future__ import annotations

import numpy as np
import pytest

from sim.experiment.metrics import MIN_GROWTH_REQUESTS, SATURATED_GROWTH, backlog, is_saturated
from sim.experiment.run import run_one


def _served(arrival: np.ndarray, service_s: float, serve_every_s: float) -> np.ndarray:
    """One server taking requests in order, each `service_s` long, starting at most one every serve_every_s."""
    finish, free = [], 0.0
    for t in arrival:
        free = max(free, t) + serve_every_s
        finish.append(free + service_s - serve_every_s)
    return np.array(finish)


ARRIVALS = np.arange(0.0, 600.0, 0.5)  # 2 req/s for ten minutes


def test_a_server_keeping_up_has_no_growth():
    line = backlog(ARRIVALS, _served(ARRIVALS, 3.0, 0.4), warmup_s=60)
    assert abs(line.growth) < 0.01 and abs(line.grown_by) < 2 and not line.is_growing


def test_a_server_serving_half_the_arrivals_falls_behind_by_half():
    finish = _served(ARRIVALS, 0.5, 1.0)  # 1 req/s served: every request still finishes, by 1,200 s
    line = backlog(ARRIVALS, finish, warmup_s=60)
    assert line.growth == pytest.approx(0.5, abs=0.01) and line.grown_by > 200 and line.is_growing
    # the horizon of twice the trace sees every request finish: the old rule called this run unsaturated
    assert not np.isnan(finish).any() and finish.max() < 2 * 600
    assert is_saturated(line, ARRIVALS, np.ones(len(ARRIVALS), bool), horizon_s=1200.0)


def test_growth_is_fitted_over_the_measured_arrivals_only():
    finish = _served(ARRIVALS, 0.5, 1.0)
    finish[ARRIVALS >= 100] = ARRIVALS[ARRIVALS >= 100] + 0.5  # after a bad start the server keeps up
    assert abs(backlog(ARRIVALS, finish, warmup_s=300).growth) < 0.01


def test_a_horizon_at_the_traces_end_leaves_the_last_arrivals_unfinished_without_saturation():
    finish = ARRIVALS + 3.0
    finish[ARRIVALS > 597.0] = np.nan  # cut at 600 s (max_time_factor 1)
    line = backlog(ARRIVALS, finish, warmup_s=60)
    assert not is_saturated(line, ARRIVALS, ~np.isnan(finish), horizon_s=600.0)
    finish[10] = np.nan  # but a request stuck since the start is
    assert is_saturated(line, ARRIVALS, ~np.isnan(finish), horizon_s=600.0)


def test_a_few_requests_more_at_the_end_of_a_short_run_is_no_trend():
    arrival = np.array([0.0, 10.0, 20.0, 30.0, 40.0])
    finish = np.array([1.0, 11.0, 21.0, 50.0, 50.0])  # the last two wait: a backlog of two at the end
    line = backlog(arrival, finish, warmup_s=0)
    assert line.growth > SATURATED_GROWTH and line.grown_by < MIN_GROWTH_REQUESTS
    assert not is_saturated(line, arrival, np.ones(5, bool), horizon_s=80.0)


def _queue(rng: np.random.Generator, load: float, duration_s: float = 90.0, servers: int = 8):
    """Poisson arrivals at 2 req/s to `servers` first-come servers with exponential service at `load`."""
    arrival = np.sort(rng.uniform(0, duration_s, rng.poisson(2.0 * duration_s)))
    free, finish = np.zeros(servers), []
    for t in arrival:
        k = free.argmin()
        free[k] = max(t, free[k]) + rng.exponential(load * servers / 2.0)
        finish.append(free[k])
    return arrival, np.array(finish)


def test_a_stable_backlog_wandering_over_a_short_window_is_no_trend_and_an_overload_is():
    """Over a minute a stable queue's backlog wanders (a burst raises it for a while): its line may slope by more
    than 5% of the arrivals, and still lie within its own spread. An overload grows out of it."""
    stable = [backlog(*_queue(np.random.default_rng(seed), 0.7), warmup_s=30) for seed in range(30)]
    assert not any(line.is_growing for line in stable)
    assert any(line.growth > SATURATED_GROWTH and line.grown_by >= MIN_GROWTH_REQUESTS for line in stable)
    over = [backlog(*_queue(np.random.default_rng(seed), 1.5), warmup_s=30) for seed in range(30)]
    assert sum(line.is_growing for line in over) >= 28


def test_too_few_arrivals_measure_nothing():
    line = backlog(np.array([0.0, 1.0]), np.array([2.0, 3.0]), warmup_s=0)
    assert np.isnan(line.growth) and line.grown_by == 0 and not line.is_growing


def test_an_overloaded_run_that_drains_before_its_horizon_says_saturated(write_config):
    """Orca (Oracle) on the small experiment serves about 1.4 req/s: at 2.5 it still drains within twice the
    trace, and the summary says saturated; well under its capacity it does not."""
    from sim.experiment.config import load_experiment

    exp = load_experiment(write_config(), ["systems=[orca-oracle]", "workload.duration_s=300"])
    over = run_one(exp, exp.systems[0], 2.5, 0).summary
    assert over["num_unfinished"] == 0 and over["saturated"] and over["backlog_growth"] > 0.2
    under = run_one(exp, exp.systems[0], 0.5, 0).summary
    assert not under["saturated"] and abs(under["backlog_growth"]) < SATURATED_GROWTH


def test_the_fit_waits_for_an_empty_start_to_fill():
    """Requests of 15 s each at 2 req/s: the backlog fills to 30 for the first 15 s, at any load. A 5-s warm-up
    leaves that filling in the fit, which the time requests take to serve (first token to finish) moves past."""
    arrival = np.arange(0.0, 40.0, 0.5)
    finish = arrival + 15.0
    first_token = arrival + 0.1
    assert backlog(arrival, finish, warmup_s=5).is_growing
    waited = backlog(arrival, finish, warmup_s=5, first_token_s=first_token)
    assert not waited.is_growing and abs(waited.growth) < 0.01
    overloaded = _served(arrival, 15.0, 1.0)  # served at 1 req/s: it grows after the filling too
    assert backlog(arrival, overloaded, warmup_s=5, first_token_s=overloaded - 14.9).is_growing
