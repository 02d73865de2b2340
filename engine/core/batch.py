"""What one iteration runs: the value both data planes execute."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Batch:
    """One iteration. Prefill and decode sequences share it, as in the paper-era engine.

    A prefill computes the KV of `prefill_lens[i]` tokens of sequence `prefill_seq_ids[i]`
    (its prompt, or prompt plus generated tokens when recomputing after a preemption) and
    samples one token for every sequence in `prefill_sample_ids[i]` (all n samples of a
    request share one prompt computation). A decode feeds sequence `decode_seq_ids[i]` its
    last token at context length `decode_context_lens[i]` (that token included) and samples
    one more. Block plans are applied before the forward: swap-out, swap-in, then copies.
    """

    prefill_seq_ids: list[int] = field(default_factory=list)
    prefill_lens: list[int] = field(default_factory=list)
    prefill_sample_ids: list[tuple[int, ...]] = field(default_factory=list)
    decode_seq_ids: list[int] = field(default_factory=list)
    decode_context_lens: list[int] = field(default_factory=list)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)  # (src gpu, dst gpu)
    blocks_to_swap_in: list[tuple[int, int]] = field(default_factory=list)  # (cpu, gpu)
    blocks_to_swap_out: list[tuple[int, int]] = field(default_factory=list)  # (gpu, cpu)
    num_running_groups: int = 0  # requests in the batch (the paper's "batched requests")

    @property
    def num_prefill_tokens(self) -> int:
        return sum(self.prefill_lens)

    @property
    def sum_prefill_sq(self) -> int:
        return sum(n * n for n in self.prefill_lens)

    @property
    def num_decodes(self) -> int:
        return len(self.decode_seq_ids)

    @property
    def sum_decode_context(self) -> int:
        return sum(self.decode_context_lens)

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + len(self.decode_seq_ids)

    @property
    def is_empty(self) -> bool:
        return not self.prefill_seq_ids and not self.decode_seq_ids

    @property
    def num_swap_blocks(self) -> int:
        return len(self.blocks_to_swap_in) + len(self.blocks_to_swap_out)
