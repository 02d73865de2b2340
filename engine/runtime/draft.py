"""The draft-model proposer: a smaller decoder of the target's vocabulary, with its own paged KV cache over the
target's block tables (each block holds the draft's KV of its tokens beside the target's, in a pool of the same
block ids, as vLLM keeps it), moved by the same swaps and copies.

Each iteration the draft computes what the target computes: every prefill chunk, and for each decode the tokens
it has not seen yet (its last sampled one, and the last proposal a step kept all of); that forward's last row of
a speculating decode gives its first proposal. Then one forward a further proposal, each a token over the
draft's cache, k in all. The draft chooses as the target samples (greedy, or the same temperature and top-p from
its own generator) and hands the verify the distributions it drew from. Each round's tokens come back to the host
to build the next (k syncs an iteration).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.batch import Batch
from engine.core.spec import ModelSpec
from engine.runtime.cache import PagedKVCache
from engine.runtime.inputs import BlockTableFn, Chunk, PoolLimits, chunk_inputs
from engine.runtime.model import Decoder
from engine.runtime.sampler import Sampler, SamplingParams
from engine.runtime.speculation import Round
from engine.runtime.timing import IterationTimer


@dataclass
class DraftProposals:
    """Each speculating decode's proposals; with random sampling the draft's distribution at each ([count, V]);
    and the seconds the draft took."""

    tokens: dict[int, list[int]]
    probs: dict[int, torch.Tensor] | None
    seconds: float


class DraftProposer:
    def __init__(self, spec: ModelSpec, model: Decoder, num_gpu_blocks: int, num_cpu_blocks: int, block_size: int,
                 backend: str, seed: int):
        self.spec, self.model, self.backend = spec, model, backend
        self.device = model.device
        self.cache = PagedKVCache(spec, num_gpu_blocks, num_cpu_blocks, block_size, model.device, model.dtype,
                                  backend=backend)
        self.limits = PoolLimits(spec.vocab_size, spec.max_seq_len, block_size, num_gpu_blocks)
        self.reset(seed)

    def reset(self, seed: int) -> None:
        """A run starts: the draft's own random stream (the target's draws stay the target's), nothing computed."""
        self.sampler = Sampler(self.device, seed + 1)
        self.computed: dict[int, int] = {}  # seq_id -> its leading positions whose draft KV is its tokens'

    def apply_block_plans(self, batch: Batch) -> None:
        self.cache.swap_out(batch.blocks_to_swap_out)  # out before in, as the runner moves the target's
        self.cache.swap_in(batch.blocks_to_swap_in)
        self.cache.copy(batch.blocks_to_copy)

    def propose(self, batch: Batch, tokens: dict[int, list[int]], block_table_fn: BlockTableFn,
                sampling: SamplingParams, forced: dict[int, list[int]]) -> DraftProposals:
        """The draft's work of the iteration, before the target's: its block plans, what it has not computed, and
        the speculating decodes' proposals (a sequence made to generate a stream proposes the stream's tokens)."""
        proposed = batch.decode_proposed or [0] * len(batch.decode_seq_ids)
        speculating = Round.of(batch)
        with IterationTimer(self.device) as timer, torch.inference_mode():
            self.apply_block_plans(batch)
            chunks = self._catch_up(batch, tokens, proposed)
            logits = self._forward(chunks, block_table_fn) if chunks else None
            proposals, probs = self._rounds(speculating, logits, tokens, block_table_fn, sampling, forced)
        return DraftProposals(proposals, probs if sampling.method != "greedy" else None, timer.seconds)

    def kept(self, batch: Batch, accepted: list[int] | None) -> None:
        """After the verify: the draft's KV is the sequence's through its last kept proposal the draft computed
        (it never computes its last proposal's)."""
        if not batch.decode_proposed:
            return
        for i, (seq_id, context, count) in enumerate(zip(batch.decode_seq_ids, batch.decode_context_lens,
                                                         batch.decode_proposed)):
            if count:
                self.computed[seq_id] = context + min(accepted[i] if accepted else 0, count - 1)

    def _catch_up(self, batch: Batch, tokens: dict[int, list[int]], proposed: list[int]) -> list[Chunk]:
        """The prefills' chunks, and each decode's tokens from the first the draft has not computed to its last
        sampled one (its logits row wanted where it speculates)."""
        chunks = []
        cached_lens = batch.prefill_cached_lens or [0] * len(batch.prefill_seq_ids)
        for seq_id, length, cached in zip(batch.prefill_seq_ids, batch.prefill_lens, cached_lens):
            chunks.append(Chunk(seq_id, cached, tokens[seq_id][cached:cached + length]))
            self.computed[seq_id] = cached + length
        for seq_id, context, count in zip(batch.decode_seq_ids, batch.decode_context_lens, proposed):
            start = min(self.computed.get(seq_id, 0), context - 1)
            chunks.append(Chunk(seq_id, start, tokens[seq_id][start:context], logits=count > 0))
            self.computed[seq_id] = context
        return chunks

    def _rounds(self, speculating: Round, logits: torch.Tensor | None, tokens: dict[int, list[int]],
                block_table_fn: BlockTableFn, sampling: SamplingParams, forced: dict[int, list[int]]
                ) -> tuple[dict[int, list[int]], dict[int, torch.Tensor]]:
        proposals: dict[int, list[int]] = {seq_id: [] for seq_id in speculating.seq_ids}
        rows: dict[int, list[torch.Tensor]] = {seq_id: [] for seq_id in speculating.seq_ids}
        live = list(range(len(speculating.seq_ids)))  # those still proposing, in logits-row order
        for j in range(max(speculating.counts, default=0)):
            if j:
                live = [i for i in live if speculating.counts[i] > j]
                chunks = [Chunk(speculating.seq_ids[i], speculating.contexts[i] + j - 1,
                                [proposals[speculating.seq_ids[i]][-1]], logits=True) for i in live]
                logits = self._forward(chunks, block_table_fn)
            assert logits is not None  # a speculating decode's chunk is always computed
            probs = self.sampler.probs(logits, sampling) if sampling.method != "greedy" else None
            chosen = (logits.argmax(dim=-1) if probs is None
                      else torch.multinomial(probs, 1, generator=self.sampler.generator).squeeze(1))
            for row, (i, token) in enumerate(zip(live, chosen.tolist())):
                seq_id = speculating.seq_ids[i]
                stream = forced.get(seq_id)
                if stream is not None:  # a deterministic proposal: q is one-hot on it
                    token = int(stream[len(tokens[seq_id]) + j])
                proposals[seq_id].append(int(token))
                if probs is not None:
                    rows[seq_id].append(probs[row] if stream is None else _one_hot(token, probs.shape[-1], probs))
        return proposals, {seq_id: torch.stack(r) for seq_id, r in rows.items() if r}

    def _forward(self, chunks: list[Chunk], block_table_fn: BlockTableFn) -> torch.Tensor:
        host = chunk_inputs(chunks, block_table_fn, self.limits)
        input_ids, positions, meta, rows = host.to_device(self.device, self.backend)
        hidden = self.model(input_ids, positions, meta, self.cache.layers)
        return self.model.logits(hidden[rows])


def _one_hot(token: int, vocab: int, like: torch.Tensor) -> torch.Tensor:
    row = torch.zeros(vocab, dtype=like.dtype, device=like.device)
    row[token] = 1.0
    return row
