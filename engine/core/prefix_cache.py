"""Automatic prefix caching (vLLM >= 0.4, `enable_prefix_caching`): full KV blocks are keyed by their
tokens and reused by any later request whose prompt starts with the same blocks.

The control plane sees lengths, not token ids: a request carries opaque block keys
(SequenceGroup.block_keys), key i naming the tokens [0, (i + 1) block_size) of its stream (a chained
hash, which the data plane makes from token ids or from the workload's token identities), so two
requests share exactly the leading blocks their token streams share.

The rules (vLLM v0.4's block_manager_v1 and evictor, with the differences said):

- A full block gets its key (is registered) when its KV is computed: a prompt's full blocks when the
  prompt is admitted (the prefill computes them in that step's batch, so a request admitted later in the
  same step may already attend over them, as over the paper's shared prefix); a block of generated tokens,
  or any full block not registered yet, when its sequence frees it (finished, preempted, swapped out).
  vLLM registers a generated block as soon as it fills; here it waits for its holder to let go, which a
  later chat round, sent after the answer it continues, never notices, and which keeps a decode stretch's
  promise (docs/stretch.md) that nothing changes for a waiting request until someone finishes.
  Only one block per key: a recomputed copy of a cached block stays its sequence's own.
  Under chunked prefill a prompt's full blocks are keyed chunk by chunk instead, in the iteration whose
  chunk fills them (prompt_computed), so nobody hits a block a later chunk has yet to compute, and a
  prompt preempted part way keys only what its chunks computed.
- Admission looks the request's leading keys up: the cached ones (hits) are reused (a reference more,
  no prefill for their tokens: its prefill is n new tokens over c cached, Batch.prefill_cached_lens);
  the first miss ends the hits. A prefill computes at least its last token, so the hits stop one block
  short of a prompt of whole blocks all cached (vLLM leaves out the last block for the same reason).
  Admission asks for every block of the prompt, hit or not, as vLLM v0.4's can_allocate does (the base
  class's blocks_to_allocate): the cache shortens prefills, not the room a request must find.
- A partial last block is never keyed, so never shared across requests; copy on write stays as it was
  (samples and beams share a prompt's partial last block and copy it when they append).
- A registered block whose last reference goes is not free-listed: it waits, still keyed, in the evictor,
  and counts as free (admission and appends may take it). A block is evicted only when one is needed and
  no never-keyed block is free: least recently used first (the step its sequence last ran), ties to the
  block deepest in its prefix (vLLM's num_hashed_tokens), then the first freed.
- Samples and beams diverge after the prompt: a group of several sequences uses only its prompt's keys.
- Swapping moves a group's blocks to host memory and back into fresh blocks; their cached GPU copies
  stay in the evictor for whoever asks for them next.

KV usage (paper Fig. 2): a block the cache holds for running requests holds a token's K/V in every slot,
counted once however many requests hold it (cache_token_slots; each group leaves its cache_blocks out of
its own count). A cached block nobody holds is free space (external fragmentation while someone waits,
idle otherwise): it is evictable, so it is there for the next request as any free block is.
"""
from __future__ import annotations

import heapq

from engine.core.block_manager import BlockAllocator, BlockManager
from engine.core.blocks import blocks_for
from engine.core.sequence import SeqStatus, Sequence, SequenceGroup
from engine.core.system import SystemSpec


def block_manager_for(system: SystemSpec, num_gpu_blocks: int, num_cpu_blocks: int) -> BlockManager:
    """The vLLM system's block manager: with prefix caching or without."""
    if system.prefix_caching:
        return PrefixCachingBlockManager(system.block_size, num_gpu_blocks, num_cpu_blocks, system.watermark,
                                         system.prefill_policy == "chunked")
    return BlockManager(system.block_size, num_gpu_blocks, num_cpu_blocks, system.watermark)


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

    def eviction_order(self) -> list[int]:
        """The evictor's blocks, the next to be evicted first (for tests and reports)."""
        live = [e for e in self._heap if self._evictable.get(e[3]) == e[2]]
        return [e[3] for e in sorted(live)]


