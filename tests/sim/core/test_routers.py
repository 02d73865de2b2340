"""The fleet's routers (sim/core/routers.py): cache_aware's choice where it is exact, and where an imbalance
overrides it; its hit rate against round robin's on a system-prompt workload; power_of_two's draws, seeded and
apart from the run's other draws; and the cache query they read (CachingBlockAllocator.num_cached_leading)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import sim.core.simulate
from engine.core.block_allocator import CachingBlockAllocator
from engine.core.system import PAPER_SYSTEMS
from engine.specs.loader import load_model_spec
from sim.core.routers import PowerOfTwo, RouterSpec
from sim.core.simulate import simulate
from sim.experiment.metrics import summarize
from sim.workload.config import WorkloadConfig, build_trace
from sim.workload.tokens import system_prompt_segments
from sim.workload.trace import Trace
from tests.helpers.simulation import MODEL, ROOFLINE, SYSTEMS, random_trace

CACHING = dataclasses.replace(PAPER_SYSTEMS["vllm"], prefix_caching=True)


def replicas_of(records) -> list[int]:
    """Each request's replica, by request id."""
    requests = records.requests_frame().sort_values("request_id")
    return requests["replica"].tolist()


def three_requests() -> Trace:
    """Request 0 (system prompt A, a long answer) at 0 s, 1 (prompt B, a short one) just after, and 2 (prompt A
    again) at 2 s: request 0 still runs on its replica then, request 1 has finished on the other."""
    prompt, output = np.array([200, 200, 200]), np.array([200, 2, 2])
    segments = system_prompt_segments(np.array([0, 1, 0]), 160, prompt, output)
    return Trace(np.array([0.0, 0.001, 2.0]), prompt, output, source="test", segments=segments)


def test_cache_aware_sends_a_prompt_to_the_replica_that_holds_its_system_prompt():
    trace = three_requests()
    def serve(router):
        return replicas_of(simulate(trace, MODEL, CACHING, ROOFLINE, 200, 64, replicas=2, router=router, horizon_s=1e6))

    # request 2 finds 10 of its 12 full blocks cached on replica 0, which still serves request 0 (1 outstanding
    # against replica 1's 0: balanced for sgl-router's thresholds)
    assert serve("cache_aware") == [0, 1, 0]
    assert serve("least_outstanding") == [0, 1, 1]
    # that 1 against 0 is an imbalance once the thresholds allow none: the least loaded replica then
    assert serve(RouterSpec("cache_aware", balance_abs_threshold=0, balance_rel_threshold=1.0)) == [0, 1, 1]
    # a match of 10 of 12 blocks is not above a threshold of 0.9: the least loaded replica
    assert serve(RouterSpec("cache_aware", cache_threshold=0.9)) == [0, 1, 1]


def test_the_cache_query_counts_leading_keys_held_evictable_or_pinned_and_changes_nothing():
    cache = CachingBlockAllocator(8)
    held, evictable = cache.allocate(), cache.allocate()
    cache.register(held, 11, 0)
    cache.register(evictable, 12, 1)
    cache.free(evictable)  # its last holder left: in the evictor, still keyed
    order = cache.eviction_order()
    assert cache.num_cached_leading((11, 12, 13)) == 2
    assert cache.num_cached_leading((12, 11)) == 2 and cache.num_cached_leading((13, 11)) == 0
    assert cache.num_cached_leading(()) == 0
    assert cache.eviction_order() == order and cache.ref_counts[evictable] == 0


def test_cache_aware_reads_a_pinned_shared_prefix_as_cached():
    """An explicit shared prefix (prefix_len) is pinned keys of the same cache: request 1 finds it on replica 0,
    which still serves request 0, and goes there; least_outstanding sends it to the idle replica."""
    trace = Trace(np.array([0.0, 2.0]), np.array([200, 200]), np.array([200, 2]), source="test", prefix_len=160)
    def serve(router):
        return simulate(trace, MODEL, CACHING, ROOFLINE, 200, 64, replicas=2, router=router, horizon_s=1e6)

    assert replicas_of(serve("least_outstanding")) == [0, 1]
    cache_aware = serve("cache_aware")
    assert replicas_of(cache_aware) == [0, 0]
    assert cache_aware.requests_frame().sort_values("request_id")["cached_tokens"].tolist() == [0, 160]


def system_prompt_trace(count: int = 16) -> Trace:
    workload = WorkloadConfig.from_dict({"dataset": "sharegpt-standin", "duration_s": 60,
                                         "system_prompt": {"tokens": 256, "count": count}}, "test")
    return build_trace(workload, 4.0, 2048, np.random.default_rng(0))


