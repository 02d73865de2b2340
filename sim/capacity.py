"""Capacity planning: the highest rate that meets a latency target, and replicas for a rate.

A rate "holds" when the chosen metric (normalized latency by default) stays at or under
the target and the run drained every request before its horizon. The search brackets
the knee by doubling, then bisects to a relative tolerance; each probe is one run.

Each search is written as a generator of the (rate, replicas) points it probes, so that one
driver (sim/capacity_parallel.py) runs it one probe at a time or many ahead on any workers, with
the same probes and the same answer.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from dataclasses import dataclass

from engine.core.system import SystemSpec
from sim.capacity_parallel import Job, run_searches
from sim.config import Experiment
from sim.pool import Workers
from sim.run import run_one

TARGET_METRICS = ("normalized_latency", "normalized_latency_p90", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
                  "tpot_mean_s", "tpot_p90_s", "tpot_p99_s", "latency_mean_s")
MAX_REPLICAS = 256

Point = tuple[float, int]  # (total rate in req/s, replicas)


@dataclass(frozen=True)
class Target:
    metric: str
    limit: float

    def holds(self, summary: dict) -> bool:
        value = summary[self.metric]
        return not summary["saturated"] and value == value and value <= self.limit


@dataclass
class Probe:
    rate: float
    replicas: int
    value: float
    holds: bool


def probe(exp: Experiment, system: SystemSpec, rate: float, replicas: int, seed: int, target: Target) -> Probe:
    """One run at a point; what a worker computes and sends back (a few numbers, not the run's records)."""
    summary = run_one(dataclasses.replace(exp, replicas=replicas), system, rate, seed).summary
    return Probe(rate, replicas, summary[target.metric], target.holds(summary))


def rate_search(start: float, rel_tol: float, replicas: int) -> Generator[Point, bool, float]:
    """Highest rate found to hold, to rel_tol; 0.0 if none does."""
    if not rel_tol > 0:
        raise ValueError(f"rel_tol must be positive, got {rel_tol}: the bisection would never end")
    low, high = 0.0, None
    rate = start
    while high is None:
        if (yield rate, replicas):
            low, rate = rate, rate * 2
        else:
            high = rate
            if low == 0.0:
                rate /= 4
                while rate > start / 1024 and not (yield rate, replicas):
                    high, rate = rate, rate / 4
                if rate <= start / 1024:
                    return 0.0
                low = rate
    while (high - low) / high > rel_tol:
        mid = (low + high) / 2
        if (yield mid, replicas):
            low = mid
        else:
            high = mid
    return low


def replica_search(rate: float, per_replica_rate: float, max_replicas: int = MAX_REPLICAS
                   ) -> Generator[Point, bool, int | None]:
    """Fewest replicas that hold `rate`, starting from rate / per-replica capacity; None if even
    max_replicas do not."""
    guess = max(1, int(-(-rate // per_replica_rate))) if per_replica_rate > 0 else 1
    k = min(guess, max_replicas)
    if (yield rate, k):  # walk down while fewer still hold
        while k > 1:
            if not (yield rate, k - 1):
                break
            k -= 1
        return k
    while k < max_replicas:  # walk up until one holds
        k += 1
        if (yield rate, k):
            return k
    return None


def capacity_search(start: float, rel_tol: float, rate: float | None = None, max_replicas: int = MAX_REPLICAS
                    ) -> Generator[Point, bool, tuple[float, int | None]]:
    """`servesim capacity` for one system: the rate one replica holds, then (given a total `rate`, and
    if any rate held) the replicas that rate needs."""
    per_replica = yield from rate_search(start, rel_tol, 1)
    needed = None
    if rate is not None and per_replica > 0:
        needed = yield from replica_search(rate, per_replica, max_replicas)
    return per_replica, needed


def job(exp: Experiment, system: SystemSpec, target: Target, seed: int, start: Callable[[], Generator]) -> Job:
    """A search of one system, ready for run_searches with `probe`."""
    return Job(start, lambda point: (exp, system, point[0], point[1], seed, target))


def run_jobs(jobs: list[Job], workers: Workers | None = None,
             on_probe: Callable[[int, Probe], None] = lambda i, p: None) -> list:
    """Every job's result; its probes go to on_probe(job index, probe) in the order its search took them."""
    run_searches(jobs, probe, workers or Workers(), on_probe)
    return [j.result for j in jobs]


def _probes_of(one: Job) -> list[Probe]:
    return [one.known[point] for point in one.path]


def max_rate(exp: Experiment, system: SystemSpec, target: Target, seed: int = 0, start: float = 1.0,
             rel_tol: float = 0.05, replicas: int | None = None, on_probe: Callable[[Probe], None] = lambda p: None,
             workers: Workers | None = None) -> tuple[float, list[Probe]]:
    """Highest rate (req/s) found to hold the target, to rel_tol; 0.0 if none does."""
    one = job(exp, system, target, seed, lambda: rate_search(start, rel_tol, replicas or exp.replicas))
    [rate] = run_jobs([one], workers, lambda i, p: on_probe(p))
    return rate, _probes_of(one)


def replicas_for(exp: Experiment, system: SystemSpec, target: Target, rate: float, per_replica_rate: float,
                 seed: int = 0, max_replicas: int = MAX_REPLICAS, on_probe: Callable[[Probe], None] = lambda p: None,
                 workers: Workers | None = None) -> tuple[int | None, list[Probe]]:
    """Fewest replicas that hold the target at `rate`, starting from rate / per-replica capacity;
    None if even max_replicas do not."""
    one = job(exp, system, target, seed, lambda: replica_search(rate, per_replica_rate, max_replicas))
    [needed] = run_jobs([one], workers, lambda i, p: on_probe(p))
    return needed, _probes_of(one)
