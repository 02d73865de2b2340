"""The KV pool's breakdown (paper Fig. 2) over contiguous reservations: Orca's and FasterTransformer's tracker.

Each sequence's chunk holds its tokens, the slots its remaining output will fill, the slots its estimate
overshoots the final length and the buddy rounding; nothing is shared (engine.core.kv_tracker has the contract
and the paged pool's).
"""
from __future__ import annotations

from engine.core.kv_usage import (
    USAGE_FIELDS,
    KVTracker,
    KVUsage,
    TokenSlots,
    UsageColumns,
    free_parts,
    unshared_token_slots,
    usage_columns,
    usage_values,
)
from engine.core.reservation import ReservationAllocator
from engine.core.sequence import SequenceGroup

__all__ = ["ReservedKVTracker"]


class ReservedKVTracker(KVTracker):
    """Contiguous reservations: every sample holds its own copy of the prompt, nothing is shared."""

    def __init__(self, allocator: ReservationAllocator) -> None:
        self.allocator = allocator
        self.token_slots = TokenSlots(self.slots_of)

    def slots_of(self, group: SequenceGroup) -> int:
        return unshared_token_slots(group)

    def usage(self, someone_waits: bool) -> KVUsage:
        return reserved_usage(self.allocator, self.token_slots, someone_waits)

    def stretch_usage(self, token_slots: range, free_blocks: list[int], someone_waited: bool) -> UsageColumns:
        """The breakdown at a decode stretch's moments, as columns: reservations stay as they are."""
        return reserved_usage_columns(self.allocator, token_slots, someone_waited)


def reserved_usage(allocator: ReservationAllocator, tokens: TokenSlots, someone_waits: bool) -> KVUsage:
    """Orca's and FasterTransformer's reservations: each sequence's chunk holds its tokens, the
    slots its remaining output will fill (reserved), the slots its estimate overshoots the final
    length (internal), and the buddy rounding of the estimate up to a chunk (external)."""
    bs = allocator.block_size
    external, idle = free_parts(allocator.num_free_blocks * bs, 0, someone_waits)
    return KVUsage(token=tokens.slots,
                   reserved=allocator.num_needed_tokens - tokens.slots,
                   internal=allocator.num_estimated_tokens - allocator.num_needed_tokens,
                   external=allocator.num_reserved_blocks * bs - allocator.num_estimated_tokens + external,
                   idle=idle,
                   unshared_blocks=allocator.num_reserved_blocks)  # nothing is shared: nothing saved


def reserved_usage_columns(allocator: ReservationAllocator, token_slots: range, someone_waits: bool) -> UsageColumns:
    """reserved_usage at moments when only the token slots differ from now (no reservation comes or goes)."""
    usage = reserved_usage(allocator, TokenSlots(lambda group: 0), someone_waits)  # with no token slot
    reserved = range(usage.reserved - token_slots.start, usage.reserved - token_slots.stop, -token_slots.step)
    fixed = dict(zip(USAGE_FIELDS, usage_values(usage)))
    return usage_columns(**{**fixed, "token": token_slots, "reserved": reserved})
