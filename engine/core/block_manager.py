"""vLLM's paged KV cache bookkeeping (paper-era rules, Kwon et al. 2023 section 4)."""
from __future__ import annotations

from collections.abc import Iterable

from engine.core.blocks import blocks_for
from engine.core.sequence import SeqStatus, Sequence, SequenceGroup


def appends_fit(num_seqs: int, num_free: int) -> bool:
    """vLLM's paper-era rule for letting sequences take their next slots: a free block for each, whether it
    needs one or not (conservative). schedule() preempts until it holds; a decode stretch ends before it
    would fail."""
    return num_seqs <= num_free


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


class BlockManager:
    """Maps each sequence's logical blocks to physical ones, sharing by reference count.

    A sequence of `length` tokens holds ceil(length / block_size) blocks: the slot of its
    last sampled token is reserved when that token is fed back as the next decode's input.

    A workload's shared prefix (one per run, as the authors' `allocate_with_prefix`): its whole
    blocks are allocated once, when the first request using it is admitted, and stay cached until
    `release_prefix` (the scheduler calls it when the run ends). The manager holds one reference to
    each of them itself; every block table of a request using the prefix starts with them and
    holds one more. What is left of the prefix past its last whole block is part of each request's
    own prompt, as in the authors' generator.
    """

    def __init__(self, block_size: int, num_gpu_blocks: int, num_cpu_blocks: int, watermark: float = 0.01):
        self.block_size = block_size
        self.gpu = BlockAllocator(num_gpu_blocks, "gpu")
        self.cpu = BlockAllocator(num_cpu_blocks, "cpu")
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.block_tables: dict[int, list[int]] = {}
        self.prefix_table: list[int] = []  # the cached shared prefix's GPU blocks
        # the sequences whose block tables changed (made, grown, copied on write, forked, moved, freed) since
        # the owner last took them (take_changed_tables); kept only once track_table_changes() is called
        self._changed_tables: set[int] | None = None

    def track_table_changes(self, on: bool) -> None:
        """Whether to note which sequences' tables change (a scheduler turns it on while beam searches run)."""
        if not on:
            self._changed_tables = None
        elif self._changed_tables is None:
            self._changed_tables = set()

    def take_changed_tables(self) -> set[int]:
        """The sequences whose tables changed since the last call (tracking must be on); forgets them."""
        changed = self._changed_tables
        assert changed is not None, "track_table_changes(True) first"
        self._changed_tables = set()
        return changed

    def _table_changed(self, seq_id: int) -> None:
        if self._changed_tables is not None:
            self._changed_tables.add(seq_id)

    # --- automatic prefix caching (engine.core.prefix_cache overrides) ---------------
    def begin_step(self) -> None:
        """schedule() starts a step: the prefix cache's clock for least-recently-used (nothing here)."""

    def prompt_computed(self, group: SequenceGroup, num_tokens: int) -> int:
        """Chunked prefill: this iteration's chunk computes the group's prompt up to num_tokens. The
        prefix cache keys the full blocks computed so far; returns how many blocks it keyed now (none here)."""
        return 0

    @property
    def cache_token_slots(self) -> int:
        """Slots of the blocks the prefix cache holds for running requests, counted once (none here)."""
        return 0

    # --- the shared prefix -------------------------------------------------------
    def prefix_blocks_of(self, group: SequenceGroup) -> int:
        """Blocks of the group's prompt the shared prefix fills whole (the rest is its own input)."""
        return group.prefix_len // self.block_size

    def _blocks_to_cache(self, prefix_blocks: int) -> int:
        if not prefix_blocks or self.prefix_table:
            return 0
        return prefix_blocks

    def _use_prefix(self, prefix_blocks: int) -> int:
        """The cached prefix's blocks, caching them now if no request has; returns the prompt tokens
        already cached: 0 for the request that caches them (its prefill computes them, once)."""
        if not prefix_blocks:
            return 0
        if self.prefix_table:
            if len(self.prefix_table) != prefix_blocks:
                raise ValueError(f"one shared prefix per run: {len(self.prefix_table)} blocks are cached, "
                                 f"a request asks for {prefix_blocks}")
            return prefix_blocks * self.block_size
        self.prefix_table = [self.gpu.allocate() for _ in range(prefix_blocks)]
        return 0

    def cached_tokens(self, group: SequenceGroup) -> int:
        """Prompt tokens of the group whose KV is already in the cache: the shared prefix's whole
        blocks, once a request has cached them (what allocate() will set as num_cached_tokens)."""
        return self.prefix_blocks_of(group) * self.block_size if self.prefix_table else 0

    def release_prefix(self) -> None:
        """Drop the manager's own hold on the prefix (tables still holding it keep their references)."""
        for block in self.prefix_table:
            self.gpu.free(block)
        self.prefix_table = []

    # --- admission -------------------------------------------------------------
    def blocks_to_allocate(self, group: SequenceGroup) -> int:
        seqs = group.live_seqs()
        prefix = self.prefix_blocks_of(group)
        cache = self._blocks_to_cache(prefix)
        if group.shares_prompt:
            return cache + blocks_for(seqs[0].length, self.block_size) - prefix
        return cache + sum(blocks_for(s.length, self.block_size) - prefix for s in seqs)

    def can_allocate(self, group: SequenceGroup) -> bool:
        return self.gpu.num_free - self.blocks_to_allocate(group) >= self.watermark_blocks

    def allocate(self, group: SequenceGroup) -> None:
        """The prompt's blocks, once, shared by every live sequence of the group; or, for a
        group whose samples diverged and are recomputed apart, each sample's own blocks. Either
        way a table starts with the cached shared prefix when the group uses one. Sets the
        group's prefix_blocks and num_cached_tokens (see SequenceGroup)."""
        seqs = group.live_seqs()
        prefix_blocks = self.prefix_blocks_of(group)
        group.num_cached_tokens = self._use_prefix(prefix_blocks)
        group.prefix_blocks = prefix_blocks
        prefix = self.prefix_table if prefix_blocks else []
        for block in prefix:
            self.gpu.incref(block, len(seqs))
        if not group.shares_prompt:
            for seq in seqs:
                num_blocks = blocks_for(seq.length, self.block_size) - prefix_blocks
                self.block_tables[seq.seq_id] = prefix + [self.gpu.allocate() for _ in range(num_blocks)]
                self._table_changed(seq.seq_id)
            return
        own = [self.gpu.allocate() for _ in range(blocks_for(seqs[0].length, self.block_size) - prefix_blocks)]
        for block in own:
            self.gpu.incref(block, len(seqs) - 1)
        for seq in seqs:
            self.block_tables[seq.seq_id] = prefix + own
            self._table_changed(seq.seq_id)

    # --- growth ----------------------------------------------------------------
    def can_append(self, num_running_seqs: int) -> bool:
        """Whether a group of that many running sequences may take its next slots."""
        return appends_fit(num_running_seqs, self.gpu.num_free)

    def append_slots(self, seqs: Iterable[Sequence], copies: list[tuple[int, int]]) -> None:
        """Make room in each sequence's table, in turn, for the token at position length - 1, adding the
        copies on write to `copies`: a block when its last one is full, else a copy of a shared last block.
        schedule() calls it for the whole batch (one call: most sequences need nothing, and a call per
        sequence cost more than that); a decode stretch calls it once for the blocks its iterations take
        (docs/stretch.md)."""
        tables, bs, gpu = self.block_tables, self.block_size, self.gpu
        ref_counts, allocate = gpu.ref_counts, gpu.allocate
        for seq in seqs:
            table = tables[seq.seq_id]
            if len(table) * bs < seq.length:
                table.append(allocate())
                self._table_changed(seq.seq_id)
            elif ref_counts[table[-1]] != 1:
                copies.append(self._copy_last_block(table))
                self._table_changed(seq.seq_id)

    def _copy_last_block(self, table: list[int]) -> tuple[int, int]:
        """Copy on write: the table's shared last block is replaced by a fresh one the data plane fills."""
        last = table[-1]
        fresh = self.gpu.allocate()
        table[-1] = fresh
        self.gpu.free(last)
        return last, fresh

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Beam search: the child drops its blocks and continues the parent's, shared by reference
        count (paper-era `fork`: the table is copied, every block gains a holder, nothing is
        allocated). A shared last block is copied on the next append_slots."""
        table = self.block_tables[parent.seq_id]
        for block in table:
            self.gpu.incref(block)
        for block in self.block_tables[child.seq_id]:
            self.gpu.free(block)
        self.block_tables[child.seq_id] = list(table)
        self._table_changed(child.seq_id)

    def held_token_slots(self, group: SequenceGroup) -> int:
        """Slots of the group's GPU blocks holding a token's K/V, each block once however many beams
        hold it, filled as its first holder's table fills it (a token sampled but not yet given a slot
        is not counted). The blocks a table shares with the group's others are a prefix of it, at the same
        places: a fork copies a whole table, and a copy on write or a new block changes only its end. So a
        table's blocks past its longest shared prefix with the tables before it are its own, and no block
        need be looked up in a set (which cost most of a beam search's recount)."""
        bs, slots = self.block_size, 0
        before: list[list[int]] = []
        for seq in group.live_seqs():
            table, length = self.block_tables[seq.seq_id], seq.length
            start = 0
            for other in before:
                shared = shared_prefix(table, other)
                if shared > start:
                    start = shared
            before.append(table)
            full = min(length // bs, len(table))
            if start < full:
                slots += (full - start) * bs
            for i in range(max(start, full), len(table)):  # the last one or two, partly filled
                slots += min(bs, length - i * bs)
        return slots

    def free(self, seq: Sequence) -> None:
        table = self.block_tables.pop(seq.seq_id, None)
        if table is None:
            return
        self._table_changed(seq.seq_id)
        allocator = self.cpu if seq.status is SeqStatus.SWAPPED else self.gpu
        for block in table:
            allocator.free(block)

    # --- swapping --------------------------------------------------------------
    def _unique_blocks(self, group: SequenceGroup) -> int:
        return len({b for s in group.live_seqs() for b in self.block_tables[s.seq_id]})

    def can_swap_out(self, group: SequenceGroup) -> bool:
        return self._unique_blocks(group) <= self.cpu.num_free

    def blocks_to_swap_in(self, group: SequenceGroup) -> int:
        """The free blocks a swapped-out group takes to come back: its own, and a spare one per sequence for
        the appends of the step that swaps it in."""
        return self._unique_blocks(group) + len(group.live_seqs())

    def can_swap_in(self, group: SequenceGroup) -> bool:
        return self.gpu.num_free - self.blocks_to_swap_in(group) >= self.watermark_blocks

    def swap_out(self, group: SequenceGroup) -> list[tuple[int, int]]:
        """Every block of the group to host memory; the shared prefix's too, as a private copy: the
        group comes back holding its own copy of the prefix (the cache keeps the original)."""
        group.prefix_blocks = 0
        return self._move(group, self.gpu, self.cpu)

    def swap_in(self, group: SequenceGroup) -> list[tuple[int, int]]:
        return self._move(group, self.cpu, self.gpu)

    def _move(self, group: SequenceGroup, src: BlockAllocator, dst: BlockAllocator) -> list[tuple[int, int]]:
        """Move every live sequence's blocks; sharing survives, mapped one to one."""
        mapping: dict[int, int] = {}
        for seq in group.live_seqs():
            table = self.block_tables[seq.seq_id]
            for i, block in enumerate(table):
                if block in mapping:
                    dst.incref(mapping[block])
                else:
                    mapping[block] = dst.allocate()
                src.free(block)
                table[i] = mapping[block]
            self._table_changed(seq.seq_id)
        return list(mapping.items())

    # --- accounting ------------------------------------------------------------
    @property
    def num_used_gpu_blocks(self) -> int:
        return self.gpu.num_blocks - self.gpu.num_free

    @property
    def num_unshared_blocks(self) -> int:
        """GPU blocks the sequences would hold without sharing: one per block-table entry. The
        cached prefix's own hold is not a sequence's, so its blocks count only in tables."""
        return self.num_used_gpu_blocks + self.gpu.num_shared_refs - len(self.prefix_table)

    @property
    def num_saved_blocks(self) -> int:
        """GPU blocks sharing saves now: num_unshared_blocks less the distinct blocks the sequences
        hold. Every reference beyond a block's first, except the cache's hold on a prefix block
        that some table holds too: k requests over a P-block prefix save (k - 1) P, not k P."""
        saved = self.gpu.num_shared_refs
        prefix = self.prefix_table
        if prefix and self.gpu.ref_counts[prefix[0]] > 1:  # every table holding the prefix holds all of it
            saved -= len(prefix)
        return saved


def shared_prefix(table: list[int], other: list[int]) -> int:
    """How many leading blocks two tables of one group have in common: a binary search, as the blocks they
    share are a prefix of both (BlockManager.held_token_slots)."""
    low, high = 0, min(len(table), len(other))
    while low < high:
        middle = (low + high) // 2
        if table[middle] == other[middle]:
            low = middle + 1
        else:
            high = middle
    return low
