"""The one interface a scheduler's KV memory has: what every policy asks of it.

Two implementations: the paged block manager with its prefix cache (engine.core.block_manager, vLLM) and the
contiguous reservations (engine.core.reservation, Orca and FasterTransformer). Each scheduler keeps its own as
`allocator`, typed as what it is (mypyc lets no subclass narrow an attribute's type, so the shared skeleton in
engine.core.scheduler.common names none and asks the family to free, fork and read tables); what a policy asks
beyond this interface (how many blocks a prompt takes, which prompt tokens are cached) is its own business.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from engine.core.sequence import Sequence, SequenceGroup

BlockCopies = list[tuple[int, int]]  # (source block, destination block), for the data plane to copy


@runtime_checkable
class KVAllocator(Protocol):
    @property
    def num_free_blocks(self) -> int:
        """GPU blocks a new request may take now."""
        ...

    def can_allocate(self, group: SequenceGroup) -> bool:
        """Whether the group's prompt finds room now."""
        ...

    def allocate(self, group: SequenceGroup) -> None:
        """The group's prompt gets its KV memory."""
        ...

    def append_slots(self, seqs: Iterable[Sequence], copies: BlockCopies) -> None:
        """Room for each sequence's next token, adding the blocks to copy first to `copies`."""
        ...

    def fork(self, parent: Sequence, child: Sequence, copies: BlockCopies) -> None:
        """Beam search: the child continues the parent's KV, adding the blocks to copy now to `copies`."""
        ...

    def free(self, seq: Sequence) -> None:
        """The sequence's memory goes back (a finished, preempted or swapped-out one)."""
        ...

    def can_swap_out(self, group: SequenceGroup) -> bool:
        """Whether host memory holds the group's KV now."""
        ...

    def swap_out(self, group: SequenceGroup) -> BlockCopies:
        """The group's KV to host memory: the (GPU, host) blocks to move."""
        ...

    def can_swap_in(self, group: SequenceGroup) -> bool:
        """Whether the swapped-out group's KV finds room on the GPU now."""
        ...

    def swap_in(self, group: SequenceGroup) -> BlockCopies:
        """The group's KV back from host memory: the (host, GPU) blocks to move."""
        ...

    def block_table(self, seq: Sequence) -> list[int]:
        """The GPU blocks holding the sequence's KV, in logical order."""
        ...
