"""The EAGLE or MTP proposer (engine/runtime/head_model.py's head), run as vLLM's EagleProposer runs it: over
every token the target computes, then chained, greedy.

After the target's forward (`follow`): each token the target computed and kept (a prefill chunk's, a decode's,
a verify's last token and the proposals it kept) gives the head a row: the token after it and the target's hidden
state there. One forward of the head over them writes its KV, in its own paged cache over the target's block
tables (each block holds the head's KV of its tokens beside the target's, in a pool of the same block ids, moved
by the same swaps and copies), and keeps each sequence's last output. At the next step (`propose`), the LM head
over that output is a speculating decode's first proposal; each further one is one forward of a row of its own:
the proposal before it and the head's output there, k forwards an iteration with the one after the target's.
Proposals are the argmax (vLLM's head proposes greedily; the verify takes them as a deterministic proposer's,
q one-hot), and each round's come back to the host to build the next (k syncs an iteration).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from engine.core.batch import Batch
from engine.runtime.cache import PagedKVCache
from engine.runtime.head_model import ProposerHead, head_kv_spec
from engine.runtime.inputs import BlockTableFn, Chunk, HostInputs, PoolLimits, chunk_inputs, upload
from engine.runtime.model import Decoder
from engine.runtime.speculation import Round
from engine.runtime.timing import IterationTimer

TokensOf = Callable[[int], list[int]]  # seq_id -> its tokens after the step (the kept proposals, then its own)


@dataclass
class HeadProposals:
    """Each speculating decode's proposals, and the seconds the head took."""

    tokens: dict[int, list[int]]
    seconds: float


class HeadProposer:
    def __init__(self, head: ProposerHead, target: Decoder, num_gpu_blocks: int, num_cpu_blocks: int,
                 block_size: int, backend: str):
        self.head, self.target, self.backend = head, target, backend
        spec = target.spec
        self.cache = PagedKVCache(head_kv_spec(spec), num_gpu_blocks, num_cpu_blocks, block_size, target.device,
                                  target.dtype, backend=backend)
        self.limits = PoolLimits(spec.vocab_size, spec.max_seq_len, block_size, num_gpu_blocks)
        self.last: dict[int, torch.Tensor] = {}  # seq_id -> the head's output at its last token the target kept

    def reset(self) -> None:
        """A run starts: nothing followed."""
        self.last.clear()

    def forget(self, seq_ids: Iterable[int]) -> None:
        for seq_id in seq_ids:
            self.last.pop(seq_id, None)

    def apply_block_plans(self, batch: Batch) -> None:
        self.cache.swap_out(batch.blocks_to_swap_out)  # out before in, as the runner moves the target's
        self.cache.swap_in(batch.blocks_to_swap_in)
        self.cache.copy(batch.blocks_to_copy)

    def follow(self, inputs: HostInputs | None, hidden: torch.Tensor | None, tokens_of: TokensOf,
               accepted: dict[int, int], block_table_fn: BlockTableFn) -> float:
        """After the target's forward over `inputs` (its hidden states `hidden`; None: no forward, block plans
        alone), the head's rows of every token it computed and kept (a verify's: its last token and the
        `accepted` proposals). Returns the seconds it took."""
        if inputs is None or hidden is None or not inputs.runs:
            return 0.0
        chunks, rows = [], []
        for run in inputs.runs:
            count = accepted[run.seq_id] + 1 if run.seq_id in accepted else run.count
            after = tokens_of(run.seq_id)[run.start + 1:run.start + 1 + count]
            chunks.append(Chunk(run.seq_id, run.start, after, logits=True))
            rows.extend(range(run.first_row, run.first_row + count))
        with IterationTimer(self.target.device) as timer, torch.inference_mode():
            outputs = self._forward(chunks, hidden.index_select(0, upload(rows, torch.int64, hidden.device)),
                                    block_table_fn)
            self.last.update(zip((chunk.seq_id for chunk in chunks), outputs))
        return timer.seconds

    def propose(self, batch: Batch, block_table_fn: BlockTableFn, tokens: dict[int, list[int]],
                forced: dict[int, list[int]]) -> HeadProposals:
        """The head's work at the start of a step: its block plans, and the speculating decodes' proposals (a
        sequence made to generate a stream proposes the stream's tokens, and chains them)."""
        speculating = Round.of(batch)
        with IterationTimer(self.target.device) as timer, torch.inference_mode():
            self.apply_block_plans(batch)
            proposals = self._rounds(speculating, block_table_fn, tokens, forced) if speculating.seq_ids else {}
        return HeadProposals(proposals, timer.seconds)

    def _rounds(self, speculating: Round, block_table_fn: BlockTableFn, tokens: dict[int, list[int]],
                forced: dict[int, list[int]]) -> dict[int, list[int]]:
        """Round j of a decode of context c is the head's row at position c - 2 + j: round 0's output the one
        `follow` kept, each later one a forward over the proposal before it."""
        outputs = torch.stack([self.last[seq_id] for seq_id in speculating.seq_ids])  # one a live decode
        proposals: dict[int, list[int]] = {seq_id: [] for seq_id in speculating.seq_ids}
        live = list(range(len(speculating.seq_ids)))
        for j in range(max(speculating.counts)):
            if j:
                chunks = [Chunk(speculating.seq_ids[i], speculating.contexts[i] - 2 + j,
                                [proposals[speculating.seq_ids[i]][-1]], logits=True) for i in live]
                outputs = self._forward(chunks, outputs, block_table_fn)
            chosen = self.head.logits(self.target, outputs).argmax(dim=-1).tolist()
            for i, token in zip(live, chosen):
                seq_id = speculating.seq_ids[i]
                stream = forced.get(seq_id)
                proposals[seq_id].append(int(token) if stream is None else int(stream[len(tokens[seq_id]) + j]))
            going = [row for row, i in enumerate(live) if speculating.counts[i] > j + 1]
            if len(going) < len(live):
                live = [live[row] for row in going]
                outputs = outputs.index_select(0, upload(going, torch.int64, outputs.device))
        return proposals

    def _forward(self, chunks: list[Chunk], hidden: torch.Tensor, block_table_fn: BlockTableFn) -> torch.Tensor:
        """The head over chunks of rows (their tokens the ones after each row's position), hidden states in row
        order; its outputs at each chunk's last row."""
        host = chunk_inputs(chunks, block_table_fn, self.limits)
        input_ids, positions, meta, rows = host.to_device(self.target.device, self.backend)
        return self.head(self.target, input_ids, positions, hidden, meta, self.cache.layers[0])[rows]
