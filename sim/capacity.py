"""Capacity planning: the highest rate that meets a latency target, and replicas for a rate.

A rate "holds" when the chosen metric (normalized latency by default) stays at or under
the target and the run drained every request before its horizon. The search brackets
the knee by doubling, then bisects to a relative tolerance; each probe is one run.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from engine.core.system import SystemSpec
from sim.config import Experiment
from sim.run import run_one

TARGET_METRICS = ("normalized_latency", "normalized_latency_p90", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
                  "tpot_mean_s", "tpot_p90_s", "tpot_p99_s", "latency_mean_s")


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


def _probe(exp: Experiment, system: SystemSpec, rate: float, replicas: int, seed: int, target: Target) -> Probe:
    summary = run_one(dataclasses.replace(exp, replicas=replicas), system, rate, seed)
    return Probe(rate, replicas, summary.summary[target.metric], target.holds(summary.summary))


def max_rate(exp: Experiment, system: SystemSpec, target: Target, seed: int = 0, start: float = 1.0,
             rel_tol: float = 0.05, replicas: int | None = None, on_probe: Callable[[Probe], None] = lambda p: None
             ) -> tuple[float, list[Probe]]:
    """Highest rate (req/s) found to hold the target, to rel_tol; 0.0 if none does."""
    if not rel_tol > 0:
        raise ValueError(f"rel_tol must be positive, got {rel_tol}: the bisection would never end")
    replicas = replicas or exp.replicas
    probes: list[Probe] = []

    def probe(rate: float) -> bool:
        p = _probe(exp, system, rate, replicas, seed, target)
        probes.append(p)
        on_probe(p)
        return p.holds

    low, high = 0.0, None
    rate = start
    while high is None:
        if probe(rate):
            low, rate = rate, rate * 2
        else:
            high = rate
            if low == 0.0:
                rate /= 4
                while rate > start / 1024 and not probe(rate):
                    high, rate = rate, rate / 4
                if rate <= start / 1024:
                    return 0.0, probes
                low = rate
    while (high - low) / high > rel_tol:
        mid = (low + high) / 2
        if probe(mid):
            low = mid
        else:
            high = mid
    return low, probes


def replicas_for(exp: Experiment, system: SystemSpec, target: Target, rate: float, per_replica_rate: float,
                 seed: int = 0, max_replicas: int = 256, on_probe: Callable[[Probe], None] = lambda p: None
                 ) -> tuple[int | None, list[Probe]]:
    """Fewest replicas that hold the target at `rate`, starting from rate / per-replica capacity;
    None if even max_replicas do not."""
    probes: list[Probe] = []
    guess = max(1, int(-(-rate // per_replica_rate))) if per_replica_rate > 0 else 1
    k = min(guess, max_replicas)
    p = _probe(exp, system, rate, k, seed, target)
    probes.append(p)
    on_probe(p)
    if p.holds:  # walk down while fewer still hold
        while k > 1:
            q = _probe(exp, system, rate, k - 1, seed, target)
            probes.append(q)
            on_probe(q)
            if not q.holds:
                break
            k -= 1
        return k, probes
    while k < max_replicas:  # walk up until one holds
        k += 1
        q = _probe(exp, system, rate, k, seed, target)
        probes.append(q)
        on_probe(q)
        if q.holds:
            return k, probes
    return None, probes
