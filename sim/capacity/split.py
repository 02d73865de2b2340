"""`servesim capacity --splits N`: the prefill:decode split, of at most N replicas in all, that serves the most
requests per second per GPU under the joint targets (goodput per GPU), beside the colocated replica's.

A colocated fleet behind round robin serves about n times one replica's rate, so its goodput per GPU is one
replica's rate over its GPUs. A split fleet's pools limit each other (a prefill pool too small for the decode
pool's appetite, or the other way round), so every split P:D with P + D <= N is searched for the rate it holds,
each by the same rate search (sim/capacity/search.py), and divided by its GPUs. The pools take their GPU and
tensor parallelism from the experiment's `split` where it names them, else from the experiment.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from engine.core.system import SystemSpec
from engine.errors import SpecError
from sim.capacity.plan import CapacityPlan
from sim.capacity.search import Probe, job, rate_search, run_jobs
from sim.capacity.targets import judge
from sim.executors.workers import Workers
from sim.experiment.config import Experiment, check_pools
from sim.experiment.router_config import check_router
from sim.experiment.split_config import PoolConfig, SplitConfig, routed_systems

MAX_SPLIT_REPLICAS = 16  # 120 splits, each a rate search: an afternoon on two cores, not a week


def check_splits(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= MAX_SPLIT_REPLICAS:
        raise SpecError(name, "", f"must be a whole number of replicas from 2 to {MAX_SPLIT_REPLICAS} (a prefill "
                        f"and a decode one at least), got {value!r}")
    return value


def check_split_search(exp: Experiment, total: int) -> None:
    """Before any search runs: the largest pools the search makes, checked as a config's split is (their
    systems, memory and link, and the requests they serve), and the router of the colocated replica beside them,
    which routes to the experiment's systems, not to the prefill pool's (checked with the config)."""
    check_pools(split_experiment(exp, total - 1, total - 1))
    try:
        check_router(exp.router, routed_systems(None, exp.systems), exp.source)
    except SpecError as err:
        raise SpecError(err.source, err.key, f"{err.message} (the colocated replica the splits are compared with "
                        "runs the experiment's systems)") from None


def header(total: int) -> str:
    """What the search's lines come under."""
    return (f"prefill:decode splits of up to {total} replicas, against the colocated replica (the rate each holds "
            "under every target at once, and per GPU):")


def splits_of(total: int) -> list[tuple[int, int]]:
    """Every prefill:decode split of at most `total` replicas in all, fewest replicas first."""
    return [(p, n - p) for n in range(2, total + 1) for p in range(1, n)]


def split_experiment(exp: Experiment, num_prefill: int, num_decode: int) -> Experiment:
    base = exp.split or SplitConfig(PoolConfig(1), PoolConfig(1))
    split = dataclasses.replace(base, prefill=dataclasses.replace(base.prefill, replicas=num_prefill),
                                decode=dataclasses.replace(base.decode, replicas=num_decode))
    return dataclasses.replace(exp, split=split, replicas=1)


def gpus_of(exp: Experiment) -> int:
    """GPUs the experiment's fleet takes: its replicas' tensor-parallel groups, pool by pool for a split."""
    split = exp.split
    if split is None:
        return exp.replicas * exp.tensor_parallel
    return sum(pool.replicas * (pool.tensor_parallel or exp.tensor_parallel) for pool in (split.prefill, split.decode))


def split_capacity(plan: CapacityPlan, total: int, workers: Workers | None = None,
                   on_probe: Callable[[str], None] = lambda line: None) -> list[dict]:
    """capacity_split.csv: per system, the colocated replica and every split of at most `total` replicas, each
    with the rate it holds under the joint targets and that rate per GPU; `best` marks each system's highest."""
    colocated = dataclasses.replace(plan.exp, split=None, replicas=1)
    fleets = [("colocated", colocated)] + [(f"{p}P:{d}D", split_experiment(plan.exp, p, d))
                                           for p, d in splits_of(total)]
    planned = [(system, name, exp) for system in plan.exp.systems for name, exp in fleets]
    jobs = [job(exp, system, plan.targets, plan.seed, _search(plan)) for system, _, exp in planned]

    def note(i: int, p: Probe) -> None:
        system, name, _ = planned[i]
        verdict = judge(p.summary, plan.targets).held
        said = {True: "ok", False: "over", None: "no information"}[verdict]
        on_probe(f"  {system.name:<18} {name:<10} at {p.rate:8.3f} req/s: {said}")

    rates = run_jobs(jobs, workers, note)
    rows = [_row(system, name, exp, rate) for (system, name, exp), rate in zip(planned, rates)]
    for system in plan.exp.systems:
        mine = [row for row in rows if row["system"] == system.name]
        best = max(mine, key=lambda row: row["goodput_per_gpu_rps"])
        for row in mine:
            row["best"] = row is best and best["goodput_per_gpu_rps"] > 0
    return rows


def _search(plan: CapacityPlan) -> Callable:
    return lambda: rate_search(plan.start, plan.tolerance, 1, plan.ceiling)


def _row(system: SystemSpec, name: str, exp: Experiment, rate: float) -> dict:
    split = exp.split
    gpus = gpus_of(exp)
    return {"system": system.name, "fleet": name,
            "prefill_replicas": split.prefill.replicas if split else 0,
            "decode_replicas": split.decode.replicas if split else 0,
            "gpus": gpus, "max_rate_rps": rate, "goodput_per_gpu_rps": rate / gpus}
