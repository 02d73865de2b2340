"""What one iteration runs (`Batch`), and what its cost depends on (`BatchShape`).

Every cost model, the fit's features and the validation read an iteration through the same
`ShapeMetrics`, whether they hold the live Batch (the simulator, the engine) or its shape kept
after the batch is gone (the profiler's grid rows, a validation's recorded iterations).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


class ShapeMetrics:
    """The quantities an iteration's time is a function of, from its prefill and decode lengths."""

    __slots__ = ()
    # Sequence, here and in both subclasses: a compiled (mypyc) subclass must declare an attribute with its
    # base's very type; a Batch holds lists, a BatchShape tuples
    prefill_lens: Sequence[int]
    prefill_cached_lens: Sequence[int]  # empty, or one per prefill
    decode_context_lens: Sequence[int]

    @property
    def num_prefill_tokens(self) -> int:
        return sum(self.prefill_lens)

    @property
    def num_prefills(self) -> int:
        return len(self.prefill_lens)

    @property
    def sum_prefill_sq(self) -> int:
        """The prefills' attention work, on the scale of a plain prompt's n^2: a prefill of n new tokens
        over c cached ones scores n^2 / 2 causal pairs among the new tokens and n c pairs with the
        cached ones, i.e. n (n + 2c) on that scale (a prompt with nothing cached: n^2)."""
        if not any(self.prefill_cached_lens):
            return sum(n * n for n in self.prefill_lens)
        return sum(n * (n + 2 * c) for n, c in zip(self.prefill_lens, self.prefill_cached_lens))

    @property
    def sum_prefill_cached(self) -> int:
        """Cached tokens the prefills attend over without computing them (a shared prefix's KV)."""
        return sum(self.prefill_cached_lens)

    @property
    def num_decodes(self) -> int:
        return len(self.decode_context_lens)

    @property
    def sum_decode_context(self) -> int:
        return sum(self.decode_context_lens)

    @property
    def max_decode_context(self) -> int:
        return max(self.decode_context_lens, default=0)

    @property
    def num_tokens(self) -> int:
        """Tokens through the linear layers: every prompt token, one per decode."""
        return self.num_prefill_tokens + len(self.decode_context_lens)

    @property
    def num_seqs(self) -> int:
        """Sequences that produce logits: one per prefill and per decode."""
        return len(self.prefill_lens) + len(self.decode_context_lens)

    @property
    def num_logit_rows(self) -> int:
        """Rows the LM head computes: one per sequence (a speculative verify's shape has more: BatchShape)."""
        return self.num_seqs

    def decode_blocks(self, block_size: int) -> int:
        """KV blocks the decodes read, ceil(context / block_size) each: a paged kernel visits each once."""
        if block_size == 1:
            return sum(self.decode_context_lens)
        last = block_size - 1
        blocks = 0
        for c in self.decode_context_lens:  # a loop on native ints, compiled: no list of boxed ones
            blocks += (c + last) // block_size
        return blocks

    def features(self) -> dict[str, int]:
        """The terms a profile is fitted on (calibrate/work/features.py)."""
        num_decodes = len(self.decode_context_lens)
        return {
            "num_tokens": self.num_tokens,
            "sum_prefill_sq": self.sum_prefill_sq,
            "sum_decode_context": self.sum_decode_context,
            "padded_decode_context": num_decodes * self.max_decode_context,
            "num_seqs": self.num_seqs,
            "num_prefills": len(self.prefill_lens),
            "num_decodes": num_decodes,
        }


