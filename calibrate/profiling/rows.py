"""Rows of a profile's raw CSV that time the engine: one batch shape, or a swap."""
from __future__ import annotations

import numpy as np

from calibrate.clock.roofline import swap_copies_per_block
from calibrate.profiling.grid import Shape
from calibrate.work.features import BLOCKS_COLUMN
from engine.core.batch import BatchShape


def shape_row(shape: Shape, times: list[float], block_size: int, timings: list | None = None) -> dict:
    """A shape's row: its features and its time_s (the median timed step). With `timings` (the runs'
    engine.runtime.timing.IterationTiming) also device_s and host_s: the medians of each run's device span
    and of the rest of its wall time (inputs built and uploaded, launches, token ids read back)."""
    prefill, decode = shape.prefill_lens, shape.decode_context_lens
    batch = BatchShape(tuple(prefill), tuple(decode))
    row = {
        "kind": shape.kind, "num_prefills": len(prefill), "num_prefill_tokens": sum(prefill),
        "num_decodes": len(decode), "max_decode_context": max(decode, default=0),
        **batch.features(), BLOCKS_COLUMN: batch.decode_blocks(block_size), "block_size": block_size,
        "time_s": float(np.median(times)), "time_min_s": float(min(times)), "time_max_s": float(max(times)),
        "repeats": len(times),
    }
    if timings:
        row.update(split_times(timings))
    return row


def split_times(timings: list) -> dict:
    """device_s and host_s of a shape: medians over its runs (a raw CSV's split of each iteration)."""
    return {"device_s": float(np.median([t.device_s for t in timings])),
            "host_s": float(np.median([t.host_s for t in timings]))}


def swap_rows(runner, repeats: int, warmup: int, num_blocks: int) -> list[dict]:
    """A swap's seconds (a decode with `num_blocks` swapped out and in, less the same decode without), twice:
    the blocks as neighbours (the engine copies each layer's K and V in one run) and scattered (a copy per
    block, as paper-era vLLM always copied). Each row counts its copies and bytes, so a fit tells the cost
    per copy from the cost per byte (calibrate/fitting/fit.py fit_swap)."""
    base = float(np.median(runner.time_batch([], [16], repeats, warmup=warmup)))
    rows = []
    for scattered in (False, True):
        timings = runner.time_batch_split([], [16], repeats, warmup=warmup, num_swap_blocks=num_blocks,
                                          scattered_swaps=scattered)
        with_swaps = [t.seconds for t in timings]
        runs = num_blocks if scattered else 1  # copies of each layer's K and V, each way
        row = shape_row(Shape("swap", (), (16,)), with_swaps, runner.block_size, timings)
        # swap rows carry the PCIe cost, not an iteration's: the fit reads their swap_ columns only
        row.update(swap_s=max(float(np.median(with_swaps)) - base, 0.0), swap_blocks=2 * num_blocks,
                   swap_copies=2 * runs * swap_copies_per_block(runner.spec),
                   swap_bytes=2 * num_blocks * runner.cache.bytes_per_block, swap_scattered=scattered)
        rows.append(row)
    return rows
