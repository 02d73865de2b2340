"""vLLM's paged KV cache: block tables over reference-counted blocks (Kwon et al. 2023 section 4), and the
prefix cache that lets requests share the leading blocks their token streams share.

A sequence of `length` tokens holds ceil(length / block_size) blocks: the slot of its last sampled token is
reserved when that token is fed back as the next decode's input. The samples of a request share its prompt's
blocks, forked beams share their parent's, a shared last block is copied on write.

The prefix cache (vLLM >= 0.4's `enable_prefix_caching`, block_manager_v1 and its evictor, with the
differences said). The control plane sees lengths, not token ids: a request carries opaque block keys
(SequenceGroup.block_keys), key i naming the tokens [0, (i + 1) block_size) of its stream (a chained hash the
data plane makes from token ids or from the workload's token identities).

- A full block gets its key (is registered) when its KV is computed: a prompt's full blocks when the prompt
  is admitted (the prefill computes them in that step's batch, so a request admitted later in the same step
  may already attend over them); a block of generated tokens, or any full block not registered yet, when its
  sequence frees it (finished, preempted, swapped out). vLLM registers a generated block as soon as it fills;
  here it waits for its holder to let go, which a later chat round, sent after the answer it continues, never
  notices, and which keeps a decode stretch's promise (docs/concepts/fast-forward.md) that nothing changes for a waiting
  request until someone finishes. Only one block per key: a recomputed copy of a cached block stays its
  sequence's own. Under chunked prefill a prompt's full blocks are keyed chunk by chunk instead, in the
  iteration whose chunk fills them (prompt_computed), so nobody hits a block a later chunk has yet to compute.
- Admission looks the request's leading keys up: the cached ones (hits) are reused (a reference more, no
  prefill for their tokens: its prefill is n new tokens over c cached, Batch.prefill_cached_lens); the first
  miss ends the hits. A prefill computes at least its last token, so the hits stop one block short of a prompt
  of whole blocks all cached (vLLM leaves out the last block for the same reason). Admission asks for every
  block of the prompt, hit or not, as vLLM v0.4's can_allocate does, except the pinned ones (below): the cache
  shortens prefills, not the room a request must find.
- A partial last block is never keyed, so never shared across requests.
- A registered block whose last reference goes is not free-listed: it waits, still keyed, in the evictor, and
  counts as free (engine.core.block_allocator).
- Samples and beams diverge after the prompt: a group of several sequences uses only its prompt's keys.
- Swapping moves a group's blocks to host memory and back into fresh blocks; their cached GPU copies stay in
  the evictor for whoever asks for them next.

The paper's explicit shared prefix (SequenceGroup.prefix_len: a workload's few-shot examples, as the authors'
`allocate_with_prefix`) is the same mechanism with its keys pinned: its whole blocks are keyed (by
shared_prefix_keys when the system has no prefix cache, by the request's own keys when it has one), the
manager holds a reference to each of them from the moment the first request using them registers them until
the run ends (unpin), so they are never evicted, and admission does not ask room for the pinned blocks it
hits (they are not free, and never will be while pinned). Without a prefix cache, the shared prefix's keys
are the only ones registered. What is left of the prefix past its last whole block is part of each request's
own prompt, as in the authors' generator.

KV usage (paper Fig. 2): a keyed block running requests hold, pinned ones included, holds a token's K/V in
every slot, counted once however many requests hold it (cache_token_slots; each group leaves its
cache_blocks out of its own count). A cached block nobody holds is free space.
"""
from __future__ import annotations

from collections.abc import Iterable

from engine.core.block_allocator import BlockAllocator, CachingBlockAllocator
from engine.core.blocks import blocks_for
from engine.core.sequence import SeqStatus, Sequence, SequenceGroup
from engine.core.speculative import lookahead_slots

SHARED_PREFIX = -1  # block i of the explicit shared prefix is keyed hash((SHARED_PREFIX, i))


def appends_fit(num_seqs: int, num_free: int) -> bool:
    """vLLM's paper-era rule for letting sequences take their next slots: a free block for each, whether it
    needs one or not (conservative). schedule() preempts until it holds; a decode stretch ends before it
    would fail."""
    return num_seqs <= num_free


