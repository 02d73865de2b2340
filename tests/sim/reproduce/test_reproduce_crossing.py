"""reproduce's search past a figure's rates for each curve's crossing of the sustainable-rate threshold."""
import math

import pandas as pd
import pytest

from sim.reproduce.crossing import CROSSING_STEP, crossing_notes, next_rate, probes_for
from sim.reproduce.readings import THRESHOLD_S_PER_TOKEN, sustainable_rate
from sim.reproduce.runner import reproduce
from sim.reproduce.scale import Scale

GRID = (0.5, 1.0, 1.5, 2.0)


def knee(crossing: float):
    """A synthetic curve: flat, then exploding, reaching the threshold exactly at `crossing`."""
    return lambda rate: 0.05 + (THRESHOLD_S_PER_TOKEN - 0.05) * (rate / crossing) ** 6


def search(curve, grid=GRID, max_extra=8):
    points = {rate: curve(rate) for rate in grid}
    while (rate := next_rate(points, grid, max_extra=max_extra)) is not None:
        assert rate not in points
        points[rate] = curve(rate)
    return points


def reading(points):
    return sustainable_rate(pd.DataFrame({"rate": list(points), "normalized_latency": list(points.values())}))


@pytest.mark.parametrize("crossing", [2.7, 4.9, 11.0])
def test_finds_a_crossing_past_the_grid_between_two_probes(crossing):
    points = search(knee(crossing))
    extra = sorted(set(points) - set(GRID))
    assert extra and max(extra) >= crossing > max(r for r in points if r < max(extra))
    found = reading(points)
    assert found.is_exact and max(r for r in points if r < crossing) <= found.low <= crossing
    # consecutive probes are one step apart, so the reading brackets the crossing within a step
    assert crossing / found.low < CROSSING_STEP


def test_finds_a_crossing_below_the_grid():
    points = search(knee(0.2))
    assert min(points) < 0.2 and reading(points).is_exact


def test_a_curve_inside_the_grid_needs_no_probe():
    assert search(knee(1.2)).keys() == set(GRID)


def test_stops_within_its_budget_and_keeps_the_bound():
    flat = search(lambda rate: 0.05, max_extra=5)
    assert len(set(flat) - set(GRID)) == 5
    bound = reading(flat)
    assert not bound.is_exact and bound.low == max(flat) and math.isinf(bound.high)
    notes = crossing_notes({"vLLM": flat}, GRID, (0, 2))
    assert len(notes) == 1 and "no crossing" in notes[0] and "bound" in notes[0] and "5 extra rates" in notes[0]


def test_a_crossing_past_the_papers_axis_is_noted():
    points = search(knee(2.7))
    notes = crossing_notes({"vLLM": points, "Orca (Max)": search(knee(1.2))}, GRID, (0, 2))
    assert notes == [n for n in notes if n.startswith("vLLM: crosses 0.5 s/token at")] and len(notes) == 1
    assert "past the paper's axis" in notes[0]


def test_runs_that_measured_nothing_tell_nothing():
    assert next_rate({1.0: math.nan, 2.0: math.nan}, [1.0, 2.0]) is None
    # a NaN point is skipped, not read as over the threshold
    assert next_rate({1.0: math.nan, 2.0: 0.1}, [1.0, 2.0]) == 2.5
    assert probes_for({"a": {1.0: 0.1}, "b": {1.0: 0.9}, "c": {1.0: 0.1, 2.0: 0.9}}, [1.0]) == [
        probes_for({"a": {1.0: 0.1}}, [1.0])[0], probes_for({"b": {1.0: 0.9}}, [1.0])[0]]


@pytest.mark.slow
def test_reproduce_probes_each_curve_until_it_crosses(tmp_path):
    scale = Scale("crossing-test", "test: 30-s traces, the lowest rate of each curve", duration_s=30, warmup_s=5,
                  max_rates=1, max_extra_probes=2)
    lines = []
    reproduce(["fig17"], tmp_path, scale, jobs=1, progress=lines.append)
    summary = pd.read_csv(tmp_path / "fig17" / "summary.csv")
    configured = summary["rate"].min()
    probed = summary[summary["rate"] != configured]
    assert not probed.empty and any(line.startswith("probing past the configured rates") for line in lines)
    for _, curve in summary.groupby("system"):
        rates = sorted(curve["rate"])
        assert len(rates) <= 3  # the configured rate and at most 2 probes
        if len(rates) > 1:  # each probe a step past the last
            assert all(b == pytest.approx(a * CROSSING_STEP, rel=0.01) for a, b in zip(rates, rates[1:]))
    again = []
    reproduce(["fig17"], tmp_path, scale, jobs=1, progress=again.append)
    assert not [line for line in again if "left]" in line]  # the probes are found done, as the grid's runs are
