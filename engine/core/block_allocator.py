"""Physical KV blocks: a free list with reference counts, and the keyed blocks of the prefix cache.

A block a sequence's table holds has a reference per holder. A keyed block (its KV is that of a known run of
tokens: engine.core.block_manager) freed by its last holder is not free-listed: it waits in an evictor, still
keyed, for a request that hits it, and counts as free; it is evicted only when a block is needed and no
never-keyed block is free, least recently used first.
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence


class BlockAllocator:
    """A free list of physical blocks with reference counts.

    `num_shared_refs` is the sum over used blocks of (ref_count - 1): the references beyond the
    first, i.e. the blocks sharing saves. It is kept as references come and go (allocate, incref,
    free), so every change to a block table that goes through them is counted, and reading it is O(1).
    """

    def __init__(self, num_blocks: int, name: str = "gpu"):
        self.num_blocks = num_blocks
        self.name = name
        # pop() from the end hands out low block ids first: easier to read in a trace
        self._free = list(range(num_blocks - 1, -1, -1))
        self.ref_counts = [0] * num_blocks
        self.num_shared_refs = 0

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError(f"out of {self.name} blocks")
        block = self._free.pop()
        self.ref_counts[block] = 1
        return block

    def incref(self, block: int, by: int = 1) -> None:
        if self.ref_counts[block] <= 0:
            raise RuntimeError(f"reference to free {self.name} block {block}")
        self.ref_counts[block] += by
        self.num_shared_refs += by

    def free(self, block: int) -> None:
        refs = self.ref_counts[block]
        if refs <= 0:
            raise RuntimeError(f"double free of {self.name} block {block}")
        self.ref_counts[block] = refs - 1
        if refs == 1:
            self._free.append(block)
        else:
            self.num_shared_refs -= 1


class CachingBlockAllocator(BlockAllocator):
    """GPU blocks with keys: a keyed block freed by its last holder waits in an LRU evictor, still
    keyed, and is taken back when a request hits it or evicted when a block is needed and the free
    list (blocks never keyed) is empty. num_free counts both."""

    def __init__(self, num_blocks: int, name: str = "gpu"):
        super().__init__(num_blocks, name)
        self.block_of_key: dict[int, int] = {}
        self.key_of_block: dict[int, int] = {}
        self.depth_of_block: dict[int, int] = {}  # its index in its prefix: the deeper, the sooner evicted on a tie
        self.stamp = 0  # when blocks freed now were last used (the manager sets it)
        self.num_in_use = 0  # keyed blocks some table holds
        self.num_evictions = 0
        # the evictor: entry numbers of the blocks in it, and a heap of (stamp, -depth, entry, block) where
        # an entry whose block was taken back since is skipped (lazily deleted)
        self._evictable: dict[int, int] = {}
        self._heap: list[tuple[int, int, int, int]] = []
        self._entries = 0

    @property
    def num_free(self) -> int:
        return len(self._free) + len(self._evictable)

    @property
    def num_evictable(self) -> int:
        return len(self._evictable)

    def allocate(self) -> int:
        block = self._free.pop() if self._free else self._evict()
        self.ref_counts[block] = 1
        return block

    def free(self, block: int) -> None:
        refs = self.ref_counts[block]
        if refs <= 0:
            raise RuntimeError(f"double free of {self.name} block {block}")
        self.ref_counts[block] = refs - 1
        if refs > 1:
            self.num_shared_refs -= 1
        elif block in self.key_of_block:
            self.num_in_use -= 1
            self._entries += 1
            self._evictable[block] = self._entries
            heapq.heappush(self._heap, (self.stamp, -self.depth_of_block[block], self._entries, block))
            if len(self._heap) > 2 * len(self._evictable) + 64:  # drop the skipped entries now and then
                self._heap = [e for e in self._heap if self._evictable.get(e[3]) == e[2]]
                heapq.heapify(self._heap)
        else:
            self._free.append(block)

    def reuse(self, block: int) -> None:
        """A hit: one more holder of a keyed block, taken back from the evictor if nobody held it."""
        if self.ref_counts[block] == 0:
            del self._evictable[block]
            self.ref_counts[block] = 1
            self.num_in_use += 1
        else:
            self.incref(block)

    def register(self, block: int, key: int, depth: int) -> None:
        """The block's KV is that of the key's tokens: later requests may hit it."""
        self.block_of_key[key] = block
        self.key_of_block[block] = key
        self.depth_of_block[block] = depth
        if self.ref_counts[block] > 0:
            self.num_in_use += 1

    def _evict(self) -> int:
        heap, evictable = self._heap, self._evictable
        while heap:
            _, _, entry, block = heapq.heappop(heap)
            if evictable.get(block) == entry:
                del evictable[block]
                del self.block_of_key[self.key_of_block.pop(block)]
                del self.depth_of_block[block]
                self.num_evictions += 1
                return block
        raise RuntimeError(f"out of {self.name} blocks")

    def num_cached_leading(self, keys: Sequence[int]) -> int:
        """How many of `keys`, from the first, name blocks this cache holds now (held, pinned or waiting in the
        evictor): where a router reads how much of a prompt's prefix a replica would find. Changes nothing, not
        even the evictor's order, so asking never alters the run."""
        lookup, count = self.block_of_key, 0
        for key in keys:
            if key not in lookup:
                break
            count += 1
        return count

    def eviction_order(self) -> list[int]:
        """The evictor's blocks, the next to be evicted first (for tests and reports)."""
        live = [e for e in self._heap if self._evictable.get(e[3]) == e[2]]
        return [e[3] for e in sorted(live)]
