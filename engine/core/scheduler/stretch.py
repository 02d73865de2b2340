"""Why a decode stretch is exact, stated once for every scheduler (docs/concepts/fast-forward.md).

Right after schedule() returned a decode-only batch, the next iterations repeat it, every context one
longer per step, with nothing decided differently, for as long as all of this holds:

1. No request finishes: completion k takes every decoding sequence to length + k, so the stretch lasts
   until the first reaches its final length (steps_to_first_finish), whose completion ends it.
2. No prompt joins: the oldest waiting request, which every scheduler admits before any later one, was
   refused by this schedule(), and stays refused. Reservations (Orca, FasterTransformer) never change while
   nobody finishes. vLLM asks its one admissible() of the head with the budget the next step would give it:
   it reads the free blocks, which only fall during a stretch, and the running sequences and the budget,
   which stay; a head it would admit (or ignore) now ends the stretch at once. An admission that read
   anything a stretch changes would break this promise (tests/engine/core/test_decode_stretch.py).
3. No beam forks, no swap comes back, no chunk runs: a beam search's parents are the data plane's draw, a
   swapped group's return and a prompt part way through its chunks change the batch.
4. The allocator does nothing but what the stretch repeats: a reservation never grows; the paged pool
   gives each sequence a block every block_size steps, at the step its slack runs out (growth_by_slack),
   and the stretch stops before the first step whose appends could preempt (steps_without_preemption).
"""
from __future__ import annotations

from collections.abc import Iterable
from itertools import accumulate, chain
from operator import sub

from engine.core.batch import Batch
from engine.core.block_manager import BlockManager, appends_fit
from engine.core.scheduler.base import DecodeStretch
from engine.core.sequence import SeqStatus, Sequence, SequenceGroup

__all__ = ["paged_stretch", "running_seqs", "steps_to_first_finish", "stretch_appends"]


def steps_to_first_finish(decoding: Iterable[Sequence]) -> int:
    """Completion k takes each decoding sequence to length + k: the first to reach its final length ends
    the stretch (with the completion that finishes it)."""
    return min([seq.prompt_len + seq.output_len - seq.length for seq in decoding])


def running_seqs(groups: Iterable[SequenceGroup]) -> list[Sequence]:
    running = SeqStatus.RUNNING
    return [seq for group in groups for seq in group.seqs if seq.status is running]


def paged_stretch(batch: Batch, running: list[SequenceGroup], blocks: BlockManager, num_running_seqs: int,
                  block_size: int) -> DecodeStretch:
    """Points 1 and 4 for the paged pool, the caller having checked 2 and 3."""
    growth = growth_by_slack(running, blocks, block_size)
    if growth is None:
        return DecodeStretch(batch, 1)
    # the free blocks a group must find beyond its own appends: V1 asks none (appends_as_needed), the paper-era
    # can_append a block per sequence of the group, its own appends included
    if blocks.appends_as_needed:
        largest_group = 0
    else:
        largest_group = (1 if num_running_seqs == len(running)
                         else max(len(group.live_seqs()) for group in running))
    num_steps = steps_without_preemption(steps_to_first_finish(chain.from_iterable(growth)), growth,
                                         blocks.gpu.num_free, num_running_seqs, largest_group, block_size)
    return DecodeStretch(batch, num_steps, growth)


def growth_by_slack(running: list[SequenceGroup], blocks: BlockManager, block_size: int
                    ) -> list[list[Sequence]] | None:
    """The running sequences by the free slots left in their last block, in the order schedule() appends
    (DecodeStretch.growth): iteration j >= 2 appends a block for each of growth[(j - 2) % block_size] and for
    nobody else. None when schedule() left one a table more than a block long, or short."""
    bs, tables = block_size, blocks.block_tables
    growth: list[list[Sequence]] = [[] for _ in range(bs)]
    running_status = SeqStatus.RUNNING
    for group in running:
        for seq in group.seqs:
            if seq.status is running_status:
                slack = len(tables[seq.seq_id]) * bs - seq.length
                if not 0 <= slack < bs:
                    return None
                growth[slack].append(seq)
    return growth


def steps_without_preemption(num_steps: int, growth: list[list[Sequence]], free: int, num_seqs: int,
                             largest_group: int, block_size: int) -> int:
    """The first iterations of num_steps whose schedule() preempts nobody. schedule() takes its fast path when
    the free blocks before its appends cover every running sequence, and otherwise preempts nobody when those
    left after the appends still cover the largest group (each group's can_append then holds in turn; V1's asks
    nothing beyond a group's own appends: largest_group 0, so the appends fitting is all). Free blocks only fall,
    so the first iteration failing both ends the stretch."""
    bs = block_size
    cycles, rest = divmod(num_steps - 1, bs)
    if appends_fit(largest_group, free - cycles * num_seqs - sum(map(len, growth[:rest]))):
        return num_steps  # even after the last iteration's appends
    for j in range(2, num_steps + 1):
        after = free - len(growth[(j - 2) % bs])
        if not (appends_fit(num_seqs, free) or appends_fit(largest_group, after)):
            return j - 1
        free = after
    return num_steps


def stretch_appends(stretch: DecodeStretch, num_steps: int, blocks: BlockManager, block_size: int) -> list[int]:
    """The appends of the stretch's iterations 2..num_steps, made: the same append_slots schedule() would make,
    in one call for them all (the lengths are already the last iteration's), in the order the iterations would
    append (the same block ids), each sequence listed once per block it takes. Returns the free blocks each of
    those iterations found."""
    growth = stretch.growth
    grown = [growth[(j - 2) % block_size] for j in range(2, num_steps + 1)]
    free_blocks = list(accumulate(map(len, grown), sub, initial=blocks.gpu.num_free))[1:]
    no_copies: list[tuple[int, int]] = []  # a stretch's appends copy nothing (point 4)
    blocks.append_slots(chain.from_iterable(grown), no_copies)
    return free_blocks
