"""A split fleet (sim/core/split_fleet.py): prefill replicas, decode replicas, and each request's KV copied between
them. Conservation is checked after every iteration of every replica: each request is in exactly one place
(a prefill replica, waiting for a decode replica with its KV held, being copied, on a decode replica, or recorded),
held KV is exactly that of the requests waiting or being copied, and every pool's blocks are held by its tables
alone; at the end every block is back, each finished request was copied once (or recomputed) and recorded once."""
from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import Unschedulable
from sim.core.fleet import FleetSetup
from sim.core.merge import merged_records
from sim.core.routers import make_router, router_spec
from sim.core.split_fleet import SplitSetup, serve_split
from sim.workload.trace import Trace
from tests.helpers.core_harness import hyp
from tests.helpers.simulation import ROOFLINE, random_trace
from tests.helpers.split_harness import VLLM, check_end, linear_copy, run_checked, setup_of


def test_a_request_is_prefilled_copied_at_the_links_price_and_decoded():
    trace = Trace(np.array([0.0]), np.array([100]), np.array([20]), source="test")
    fleet, checks, runs = run_checked(trace, setup_of())
    check_end(fleet, runs, trace)
    (rid, prefill, decode, prefilled_s, start_s, end_s, tokens, kind), = runs.transfers
    assert (rid, prefill, decode, tokens, kind) == (0, 0, 1, 100, "copied")
    assert start_s == prefilled_s and end_s - start_s == pytest.approx(1e-5 + 1e-4)
    records = merged_records(runs.runs)
    (row,) = records.request_values
    assert row[3] == prefilled_s  # time to first token: the prefill replica's
    replicas = Counter(records.iterations["replica"])
    assert replicas == {0: 1, 1: 19}  # the prompt on the prefill replica, the other 19 tokens on the decode one
    assert checks.checks == 20


def test_a_one_token_request_ends_on_the_prefill_replica():
    trace = Trace(np.array([0.0, 0.0]), np.array([50, 60]), np.array([1, 3]), source="test")
    fleet, _, runs = run_checked(trace, setup_of())
    check_end(fleet, runs, trace)
    assert [row[0] for row in runs.transfers] == [1]


@pytest.mark.parametrize("on_decode_full", ["hold", "recompute"])
def test_a_full_decode_pool_holds_or_recomputes(on_decode_full):
    trace = random_trace(3, 60, rate=40.0)
    setup = setup_of(decode_blocks=60, on_decode_full=on_decode_full)
    fleet, checks, runs = run_checked(trace, setup)
    check_end(fleet, runs, trace)
    kinds = Counter(row[-1] for row in runs.transfers)
    if on_decode_full == "hold":
        assert set(kinds) == {"copied"}
    else:
        assert kinds["recomputed"] > 0
    assert checks.checks > 100


def test_a_horizon_leaves_each_request_recorded_once():
    trace = random_trace(5, 80, rate=40.0)
    fleet, _, runs = run_checked(trace, setup_of(decode_blocks=80, horizon_s=4.0))
    records = merged_records(runs.runs)
    assert sorted(values[0] for values in records.request_values) == list(range(len(trace)))
    finish = records.requests["finish_s"]
    assert any(f is None for f in finish) and any(f is not None for f in finish)


def test_the_decode_pool_refuses_prefix_caching_and_samples():
    caching = dataclasses.replace(VLLM, prefix_caching=True)
    setup = setup_of()
    bad = dataclasses.replace(setup, decode=dataclasses.replace(setup.decode, system=caching))
    with pytest.raises(ValueError, match="decode pool runs without prefix caching"):
        serve_split(random_trace(0, 5), bad, make_router(router_spec("round_robin"), None))
    with pytest.raises(ValueError, match="one sequence per request"):
        serve_split(random_trace(0, 20, n=3), setup, make_router(router_spec("round_robin"), None))
    with pytest.raises(ValueError, match="on_decode_full 'drop'"):
        dataclasses.replace(setup, on_decode_full="drop")


@pytest.mark.slow
@hyp(max_examples=25)
@given(seed=st.integers(0, 10_000), num_prefill=st.integers(1, 3), num_decode=st.integers(1, 3),
       prefill_blocks=st.integers(40, 200), decode_blocks=st.integers(40, 200),
       on_decode_full=st.sampled_from(["hold", "recompute"]),
       router=st.sampled_from(["round_robin", "least_outstanding", "power_of_two"]),
       copy_us_per_token=st.sampled_from([0.0, 1.0, 50.0]))
def test_random_split_fleets_conserve_every_request_and_never_stall(seed, num_prefill, num_decode, prefill_blocks,
                                                                    decode_blocks, on_decode_full, router,
                                                                    copy_us_per_token):
    trace = random_trace(seed, 40, rate=30.0)
    setup = setup_of(num_prefill, num_decode, prefill_blocks, decode_blocks, on_decode_full,
                     copy=lambda n: copy_us_per_token * 1e-6 * n)
    fleet, checks, runs = run_checked(trace, setup, router, seed)
    check_end(fleet, runs, trace)
    assert checks.checks > 0


def test_a_request_too_large_for_any_decode_replica_says_so_instead_of_waiting_forever():
    trace = Trace(np.array([0.0, 0.1]), np.array([100, 400]), np.array([5, 5]), source="test")

    with pytest.raises(Unschedulable, match="request 1: prompt 400 .* decode replica's pool of 20"):
        serve_split(trace, setup_of(decode_blocks=20), make_router(router_spec("round_robin"), None))


def test_a_cache_aware_router_finds_more_system_prompts_cached_on_the_prefill_pool():
    """The prefill pool caches prefixes (its decode pool never does): behind cache_aware its four replicas find
    more of 16 system prompts cached than behind round robin, and the decode replicas record the hits."""
    from engine.specs.loader import load_model_spec
    from sim.experiment.metrics import prefix_hit_rate
    from sim.workload.config import WorkloadConfig, build_trace

    workload = WorkloadConfig.from_dict({"dataset": "sharegpt-standin", "duration_s": 60,
                                         "system_prompt": {"tokens": 256, "count": 16}}, "test")
    trace = build_trace(workload, 4.0, 2048, np.random.default_rng(0))
    spec, caching = load_model_spec("opt-13b"), dataclasses.replace(VLLM, prefix_caching=True)
    rates = {}
    for router in ("round_robin", "cache_aware"):
        def pool(n, system):
            return FleetSetup(spec, system, ROOFLINE, 300, 200, n, 1e9, False, False)
        setup = SplitSetup(pool(4, caching), pool(2, VLLM), linear_copy)
        runs = serve_split(trace, setup, make_router(router_spec(router), None))
        rates[router] = prefix_hit_rate(merged_records(runs.runs).request_arrays())
    assert rates["cache_aware"] > rates["round_robin"] + 0.1, rates
