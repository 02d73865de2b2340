"""How vLLM's paged scheduler preempts a group, and what a request needs alone to be sure to finish.

A preempted group gives its GPU blocks back one of two ways (PreemptionMode); `system.preemption` picks the
rule (auto: vLLM's own; or forced, engine.core.system). The same rule sizes a request on arrival: with the
pool to itself it must be admissible and, preempted at its last decode where it holds the most, able to come
back, or it would wait for good; such a request is refused (mixed) or ignored (separate, chunked).
"""
from __future__ import annotations

import enum

from engine.core.block_manager import BlockManager
from engine.core.blocks import blocks_for
from engine.core.sequence import Sequence, SequenceGroup
from engine.core.system import SystemSpec
from engine.errors import SwapSpaceExhausted

__all__ = ["PreemptionMode", "PreemptionRule"]


class PreemptionMode(enum.Enum):
    """How a preempted group frees its GPU blocks (vLLM's enum of the same name).

    SWAP: its blocks move to host memory and come back before it runs again.
    RECOMPUTE: its blocks are dropped; it waits again and re-prefills its prompt and
    everything it generated so far.
    """

    SWAP = "swap"
    RECOMPUTE = "recompute"


class PreemptionRule:
    """The system's preemption rule over one paged pool (token_cap: an iteration's tokens, at most)."""

    def __init__(self, system: SystemSpec, blocks: BlockManager, num_gpu_blocks: int, token_cap: int) -> None:
        # None: vLLM's own rule per group ("auto"); else the mode the user forced. V1 has no swap space: its own
        # rule recomputes every request
        auto = PreemptionMode.RECOMPUTE if system.prefill_policy == "v1" else None
        self.forced = auto if system.preemption == "auto" else PreemptionMode(system.preemption)
        self.blocks = blocks
        self.block_size = system.block_size
        self.num_gpu_blocks = num_gpu_blocks
        self.token_cap = token_cap

    def mode(self, group: SequenceGroup, prefilling: bool = False) -> PreemptionMode:
        """vLLM's rule (auto): recompute a group of one running sequence (cheaper than swapping), swap a group
        of several. Forced swap swaps every group. Forced recompute recomputes every group, except a group of
        several samples that could not be served apart (_can_serve_apart) and a beam search (its beams are
        chosen together from one step's scores, which a re-prefill apart would not give back): they swap. A
        group part way through a chunked prefill (prefilling) is recomputed: it generated nothing to keep."""
        if prefilling:
            return PreemptionMode.RECOMPUTE
        if self.forced is PreemptionMode.SWAP or group.is_beam:
            return PreemptionMode.SWAP
        live = group.live_seqs()
        if len(live) <= 1:
            return PreemptionMode.RECOMPUTE
        if self.forced is None or not self._can_serve_apart(live):  # auto swaps a group of several
            return PreemptionMode.SWAP
        return PreemptionMode.RECOMPUTE

    def _can_serve_apart(self, live: list[Sequence]) -> bool:
        """Whether samples recomputed apart can run again: their re-prefills fit one iteration's token cap, and
        alone in the pool each can grow to its final length in its own blocks (plus the one spare block per
        sequence that the conservative can_append asks for)."""
        if sum(s.length for s in live) > self.token_cap:
            return False
        blocks = sum(blocks_for(s.final_len, self.block_size) + 1 for s in live)
        return blocks + self.blocks.watermark_blocks <= self.num_gpu_blocks

    def swap_space_exhausted(self, group: SequenceGroup) -> SwapSpaceExhausted:
        why = (" (its samples could not be recomputed apart in this pool or token cap)"
               if self.forced is PreemptionMode.RECOMPUTE else "")
        return SwapSpaceExhausted(
            f"request {group.request_id}: its {len(group.live_seqs())} sequences must be swapped out to "
            f"preempt it{why}, and the CPU swap space has {self.blocks.cpu.num_free} free blocks; "
            "raise swap_space_gib (or lower workload.n / workload.beam_width)")

    def blocks_needed_alone(self, group: SequenceGroup) -> int:
        """The free blocks a fresh group needs at its most to be sure to finish, by the rules schedule()
        applies: its prompt's blocks above the watermark to be admitted (can_allocate), and what it takes to
        come back from a preemption at its last decode, where it holds the most (_comeback_blocks). With
        fewer, a group preempted there (by others, or by itself: can_append asks a free block per running
        sequence whether it needs one or not) would wait for good, so it is refused or ignored on arrival."""
        admit = blocks_for(group.prompt_len, self.block_size) + self.blocks.watermark_blocks
        if group.output_len < 2:  # its prefill samples its only token: it never decodes
            return admit
        return max(admit, self._comeback_blocks(group))

    def _comeback_blocks(self, group: SequenceGroup) -> int:
        """The free blocks a fresh group needs to run again after a preemption at its last decode.

        Swapped: the blocks it held then (the prompt's full ones shared, the rest each sample's own; at most:
        forked beams share more), a spare block per sequence and the watermark (can_swap_in), beside a cached
        shared prefix the manager keeps (the group comes back with its own copy of it). Those cover the spare
        blocks can_append asks for at its last decode too. Recomputed: its re-prefill's blocks, one table per
        sample, above the watermark (can_allocate), the prefix cached once; a group that cannot append even
        alone is then recomputed and gains a token with each re-prefill, so it needs no spare blocks."""
        bs, n, wm = self.block_size, group.num_seqs, self.blocks.watermark_blocks
        prefix = self.blocks.pinned_blocks_of(group)
        longest = group.prompt_len + group.output_len - 1  # its length at its last decode
        if self.mode(group) is PreemptionMode.SWAP:
            shared = group.prompt_len // bs if n > 1 else 0
            held = shared + n * (blocks_for(longest - 1, bs) - shared)  # before that decode's appends
            return held + n + wm + prefix
        return prefix + n * (blocks_for(longest, bs) - prefix) + wm

    def note(self, group: SequenceGroup) -> str:
        """What the pool must hold for the request beyond its tokens, in words, for a refusal."""
        if group.output_len < 2:
            return ""
        if self.mode(group) is PreemptionMode.SWAP:
            return (", swapped out at its last decode and back in with a spare block per sequence and the "
                    "watermark,")
        return ", recomputed at its last decode above the watermark,"

    def stall_culprit(self, group: SequenceGroup) -> str:
        """The oldest swapped-out group, which comes back before anything waiting runs (or, chunked, before the
        prompts that would take its blocks): what it holds, and the free blocks can_swap_in asks."""
        blocks = self.blocks
        n = len(group.live_seqs())
        held = blocks.blocks_to_swap_in(group) - n
        needed = held + n + blocks.watermark_blocks
        width = "beam_width" if group.is_beam else "n"
        holding = f"{held} block{'s' if held != 1 else ''}"
        return (f"request {group.request_id} (prompt {group.prompt_len} + output {group.output_len} tokens, "
                f"{width}={group.num_seqs}) is swapped out holding {holding} and needs {needed} free to come "
                f"back (its blocks, a spare one for each of its {n} sequences and the watermark's "
                f"{blocks.watermark_blocks}); the pool has {self.num_gpu_blocks} blocks, {blocks.gpu.num_free} free")