@dataclass(slots=True)
class Batch(ShapeMetrics):
    """One iteration. Prefill and decode sequences share it, as in the paper-era engine.

    A prefill computes the KV of `prefill_lens[i]` tokens of sequence `prefill_seq_ids[i]`
    (its prompt, or prompt plus generated tokens when recomputing after a preemption) and
    samples one token for every sequence in `prefill_sample_ids[i]` (all n samples of a
    request share one prompt computation). When `prefill_cached_lens[i]` tokens at the start of
    the sequence are already in the cache (a shared prefix), the prefill computes only the
    `prefill_lens[i]` tokens after them but attends over all of them; `prefill_cached_lens` is
    empty (nothing cached anywhere) or has one entry per prefill. A decode feeds sequence `decode_seq_ids[i]` its
    last token at context length `decode_context_lens[i]` (that token included) and samples
    one more. Block plans are applied before the forward: swap-out, swap-in, then copies.

    `beam_groups` lists the beam searches in the batch, each as its beams' sequence ids: their
    tokens are not sampled one by one but chosen together (engine.core.beam), and after a decode
    step the data plane tells complete() which beam each survivor continues.
    """

    prefill_seq_ids: list[int] = field(default_factory=list)
    prefill_lens: Sequence[int] = field(default_factory=list)
    prefill_sample_ids: list[tuple[int, ...]] = field(default_factory=list)
    prefill_cached_lens: Sequence[int] = field(default_factory=list)
    decode_seq_ids: list[int] = field(default_factory=list)
    decode_context_lens: Sequence[int] = field(default_factory=list)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)  # (src gpu, dst gpu)
    blocks_to_swap_in: list[tuple[int, int]] = field(default_factory=list)  # (cpu, gpu)
    blocks_to_swap_out: list[tuple[int, int]] = field(default_factory=list)  # (gpu, cpu)
    num_running_groups: int = 0  # requests in the batch (the paper's "batched requests")
    beam_groups: list[tuple[int, ...]] = field(default_factory=list)
    # speculative decoding: the tokens each decode proposes (decode_seq_ids' order), verified with its next token
    # in this iteration; empty when the system does not speculate
    decode_proposed: list[int] = field(default_factory=list)

    # written out, as the fields above, so that mypyc compiles it: a dataclass's generated __init__ runs
    # interpreted, and a batch is built every step (tests/engine/core/test_value_inits.py)
    def __init__(self, prefill_seq_ids: list[int] | None = None, prefill_lens: Sequence[int] | None = None,
                 prefill_sample_ids: list[tuple[int, ...]] | None = None,
                 prefill_cached_lens: Sequence[int] | None = None, decode_seq_ids: list[int] | None = None,
                 decode_context_lens: Sequence[int] | None = None,
                 blocks_to_copy: list[tuple[int, int]] | None = None,
                 blocks_to_swap_in: list[tuple[int, int]] | None = None,
                 blocks_to_swap_out: list[tuple[int, int]] | None = None, num_running_groups: int = 0,
                 beam_groups: list[tuple[int, ...]] | None = None, decode_proposed: list[int] | None = None) -> None:
        self.prefill_seq_ids = prefill_seq_ids if prefill_seq_ids is not None else []
        self.prefill_lens = prefill_lens if prefill_lens is not None else []
        self.prefill_sample_ids = prefill_sample_ids if prefill_sample_ids is not None else []
        self.prefill_cached_lens = prefill_cached_lens if prefill_cached_lens is not None else []
        self.decode_seq_ids = decode_seq_ids if decode_seq_ids is not None else []
        self.decode_context_lens = decode_context_lens if decode_context_lens is not None else []
        self.blocks_to_copy = blocks_to_copy if blocks_to_copy is not None else []
        self.blocks_to_swap_in = blocks_to_swap_in if blocks_to_swap_in is not None else []
        self.blocks_to_swap_out = blocks_to_swap_out if blocks_to_swap_out is not None else []
        self.num_running_groups = num_running_groups
        self.beam_groups = beam_groups if beam_groups is not None else []
        self.decode_proposed = decode_proposed if decode_proposed is not None else []

    @property
    def num_proposed(self) -> int:
        """Tokens the decodes propose in this iteration (speculative decoding; 0 without)."""
        return sum(self.decode_proposed)

    @property
    def is_empty(self) -> bool:
        return not self.prefill_seq_ids and not self.decode_seq_ids

    @property
    def num_swap_blocks(self) -> int:
        return len(self.blocks_to_swap_in) + len(self.blocks_to_swap_out)

    @property
    def num_copy_blocks(self) -> int:
        return len(self.blocks_to_copy)

    def decode_later(self, steps: int) -> Batch:
        """This decode-only batch `steps` iterations later in a decode stretch: the same sequences, each
        context `steps` longer, and no blocks to move."""
        contexts = [c + steps for c in self.decode_context_lens]
        return Batch(decode_seq_ids=self.decode_seq_ids, decode_context_lens=contexts,
                     num_running_groups=self.num_running_groups, beam_groups=self.beam_groups)

    def shape(self) -> BatchShape:
        cached = tuple(self.prefill_cached_lens) if any(self.prefill_cached_lens) else ()
        return BatchShape(tuple(self.prefill_lens), tuple(self.decode_context_lens), self.num_swap_blocks,
                          len(self.blocks_to_copy), self.num_running_groups, cached)


@dataclass(frozen=True, slots=True)
class BatchShape(ShapeMetrics):
    """A batch without its sequence ids: what a cost model reads, kept after the batch is gone."""

    prefill_lens: Sequence[int] = ()  # tuples: a shape is hashable
    decode_context_lens: Sequence[int] = ()
    num_swap_blocks: int = 0
    num_copy_blocks: int = 0
    num_running_groups: int = 0
    prefill_cached_lens: Sequence[int] = ()
    # the LM head's rows beyond one per sequence: a speculative verify scores each of its k + 1 positions, so each
    # speculating decode's chunk adds its k proposals' rows (calibrate/clock/speculative_pricing.py)
    extra_logit_rows: int = 0

    @property
    def num_logit_rows(self) -> int:
        return len(self.prefill_lens) + len(self.decode_context_lens) + self.extra_logit_rows
