"""Where the KV pool goes (Kwon et al. 2023, Fig. 2): the breakdown's value and what every allocator shares.

The breakdown is computed when a scheduler's kv_usage() is called, by its tracker, from the allocator that holds
the pool (the paged pool's free and used blocks: engine.core.kv_tracker; the reservations' sums:
engine.core.reserved_kv) and one running sum, TokenSlots, of the slots the running requests' tokens fill.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from itertools import chain, repeat
from operator import attrgetter
from typing import TypeVar

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


class KVTracker:
    """What a scheduler tells its tracker, and asks of it; one subclass per allocator (engine.core.kv_tracker's
    PagedKVTracker, engine.core.reserved_kv's ReservedKVTracker)."""

    token_slots: TokenSlots

    def slots_of(self, group: SequenceGroup) -> int:
        """K/V slots a group's tokens fill now, sampled ones included."""
        raise NotImplementedError

    def started(self, group: SequenceGroup) -> None:
        self.token_slots.started(group)

    def stopped(self, group: SequenceGroup) -> None:
        self.token_slots.stopped(group)

    def usage(self, someone_waits: bool) -> KVUsage:
        raise NotImplementedError

    def stretch_usage(self, token_slots: range, free_blocks: list[int], someone_waited: bool) -> UsageColumns:
        """The breakdown at a decode stretch's moments, as columns."""
        raise NotImplementedError


def unshared_token_slots(group: SequenceGroup) -> int:
    """Every sample holds its own copy of the prompt (reservations, or a per-sample recompute)."""
    return sum(s.length for s in group.seqs)


def shared_prompt_token_slots(group: SequenceGroup) -> int:
    """The samples share the prompt's blocks (vLLM's paged pool); each holds its own output."""
    return group.prompt_len + sum(s.length - s.prompt_len for s in group.seqs)


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
