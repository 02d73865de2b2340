"""What a batch costs inside serving, against the same batch timed alone.

The profiler times each shape on its own (`runner.time_batch`: synthetic tokens, contiguous block
tables, the median of a few runs). A serving engine runs the same shape between its own host work,
over block tables the block manager scattered through the pool, once; and what latency sums is
every iteration's time, not the typical one. On the project's 2-core CPUs that made every served
shape 2-3% slower than the grid said, in every kind of iteration, and a validation under-predicted
all its points by about that much (benchmarks/measurements/fidelity-history.md).

So calibration measures it on the engine: the calibration replay's iterations (calibrate/parts/host.py)
are re-timed alone, shape by shape, right after the replay, and the ratio of the two sums is the
profile's serving factor, which the cost model multiplies its forward time by.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.core.batch import BatchShape

RETIMES = 2  # passes over the replay's shapes, each in a fresh shuffled order; the median is kept
PLAUSIBLE = (0.5, 2.0)  # a factor outside this is the machine changing speed mid-measurement, not serving
MAX_ITERATIONS = 200  # re-timed at most (a seeded sample): a tiny model's replay has many hundreds


def serving_rows(runner, shapes: Sequence[BatchShape], forwards: Sequence[float], seed: int = 0) -> list[dict]:
    """One row per served iteration (kind "serving"): its features, its timed forward as served
    (time_s) and the median of RETIMES runs of the same shape alone (alone_s). The first iteration
    is left out: it pays one-off costs no later one does."""
    rng = np.random.default_rng(seed)
    keep = np.arange(1, len(shapes))
    if len(keep) > MAX_ITERATIONS:
        keep = np.sort(rng.choice(keep, MAX_ITERATIONS, replace=False))
    shapes, forwards = [shapes[i] for i in keep], [forwards[i] for i in keep]
    alone: list[list[float]] = [[] for _ in shapes]
    for _ in range(RETIMES):
        for i in rng.permutation(len(shapes)):
            shape = shapes[i]
            alone[i] += runner.time_batch(list(shape.prefill_lens), list(shape.decode_context_lens), 1, warmup=0)
    return [{"kind": "serving", "num_prefills": s.num_prefills, "num_prefill_tokens": s.num_prefill_tokens,
             "num_decodes": s.num_decodes, **s.features(), "time_s": float(t), "alone_s": float(np.median(a))}
            for s, t, a in zip(shapes, forwards, alone)]


def serving_factor(served_s: Sequence[float], alone_s: Sequence[float]) -> dict:
    """The profile's `serving` entry: time-weighted served / alone, and what it was measured on."""
    served, alone = float(np.sum(served_s)), float(np.sum(alone_s))
    if not alone > 0 or not served > 0:
        raise ValueError("serving rows need positive served and alone times")
    return {"factor": served / alone, "iterations": len(served_s),
            "served_s": served, "alone_s": alone}
