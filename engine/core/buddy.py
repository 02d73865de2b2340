"""Buddy allocation over KV blocks, as the authors assumed for Orca (Kwon et al. 2023, 6.1)."""
from __future__ import annotations

import bisect


def next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


class BuddyAllocator:
    """Power-of-two chunks of contiguous blocks.

    The pool is pre-split greedily into the largest power-of-two chunks that fit, from
    `max_chunk` down to 1 (the authors' code); allocation takes the smallest free chunk
    that fits and splits it; freeing merges buddies but never across a pre-split root.
    """

    def __init__(self, num_blocks: int, max_chunk: int):
        self.num_blocks = num_blocks
        self.max_chunk = next_pow2(max_chunk)
        self._free: dict[int, list[int]] = {}  # chunk size -> sorted start offsets
        self._allocated: dict[int, int] = {}  # start -> size
        self._root_starts: list[int] = []
        self._root_sizes: list[int] = []
        start, size = 0, self.max_chunk
        while size >= 1:
            while start + size <= num_blocks:
                self._root_starts.append(start)
                self._root_sizes.append(size)
                self._insert_free(start, size)
                start += size
            size //= 2
        self.num_free = num_blocks
        self.version = 0  # counts the allocations and frees: a verdict of can_allocate holds while it stands

    def _insert_free(self, start: int, size: int) -> None:
        bisect.insort(self._free.setdefault(size, []), start)

    def _remove_free(self, start: int, size: int) -> bool:
        starts = self._free.get(size)
        if not starts:
            return False
        i = bisect.bisect_left(starts, start)
        if i < len(starts) and starts[i] == start:
            starts.pop(i)
            return True
        return False

    def _root_size(self, start: int) -> int:
        return self._root_sizes[bisect.bisect_right(self._root_starts, start) - 1]

    def chunk_size(self, num_blocks: int) -> int:
        return next_pow2(num_blocks)

    def can_allocate(self, sizes: list[int]) -> bool:
        """Whether every size fits at once (a request's n sequences reserve together)."""
        if sum([self.chunk_size(n) for n in sizes]) > self.num_free:
            return False  # the chunks outsize the free blocks, however they lie
        free = {s: len(v) for s, v in self._free.items() if v}
        for size in sorted((self.chunk_size(n) for n in sizes), reverse=True):
            fit = min((s for s, c in free.items() if s >= size and c), default=None)
            if fit is None:
                return False
            free[fit] -= 1
            while fit > size:  # the split leaves one free buddy at each level
                fit //= 2
                free[fit] = free.get(fit, 0) + 1
        return True

    def allocate(self, num_blocks: int) -> int:
        size = self.chunk_size(num_blocks)
        fit = min((s for s, v in self._free.items() if s >= size and v), default=None)
        if fit is None:
            raise RuntimeError(f"no free chunk of {size} blocks")
        start = self._free[fit].pop(0)
        while fit > size:
            fit //= 2
            self._insert_free(start + fit, fit)
        self._allocated[start] = size
        self.num_free -= size
        self.version += 1
        return start

    def free(self, start: int) -> None:
        size = self._allocated.pop(start, None)
        if size is None:
            raise RuntimeError(f"free of unallocated chunk at block {start}")
        self.num_free += size
        self.version += 1
        root_size = self._root_size(start)
        root_start = self._root_starts[bisect.bisect_right(self._root_starts, start) - 1]
        while size < root_size:
            buddy = root_start + ((start - root_start) ^ size)
            if not self._remove_free(buddy, size):
                break
            start, size = min(start, buddy), size * 2
        self._insert_free(start, size)
