"""Orca's contiguous per-sequence reservations over a buddy allocator (authors' rule)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.core.blocks import blocks_for
from engine.core.buddy import BuddyAllocator, next_pow2
from engine.core.sequence import Sequence, SequenceGroup


def estimated_output(output_len: int, reservation: str, max_seq_len: int) -> int:
    """How many output tokens a policy reserves for: the truth, its next power of two, or the max."""
    if reservation == "oracle":
        return output_len
    if reservation == "pow2":
        return next_pow2(output_len)
    if reservation == "max":
        return max_seq_len
    raise ValueError(f"unknown reservation {reservation!r}")


@dataclass(slots=True)
class Reservation:
    start: int  # first block of the contiguous chunk
    chunk_blocks: int  # buddy chunk size (a power of two)
    estimate_len: int  # tokens the policy reserved for: min(prompt + est_out, max_seq_len)


class ReservationAllocator:
    """One contiguous chunk per sequence, sized by the reservation policy, held to the end."""

    def __init__(self, num_blocks: int, block_size: int, max_seq_len: int, reservation: str):
        self.block_size = block_size
        self.max_seq_len = max_seq_len
        self.reservation = reservation
        self.buddy = BuddyAllocator(num_blocks, blocks_for(max_seq_len, block_size))
        self.reservations: dict[int, Reservation] = {}
        # sums over the reservations, for the Fig. 2 breakdown (engine.core.kv_usage)
        self.num_estimated_tokens = 0  # tokens the reservations were sized for
        self.num_needed_tokens = 0  # of those, tokens the sequences will really hold at their end
        # the last can_allocate: whom it was asked about, at which buddy version, and its answer; a saturated
        # queue's head is asked every iteration, and nothing changes until a reservation comes or goes
        self._asked: SequenceGroup | None = None
        self._asked_version = -1
        self._answer = False

    def estimate_len(self, seq: Sequence) -> int:
        est_out = estimated_output(seq.output_len, self.reservation, self.max_seq_len)
        return min(seq.prompt_len + est_out, self.max_seq_len)

    def reserved_blocks(self, seq: Sequence) -> int:
        return blocks_for(self.estimate_len(seq), self.block_size)

    def can_allocate(self, group: SequenceGroup) -> bool:
        """Whether the group's reservations fit now. A waiting group's sequences and their sizes do not change, so
        the answer stands until the buddy allocator's next allocation or free."""
        if group is self._asked and self._asked_version == self.buddy.version:
            return self._answer
        answer = self.buddy.can_allocate([self.reserved_blocks(s) for s in group.live_seqs()])
        self._asked, self._asked_version, self._answer = group, self.buddy.version, answer
        return answer

    def allocate(self, group: SequenceGroup) -> None:
        for seq in group.live_seqs():
            blocks = self.reserved_blocks(seq)
            start = self.buddy.allocate(blocks)
            res = Reservation(start, self.buddy.chunk_size(blocks), self.estimate_len(seq))
            self.reservations[seq.seq_id] = res
            self.num_estimated_tokens += res.estimate_len
            self.num_needed_tokens += min(res.estimate_len, seq.final_len)

    def free(self, seq: Sequence) -> None:
        res = self.reservations.pop(seq.seq_id, None)
        if res is not None:
            self.buddy.free(res.start)
            self.num_estimated_tokens -= res.estimate_len
            self.num_needed_tokens -= min(res.estimate_len, seq.final_len)

    def append_slots(self, seqs: Iterable[Sequence], copies: list[tuple[int, int]]) -> None:
        """Nothing to do: a reservation holds every slot its sequence will fill from admission on."""

    def fork(self, parent: Sequence, child: Sequence, copies: list[tuple[int, int]]) -> None:
        """Nothing is shared: the parent's blocks are copied into the child's own reservation (the authors'
        Orca baseline), before the next forward reads them."""
        copies.extend(zip(self.table_blocks(parent), self.table_blocks(child)))

    def can_swap_out(self, group: SequenceGroup) -> bool:
        """Never: a reservation is held to the end (Orca and FasterTransformer never preempt)."""
        return False

    def swap_out(self, group: SequenceGroup) -> list[tuple[int, int]]:
        raise RuntimeError("reservations are never swapped out")

    def can_swap_in(self, group: SequenceGroup) -> bool:
        return False

    def swap_in(self, group: SequenceGroup) -> list[tuple[int, int]]:
        raise RuntimeError("reservations are never swapped out")

    def block_table(self, seq: Sequence) -> list[int]:
        return list(self.table_blocks(seq))

    def table_blocks(self, seq: Sequence) -> range:
        """block_table as a range (its blocks are consecutive): a fork's copies pair them without lists."""
        res = self.reservations[seq.seq_id]
        return range(res.start, res.start + blocks_for(seq.length, self.block_size))

    @property
    def num_free_blocks(self) -> int:
        return self.buddy.num_free

    @property
    def num_reserved_blocks(self) -> int:
        return self.buddy.num_blocks - self.buddy.num_free
