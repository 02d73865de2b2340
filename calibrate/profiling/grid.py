"""The batch shapes a profile measures: prefill-only, decode-only, and mixed iterations."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shape:
    kind: str  # prefill | decode | decode_mixed | mixed
    prefill_lens: tuple[int, ...]
    decode_context_lens: tuple[int, ...]

    @property
    def kv_tokens(self) -> int:
        return sum(self.prefill_lens) + sum(self.decode_context_lens)


@dataclass(frozen=True)
class Grid:
    prefill_tokens: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
    prefill_batches: tuple[int, ...] = (1, 2, 4, 8)
    decode_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    decode_contexts: tuple[int, ...] = (16, 64, 256, 1024, 2048)
    mixed_prefill_tokens: tuple[int, ...] = (64, 256, 1024)
    mixed_decode_batches: tuple[int, ...] = (4, 16, 64)
    mixed_decode_context: int = 512
    # decodes timed again at every block size of a block-size sweep (`profile(block_sizes=...)`)
    sweep_decode_batches: tuple[int, ...] = (1, 8, 32)
    sweep_decode_contexts: tuple[int, ...] = (64, 256, 1024)
    max_kv_tokens: int = 1 << 20  # cap on K/V held by one shape (the pool must hold it)
    max_seq_len: int = 2048
    seed: int = 0

    def shapes(self) -> list[Shape]:
        rng = np.random.default_rng(self.seed)
        shapes = []
        for total in self.prefill_tokens:
            for batch in self.prefill_batches:
                prompt = total // batch
                if 8 <= prompt <= self.max_seq_len:
                    shapes.append(Shape("prefill", (prompt,) * batch, ()))
        for batch in self.decode_batches:
            for context in self.decode_contexts:
                if context <= self.max_seq_len:
                    shapes.append(Shape("decode", (), (context,) * batch))
            # ragged contexts, as a real batch has them
            contexts = rng.integers(16, self.max_seq_len, size=batch)
            shapes.append(Shape("decode_mixed", (), tuple(int(c) for c in contexts)))
        for prefill in self.mixed_prefill_tokens:
            for batch in self.mixed_decode_batches:
                contexts = rng.integers(16, 2 * self.mixed_decode_context, size=batch)
                shapes.append(Shape("mixed", (min(prefill, self.max_seq_len),), tuple(int(c) for c in contexts)))
        return [s for s in shapes if s.kv_tokens <= self.max_kv_tokens]

    def block_sweep_shapes(self) -> list[Shape]:
        """Uniform decodes to time at each block size: blocks read vary, bytes read do not."""
        shapes = [Shape("block_sweep", (), (context,) * batch)
                  for batch in self.sweep_decode_batches for context in self.sweep_decode_contexts
                  if context <= self.max_seq_len]
        return [s for s in shapes if s.kv_tokens <= self.max_kv_tokens]


def default_grid(device: str) -> str:
    """The grid a device is profiled over when none is named: the CPU's own, else the GPU default."""
    return "cpu" if device == "cpu" else "default"


GRIDS = {
    "default": Grid(),
    # for a CPU engine: the iterations a CPU serves (small batches, short contexts, at most
    # 2,048 tokens of KV), every batch size up to 16 because the BLAS changes kernels at sizes
    # there (4 rows cost 60% more than 3; 9 to 15 more than 16); past that much KV the CPU
    # attention path leaves the caches and the cost turns irregular. Sizes between the powers
    # of two, so that cross-validation tests the table between its knots.
    # About 2 minutes for OPT-125M on one core (3 passes).
    "cpu": Grid(prefill_tokens=(16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512), prefill_batches=(1, 2, 4),
                decode_batches=(*range(1, 17), 24, 32), decode_contexts=(16, 64, 128, 256, 512),
                mixed_prefill_tokens=(32, 64, 128, 256), mixed_decode_batches=(2, 4, 8, 16),
                mixed_decode_context=128, max_kv_tokens=2048, max_seq_len=512),
    # for tests: a handful of tiny shapes
    "tiny": Grid(prefill_tokens=(16, 32, 64), prefill_batches=(1, 2), decode_batches=(1, 2, 4),
                 decode_contexts=(16, 48), mixed_prefill_tokens=(16,), mixed_decode_batches=(2,),
                 mixed_decode_context=32, max_kv_tokens=512, max_seq_len=64),
}
