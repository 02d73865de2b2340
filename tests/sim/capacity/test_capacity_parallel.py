"""Capacity searches probing ahead on several workers take the path, and give the answer, of one worker."""
from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.cli import main
from sim.capacity.parallel import Job, run_searches
from sim.capacity.search import capacity_search, rate_search
from sim.executors.workers import Workers
from tests.helpers.doors import FakeProbe, fake_holds


class Counting(Workers):
    """In this process, but `width` wide: counts the rounds and the probes handed over."""

    def __init__(self, width: int) -> None:
        self.width, self.rounds, self.probes = width, 0, 0

    def run_all(self, fn, calls):
        self.rounds += 1
        self.probes += len(calls)
        assert 0 < len(calls) <= max(self.width, 3)  # each of up to 3 searches gets a probe, however narrow
        return super().run_all(fn, calls)


def fake_probe(rate: float, replicas: int, capacity: float) -> FakeProbe:
    """A deployment whose replicas each hold up to `capacity` req/s."""
    return FakeProbe(rate, replicas, rate / replicas, rate / replicas <= capacity)


def _search(capacities: list[float], width: int, total_rate: float | None = 20.0):
    workers = Counting(width)
    jobs = [Job(lambda: capacity_search(1.0, 0.02, total_rate, max_replicas=64),
                lambda point, c=c: (point[0], point[1], c), fake_holds) for c in capacities]
    seen: list[tuple[int, FakeProbe]] = []
    run_searches(jobs, fake_probe, workers, lambda i, p: seen.append((i, p)))
    paths = [[p for j, p in seen if j == i] for i in range(len(jobs))]
    return [job.result for job in jobs], paths, workers


@settings(max_examples=40, deadline=None)
@given(capacities=st.lists(st.floats(min_value=0.0005, max_value=300), min_size=1, max_size=3),
       width=st.integers(2, 9), total=st.sampled_from([None, 0.5, 20.0, 5000.0]))
def test_any_width_takes_the_path_of_one_probe_at_a_time(capacities, width, total):
    results, paths, _ = _search(capacities, 1, total)
    wide_results, wide_paths, _ = _search(capacities, width, total)
    assert wide_results == results and wide_paths == paths


def test_probing_ahead_takes_fewer_rounds():
    _, paths, one = _search([3.7], 1)
    _, _, four = _search([3.7], 4)
    assert one.rounds == len(paths[0]) >= 10
    assert four.rounds <= one.rounds / 2 and four.probes > one.probes  # the price: probes off the path


def test_the_search_stops_on_a_probes_error():
    def failing(rate, replicas, capacity):
        if rate > 2:
            raise ValueError("boom")
        return fake_probe(rate, replicas, capacity)

    job = Job(lambda: rate_search(1.0, 0.05, 1), lambda point: (point[0], point[1], 10.0), fake_holds)
    with pytest.raises(ValueError, match="boom"):
        run_searches([job], failing, Counting(3), lambda i, p: None)


def test_capacity_on_a_process_pool_writes_the_same_files(write_config, tmp_path):
    path = write_config()
    outputs = []
    for jobs in ("1", "3"):
        out = tmp_path / f"jobs{jobs}"
        assert main(["capacity", str(path), "--target", "normalized_latency=0.2", "--rate", "2", "--out", str(out),
                     "--set", "systems=[orca-oracle, vllm]", "--set", "workload.duration_s=60",
                     "--set", "warmup_s=10", "--tolerance", "0.3", "--jobs", jobs]) == 0
        outputs.append(out)
    for name in ("capacity.csv", "capacity_probes.csv"):
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), name
    assert pd.read_csv(outputs[0] / "capacity.csv")["replicas_needed"].notna().all()
