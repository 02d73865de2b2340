"""The router's policies: which replica of a fleet each arriving request goes to.

round_robin: request i to replica i % n, whatever the replicas do (so a fleet can be served apart,
independent_replicas.py). least_outstanding: the replica with the fewest admitted, unfinished requests.
power_of_two: two distinct replicas drawn at random, the one with fewer outstanding requests (Mitzenmacher's
power of two choices). cache_aware: SGLang's router's rule (sgl-router, "cache-aware load balancing"), asking
each replica's own prefix cache instead of an approximate tree of what it was sent.

Ties go to the lower index throughout, as least_outstanding's always have.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.core.block_allocator import CachingBlockAllocator
from engine.core.serving import Request
from sim.core.replica import Replica

ROUTER_KINDS = ("round_robin", "least_outstanding", "power_of_two", "cache_aware")
# sgl-router's defaults (its README's --cache-threshold, --balance-abs-threshold, --balance-rel-threshold)
DEFAULT_CACHE_THRESHOLD = 0.5
DEFAULT_BALANCE_ABS_THRESHOLD = 32
DEFAULT_BALANCE_REL_THRESHOLD = 1.0001


@dataclass(frozen=True)
class RouterSpec:
    """A router and its parameters (the thresholds are cache_aware's; the other kinds have none)."""

    kind: str = "round_robin"
    cache_threshold: float = DEFAULT_CACHE_THRESHOLD
    balance_abs_threshold: int = DEFAULT_BALANCE_ABS_THRESHOLD
    balance_rel_threshold: float = DEFAULT_BALANCE_REL_THRESHOLD

    def __post_init__(self):
        if self.kind not in ROUTER_KINDS:
            raise ValueError(f"router {self.kind!r} is not one of {list(ROUTER_KINDS)}")

    @property
    def known_ahead(self) -> bool:
        """Which replica each request goes to does not depend on the replicas (a fleet may be served apart)."""
        return self.kind == "round_robin"

    @property
    def draws(self) -> bool:
        """The router draws random numbers (from a child of the run's Generator: make_router)."""
        return self.kind == "power_of_two"


def router_spec(router: str | RouterSpec) -> RouterSpec:
    """A router named by its kind alone (the plain string of a config) has the default parameters."""
    return router if isinstance(router, RouterSpec) else RouterSpec(router)


def by_load(replica: Replica) -> tuple[int, int]:
    """Fewest admitted, unfinished requests first, the lowest index on ties."""
    return replica.outstanding, replica.index


def least_loaded(replicas: list[Replica]) -> Replica:
    return min(replicas, key=by_load)


class RoundRobin:
    def pick(self, replicas: list[Replica], request: Request) -> Replica:
        return replicas[request.request_id % len(replicas)]


class LeastOutstanding:
    def pick(self, replicas: list[Replica], request: Request) -> Replica:
        return least_loaded(replicas)


class PowerOfTwo:
    """Two distinct replicas, each pair equally likely, drawn from `rng` (the router's own Generator); the one
    with fewer outstanding requests, the lower index on ties. One replica is no choice and draws nothing."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def pick(self, replicas: list[Replica], request: Request) -> Replica:
        n = len(replicas)
        if n == 1:
            return replicas[0]
        first = int(self.rng.integers(n))
        second = int(self.rng.integers(n - 1))
        second += second >= first  # uniform over the other n - 1
        a, b = replicas[min(first, second)], replicas[max(first, second)]
        return b if b.outstanding < a.outstanding else a


class CacheAware:
    """sgl-router's cache-aware load balancing. When the load is imbalanced (the most outstanding requests exceed
    the fewest by more than balance_abs_threshold and by more than balance_rel_threshold times), the least
    loaded replica. Otherwise the replica whose GPU cache holds most of the request's leading full prompt blocks,
    where those are more than cache_threshold of its full prompt blocks; else the least loaded one.

    The match is read from each replica's real cache (CachingBlockAllocator.num_cached_leading: held, pinned
    shared-prefix and evictable blocks alike), where sgl-router keeps an approximate tree per worker of the text
    it sent there; so a prompt still queued has put nothing in any cache yet. Below the threshold sgl-router
    picks the worker with the smallest tree (the most room, by its approximation); here every replica's cache
    fills the same pool and evicts the least recently used, so its size says little, and the least loaded
    replica (as when imbalanced) is the one whose cache the request will crowd least. Equal matches go to the
    less loaded replica, then the lower index."""

    def __init__(self, spec: RouterSpec):
        self.cache_threshold = spec.cache_threshold
        self.balance_abs_threshold = spec.balance_abs_threshold
        self.balance_rel_threshold = spec.balance_rel_threshold

    def imbalanced(self, replicas: list[Replica]) -> bool:
        loads = [r.outstanding for r in replicas]
        most, fewest = max(loads), min(loads)
        return most - fewest > self.balance_abs_threshold and most > self.balance_rel_threshold * fewest

    def pick(self, replicas: list[Replica], request: Request) -> Replica:
        if len(replicas) == 1:
            return replicas[0]
        if self.imbalanced(replicas):
            return least_loaded(replicas)
        block_size = replicas[0].core.scheduler.block_size
        full = request.prompt_len // block_size
        if full == 0:  # no full block to find anywhere
            return least_loaded(replicas)
        keys = request.block_keys[:full]  # the keys run on over the output's blocks
        best, matched = replicas[0], -1
        for replica in replicas:
            count = gpu_cache(replica).num_cached_leading(keys)
            if count > matched or (count == matched and replica.outstanding < best.outstanding):
                best, matched = replica, count
        return best if matched / full > self.cache_threshold else least_loaded(replicas)


def gpu_cache(replica: Replica) -> CachingBlockAllocator:
    """The replica's GPU prefix cache: its scheduler's block manager's (a vLLM system with prefix caching)."""
    cache = getattr(getattr(replica.core.scheduler, "allocator", None), "gpu", None)
    if not isinstance(cache, CachingBlockAllocator) or not replica.core.scheduler.caches_prefixes:
        raise ValueError(f"the cache_aware router needs prefix caching; replica {replica.index} has no prefix cache")
    return cache


Router = RoundRobin | LeastOutstanding | PowerOfTwo | CacheAware


def make_router(spec: RouterSpec, rng: np.random.Generator | None) -> Router:
    """The router of a run. power_of_two draws from a child of the run's Generator (Generator.spawn: the
    parent's own stream is left as it was, so every other draw of the run, the beams' parents, is the same
    whichever router serves it); without `rng` it has no seed to draw from, and says so."""
    if spec.kind == "round_robin":
        return RoundRobin()
    if spec.kind == "least_outstanding":
        return LeastOutstanding()
    if spec.kind == "power_of_two":
        if rng is None:
            raise ValueError("the power_of_two router needs the run's seeded rng to draw its two replicas")
        return PowerOfTwo(rng.spawn(1)[0])
    return CacheAware(spec)
