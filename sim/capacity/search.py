"""Capacity planning: the highest rate that meets a latency target, and replicas for a rate; or the highest
max_concurrency (a closed loop at rate inf: sim/capacity/concurrency.py).

A rate "holds" when the run served its load (kept pace with its arrivals, nothing dropped) and every target's
metric stays at or under its limit (sim/capacity/targets.py). The search brackets the knee by doubling, then
bisects to a relative tolerance; each probe is one run.

Each search is written as a generator of the (rate, replicas) points it probes, so that one
driver (sim/capacity/parallel.py) runs it one probe at a time or many ahead on any workers, with
the same probes and the same answer.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path

from engine.core.system import SystemSpec
from engine.errors import SpecError
from sim.capacity.parallel import Job, run_searches
from sim.capacity.saturation import pace
from sim.capacity.targets import SERVED_KEYS, TARGET_METRICS, Target, judge
from sim.executors.workers import Workers
from sim.experiment.config import MAX_REQUESTS, Experiment
from sim.experiment.run import COST_MODEL_SOURCE, run_one

__all__ = ["TARGET_METRICS", "Target", "Probe", "probe", "rate_search", "replica_search", "capacity_search",
           "concurrency_search"]
MAX_REPLICAS = 256
# The search's bounds. Four float steps are the finest relative tolerance at which low < mid < high stay
# apart (float64 resolves about 2.2e-16 relative); a bisection to it takes about 50 probes.
MIN_REL_TOL = 4 * sys.float_info.epsilon
MAX_DOUBLINGS = 64  # 2**64 x the first rate: past any deployment, where no ceiling stops it first
WALK_DOWN = 4  # down to the first rate / 256
MAX_PROBES = MAX_DOUBLINGS + WALK_DOWN + 64  # a rate search never takes more (tests/sim/test_capacity_limits.py)

Point = tuple[float, int]  # (total rate in req/s, replicas)


@dataclass
class Probe:
    """One run at a point, as a worker sends it back: a few numbers of its summary, not its records."""
    rate: float
    replicas: int
    summary: dict  # every target metric, SERVED_KEYS, PACE_KEYS, num_measured, PRICED_BY and THROUGHPUT


# what priced a probe: its system, and its cost model in a few words and in whole (capacity's cost_models.txt)
PRICED_BY = ("system", "cost_model", COST_MODEL_SOURCE)
# what a probe served: requests and generated tokens a second (a plan's dollars per million output tokens)
THROUGHPUT = ("throughput_rps", "throughput_tokens_per_s")
# what a gated probe keeps besides: its client's gate (the request rate it served is THROUGHPUT's)
GATED_KEYS = ("max_concurrency",)


def probe(exp: Experiment, system: SystemSpec, rate: float, replicas: int, seed: int) -> Probe:
    """One run, and how it kept pace with its arrivals (sim/capacity/saturation.py), read from its records here:
    a worker sends back the summary alone (a gated run's with its gate: GATED_KEYS)."""
    run = run_one(dataclasses.replace(exp, replicas=replicas), system, rate, seed)
    kept = (*TARGET_METRICS, *SERVED_KEYS, "num_measured", *PRICED_BY, *THROUGHPUT) + (
        GATED_KEYS if exp.workload.max_concurrency is not None else ())
    summary = {key: run.summary[key] for key in kept}
    return Probe(rate, replicas, {**summary, **pace(run.requests, exp.warmup_s).as_summary()})


def rate_search(start: float, rel_tol: float, replicas: int, ceiling: float = math.inf
                ) -> Generator[Point, bool | None, float]:
    """Highest rate found to hold, to rel_tol, at most `ceiling`; 0.0 if none does.

    It ends by construction: at most MAX_DOUBLINGS doublings (or up to the ceiling), WALK_DOWN quarterings,
    and a bisection of at most log2(1 / rel_tol) steps, since rel_tol is at least MIN_REL_TOL (and a step
    whose midpoint a float cannot tell from its ends stops it). A probe with no information (None: no
    request measured, a rate too low for the duration) sends the search up, never down.
    """
    if not rel_tol >= MIN_REL_TOL:
        raise ValueError(f"rel_tol must be at least {MIN_REL_TOL:.2g}, got {rel_tol}: a float resolves no finer")
    low, high = 0.0, None
    rate = min(start, ceiling)
    for _ in range(MAX_DOUBLINGS):
        held = yield rate, replicas
        if held is False:
            high = rate
            break
        if held:
            low = rate
        if rate >= ceiling:
            return low  # held (or said nothing) at the most one run simulates
        rate = min(rate * 2, ceiling)
    if high is None:
        return low
    if low == 0.0:  # the first measured answer was "over": walk down to one that holds
        for _ in range(WALK_DOWN):
            rate /= 4
            held = yield rate, replicas
            if held is None:  # lower rates measure even less
                return 0.0
            if held:
                low = rate
                break
            high = rate
        else:
            return 0.0
    while (high - low) / high > rel_tol:
        mid = (low + high) / 2
        if not low < mid < high:  # the float between them is one of them: as fine as it gets
            break
        held = yield mid, replicas
        if held is None:
            break
        if held:
            low = mid
        else:
            high = mid
    return low


def concurrency_search(start: int, ceiling: int) -> Generator[int, bool | None, int]:
    """Highest max_concurrency found to hold, at most `ceiling`; 0 if not even the first does. An integer
    search, rate_search's in whole numbers: it doubles from `start` until one is over (or the ceiling is reached),
    walks down by halves to one that holds where the first was over, then bisects the integers between the
    highest that held and the lowest over, to adjacent ones. A probe with no information (None) sends it up, as
    rate_search's does."""
    low, high = 0, None
    concurrency = min(start, ceiling)
    while high is None:
        held = yield concurrency
        if held is False:
            high = concurrency
        elif held:
            low = concurrency
        if high is None:
            if concurrency >= ceiling:
                return low
            concurrency = min(concurrency * 2, ceiling)
    while low == 0 and high > 1:  # the first measured answer was "over": halve down to one that holds
        held = yield high // 2
        if held is None:
            return 0
        if held:
            low = high // 2
        else:
            high //= 2
    while high - low > 1:
        mid = (low + high) // 2
        held = yield mid
        if held is None:
            break
        if held:
            low = mid
        else:
            high = mid
    return low


def replica_search(rate: float, per_replica_rate: float, max_replicas: int = MAX_REPLICAS
                   ) -> Generator[Point, bool | None, int | None]:
    """Fewest replicas that hold `rate`, starting from rate / per-replica capacity; None if even
    max_replicas do not, or if a probe measured no request (None): more replicas would measure even less,
    so the search cannot tell, and says so rather than walk on (the caller reads the last probe)."""
    guess = max(1, int(-(-rate // per_replica_rate))) if per_replica_rate > 0 else 1
    k = min(guess, max_replicas)
    held = yield rate, k
    if held is None:
        return None
    if held:  # walk down while fewer still hold (fewer replicas measure more: a None here keeps k)
        while k > 1:
            if not (yield rate, k - 1):
                break
            k -= 1
        return k
    while k < max_replicas:  # walk up until one holds
        k += 1
        held = yield rate, k
        if held is None:
            return None
        if held:
            return k
    return None


def capacity_search(start: float, rel_tol: float, rate: float | None = None, max_replicas: int = MAX_REPLICAS,
                    ceiling: float = math.inf) -> Generator[Point, bool | None, tuple[float, int | None]]:
    """`servesim capacity` for one system: the rate one replica holds, then (given a total `rate`, and
    if any rate held) the replicas that rate needs."""
    per_replica = yield from rate_search(start, rel_tol, 1, ceiling)
    needed = None
    if rate is not None and per_replica > 0:
        needed = yield from replica_search(rate, per_replica, max_replicas)
    return per_replica, needed


def rate_ceiling(exp: Experiment) -> float:
    """The highest total rate one run simulates: run's request limit over a generated workload's duration
    (a replay's requests are its trace's, and a counted workload's its num_requests, whatever the rate)."""
    if exp.workload.is_replay or exp.workload.num_requests is not None:
        return math.inf
    return MAX_REQUESTS / exp.workload.duration_s


def check_searchable(exp: Experiment) -> None:
    """The rate must change the workload, or a search over it learns nothing and doubles without end; and it starts
    from the lowest of `rates`, which must be a rate to double."""
    if min(exp.rates) == math.inf:
        raise SpecError(exp.source, "rates", "a rate search doubles from the lowest of the rates, and inf is no rate "
                        "to double: give a finite one, or search over concurrency (servesim capacity --concurrency)")
    if exp.workload.is_replay and exp.workload.time_scale is not None:
        raise SpecError(exp.source, "workload.time_scale", (
            f"replays {Path(exp.workload.trace).name} at {exp.workload.time_scale:g}x its recorded rate whatever "
            "the request rate, so a capacity search has nothing to vary; remove workload.time_scale (each rate "
            "then rescales the trace)"))


def job(exp: Experiment, system: SystemSpec, targets: Target | tuple[Target, ...], seed: int,
        start: Callable[[], Generator], known: dict | None = None) -> Job:
    """A search of one system against its targets, ready for run_searches with `probe`; `known`, the probes
    another search of the same system and seed has made, to share."""
    goals = (targets,) if isinstance(targets, Target) else targets
    return Job(start, lambda point: (exp, system, point[0], point[1], seed), lambda p: judge(p.summary, goals).held,
               {} if known is None else known)


def concurrency_job(exp: Experiment, system: SystemSpec, targets: tuple[Target, ...], seed: int,
                    start: Callable[[], Generator], known: dict | None = None) -> Job:
    """A search of one system's highest max_concurrency at rate inf (concurrency_search), on the experiment's
    replicas; its points are concurrencies, its probes gated runs."""
    return Job(start, lambda concurrency: (exp.at_concurrency(concurrency), system, math.inf, exp.replicas, seed),
               lambda p: judge(p.summary, targets).held, {} if known is None else known)


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
    one = job(exp, system, target, seed,
              lambda: rate_search(start, rel_tol, replicas or exp.replicas, rate_ceiling(exp)))
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