class PrefixCachingBlockManager(BlockManager):
    """vLLM's block manager with automatic prefix caching (module docstring). The paper's explicit
    shared prefix (SequenceGroup.prefix_len) is not used: the cache finds any shared prefix itself."""

    def __init__(self, block_size: int, num_gpu_blocks: int, num_cpu_blocks: int, watermark: float = 0.01,
                 by_chunk: bool = False):
        super().__init__(block_size, num_gpu_blocks, num_cpu_blocks, watermark)
        # chunked prefill: a prompt's blocks are keyed chunk by chunk (prompt_computed), not at admission
        self.by_chunk = by_chunk
        self._next_key: dict[int, int] = {}  # by_chunk: a prefilling prompt's next block to key, by its first seq
        self.cache = CachingBlockAllocator(num_gpu_blocks, "gpu")
        self.gpu = self.cache
        self._seq_keys: dict[int, tuple[int, ...]] = {}  # each sequence's usable keys, until it is freed
        self.tick = 0  # schedule() calls so far: the clock of least-recently-used
        self.num_prompt_tokens = 0  # at first admissions: prompt tokens, and those found cached
        self.num_hit_tokens = 0

    def begin_step(self) -> None:
        self.tick += 1
        self.cache.stamp = self.tick

    @property
    def cache_token_slots(self) -> int:
        return self.cache.num_in_use * self.block_size

    # --- lookups ------------------------------------------------------------------
    def prefix_blocks_of(self, group: SequenceGroup) -> int:
        return 0

    def _keys(self, group: SequenceGroup) -> tuple[int, ...]:
        """The group's keys its sequences all share: every key for one sequence, the prompt's for several."""
        if group.num_seqs > 1:
            return group.block_keys[:group.prompt_len // self.block_size]
        return group.block_keys

    def _hits(self, group: SequenceGroup) -> list[int]:
        """The cached blocks of the group's leading keys, up to the first miss, leaving each prefill at
        least one token to compute."""
        keys = self._keys(group)
        shortest = min(s.length for s in group.live_seqs())
        limit = min(len(keys), (shortest - 1) // self.block_size)
        lookup, hits = self.cache.block_of_key, []
        for key in keys[:limit]:
            block = lookup.get(key)
            if block is None:
                break
            hits.append(block)
        return hits

    def cached_tokens(self, group: SequenceGroup) -> int:
        return len(self._hits(group)) * self.block_size

    # --- admission -------------------------------------------------------------------
    def allocate(self, group: SequenceGroup) -> None:
        """Every table starts with the hits; then fresh blocks, the prompt's full ones registered (when
        the group's samples share them). Sets num_cached_tokens, cache_blocks and, at the group's first
        admission, cached_prompt_tokens."""
        seqs, cache, bs = group.live_seqs(), self.cache, self.block_size
        keys, hits = self._keys(group), self._hits(group)
        for block in hits:  # before any fresh block: an allocation may evict from the evictor
            cache.reuse(block)
            if len(seqs) > 1:
                cache.incref(block, len(seqs) - 1)
        num_hits = len(hits)
        group.prefix_blocks, group.num_cached_tokens, group.cache_blocks = 0, num_hits * bs, num_hits
        if group.first_token_s is None and not group.num_preemptions:  # (a chunked prompt may be preempted
            group.cached_prompt_tokens = num_hits * bs                  # before its first token: not again)
            self.num_prompt_tokens += group.prompt_len
            self.num_hit_tokens += num_hits * bs
        if self.by_chunk:  # nothing computed beyond the hits yet: prompt_computed keys the rest
            for seq in seqs:
                self._seq_keys[seq.seq_id] = keys[:num_hits]
            if group.shares_prompt:
                self._next_key[seqs[0].seq_id] = num_hits
        else:
            for seq in seqs:
                self._seq_keys[seq.seq_id] = keys
        if not group.shares_prompt:  # diverged samples: each its own blocks after the hits
            for seq in seqs:
                self.block_tables[seq.seq_id] = hits + [cache.allocate()
                                                        for _ in range(blocks_for(seq.length, bs) - num_hits)]
                self._table_changed(seq.seq_id)
            return
        own = [cache.allocate() for _ in range(blocks_for(seqs[0].length, bs) - num_hits)]
        for block in own:
            cache.incref(block, len(seqs) - 1)
        if not self.by_chunk:
            group.cache_blocks += self._register_prompt(own, keys, num_hits, seqs[0].length)
        for seq in seqs:
            self.block_tables[seq.seq_id] = hits + own
            self._table_changed(seq.seq_id)

    def _register_prompt(self, own: list[int], keys: tuple[int, ...], first: int, length: int) -> int:
        """Key the full blocks the prefill computes, from block `first`, up to the first key cached
        already; returns how many (they follow the hits in every table)."""
        lookup, end = self.cache.block_of_key, min(len(keys), length // self.block_size)
        for i in range(first, end):
            if keys[i] in lookup:
                return i - first
            self.cache.register(own[i - first], keys[i], i)
        return max(end - first, 0)

    def prompt_computed(self, group: SequenceGroup, num_tokens: int) -> int:
        """Chunked prefill, in the iteration whose chunk computes the prompt up to num_tokens: key the
        full blocks it fills, from where the last chunk left off up to the first key cached already (as
        _register_prompt does for a whole prompt; none after that one), and let a preemption or a finish
        key only what is computed. Adds them to the group's cache_blocks and returns how many."""
        seqs = group.live_seqs()
        keys, bs = self._keys(group), self.block_size
        done = min(len(keys), num_tokens // bs)
        computed = keys if num_tokens >= seqs[0].length else keys[:done]
        for seq in seqs:
            self._seq_keys[seq.seq_id] = computed
        first = self._next_key.get(seqs[0].seq_id)
        if first is None or done <= first:
            return 0
        table, lookup = self.block_tables[seqs[0].seq_id], self.cache.block_of_key
        keyed = 0
        for i in range(first, done):
            if keys[i] in lookup:  # someone keyed it first: this prompt keys no more
                del self._next_key[seqs[0].seq_id]
                break
            self.cache.register(table[i], keys[i], i)
            keyed += 1
        else:
            self._next_key[seqs[0].seq_id] = done
        group.cache_blocks += keyed
        return keyed

    # --- giving blocks back ------------------------------------------------------------
    def _register_computed(self, seq: Sequence) -> None:
        """Key the sequence's full blocks whose KV is computed (all its tokens but the last sampled) and
        that it alone holds, so that they stay cached once it lets go of them."""
        table = self.block_tables[seq.seq_id]
        keys, cache = self._seq_keys.get(seq.seq_id, ()), self.cache
        computed = min(len(keys), (seq.length - 1) // self.block_size, len(table))
        lookup, ref_counts = cache.block_of_key, cache.ref_counts
        for i in range(computed):
            block = table[i]
            if ref_counts[block] == 1 and block not in cache.key_of_block and keys[i] not in lookup:
                cache.register(block, keys[i], i)

    def free(self, seq: Sequence) -> None:
        if seq.seq_id not in self.block_tables:
            return
        if seq.status is not SeqStatus.SWAPPED:
            # a sequence preempted in this schedule() last ran in the one before; a finished one in this one
            self.cache.stamp = self.tick - 1 if seq.status is SeqStatus.WAITING else self.tick
            self._register_computed(seq)
        self._seq_keys.pop(seq.seq_id, None)
        self._next_key.pop(seq.seq_id, None)
        super().free(seq)
        self.cache.stamp = self.tick

    def swap_out(self, group: SequenceGroup) -> list[tuple[int, int]]:
        """As without the cache; the GPU copies of its computed full blocks stay cached (evictable)."""
        self.cache.stamp = self.tick - 1  # preempted in this schedule(): last ran in the one before
        for seq in group.live_seqs():
            self._register_computed(seq)
        group.cache_blocks = 0  # it comes back in fresh blocks of its own
        mapping = super().swap_out(group)
        self.cache.stamp = self.tick
        return mapping

    @property
    def hit_rate(self) -> float:
        """Prompt tokens found cached over prompt tokens, at first admissions (nan before any)."""
        return self.num_hit_tokens / self.num_prompt_tokens if self.num_prompt_tokens else float("nan")