def test_cache_aware_finds_more_of_a_fleets_system_prompts_cached_than_round_robin():
    """16 system prompts over 4 replicas whose caches hold a few of them each: round robin sends every prompt
    everywhere, cache_aware keeps each where it is cached."""
    spec, trace = load_model_spec("opt-13b"), system_prompt_trace()
    rates = {}
    for router in ("round_robin", "cache_aware"):
        records = simulate(trace, spec, CACHING, ROOFLINE, 300, 200, replicas=4, router=router, horizon_s=1e9)
        summary = summarize(records.requests_frame(), records.iterations_frame(), pool_slots=300 * 16, warmup_s=0,
                            horizon_s=1e9, replicas=4)
        rates[router] = summary["prefix_hit_rate"]
    assert rates["cache_aware"] > rates["round_robin"] + 0.1, rates


def test_cache_aware_without_prefix_caching_says_so():
    with pytest.raises(ValueError, match="prefix caching"):
        simulate(random_trace(0, count=5), MODEL, SYSTEMS["vllm"], ROOFLINE, 200, 64, replicas=2, router="cache_aware")


def test_power_of_two_is_the_same_for_a_seed_and_not_round_robin():
    trace = random_trace(1, count=120, rate=20.0)
    def serve(router, seed):
        return simulate(trace, MODEL, SYSTEMS["vllm"], ROOFLINE, 200, 64, replicas=4, router=router,
                        rng=np.random.default_rng(seed), horizon_s=1e6)

    first, again = serve("power_of_two", 0), serve("power_of_two", 0)
    for frame in ("requests_frame", "iterations_frame"):
        assert getattr(first, frame)().to_csv(index=False) == getattr(again, frame)().to_csv(index=False)
    picks = replicas_of(first)
    assert picks != replicas_of(serve("round_robin", 0)) and sorted(set(picks)) == [0, 1, 2, 3]
    assert picks != replicas_of(serve("power_of_two", 1))  # another seed, other draws
    with pytest.raises(ValueError, match="power_of_two.*rng"):
        simulate(trace, MODEL, SYSTEMS["vllm"], ROOFLINE, 200, 64, replicas=4, router="power_of_two")


def test_spawning_the_routers_generator_leaves_the_runs_stream_as_it_was():
    """numpy's Generator.spawn derives the child from the seed sequence, not from the parent's state."""
    parent = np.random.default_rng(7)
    parent.spawn(1)[0].random(100)
    assert (parent.random(5) == np.random.default_rng(7).random(5)).all()


class Replay:
    """Hands each request to the replica a recorded run picked, drawing nothing."""

    def __init__(self, picks: list[int]):
        self.picks = picks

    def pick(self, replicas, request):
        return replicas[self.picks[request.request_id]]


def test_beam_parents_are_drawn_the_same_whether_power_of_two_draws_or_not(monkeypatch):
    """A fleet of beam searches behind power_of_two, then the same picks replayed by a router that draws
    nothing: the same beams' parents (the same records), so the router's draws took none of the run's."""
    trace = random_trace(2, count=60, rate=12.0, beams=3)
    def serve():
        return simulate(trace, MODEL, SYSTEMS["vllm"], ROOFLINE, 200, 64, replicas=3, router="power_of_two",
                        rng=np.random.default_rng(0), horizon_s=1e6)

    drawn = serve()
    monkeypatch.setattr(sim.core.simulate, "make_router", lambda spec, rng: Replay(replicas_of(drawn)))
    replayed = serve()
    assert replicas_of(replayed) == replicas_of(drawn)
    for frame in ("requests_frame", "iterations_frame"):
        assert getattr(replayed, frame)().to_csv(index=False) == getattr(drawn, frame)().to_csv(index=False)


def test_power_of_two_draws_each_pair_of_distinct_replicas_alike():
    class Loaded:
        def __init__(self, index):
            self.index, self.outstanding = index, 0

    router, fleet = PowerOfTwo(np.random.default_rng(0)), [Loaded(i) for i in range(4)]
    fleet[0].outstanding = 10  # every pair with replica 0 picks the other; the others pick the lower index
    counts = np.bincount([router.pick(fleet, None).index for _ in range(6000)], minlength=4)
    # of the 6 pairs: {0,1}, {1,2}, {1,3} -> 1; {0,2}, {2,3} -> 2; {0,3} -> 3
    assert np.allclose(counts / 6000, [0, 3 / 6, 2 / 6, 1 / 6], atol=0.03), counts
