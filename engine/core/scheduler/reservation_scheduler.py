"""What Orca and FasterTransformer share: one contiguous buddy reservation per sequence.

Each sequence reserves a chunk sized by the system's reservation rule (Oracle / Pow2 / Max,
see engine.core.reservation) when its request is admitted and holds it to completion; nothing
is shared, so a request's n samples each get the prompt's blocks copied into their own chunk.
The policies (who is admitted when) are the subclasses': orca.py and fastertransformer.py.
"""
from __future__ import annotations

from engine.core.blocks import blocks_for
from engine.core.buddy import BuddyAllocator
from engine.core.reservation import ReservationAllocator
from engine.core.reserved_kv import ReservedKVTracker
from engine.core.scheduler.common import QueueScheduler
from engine.core.sequence import Sequence, SequenceGroup
from engine.core.system import SystemSpec


class ReservationScheduler(QueueScheduler):
    """What Orca and FasterTransformer share: reservations, prompt copies, the KV breakdown."""

    def __init__(self, system: SystemSpec, max_seq_len: int, num_gpu_blocks: int, num_cpu_blocks: int):
        super().__init__(system, max_seq_len)
        self.num_gpu_blocks = num_gpu_blocks
        self.num_cpu_blocks = num_cpu_blocks
        self.allocator = ReservationAllocator(num_gpu_blocks, system.block_size, max_seq_len, system.reservation)
        self.kv = ReservedKVTracker(self.allocator)
        self._needed_alone: dict[tuple[int, ...], int] = {}  # _blocks_needed_alone's verdicts, by sorted sizes

    def _free_seq(self, seq: Sequence) -> None:
        self.allocator.free(seq)

    def _fork_beam(self, parent: Sequence, child: Sequence) -> None:
        self.allocator.fork(parent, child, self._pending_copies)  # the child's chunk gets the parent's blocks

    def block_table(self, seq_id: int) -> list[int]:
        return self.allocator.block_table(self._seqs[seq_id])

    def _blocks_needed_alone(self, group: SequenceGroup) -> int:
        """0 when the group's reservations fit in the empty pool together, else the blocks their chunks take;
        the verdict depends on the sizes alone, and is kept for the next request of the same sizes (a fresh
        buddy allocator per admitted request was a tenth of a saturated Orca run in pure Python, by cProfile)."""
        sizes = tuple(sorted(self.allocator.reserved_blocks(s) for s in group.seqs))
        needed = self._needed_alone.get(sizes)
        if needed is None:
            fits = BuddyAllocator(self.num_gpu_blocks, self.allocator.buddy.max_chunk).can_allocate(list(sizes))
            needed = 0 if fits else sum(self.allocator.buddy.chunk_size(n) for n in sizes)
            self._needed_alone[sizes] = needed
        return needed

    def _reservation_note(self, group: SequenceGroup) -> str:
        seq = group.seqs[0]
        rule = {"oracle": "the true length", "pow2": "the output's next power of two",
                "max": "up to max_seq_len"}.get(self.allocator.reservation, self.allocator.reservation)
        return (f", each sequence reserving {self.allocator.estimate_len(seq)} tokens ({rule}) in a chunk of "
                f"{self.allocator.buddy.chunk_size(self.allocator.reserved_blocks(seq))} blocks,")

    def _fork_prompt_copies(self, groups: list[SequenceGroup]) -> None:
        """Nothing is shared: every sample gets the prompt's blocks copied into its own chunk."""
        for group in groups:
            live = group.live_seqs()
            if len(live) < 2:
                continue
            prompt_blocks = blocks_for(group.prompt_len, self.block_size)
            source = self.allocator.table_blocks(live[0])[:prompt_blocks]
            for seq in live[1:]:
                self._pending_copies.extend(zip(source, self.allocator.table_blocks(seq)))
