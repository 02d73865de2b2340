"""Profile the real engine: time the runner over a grid of batch shapes on this device.

The only room besides the engine that imports torch, and only when it runs.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd

from calibrate.hardware.device import device_name
from calibrate.parts.host import calibration_replay, host_rows
from calibrate.profiling.block_sweep import BlockSweep
from calibrate.profiling.grid import GRIDS, Grid, Shape
from calibrate.profiling.rows import shape_row, swap_rows
from calibrate.profiling.serving import serving_rows
from calibrate.profiling.speed import PROBE_SHAPES, SpeedProbe, SpeedSamples, probe_blocks
from engine.core.blocks import blocks_for
from engine.core.spec import ModelSpec


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _versions() -> dict[str, str]:
    import torch

    versions = {"torch_version": torch.__version__, "blas_version": _blas(torch)}
    try:
        import triton

        versions["triton_version"] = triton.__version__
    except ImportError:
        versions["triton_version"] = "none"
    return versions


def _blas(torch) -> str:
    """The BLAS torch was built with (its speed on a CPU is the BLAS's): e.g. 'mkl' or 'open'."""
    for line in torch.__config__.show().splitlines():
        if "BLAS_INFO=" in line:
            return line.split("BLAS_INFO=", 1)[1].split(",")[0].strip()
    return "unknown"


class Progress:
    """One line on stderr: shapes done, share, and time left at the pace so far."""

    def __init__(self, total: int, stream=None):
        # sys.stderr as it is now, not as it was when this module was imported (a test's capture, since closed)
        self.total, self.stream, self.started = total, stream or sys.stderr, time.perf_counter()

    def update(self, done: int) -> None:
        elapsed = time.perf_counter() - self.started
        eta = elapsed / done * (self.total - done) if done else 0.0
        self.stream.write(f"\rprofiling: {done}/{self.total} timed runs ({done / self.total:4.0%}) "
                          f"elapsed {elapsed:5.0f}s  ETA {eta:5.0f}s")
        if done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def profile(spec: ModelSpec, device: str = "cpu", dtype: str | None = None, grid: Grid | str = "default",
            repeats: int = 3, warmup: int = 1, block_size: int = 16, seed: int = 0,
            swap_blocks: int = 64, probe_every_s: float = 1.0, attention_backend: str = "auto", host: bool = True,
            block_sizes: tuple[int, ...] = (), on_progress: Callable[[int], None] | None = None,
            cuda_graphs: bool | None = None) -> pd.DataFrame:
    """One row per shape: its features, the median time over `repeats`, and the device; then the
    swap rows, the host work, and the speed probe's samples (kind "probe"), whose medians become the
    profile's speed reference. With `block_sizes`, the grid's block-sweep decodes and the swaps are
    timed again at each of those block sizes too (and at `block_size`): what tells the kernel's cost
    per KV block apart from its cost per token.

    The grid is timed in `repeats` passes, each in a fresh shuffled order (seeded), so that a slow
    minute on a shared machine adds noise to many shapes rather than bias to one family of them. An
    untimed pass first pays every shape's one-off allocation costs (`warmup` runs each, and each decode
    bucket's CUDA graph capture), so that every timed run follows some other shape, as a serving iteration does.

    Every shape's row keeps time_s (the median timed step, as always) and adds device_s and host_s: the
    medians of each run's device span (CUDA events around its kernels; on a CPU their wall time) and of
    the rest of its wall time (engine/runtime/timing.py). `cuda_graphs` (None: on where they run) picks the
    engine profiled: decodes replayed from CUDA graphs, or eager; the raw CSV says which (column cuda_graphs).
    """
    from engine.runtime.runner import ModelRunner

    grid = GRIDS[grid] if isinstance(grid, str) else grid
    grid = replace(grid, max_seq_len=min(grid.max_seq_len, spec.max_seq_len),
                   max_kv_tokens=min(grid.max_kv_tokens, kv_tokens_that_fit(spec, device, dtype)))
    shapes = grid.shapes()
    sweep = BlockSweep(grid.block_sweep_shapes(), sorted({*block_sizes, block_size}) if block_sizes else [],
                       swap_blocks * block_size, repeats, warmup, seed)
    pool_blocks = max(blocks_for(s.kv_tokens, block_size) + len(s.prefill_lens) + len(s.decode_context_lens)
                      for s in shapes)
    runner = ModelRunner(spec, device=device, dtype=dtype, seed=seed,
                         num_gpu_blocks=max(pool_blocks, swap_blocks, probe_blocks(block_size)),
                         num_cpu_blocks=swap_blocks, block_size=block_size,
                         attention_backend=attention_backend, cuda_graphs=cuda_graphs)
    total = len(shapes) * repeats + 1 + sweep.timed_runs
    progress = on_progress or Progress(total).update
    rows = _grid_rows(runner, shapes, repeats, warmup, seed, probe_every_s, host, progress, quiet=bool(on_progress))
    rows += swap_rows(runner, repeats, warmup, swap_blocks)
    meta = {"model": spec.name, "device": runner.device.type, "device_name": device_name(str(runner.device)),
            "dtype": str(runner.dtype).removeprefix("torch."), "tensor_parallel": 1,
            "torch_threads": _threads(), "attention_backend": attention_backend,
            "cuda_graphs": runner.cuda_graphs, **_versions()}
    if sweep.block_sizes:
        model = runner.model
        del runner  # its pool: the sweep's own pools need the memory on a GPU
        if on_progress is None:
            sys.stderr.write(f"profiling: decodes and swaps at block sizes {sweep.block_sizes}\n")
        rows += sweep.rows(lambda bs, gpu, cpu: ModelRunner(
            spec, device=device, dtype=dtype, seed=seed, num_gpu_blocks=gpu, num_cpu_blocks=cpu, block_size=bs,
            attention_backend=attention_backend, model=model, cuda_graphs=cuda_graphs), block_size,
            len(shapes) * repeats + 1, progress)
    frame = pd.DataFrame(rows)
    frame["block_size"] = frame["block_size"].fillna(block_size).astype(int)  # host, serving and probe rows
    return frame.assign(**meta)


def _grid_rows(runner, shapes: list[Shape], repeats: int, warmup: int, seed: int, probe_every_s: float,
               host: bool, progress: Callable[[int], None], quiet: bool) -> list[dict]:
    """The grid's shapes timed in shuffled passes, then the host work, then the speed probe's samples."""
    probe = SpeedProbe(runner, every_s=probe_every_s)
    if not quiet:
        sys.stderr.write(f"profiling: an untimed warm-up pass over {len(shapes)} shapes first\n")
    for shape in shapes:
        runner.time_batch(list(shape.prefill_lens), list(shape.decode_context_lens), 0, warmup=warmup)
    # the pace, and so the time left, from the timed passes alone: the warm-up pays one-off costs
    timings: list[list] = [[] for _ in shapes]
    order = np.random.default_rng(seed)
    for p in range(repeats):
        for done, i in enumerate(order.permutation(len(shapes)), start=p * len(shapes) + 1):
            probe.maybe_sample()
            shape = shapes[i]
            timings[i] += runner.time_batch_split(list(shape.prefill_lens), list(shape.decode_context_lens), 1,
                                                  warmup=0)
            progress(done)
    rows = [shape_row(shape, [t.seconds for t in runs], runner.block_size, runs)
            for shape, runs in zip(shapes, timings)]
    if host:
        if not quiet:
            sys.stderr.write("profiling: the host work around the forward (a short replay on the engine)\n")
        engine_runner, result, served, forwards = calibration_replay(runner, runner.block_size)
        rows += host_rows(result)
        if not quiet:
            sys.stderr.write(f"profiling: the replay's {len(served)} batches again, each alone\n")
        rows += serving_rows(engine_runner, served, forwards, seed)
    probe.sample()
    rows += probe_rows(probe.samples, runner.block_size)
    progress(len(shapes) * repeats + 1)
    return rows


def save_raw(raw: pd.DataFrame, path) -> None:
    """A profile's measurements as CSV, written whole or not at all."""
    from engine.atomic import write_atomic

    write_atomic(path, lambda f: raw.to_csv(f, index=False))


def probe_rows(samples: SpeedSamples, block_size: int) -> list[dict]:
    """One row per probe sample: kind "probe", the probe's name, its shape's features and time."""
    rows = []
    for name, values in samples.times.items():
        prefill, decode = PROBE_SHAPES[name]
        for t in values:
            rows.append({**shape_row(Shape("probe", prefill, decode), [t], block_size), "probe": name})
    return rows


def kv_tokens_that_fit(spec: ModelSpec, device: str, dtype: str | None, fraction: float = 0.8) -> int:
    """Tokens of K/V that fit beside the weights: the largest shape a grid may ask for here."""
    from engine.runtime.cache import dtype_bytes, free_device_bytes
    from engine.runtime.runner import resolve_device, resolve_dtype

    dev = resolve_device(device)
    element = dtype_bytes(resolve_dtype(dtype, dev))
    free = free_device_bytes(dev)
    weights = spec.weight_bytes(element) if dev.type == "cuda" else 0  # the CPU budget is for KV alone
    return max(int((free - weights) * fraction) // spec.kv_bytes_per_token(element), 0)
