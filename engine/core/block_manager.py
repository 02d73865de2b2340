"""vLLM's paged KV cache bookkeeping (paper-era rules, Kwon et al. 2023 section 4)."""
from __future__ import annotations

from engine.core.blocks import blocks_for
from engine.core.sequence import SeqStatus, Sequence, SequenceGroup


class BlockAllocator:
    """A free list of physical blocks with reference counts."""

    def __init__(self, num_blocks: int, name: str = "gpu"):
        self.num_blocks = num_blocks
        self.name = name
        # pop() from the end hands out low block ids first: easier to read in a trace
        self._free = list(range(num_blocks - 1, -1, -1))
        self.ref_counts = [0] * num_blocks

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
        self.ref_counts[block] += by

    def free(self, block: int) -> None:
        if self.ref_counts[block] <= 0:
            raise RuntimeError(f"double free of {self.name} block {block}")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self._free.append(block)


class BlockManager:
    """Maps each sequence's logical blocks to physical ones, sharing by reference count.

    A sequence of `length` tokens holds ceil(length / block_size) blocks: the slot of its
    last sampled token is reserved when that token is fed back as the next decode's input.
    """

    def __init__(self, block_size: int, num_gpu_blocks: int, num_cpu_blocks: int, watermark: float = 0.01):
        self.block_size = block_size
        self.gpu = BlockAllocator(num_gpu_blocks, "gpu")
        self.cpu = BlockAllocator(num_cpu_blocks, "cpu")
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.block_tables: dict[int, list[int]] = {}

    # --- admission -------------------------------------------------------------
    def blocks_to_allocate(self, group: SequenceGroup) -> int:
        seqs = group.live_seqs()
        if group.shares_prompt:
            return blocks_for(seqs[0].length, self.block_size)
        return sum(blocks_for(s.length, self.block_size) for s in seqs)

    def can_allocate(self, group: SequenceGroup) -> bool:
        return self.gpu.num_free - self.blocks_to_allocate(group) >= self.watermark_blocks

    def allocate(self, group: SequenceGroup) -> None:
        """The prompt's blocks, once, shared by every live sequence of the group; or, for a
        group whose samples diverged and are recomputed apart, each sample's own blocks."""
        seqs = group.live_seqs()
        if not group.shares_prompt:
            for seq in seqs:
                num_blocks = blocks_for(seq.length, self.block_size)
                self.block_tables[seq.seq_id] = [self.gpu.allocate() for _ in range(num_blocks)]
            return
        table = [self.gpu.allocate() for _ in range(blocks_for(seqs[0].length, self.block_size))]
        for block in table:
            self.gpu.incref(block, len(seqs) - 1)
        for seq in seqs:
            self.block_tables[seq.seq_id] = list(table)

    # --- growth ----------------------------------------------------------------
    def can_append(self, group: SequenceGroup) -> bool:
        # conservative, as the paper-era code: one new block per running sequence
        return sum(1 for s in group.seqs if s.status is SeqStatus.RUNNING) <= self.gpu.num_free

    def append_slot(self, seq: Sequence) -> tuple[int, int] | None:
        """Make room for the token at position length-1; returns a (src, dst) copy if CoW."""
        table = self.block_tables[seq.seq_id]
        if len(table) * self.block_size < seq.length:
            table.append(self.gpu.allocate())
            return None
        last = table[-1]
        if self.gpu.ref_counts[last] == 1:
            return None
        fresh = self.gpu.allocate()
        table[-1] = fresh
        self.gpu.free(last)
        return last, fresh

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Beam search: the child drops its blocks and continues the parent's, shared by reference
        count (paper-era `fork`: the table is copied, every block gains a holder, nothing is
        allocated). A shared last block is copied on the next append_slot."""
        table = self.block_tables[parent.seq_id]
        for block in table:
            self.gpu.incref(block)
        for block in self.block_tables[child.seq_id]:
            self.gpu.free(block)
        self.block_tables[child.seq_id] = list(table)

    def held_token_slots(self, group: SequenceGroup) -> int:
        """Slots of the group's GPU blocks holding a token's K/V, each block once however many beams
        hold it (a token sampled but not yet given a slot is not counted)."""
        bs, seen, slots = self.block_size, set(), 0
        for seq in group.live_seqs():
            for i, block in enumerate(self.block_tables[seq.seq_id]):
                if block not in seen:
                    seen.add(block)
                    slots += min(bs, seq.length - i * bs)
        return slots

    def free(self, seq: Sequence) -> None:
        table = self.block_tables.pop(seq.seq_id, None)
        if table is None:
            return
        allocator = self.cpu if seq.status is SeqStatus.SWAPPED else self.gpu
        for block in table:
            allocator.free(block)

    # --- swapping --------------------------------------------------------------
    def _unique_blocks(self, group: SequenceGroup) -> int:
        return len({b for s in group.live_seqs() for b in self.block_tables[s.seq_id]})

    def can_swap_out(self, group: SequenceGroup) -> bool:
        return self._unique_blocks(group) <= self.cpu.num_free

    def can_swap_in(self, group: SequenceGroup) -> bool:
        needed = self._unique_blocks(group) + len(group.live_seqs())
        return self.gpu.num_free - needed >= self.watermark_blocks

    def swap_out(self, group: SequenceGroup) -> list[tuple[int, int]]:
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
        return list(mapping.items())

    # --- accounting ------------------------------------------------------------
    @property
    def num_used_gpu_blocks(self) -> int:
        return self.gpu.num_blocks - self.gpu.num_free
