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


def split_cost_source(setup: SplitSetup) -> str:
    """The split fleet's cost model in words: the prefill pool's, and the decode pool's beside it where that one
    prices speculation (the prefill pool never speculates)."""
    source = setup.prefill.cost_model.source
    if setup.decode.system.speculative is None:
        return source
    return f"prefill pool: {source}; decode pool: {setup.decode.cost_model.source}"


def serve_split_trace(exp: Experiment, setup: SplitSetup, trace: Trace, rng: np.random.Generator) -> SplitRuns:
    """The trace on the split fleet `setup` builds; the experiment's router spreads the requests over the prefill
    pool (power_of_two drawing from a child of the run's `rng`, and a speculating decode pool's replicas from the
    children after it)."""
    return serve_split(trace, setup, make_router(exp.router, rng), rng)


def prefill_replicas(requests: dict[str, np.ndarray], split_runs: SplitRuns) -> np.ndarray:
    """Each request's prefill replica: a decode replica's request by its transfer, one the fleet recorded (its
    only token sampled, or cut off by the horizon before a decode replica) where it was recorded."""
    prefill_of = {row[0]: row[TRANSFER_COLUMNS.index("prefill_replica")] for row in split_runs.transfers}
    return np.array([prefill_of.get(int(rid), int(replica))
                     for rid, replica in zip(requests["request_id"], requests["replica"])], dtype=np.int64)


# a split run's summary columns, after SUMMARY_COLUMNS (sim/experiment/sweep.py)
SPLIT_COLUMNS = ("prefill_replicas", "decode_replicas", "kv_copy_mean_s", "kv_wait_mean_s", "recomputed_share")


def transfer_metrics(transfers: list[tuple], warmup_s: float, arrivals: np.ndarray,
                     horizon_s: float) -> dict[str, float]:
    """The summary's KV-move columns, over the requests that arrived after the warm-up, each counting only what
    happened before the horizon, as the latencies count a request unfinished there (sim/experiment/metrics.py):
    - kv_copy_mean_s: the copies' mean time on the link, a copy the horizon cut off until the horizon (one still
      queued for the link had none);
    - kv_wait_mean_s: their mean wait from the first token to the copy's start (a full decode pool, a busy link),
      a request whose copy had not started until the horizon (one prefilled after it waited for nothing in the
      run);
    - recomputed_share: the share of the requests placed on a decode replica that were recomputed there instead
      of copied."""
    rows = [row for row in transfers if arrivals[row[0]] >= warmup_s]
    kind, prefilled, start, end = (TRANSFER_COLUMNS.index(k) for k in ("kind", "prefilled_s", "start_s", "end_s"))
    to_copy = [row for row in rows if row[kind] != "recomputed"]
    started = np.array([(row[start], row[end]) for row in to_copy if not np.isnan(row[start])], dtype=np.float64)
    waited = np.array([(row[prefilled], row[start]) for row in to_copy if row[prefilled] < horizon_s],
                      dtype=np.float64)
    placed = [row for row in rows if row[kind] != "waiting"]
    recomputed = sum(row[kind] == "recomputed" for row in placed)
    return {
        "kv_copy_mean_s": _mean_span(started, horizon_s),
        "kv_wait_mean_s": _mean_span(waited, horizon_s),
        "recomputed_share": recomputed / len(placed) if placed else float("nan"),
    }


def _mean_span(spans: np.ndarray, horizon_s: float) -> float:
    """The mean of (from, to) spans, a `to` the run never reached (NaN) at the horizon; NaN with none."""
    if not len(spans):
        return float("nan")
    to = np.where(np.isnan(spans[:, 1]), horizon_s, spans[:, 1])
    return float(np.mean(to - spans[:, 0]))
