"""A replica that takes its arrivals itself (sim/core/known_arrivals.py) against the router's
SimPy process handing them over (simulate(..., router_process=True)): the same records, to the last bit, step by
step and fast-forwarded, one replica and fleets served apart, on random traces and on traces built so that
requests arrive at the very instant iterations end, both ways round."""
from __future__ import annotations

import numpy as np
import pytest
import simpy

import sim.core.independent_replicas
from engine.errors import SpecError
from sim.core.known_arrivals import KnownArrivals
from sim.core.router_wakes import arrival_event_times
from sim.core.simulate import simulate, simulate_runs
from sim.workload.trace import Trace
from tests.helpers.simulation import MODEL, ROOFLINE, SYSTEMS, GridCost, NanAfter, grid_trace, random_trace


class WatchedArrivals(KnownArrivals):
    """KnownArrivals that counts the iterations ending at the very instant a request of its replica is handed over,
    by which comes first: the router's wake or the iteration's end (`behind`)."""

    ties = {"arrival first": 0, "iteration first": 0}

    def iteration(self, core, start_s, seconds):
        tie = start_s + seconds in self.wakes[self.handed:]
        super().iteration(core, start_s, seconds)
        if tie:
            WatchedArrivals.ties["iteration first" if self.behind else "arrival first"] += 1


@pytest.fixture(autouse=True)
def ties(monkeypatch):
    monkeypatch.setattr(sim.core.independent_replicas, "KnownArrivals", WatchedArrivals)
    WatchedArrivals.ties = {"arrival first": 0, "iteration first": 0}
    return WatchedArrivals.ties


def both_loops(trace: Trace, system=SYSTEMS["vllm"], cost=ROOFLINE, gpu_blocks: int = 96, **kwargs):
    """The trace served by the replica's own loop and behind the router's process; asserts the same bytes and
    returns the records."""
    runs = [simulate(trace, MODEL, system, cost, gpu_blocks, 256, rng=np.random.default_rng(0), router_process=old,
                     **kwargs) for old in (False, True)]
    for frame in ("requests_frame", "iterations_frame"):
        assert getattr(runs[0], frame)().to_csv(index=False) == getattr(runs[1], frame)().to_csv(index=False), frame
    return runs[0]


@pytest.mark.parametrize("fast_forward", [True, False])
@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("seed", range(4))
def test_random_traces_give_the_same_records(seed, replicas, fast_forward):
    arrivals = ("poisson", "burst", "gamma", "poisson")[seed]
    name = ("vllm", "vllm-swap", "orca-oracle", "fastertransformer")[seed]
    both_loops(random_trace(seed, count=150, rate=10.0 * replicas, arrivals=arrivals), SYSTEMS[name],
               replicas=replicas, fast_forward=fast_forward)


@pytest.mark.parametrize("fast_forward", [True, False])
@pytest.mark.parametrize("replicas", [pytest.param(1, marks=pytest.mark.slow), 2,
                                      pytest.param(3, marks=pytest.mark.slow)])
def test_arrivals_at_the_very_end_of_an_iteration_come_in_the_router_process_order(ties, replicas, fast_forward):
    for seed in range(3):
        for name in ("vllm", "orca-oracle", "fastertransformer"):
            both_loops(grid_trace(seed), SYSTEMS[name], GridCost(), replicas=replicas, fast_forward=fast_forward)
    assert ties["arrival first"] > 100 and ties["iteration first"] > 20, ties


@pytest.mark.parametrize("seed", [10, 11])
def test_iterations_that_take_no_time(ties, seed):
    # decodes take no time: a finish frees blocks for a waiting prompt at an instant the router woke at, and the
    # prefill's end ties with the next arrival
    rng = np.random.default_rng(seed)
    trace = Trace(np.sort(rng.integers(0, 40, 60)) * 0.25, rng.integers(5, 100, 60), rng.integers(2, 60, 60),
                  source="zero")
    for replicas in (1, 2):
        for fast_forward in (True, False):
            both_loops(trace, cost=GridCost(decode_s=0.0), gpu_blocks=24, replicas=replicas,
                       fast_forward=fast_forward)
    assert ties["arrival first"] > 0


def with_arrivals_at_iteration_ends(trace: Trace, cost, rounds: int, seed: int) -> Trace:
    """The trace with a request added, `rounds` times, at the very end of one of the lone replica's iterations (one
    its wake lands on to the bit), after the last added: the iterations before an added request stay as they
    were, so each still ties with the iteration it was put at."""
    rng = np.random.default_rng(seed)
    after = 0.0
    for _ in range(rounds):
        run, = simulate_runs(trace, MODEL, SYSTEMS["vllm"], cost, 96, 256, router_process=True)
        ends = np.array(run.iteration_ends)
        ends = ends[ends > after]
        arrivals = trace.arrival_s.tolist()
        for end in rng.permutation(ends[:40]):
            joined = sorted([*arrivals, float(end)])
            if float(end) in arrival_event_times(joined):
                break
        else:
            continue
        after = float(end)
        at = joined.index(after)
        trace = Trace(np.array(joined), np.insert(trace.prompt_len, at, 30), np.insert(trace.output_len, at, 20),
                      source="ties")
    return trace


@pytest.mark.parametrize("seed", range(3))
def test_requests_put_at_the_roofline_s_iteration_ends(ties, seed):
    trace = with_arrivals_at_iteration_ends(random_trace(seed, count=60, rate=8.0), ROOFLINE, rounds=8, seed=seed)
    for fast_forward in (True, False):
        both_loops(trace, fast_forward=fast_forward)
    assert ties["arrival first"] + ties["iteration first"] >= 4, ties


def test_a_horizon_cuts_both_at_the_same_iteration():
    for replicas in (1, 2):
        records = both_loops(random_trace(7, rate=20.0 * replicas), gpu_blocks=64, replicas=replicas, horizon_s=4.0)
        assert records.requests_frame()["finish_s"].isna().any()  # requests still in the system, and unserved


def test_a_bad_step_time_is_the_same_error_at_the_same_time(monkeypatch):
    trace = Trace([0.0, 0.1, 0.2], [100, 300, 50], [400, 50, 300], source="test")
    messages = []
    for old in (False, True):
        for fast_forward in (True, False):
            with pytest.raises(SpecError) as err:
                simulate(trace, MODEL, SYSTEMS["vllm"], NanAfter(), 96, 0, fast_forward=fast_forward,
                         router_process=old)
            messages.append(str(err.value))
    assert len(set(messages)) == 1 and "nan" in messages[0]
    clocks = []  # the replica's own clock is SimPy's when the error leaves it, for whoever reads env.now

    class Clock(simpy.Environment):
        def __init__(self):
            super().__init__()
            clocks.append(self)

    monkeypatch.setattr(sim.core.independent_replicas.simpy, "Environment", Clock)
    with pytest.raises(SpecError):
        simulate(trace, MODEL, SYSTEMS["vllm"], NanAfter(), 96, 0)
    assert f"at {clocks[0].now:.6g} s" in messages[0] and clocks[0].now > 0


def test_a_replica_alone_runs_on_no_simpy_event_per_iteration_or_arrival(monkeypatch):
    environments = []

    class Counted(simpy.Environment):
        def __init__(self):
            super().__init__()
            environments.append(self)

    monkeypatch.setattr(sim.core.independent_replicas.simpy, "Environment", Counted)
    records = simulate(random_trace(3, count=100), MODEL, SYSTEMS["vllm"], ROOFLINE, 96, 256, fast_forward=False)
    assert len(environments) == 1 and records.num_iterations > 100
    assert next(environments[0]._eid) <= 2  # the process's start, and nothing after
