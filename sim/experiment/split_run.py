"""A run of an experiment with a `split` (sim/experiment/split_config.py): each pool as the experiment with its own
GPU, tensor parallelism and KV cache, the KV link read against the prefill pool's GPU, and the fleet served by
sim.core.split_fleet."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from calibrate.parts.kv_link import kv_bytes
from engine.core.system import SystemSpec
from sim.core.fleet import FleetSetup
from sim.core.routers import make_router
from sim.core.split_fleet import TRANSFER_COLUMNS, SplitRuns, SplitSetup, serve_split
from sim.experiment.config import Experiment, clock_for, kv_copy_parallel, kv_link_of, pool_experiment
from sim.experiment.split_config import SplitConfig, pool_system
from sim.workload.trace import Trace


def kv_copy_price(exp: Experiment, split: SplitConfig) -> Callable[[int], float]:
    """Seconds to copy a request's prompt KV (all layers, K and V, at the KV cache's format) from a prefill replica
    to a decode replica: each of the smaller pool's tensor-parallel GPUs sends its share over its own link."""
    link = kv_link_of(exp, split)
    parallel = kv_copy_parallel(exp, split)
    element = exp.precision.kv_bytes
    model = exp.model

    def kv_copy_s(num_tokens: int) -> float:
        return link.transfer_s(kv_bytes(model, num_tokens, element), parallel)
    return kv_copy_s


def split_setup(exp: Experiment, system: SystemSpec, horizon_s: float) -> SplitSetup:
    split = exp.split
    if split is None:
        raise ValueError(f"{exp.source}: the experiment has no split")
    pools = []
    for pool, decode in ((split.prefill, False), (split.decode, True)):
        variant = pool_experiment(exp, pool)
        pool_sys = pool_system(pool, system, decode)
        kv = variant.kv_pool(pool_sys)
        pools.append(FleetSetup(exp.model, pool_sys, clock_for(variant, pool_sys), kv.num_gpu_blocks,
                                kv.num_cpu_blocks, pool.replicas, horizon_s, False, False))
    return SplitSetup(pools[0], pools[1], kv_copy_price(exp, split), split.on_decode_full)


def serve_split_trace(exp: Experiment, setup: SplitSetup, trace: Trace, rng: np.random.Generator) -> SplitRuns:
    """The trace on the split fleet `setup` builds; the experiment's router spreads the requests over the prefill
    pool (power_of_two drawing from a child of the run's `rng`)."""
    return serve_split(trace, setup, make_router(exp.router, rng))


def prefill_replicas(requests: dict[str, np.ndarray], split_runs: SplitRuns) -> np.ndarray:
    """Each request's prefill replica: a decode replica's request by its transfer, one the fleet recorded (its
    only token sampled, or cut off by the horizon before a decode replica) where it was recorded."""
    prefill_of = {row[0]: row[TRANSFER_COLUMNS.index("prefill_replica")] for row in split_runs.transfers}
    return np.array([prefill_of.get(int(rid), int(replica))
                     for rid, replica in zip(requests["request_id"], requests["replica"])], dtype=np.int64)


# a split run's summary columns, after SUMMARY_COLUMNS (sim/experiment/sweep.py)
SPLIT_COLUMNS = ("prefill_replicas", "decode_replicas", "kv_copy_mean_s", "kv_wait_mean_s", "recomputed_share")


def transfer_metrics(transfers: list[tuple], warmup_s: float, arrivals: np.ndarray) -> dict[str, float]:
    """The summary's KV-move columns, over the requests that arrived after the warm-up: the copies' mean time
    on the link, their mean wait from the first token to the copy's start (a full decode pool, a busy link), and
    the share of requests recomputed on a decode replica instead."""
    rows = [row for row in transfers if arrivals[row[0]] >= warmup_s]
    kind = TRANSFER_COLUMNS.index("kind")
    copied = [row for row in rows if row[kind] == "copied"]
    start, end, prefilled = (TRANSFER_COLUMNS.index(k) for k in ("start_s", "end_s", "prefilled_s"))
    nan = float("nan")
    return {
        "kv_copy_mean_s": float(np.mean([r[end] - r[start] for r in copied])) if copied else nan,
        "kv_wait_mean_s": float(np.mean([r[start] - r[prefilled] for r in copied])) if copied else nan,
        "recomputed_share": (len(rows) - len(copied)) / len(rows) if rows else nan,
    }