def shared_prefix_keys(num_blocks: int) -> tuple[int, ...]:
    """The keys of the explicit shared prefix's first num_blocks blocks, where no prefix cache keys prompts
    (a hash of a tuple of ints: the same on every machine and run)."""
    return tuple(hash((SHARED_PREFIX, i)) for i in range(num_blocks))


class BlockManager:
    """Maps each sequence's logical blocks to physical ones, sharing by reference count and by key (module
    docstring). prefix_caching: every request's prompt blocks are keyed (automatic prefix caching), else only
    an explicit shared prefix's; by_chunk (chunked prefill): a prompt's blocks are keyed chunk by chunk;
    appends_as_needed (vLLM V1): a group may take its next slots while the blocks they need are free, not only
    while a block per sequence is (can_append); lookahead (speculative decoding): the tokens a decoding
    sequence proposes a step, whose slots it takes beside its next token's and gives back once the step
    has said how many were accepted (give_back_lookahead)."""

    def __init__(self, block_size: int, num_gpu_blocks: int, num_cpu_blocks: int, watermark: float = 0.01,
                 prefix_caching: bool = False, by_chunk: bool = False, appends_as_needed: bool = False,
                 lookahead: int = 0):
        self.block_size = block_size
        self.gpu = CachingBlockAllocator(num_gpu_blocks, "gpu")
        self.cpu = BlockAllocator(num_cpu_blocks, "cpu")
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.prefix_caching = prefix_caching
        self.by_chunk = by_chunk
        self.appends_as_needed = appends_as_needed
        self.lookahead = lookahead
        self.block_tables: dict[int, list[int]] = {}
        self.pinned: list[int] = []  # the explicit shared prefix's blocks, held by the manager itself
        self._pin_keys: set[int] = set()  # the keys whose blocks are pinned once registered
        self._prefix_keys: tuple[int, ...] = ()  # shared_prefix_keys, as many as a request has asked for
        self._seq_keys: dict[int, tuple[int, ...]] = {}  # each sequence's usable keys, until it is freed
        self._next_key: dict[int, int] = {}  # by_chunk: a prefilling prompt's next block to key, by its first seq
        self.tick = 0  # schedule() calls so far: the clock of least-recently-used
        self.num_prompt_tokens = 0  # prefix caching, at first admissions: prompt tokens, and those found cached
        self.num_hit_tokens = 0
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

    def begin_step(self) -> None:
        """schedule() starts a step: the clock of least-recently-used moves on."""
        self.tick += 1
        self.gpu.stamp = self.tick

    # --- keys and lookups ------------------------------------------------------------
    def pinned_blocks_of(self, group: SequenceGroup) -> int:
        """Blocks of the group's prompt the explicit shared prefix fills whole (the rest is its own input)."""
        return group.prefix_len // self.block_size

    def _keys(self, group: SequenceGroup) -> tuple[int, ...]:
        """The keys the group's sequences all share: with a prefix cache, the request's (every one for one
        sequence, the prompt's for several); without, its shared prefix's."""
        if self.prefix_caching:
            if group.num_seqs > 1:
                return group.block_keys[:group.prompt_len // self.block_size]
            return group.block_keys
        num_blocks = group.prefix_len // self.block_size
        if not num_blocks:
            return ()
        if len(self._prefix_keys) < num_blocks:
            self._prefix_keys = shared_prefix_keys(num_blocks)
        return self._prefix_keys[:num_blocks]

    def _hits(self, group: SequenceGroup) -> list[int]:
        """The cached blocks of the group's leading keys, up to the first miss, leaving each prefill at least
        one token to compute."""
        if not self.prefix_caching:
            return self._prefix_hits(group)
        keys = self._keys(group)
        if not keys:
            return []
        shortest = min(s.length for s in group.live_seqs())
        limit = min(len(keys), (shortest - 1) // self.block_size)
        lookup, hits = self.gpu.block_of_key, []
        for key in keys[:limit]:
            block = lookup.get(key)
            if block is None:
                break
            hits.append(block)
        return hits

    def _prefix_hits(self, group: SequenceGroup) -> list[int]:
        """_hits without a prefix cache: the shared prefix's blocks are the only keyed ones, all pinned, and keyed
        in the order of their depth (a prompt's blocks are keyed first to last, and each prompt starts with the
        prefix), so the hits are the pinned blocks up to the group's limit, found without a lookup per block
        (which admission would repeat every step for the head of the queue)."""
        if not group.prefix_len or not self.pinned:
            return []
        shortest = min(s.length for s in group.live_seqs())
        return self.pinned[:min(group.prefix_len // self.block_size, (shortest - 1) // self.block_size)]

    def cached_tokens(self, group: SequenceGroup) -> int:
        """Prompt tokens of the group whose KV is already cached (what allocate() will set as num_cached_tokens)."""
        return len(self._hits(group)) * self.block_size

    def _register(self, block: int, key: int, depth: int) -> None:
        """The block's KV is that of the key's tokens: later requests may hit it; a shared prefix's, pinned."""
        self.gpu.register(block, key, depth)
        if key in self._pin_keys:
            self.gpu.incref(block)
            self.pinned.append(block)

    def unpin(self) -> None:
        """The run is over: the manager lets go of the shared prefix (tables still holding it keep theirs)."""
        for block in self.pinned:
            self.gpu.free(block)
        self.pinned = []

    # --- admission -------------------------------------------------------------------
    def blocks_to_allocate(self, group: SequenceGroup) -> int:
        seqs = group.live_seqs()
        pinned = min(len(self._hits(group)), self.pinned_blocks_of(group)) if group.prefix_len else 0
        if group.shares_prompt:
            return blocks_for(seqs[0].length, self.block_size) - pinned
        return sum(blocks_for(s.length, self.block_size) - pinned for s in seqs)

    def can_allocate(self, group: SequenceGroup) -> bool:
        return self.gpu.num_free - self.blocks_to_allocate(group) >= self.watermark_blocks

    def allocate(self, group: SequenceGroup) -> None:
        """Every table starts with the hits; then fresh blocks, the prompt's full ones registered (when the
        group's samples share them). Sets num_cached_tokens, cache_blocks and, with a prefix cache, at the
        group's first admission, cached_prompt_tokens."""
        seqs, cache, bs = group.live_seqs(), self.gpu, self.block_size
        keys, hits = self._keys(group), self._hits(group)
        if group.prefix_len:
            self._pin_keys.update(keys[:self.pinned_blocks_of(group)])
        num_seqs, ref_counts = len(seqs), cache.ref_counts
        for block in hits:  # before any fresh block: an allocation may evict from the evictor
            if ref_counts[block]:  # held (a pinned block always is): a reference more per sequence
                cache.incref(block, num_seqs)
                continue
            cache.reuse(block)
            if num_seqs > 1:
                cache.incref(block, num_seqs - 1)
        num_hits = len(hits)
        group.num_cached_tokens, group.cache_blocks = num_hits * bs, num_hits
        if self.prefix_caching and group.first_token_s is None and not group.num_preemptions:
            group.cached_prompt_tokens = num_hits * bs  # (a chunked prompt may be preempted before its first token)
            self.num_prompt_tokens += group.prompt_len
            self.num_hit_tokens += num_hits * bs
        if self.by_chunk:  # nothing computed beyond the hits yet: prompt_computed keys the rest
            for seq in seqs:
                self._seq_keys[seq.seq_id] = keys[:num_hits]
            if group.shares_prompt and keys:
                self._next_key[seqs[0].seq_id] = num_hits
        elif keys:
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
        if not self.by_chunk and keys:
            group.cache_blocks += self._register_prompt(own, keys, num_hits, seqs[0].length)
        for seq in seqs:
            self.block_tables[seq.seq_id] = hits + own
            self._table_changed(seq.seq_id)

    def _register_prompt(self, own: list[int], keys: tuple[int, ...], first: int, length: int) -> int:
        """Key the full blocks the prefill computes, from block `first`, up to the first key cached already;
        returns how many (they follow the hits in every table)."""
        lookup, end = self.gpu.block_of_key, min(len(keys), length // self.block_size)
        for i in range(first, end):
            if keys[i] in lookup:
                return i - first
            self._register(own[i - first], keys[i], i)
        return max(end - first, 0)

    def prompt_computed(self, group: SequenceGroup, num_tokens: int) -> int:
        """Chunked prefill, in the iteration whose chunk computes the prompt up to num_tokens: key the full
        blocks it fills, from where the last chunk left off up to the first key cached already (as
        _register_prompt does for a whole prompt; none after that one), and let a preemption or a finish key
        only what is computed. Adds them to the group's cache_blocks and returns how many."""
        keys, bs = self._keys(group), self.block_size
        if not keys:
            return 0
        seqs = group.live_seqs()
        done = min(len(keys), num_tokens // bs)
        computed = keys if num_tokens >= seqs[0].length else keys[:done]
        for seq in seqs:
            self._seq_keys[seq.seq_id] = computed
        first = self._next_key.get(seqs[0].seq_id)
        if first is None or done <= first:
            return 0
        table, lookup = self.block_tables[seqs[0].seq_id], self.gpu.block_of_key
        keyed = 0
        for i in range(first, done):
            if keys[i] in lookup:  # someone keyed it first: this prompt keys no more
                del self._next_key[seqs[0].seq_id]
                break
            self._register(table[i], keys[i], i)
            keyed += 1
        else:
            self._next_key[seqs[0].seq_id] = done
        group.cache_blocks += keyed
        return keyed

    # --- growth ----------------------------------------------------------------
    def can_append(self, seqs: list[Sequence]) -> bool:
        """Whether a group's running sequences, seqs, may take their next slots: a free block for each (the
        paper-era rule, appends_fit), or, appends_as_needed or speculating, the blocks they need (V1's
        allocate_slots; vLLM's block manager v2, which speculative decoding needs, counts lookahead slots so)."""
        if self.appends_as_needed or self.lookahead:
            return self.blocks_to_append(seqs) <= self.gpu.num_free
        return appends_fit(len(seqs), self.gpu.num_free)

    def blocks_to_append(self, seqs: Iterable[Sequence]) -> int:
        """The free blocks append_slots would take for these sequences now: one for each whose table is full,
        or whose last block is shared (a copy on write)."""
        tables, bs, ref_counts = self.block_tables, self.block_size, self.gpu.ref_counts
        needed = 0
        if self.lookahead:  # a speculating sequence's proposals need their slots too
            for seq in seqs:
                table = tables[seq.seq_id]
                if self._next_slot_shared(seq, table):
                    needed += 1
                needed += max(blocks_for(self._lookahead_end(seq), bs) - len(table), 0)
            return needed
        for seq in seqs:
            table = tables[seq.seq_id]
            if len(table) * bs < seq.length or ref_counts[table[-1]] != 1:
                needed += 1
        return needed

    def append_slots(self, seqs: Iterable[Sequence], copies: list[tuple[int, int]]) -> None:
        """Make room in each sequence's table, in turn, for the token at position length - 1, adding the
        copies on write to `copies`: a block when its last one is full, else a copy of a shared last block.
        schedule() calls it for the whole batch (one call: most sequences need nothing, and a call per
        sequence cost more than that); a decode stretch calls it once for the blocks its iterations take
        (docs/concepts/fast-forward.md)."""
        tables, bs, gpu = self.block_tables, self.block_size, self.gpu
        ref_counts, allocate = gpu.ref_counts, gpu.allocate
        if self.lookahead:
            for seq in seqs:
                self._append_lookahead(seq, copies)
            return
        for seq in seqs:
            table = tables[seq.seq_id]
            if len(table) * bs < seq.length:
                table.append(allocate())
                self._table_changed(seq.seq_id)
            elif ref_counts[table[-1]] != 1:
                copies.append(self._copy_last_block(table))
                self._table_changed(seq.seq_id)

    def append_lookahead_if_fits(self, seqs: list[Sequence], copies: list[tuple[int, int]]) -> bool:
        """append_slots for speculating sequences where the blocks they need are free (blocks_to_append), asking each
        one's copy on write and lookahead end once for both: whether they were. A copy on write frees a reference
        and takes nothing else, so a sequence that needed none before the others' appends needs none after."""
        tables, bs = self.block_tables, self.block_size
        ends: list[int] = []
        shared: list[bool] = []
        needed = 0
        for seq in seqs:
            table = tables[seq.seq_id]
            copy = self._next_slot_shared(seq, table)
            end = self._lookahead_end(seq)
            needed += copy + max(blocks_for(end, bs) - len(table), 0)
            ends.append(end)
            shared.append(copy)
        if needed > self.gpu.num_free:
            return False
        allocate = self.gpu.allocate
        for seq, end, copy in zip(seqs, ends, shared):
            table = tables[seq.seq_id]
            if copy and self._next_slot_shared(seq, table):
                copies.append(self._copy_last_block(table))
            while len(table) * bs < end:
                table.append(allocate())
            self._table_changed(seq.seq_id)
        return True

    def grow_lookahead(self, seq: Sequence, num_blocks: int) -> None:
        """A speculating sequence whose last block is its own takes num_blocks fresh ones for its proposals' slots:
        append_slots where the blocks it needs are known (a speculating stretch's, engine.core.scheduler)."""
        table, allocate = self.block_tables[seq.seq_id], self.gpu.allocate
        for _ in range(num_blocks):
            table.append(allocate())
        self._table_changed(seq.seq_id)

    def _append_lookahead(self, seq: Sequence, copies: list[tuple[int, int]]) -> None:
        """append_slots for a speculating sequence: its next token's slot (a copy on write of a shared last
        block where that slot is in it) and one for each token it proposes this step (lookahead_slots)."""
        table, bs = self.block_tables[seq.seq_id], self.block_size
        if self._next_slot_shared(seq, table):
            copies.append(self._copy_last_block(table))
        end = self._lookahead_end(seq)
        while len(table) * bs < end:
            table.append(self.gpu.allocate())
        self._table_changed(seq.seq_id)

    def _next_slot_shared(self, seq: Sequence, table: list[int]) -> bool:
        """Whether a speculating sequence's next token falls in its last block and that block is shared: a copy on
        write before the step writes there."""
        return len(table) * self.block_size >= seq.length and self.gpu.ref_counts[table[-1]] != 1

    def _lookahead_end(self, seq: Sequence) -> int:
        """The slots a speculating sequence holds this step: its tokens and the ones it proposes."""
        return seq.length + lookahead_slots(seq.length, seq.final_len, self.lookahead)

    def give_back_lookahead(self, seq: Sequence) -> int:
        """After a speculating step: the slots past the sequence's computed tokens (all but its last sampled one)
        held the proposals the target rejected; a block left holding none of its tokens is freed (it was the
        sequence's own, fresh this step: never keyed, never shared). Returns how many blocks."""
        table = self.block_tables[seq.seq_id]
        keep = blocks_for(seq.length - 1, self.block_size)
        extra = len(table) - keep
        if extra <= 0:
            return 0
        for block in table[keep:]:
            self.gpu.free(block)
        del table[keep:]
        self._table_changed(seq.seq_id)
        return extra

    def _copy_last_block(self, table: list[int]) -> tuple[int, int]:
        """Copy on write: the table's shared last block is replaced by a fresh one the data plane fills."""
        last = table[-1]
        fresh = self.gpu.allocate()
        table[-1] = fresh
        self.gpu.free(last)
        return last, fresh

    def fork(self, parent: Sequence, child: Sequence, copies: list[tuple[int, int]]) -> None:
        """Beam search: the child drops its blocks and continues the parent's, shared by reference
        count (paper-era `fork`: the table is copied, every block gains a holder, nothing is
        allocated, nothing added to `copies`: schedule() never takes a fork's copies for the paged pool).
        A shared last block is copied on the next append_slots."""
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

    # --- giving blocks back ------------------------------------------------------------
    def _register_computed(self, seq: Sequence) -> None:
        """Key the sequence's full blocks whose KV is computed (all its tokens but the last sampled) and that it
        alone holds, so that they stay cached once it lets go of them."""
        keys = self._seq_keys.get(seq.seq_id, ())
        if not keys or (not self.prefix_caching and len(self.pinned) >= len(keys)):
            return  # (without a prefix cache the keys are the shared prefix's: all keyed once pinned)
        table, cache = self.block_tables[seq.seq_id], self.gpu
        computed = min(len(keys), (seq.length - 1) // self.block_size, len(table))
        lookup, ref_counts = cache.block_of_key, cache.ref_counts
        for i in range(computed):
            block = table[i]
            if ref_counts[block] == 1 and block not in cache.key_of_block and keys[i] not in lookup:
                self._register(block, keys[i], i)

    def free(self, seq: Sequence) -> None:
        table = self.block_tables.get(seq.seq_id)
        if table is None:
            return
        if seq.status is SeqStatus.SWAPPED:
            allocator = self.cpu
        else:
            allocator = self.gpu
            # a sequence preempted in this schedule() last ran in the one before; a finished one in this one
            self.gpu.stamp = self.tick - 1 if seq.status is SeqStatus.WAITING else self.tick
            self._register_computed(seq)
        self._seq_keys.pop(seq.seq_id, None)
        self._next_key.pop(seq.seq_id, None)
        del self.block_tables[seq.seq_id]
        self._table_changed(seq.seq_id)
        for block in table:
            allocator.free(block)
        self.gpu.stamp = self.tick

    # --- swapping --------------------------------------------------------------
    def _unique_blocks(self, group: SequenceGroup) -> int:
        return len({b for s in group.live_seqs() for b in self.block_tables[s.seq_id]})

    def can_swap_out(self, group: SequenceGroup) -> bool:
        return self._unique_blocks(group) <= self.cpu.num_free

    def blocks_to_swap_in(self, group: SequenceGroup) -> int:
        """The free blocks a swapped-out group takes to come back: its own, and a spare one per sequence for
        the appends of the step that swaps it in (a speculating one's: its next token's and its proposals')."""
        spare = 1 + (self.lookahead + self.block_size - 1) // self.block_size
        return self._unique_blocks(group) + spare * len(group.live_seqs())

    def can_swap_in(self, group: SequenceGroup) -> bool:
        return self.gpu.num_free - self.blocks_to_swap_in(group) >= self.watermark_blocks

    def swap_out(self, group: SequenceGroup) -> list[tuple[int, int]]:
        """Every block of the group to host memory, a cached one's too, as a private copy: the group comes back
        in fresh blocks of its own, and the GPU copies of its computed full blocks stay cached (evictable)."""
        self.gpu.stamp = self.tick - 1  # preempted in this schedule(): last ran in the one before
        for seq in group.live_seqs():
            self._register_computed(seq)
        group.cache_blocks = 0
        mapping = self._move(group, self.gpu, self.cpu)
        self.gpu.stamp = self.tick
        return mapping

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
    def block_table(self, seq: Sequence) -> list[int]:
        return self.block_tables[seq.seq_id]

    @property
    def num_free_blocks(self) -> int:
        return self.gpu.num_free

    @property
    def num_used_gpu_blocks(self) -> int:
        return self.gpu.num_blocks - self.gpu.num_free

    @property
    def cache_token_slots(self) -> int:
        """Slots of the keyed blocks running requests hold, the pinned prefix's included, counted once."""
        return self.gpu.num_in_use * self.block_size

    @property
    def num_unshared_blocks(self) -> int:
        """GPU blocks the sequences would hold without sharing: one per block-table entry. The manager's own
        hold on a pinned block is not a sequence's, so a pinned block counts only in tables."""
        return self.num_used_gpu_blocks + self.gpu.num_shared_refs - len(self.pinned)

    @property
    def num_saved_blocks(self) -> int:
        """GPU blocks sharing saves now: num_unshared_blocks less the distinct blocks the sequences hold. Every
        reference beyond a block's first, except the manager's hold on a pinned block some table holds too:
        k requests over a P-block shared prefix save (k - 1) P, not k P."""
        saved = self.gpu.num_shared_refs
        if self.pinned:
            ref_counts = self.gpu.ref_counts
            saved -= sum(1 for block in self.pinned if ref_counts[block] > 1)
        return saved

    @property
    def hit_rate(self) -> float:
        """Prompt tokens found cached over prompt tokens, at first admissions (nan before any)."""
        return self.num_hit_tokens / self.num_prompt_tokens if self.num_prompt_tokens else float("nan")


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
