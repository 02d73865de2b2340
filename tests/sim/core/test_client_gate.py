"""A client's gate of max_concurrency requests in flight (sim/core/client_gate.py): wide enough it changes
nothing; at 1 the requests run one at a time; never more than N in flight; step by step and fast-forwarded alike."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim.core.fleet
from sim.core.fast_forward import FastForward
from sim.core.simulate import simulate
from sim.workload.trace import Trace
from tests.helpers.simulation import MODEL, ROOFLINE, SYSTEMS, GridCost, grid_trace, random_trace


class Counted(FastForward):
    """FastForward that remembers its last instance: a test sees the stretches were run, not only planned."""

    last: Counted | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        Counted.last = self


@pytest.fixture(autouse=True)
def counted(monkeypatch):
    monkeypatch.setattr(sim.core.fleet, "FastForward", Counted)


def served(trace: Trace, system: str = "vllm", *, fast_forward: bool = True, cost=ROOFLINE, gpu_blocks: int = 96,
           **kwargs):
    return simulate(trace, MODEL, SYSTEMS[system], cost, gpu_blocks, 256, rng=np.random.default_rng(0),
                    fast_forward=fast_forward, **kwargs)


def same(a, b) -> bool:
    return a.request_values == b.request_values and a.dropped_values == b.dropped_values and \
        [bytes(column) for column in a.iteration_columns] == [bytes(column) for column in b.iteration_columns]


def in_flight_at_iterations(records) -> int:
    """The most requests sent and unfinished when any iteration started (a request is sent at its arrival_s)."""
    requests = records.requests_frame()
    sent, finish = requests["arrival_s"].to_numpy(), requests["finish_s"].to_numpy()
    starts = records.iterations_frame()["start_s"].to_numpy()
    return int(max(((sent <= t) & (t < finish)).sum() for t in starts))


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("system, replicas, router", [
    ("vllm", 1, "round_robin"), ("orca-max", 1, "round_robin"), ("fastertransformer", 1, "round_robin"),
    ("vllm-chunked", 1, "round_robin"), ("vllm", 3, "round_robin"), ("vllm", 3, "least_outstanding")])
def test_a_gate_as_wide_as_the_trace_changes_nothing(fast, system, replicas, router):
    trace = random_trace(3, 80, rate=12.0)
    open_loop = served(trace, system, fast_forward=fast, replicas=replicas, router=router)
    gated = served(trace, system, fast_forward=fast, replicas=replicas, router=router, max_concurrency=len(trace))
    assert same(open_loop, gated)


def test_at_one_the_requests_run_one_at_a_time():
    trace = random_trace(5, 60, rate=20.0)  # arrivals far faster than one request is served
    records = served(trace, max_concurrency=1)
    requests = records.requests_frame()
    sent, finish = requests["arrival_s"].to_numpy(), requests["finish_s"].to_numpy()
    assert not np.isnan(finish).any()
    expected = np.maximum(trace.arrival_s, np.concatenate([[0.0], finish[:-1]]))
    assert sent.tolist() == expected.tolist()  # at its arrival, or the instant the one before it finished
    assert (sent[1:] >= finish[:-1]).all()
    iterations = records.iterations_frame()
    assert (iterations["num_running_groups"] + iterations["num_waiting"]).max() == 1


@pytest.mark.parametrize("limit", [1, 2, 5])
@pytest.mark.parametrize("system", ["vllm", "vllm-swap", "orca-max", "vllm-v1"])
def test_ties_of_sends_and_iteration_ends_are_ordered_alike_both_ways(limit, system):
    """Iterations end on the binary grid the arrivals are on, and requests are sent when others finish: every
    kind of tie, step by step and fast-forwarded."""
    trace = grid_trace(2, 90)
    step, fast = (served(trace, system, fast_forward=ff, cost=GridCost(), max_concurrency=limit) for ff in (0, 1))
    assert same(step, fast)
    assert Counted.last is not None and Counted.last.num_forwarded > fast.num_iterations / 4
    assert in_flight_at_iterations(fast) <= limit


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), count=st.integers(1, 40), limit=st.integers(1, 6), replicas=st.integers(1, 3),
       router=st.sampled_from(["round_robin", "least_outstanding", "power_of_two"]),
       system=st.sampled_from(["vllm", "vllm-recompute", "orca-max", "fastertransformer-b4", "vllm-chunked",
                               "vllm-v1"]),
       at_once=st.booleans())
def test_never_more_in_flight_than_the_gate_allows(seed, count, limit, replicas, router, system, at_once):
    trace = random_trace(seed, count, rate=30.0)
    if at_once:  # vLLM's --request-rate inf: every request at 0 s
        trace = Trace(np.zeros(count), trace.prompt_len, trace.output_len, source="at once")
    step, fast = (served(trace, system, fast_forward=ff, gpu_blocks=48, replicas=replicas, router=router,
                         max_concurrency=limit) for ff in (False, True))
    assert same(step, fast)
    assert in_flight_at_iterations(fast) <= limit
    requests = fast.requests_frame()
    assert len(requests) + len(fast.dropped_values) == count and not requests["finish_s"].isna().any()
    if replicas == 1:
        iterations = fast.iterations_frame()
        assert (iterations["num_running_groups"] + iterations["num_waiting"]).max() <= limit


@pytest.mark.parametrize("limit, horizon, message", [
    (0, math.inf, "max_concurrency must be an integer >= 1, got 0"),
    (2.5, math.inf, "max_concurrency must be an integer >= 1, got 2.5"),
    (4, 100.0, "runs until every request is served: horizon_s must be inf, got 100.0"),
])
def test_a_gate_it_cannot_run_is_refused(limit, horizon, message):
    with pytest.raises(ValueError, match=message):
        served(random_trace(0, 5), max_concurrency=limit, horizon_s=horizon)
