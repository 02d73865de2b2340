"""Where the KV pool goes (Kwon et al. 2023, Fig. 2), read off the allocators when asked.

The breakdown is computed here and only here, when a scheduler's kv_usage() is called, from the
allocator that holds the pool (free and used blocks, the reservations' sums) and one running sum,
TokenSlots, of the slots the running requests' tokens fill.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from itertools import chain, repeat
from operator import attrgetter, sub
from typing import TypeVar

from engine.core.block_manager import BlockManager
from engine.core.reservation import ReservationAllocator
from engine.core.sequence import SequenceGroup

T = TypeVar("T")


@dataclass(slots=True)
class KVUsage:
    """KV pool slots by what holds them (paper Fig. 2); the five parts sum to the pool."""

    token: int = 0  # slots holding a token's K/V
    reserved: int = 0  # slots reserved for tokens the request will still generate
    internal: int = 0  # slots inside a request's own allocation it will never fill
    external: int = 0  # unusable: rounding above the estimate, free space nobody waiting can use
    idle: int = 0  # free space while nobody waits for it
    # block sharing at the same moment (paper Fig. 15), in blocks, not parts of the pool's total:
    # blocks the sequences would hold without sharing, and how many of those sharing saves
    unshared_blocks: int = 0
    saved_blocks: int = 0

    # written out so that mypyc compiles it (a dataclass's generated __init__ runs interpreted): one a step
    def __init__(self, token: int = 0, reserved: int = 0, internal: int = 0, external: int = 0, idle: int = 0,
                 unshared_blocks: int = 0, saved_blocks: int = 0) -> None:
        self.token, self.reserved, self.internal, self.external, self.idle = token, reserved, internal, external, idle
        self.unshared_blocks, self.saved_blocks = unshared_blocks, saved_blocks

    @property
    def total(self) -> int:
        return self.token + self.reserved + self.internal + self.external + self.idle


class TokenSlots:
    """K/V slots the running requests' tokens fill, kept as requests start and stop running and
    as tokens are sampled: one update per event. It is the one Fig. 2 quantity that changes every
    iteration, and recounting it over the running sequences at every call would cost the simulator
    several percent; the rest of the breakdown is read off the allocators as they stand.

    `slots_of(group)` is how many slots a group's tokens fill right now (sampled tokens included),
    which depends on whether its samples share the prompt's blocks.
    """

    __slots__ = ("slots", "_slots_of")

    def __init__(self, slots_of: Callable[[SequenceGroup], int]):
        self.slots = 0
        self._slots_of = slots_of

    def started(self, group: SequenceGroup) -> None:
        self.slots += self._slots_of(group)

    def stopped(self, group: SequenceGroup) -> None:
        self.slots -= self._slots_of(group)

    def sampled(self, num_tokens: int) -> None:
        self.slots += num_tokens


def unshared_token_slots(group: SequenceGroup) -> int:
    """Every sample holds its own copy of the prompt (reservations, or a per-sample recompute)."""
    return sum(s.length for s in group.seqs)


def shared_prompt_token_slots(group: SequenceGroup) -> int:
    """The samples share the prompt's blocks (vLLM's paged pool); each holds its own output."""
    return group.prompt_len + sum(s.length - s.prompt_len for s in group.seqs)


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


def free_parts(free_slots: T, nothing: T, someone_waits: bool) -> tuple[T, T]:
    """(external, idle): free space is fragmentation while someone waits for it, idle otherwise."""
    return (free_slots, nothing) if someone_waits else (nothing, free_slots)


# --- the same at every iteration of a decode stretch (Scheduler.advance_decodes), as columns -------------
USAGE_FIELDS = tuple(f.name for f in fields(KVUsage))
usage_values = attrgetter(*USAGE_FIELDS)  # a KVUsage's values in field order: a row of UsageColumns
# a column per field of KVUsage, in that order, a value per iteration: lists, ranges or other iterables, or an int for
# what stays put
UsageColumns = tuple[Iterable[int] | int, ...]  # a column that stays the same is that int


def usage_columns(**columns: Iterable[int] | int) -> UsageColumns:
    """KVUsage's fields as columns, in its order (the records' order of the kv columns)."""
    return tuple(columns[name] for name in USAGE_FIELDS)


def after_first(first: int, column: Iterable[int] | int) -> Iterable[int] | int:
    """A column of one value, `first`, then `column`'s: the int itself where both are that int, a list where
    `column` is a list or a range (the records copy a list's values faster than an iterator's)."""
    if isinstance(column, int):
        return column if column == first else chain((first,), repeat(column))
    if isinstance(column, (list, range)):
        return [first, *column]
    return chain((first,), column)


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


def reserved_usage_columns(allocator: ReservationAllocator, token_slots: range, someone_waits: bool) -> UsageColumns:
    """reserved_usage at moments when only the token slots differ from now (no reservation comes or goes)."""
    usage = reserved_usage(allocator, TokenSlots(lambda group: 0), someone_waits)  # with no token slot
    reserved = range(usage.reserved - token_slots.start, usage.reserved - token_slots.stop, -token_slots.step)
    fixed = dict(zip(USAGE_FIELDS, usage_values(usage)))
    return usage_columns(**{**fixed, "token": token_slots, "reserved": reserved})
