"""A block-size sweep: the same decodes, and swaps of the same tokens, timed at several block sizes.

At one block size the blocks a decode reads are its context / block size plus about half a block, so a
fit cannot tell the kernel's cost per block from its cost per token (or per sequence); nor a swap's cost
per copy from its cost per byte. Timed at several sizes, the blocks and copies change while the tokens
and bytes do not, and the fit (calibrate/fitting/fit.py) tells them apart: decode_block_s, swap_s_per_copy.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from calibrate.profiling.grid import Shape
from calibrate.profiling.rows import shape_row, swap_rows
from engine.core.blocks import blocks_for

# (block_size, gpu blocks, cpu blocks) -> a runner over the profile's model with pools of that block size
RunnerFactory = Callable[[int, int, int], object]


@dataclass
class BlockSweep:
    shapes: list[Shape]  # Grid.block_sweep_shapes()
    block_sizes: list[int]  # empty: no sweep
    swap_tokens: int  # tokens swapped out and in at every block size (blocks of the grid's size, in tokens)
    repeats: int
    warmup: int
    seed: int

    @property
    def timed_runs(self) -> int:
        return len(self.shapes) * len(self.block_sizes) * self.repeats

    def swap_blocks(self, block_size: int) -> int:
        return max(self.swap_tokens // block_size, 2)

    def rows(self, make_runner: RunnerFactory, grid_block_size: int, done: int,
             progress: Callable[[int], None]) -> list[dict]:
        """The sweep's shapes at every block size (each in shuffled passes on a runner of its own, made and
        dropped in turn so one pool holds the memory at a time), and the swaps at every size but the grid's
        (its runner timed those)."""
        rows: list[dict] = []
        order = np.random.default_rng(self.seed)
        for block_size in self.block_sizes:
            swaps = self.swap_blocks(block_size) if block_size != grid_block_size else 0
            pool = max([blocks_for(s.kv_tokens, block_size) + len(s.decode_context_lens) for s in self.shapes]
                       + [swaps, 1])
            runner = make_runner(block_size, pool, swaps)
            for shape in self.shapes:  # one-off costs, untimed
                runner.time_batch([], list(shape.decode_context_lens), 0, warmup=self.warmup)
            timings: list[list] = [[] for _ in self.shapes]
            for _ in range(self.repeats):
                for i in order.permutation(len(self.shapes)):
                    timings[i] += runner.time_batch_split([], list(self.shapes[i].decode_context_lens), 1,
                                                          warmup=0)
                    done += 1
                    progress(done)
            rows += [shape_row(shape, [t.seconds for t in runs], block_size, runs)
                     for shape, runs in zip(self.shapes, timings)]
            if swaps:
                rows += swap_rows(runner, self.repeats, self.warmup, swaps)
            del runner
        return rows
