"""The KV pool's breakdown (paper Fig. 2) kept beside a scheduler, never inside its policy.

A scheduler tells its tracker what happens to the pool's users: a group starts or stops running, its
sequences sample tokens, a prompt chunk's blocks become the cache's, the run releases
the cache. The tracker keeps the one figure the allocator cannot give at any moment, the slots the running
requests' tokens fill (TokenSlots), and reads everything else off the allocator when the breakdown is
asked for. Reservations (Orca, FasterTransformer: engine.core.reserved_kv) and vLLM's paged pool (here) differ
only in how a group's tokens fill slots and in what the allocator says; the paged pool's beam searches, whose
forks share blocks the token count does not see, are counted again where their tables changed.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import sub

from engine.core.block_manager import BlockManager
from engine.core.kv_usage import (
    KVTracker,
    KVUsage,
    TokenSlots,
    UsageColumns,
    free_parts,
    shared_prompt_token_slots,
    unshared_token_slots,
)
from engine.core.sequence import SequenceGroup

__all__ = ["PagedKVTracker", "paged_usage", "paged_usage_columns"]


class PagedKVTracker(KVTracker):
    """vLLM's paged pool: the samples of a request share its prompt's blocks, a shared prefix or the prefix
    cache holds its blocks once for all, and forked beams share generated blocks too.

    beam_group_of: the scheduler's running beam searches by their sequences' ids (read, never written)."""

    def __init__(self, blocks: BlockManager, beam_group_of: Mapping[int, SequenceGroup]) -> None:
        self.blocks = blocks
        self.block_size = blocks.block_size
        self.token_slots = TokenSlots(self.slots_of)
        self.beam_group_of = beam_group_of
        # per running beam search, the slots its blocks hold less those TokenSlots counts for it, their sum,
        # and the groups to count again at the next usage() (started, or a table changed: _beam_token_slots)
        self._beam_sharing: dict[int, int] = {}
        self.beam_sharing_slots = 0
        self._beams_to_count: dict[int, SequenceGroup] = {}

    def slots_of(self, group: SequenceGroup) -> int:
        slots = shared_prompt_token_slots(group) if group.shares_prompt else unshared_token_slots(group)
        # the keyed blocks the cache holds for it (a shared prefix's among them) are counted once, by the cache,
        # while some table holds them (BlockManager.cache_token_slots)
        if group.cache_blocks:
            tables = 1 if group.shares_prompt else group.num_seqs
            slots -= tables * group.cache_blocks * self.block_size
        return slots

    def started(self, group: SequenceGroup) -> None:
        self.token_slots.started(group)
        if group.is_beam:
            self.blocks.track_table_changes(True)
            self._beam_sharing[group.request_id] = 0
            self._beams_to_count[group.request_id] = group

    def stopped(self, group: SequenceGroup) -> None:
        if group.is_beam:
            self.beam_sharing_slots -= self._beam_sharing.pop(group.request_id)
            self._beams_to_count.pop(group.request_id, None)
            if not self._beam_sharing:
                self.blocks.track_table_changes(False)  # nothing to count until a beam search runs again
        self.token_slots.stopped(group)

    def usage(self, someone_waits: bool) -> KVUsage:
        token_slots = self.token_slots.slots
        if self._beam_sharing:
            token_slots += self._beam_token_slots()
        return paged_usage(self.blocks, token_slots, someone_waits)

    def stretch_usage(self, token_slots: Iterable[int], free_blocks: list[int], someone_waited: bool) -> UsageColumns:
        """The breakdown at a decode stretch's moments, as columns (no beam search runs in a stretch)."""
        return paged_usage_columns(self.blocks, token_slots, free_blocks, someone_waited)

    def _beam_token_slots(self) -> int:
        """Slots the running beam searches' blocks hold, less those TokenSlots counts for them (<= 0: forked
        beams share blocks). A group is counted (held_token_slots) when it starts running and again only after
        one of its tables changed: while they stay as they are, schedule() has given each beam a last block of
        its own that holds its newest token (a shared one is copied on write, a full one followed by a fresh
        one), so the held slots grow as TokenSlots does, a slot per sampled token. Counting every group at
        every step instead cost a quarter of a beam run."""
        for seq_id in self.blocks.take_changed_tables():
            group = self.beam_group_of.get(seq_id)
            if group is not None:
                self._beams_to_count[group.request_id] = group
        for request_id, group in self._beams_to_count.items():
            sharing = self.blocks.held_token_slots(group) - shared_prompt_token_slots(group)
            self.beam_sharing_slots += sharing - self._beam_sharing[request_id]
            self._beam_sharing[request_id] = sharing
        self._beams_to_count.clear()
        return self.beam_sharing_slots


def paged_usage(blocks: BlockManager, token_slots: int, someone_waits: bool) -> KVUsage:
    """vLLM's paged pool now: an allocated block holds tokens, and the unfilled slots of a sequence's
    last block are internal fragmentation; nothing is reserved ahead. (Between complete() and the next
    schedule() the newest tokens have no slot yet: hence the min.) paged_usage_columns is the same at a
    decode stretch's moments, column by column (a function call per moment would cost the stretch more
    than the iterations it spares; tests/engine/core/test_decode_stretch.py holds the two equal)."""
    used = blocks.num_used_gpu_blocks * blocks.block_size
    token = min(token_slots + blocks.cache_token_slots, used)
    external, idle = free_parts(blocks.gpu.num_free * blocks.block_size, 0, someone_waits)
    return KVUsage(token, 0, used - token, external, idle, blocks.num_unshared_blocks, blocks.num_saved_blocks)


def paged_usage_columns(blocks: BlockManager, token_slots: Iterable[int], free_blocks: Sequence[int],
                        someone_waits: bool) -> UsageColumns:
    """paged_usage at moments when only the token slots and the free GPU blocks differ from now (a decode
    stretch allocates fresh blocks and frees none, so references beyond a block's first stay as they are),
    as columns in KVUsage's order."""
    bs, num_blocks = blocks.block_size, blocks.gpu.num_blocks
    sharing = blocks.num_unshared_blocks - blocks.num_used_gpu_blocks  # fresh blocks leave it as it is
    used = [(num_blocks - free) * bs for free in free_blocks]
    cached = blocks.cache_token_slots  # the prefix cache's blocks in use: a stretch neither hits nor frees one
    if cached:
        token_slots = [slots + cached for slots in token_slots]
    token = list(map(min, token_slots, used))
    free_slots: Iterable[int] | int = [free * bs for free in free_blocks]
    external, idle = (free_slots, 0) if someone_waits else (0, free_slots)  # free_parts, column by column
    return (token, 0, list(map(sub, used, token)), external, idle,
            [num_blocks - free + sharing for free in free_blocks], blocks.num_saved_blocks)
