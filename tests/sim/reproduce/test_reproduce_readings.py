"""Readings off made-up curves: sustainable rates, their ratios as intervals, and verdicts."""
import math

import pandas as pd
import pytest

from sim.reproduce.readings import (
    Interval,
    all_land,
    lands,
    max_over_min,
    near_best,
    point_range,
    sustainable_rate,
)


def curve(rates, latency):
    return pd.DataFrame({"rate": rates, "normalized_latency": latency})


def test_sustainable_rate_is_interpolated_where_the_curve_first_reaches_the_threshold():
    # 0.3 at 2 req/s, 0.9 at 3: 0.5 is a third of the way
    rate = sustainable_rate(curve([1, 2, 3, 4], [0.1, 0.3, 0.9, 0.2]), threshold=0.5)
    assert rate == Interval.exact(pytest.approx(2 + 1 / 3))


def test_a_curve_that_never_crosses_gives_a_lower_bound_and_one_over_at_once_an_upper_bound():
    assert sustainable_rate(curve([1, 2], [0.1, 0.2]), 0.5) == Interval(2, math.inf)
    assert sustainable_rate(curve([1, 2], [0.7, 0.9]), 0.5) == Interval(0, 1)


def test_rates_with_nothing_measured_are_skipped():
    assert sustainable_rate(curve([1, 2, 3], [0.1, float("nan"), 0.9]), 0.5) == Interval.exact(2.0)
    assert sustainable_rate(curve([1], [float("nan")]), 0.5) == Interval(0, math.inf)


def test_a_sustainable_rate_ratio_from_two_made_up_curves():
    vllm = sustainable_rate(curve([1, 2, 3, 4], [0.02, 0.03, 0.1, 0.9]), 0.5)  # crosses at 3.5
    oracle = sustainable_rate(curve([1, 2, 3, 4], [0.1, 0.9, 1.5, 2.0]), 0.5)  # crosses at 1.5
    ratio = vllm / oracle
    assert ratio.low == pytest.approx(3.5 / 1.5) and ratio.is_exact
    assert lands(ratio, 1.7, 2.7) == "yes"
    assert lands(ratio, 2.7, 8.0) == "no"


def test_a_bound_decides_only_when_all_of_it_is_on_one_side():
    at_least_two = Interval(4, math.inf) / Interval.exact(2)
    assert at_least_two == Interval(2, math.inf)
    assert lands(at_least_two, 1.7, 2.7) == "n/a"  # might be 2.5, might be 10
    assert lands(Interval(3, math.inf), 1.7, 2.7) == "no"
    assert lands(Interval(4, math.inf) / Interval(4, math.inf), 1, 2) == "n/a"
    assert (Interval(4, math.inf) / Interval(4, math.inf)).text() == "unknown"


def test_verdicts_over_panels_and_printed_points():
    assert all_land(["yes", "yes"]) == "yes"
    assert all_land(["yes", "n/a"]) == "n/a"
    assert all_land(["n/a", "no"]) == "no"
    assert point_range(2.0) == pytest.approx((1.9, 2.1))


def test_interval_text():
    assert Interval.exact(2.125).text(unit="x") == "2.12x"
    assert Interval(4, math.inf).text("{:g}", " req/s") == ">= 4 req/s"
    assert Interval(0, 0.25).text("{:g}") == "<= 0.25"


def test_near_best_block_sizes():
    assert near_best({8: 1.2, 16: 1.0, 32: 1.05, 64: 1.11}) == [16, 32]


def test_the_spread_of_readings_as_far_as_their_bounds_tell():
    assert max_over_min([Interval.exact(2), Interval.exact(1), Interval.exact(1.5)]) == Interval.exact(2)
    assert max_over_min([Interval(2, math.inf), Interval.exact(1)]) == Interval(2, math.inf)
    assert max_over_min([Interval(1, math.inf), Interval(1, math.inf)]) == Interval(1, math.inf)  # alike or not
    assert max_over_min([Interval(0, 1), Interval.exact(2)]) == Interval(2, math.inf)
