"""A speculating decode stretch (docs/concepts/fast-forward.md, docs/speculative-decoding.md): the iterations a
speculating vLLM scheduler runs after a decode-only batch, planned one at a time from each one's accepted counts,
and then made at once.

A speculating step advances each sequence by its accepted count plus one: known only once the data plane has the
counts, but a simulator draws them ahead, in order (sim/core/acceptance.py). Given them, the next schedule()
decides nothing but what follows from the lengths, for as long as all of this holds:

1. Nobody waits (checked where the stretch starts) and nobody arrives (a request reaching the replica ends the
   stretch at the iteration in flight): no prompt joins, and schedule() only gives the running sequences their
   slots.
2. No request finishes: the step whose completion takes a sequence to its final length is the stretch's last.
3. The slots fit: each step gives every sequence its next token's slot and its proposals' (lookahead_slots), in
   blocks of its own (the stretch's first step copied any shared last block on write, and every block taken
   since is fresh), so a step takes as many free blocks as its sequences' slots reach past their tables. A step
   whose slots need more than are free would preempt: the stretch ends before it.
4. After each step the rejected proposals' slots go back: a sequence's blocks past its computed tokens, which it
   took in that very step (never keyed, never shared).
Nothing is swapped out, no prompt is part way through its chunks, no request is being copied in, no beam search
runs and each request runs one sequence: checked where the stretch starts (VLLMScheduler.speculating_stretch).
"""
from __future__ import annotations

from itertools import compress
from operator import gt

from engine.core.batch import Batch
from engine.core.block_manager import BlockManager
from engine.core.sequence import Sequence, SequenceGroup


class SpeculatingSteps:
    """A speculating stretch as planned so far: each iteration's batch (`batches`, the first the one schedule()
    returned), the accepted counts of each one given so far (`accepted`), and the pool as each one's schedule()
    left it (`free_blocks`, `token_slots`). accept() takes the last one's counts, extend() plans the one after it,
    and make() runs the first ones' completions and the schedule() of each next one at once."""

    def __init__(self, batch: Batch, groups: list[SequenceGroup], seqs: list[Sequence], tables: list[int],
                 lookahead: int, block_size: int, free_blocks: int, token_slots: int) -> None:
        """batch: the decode-only batch schedule() just returned, whose decodes are `seqs` (one of each of
        `groups`, in that order), holding `tables` blocks each; free_blocks and token_slots: the pool then."""
        self.batches: list[Batch] = [batch]
        self.accepted: list[list[int]] = []
        self.free_blocks: list[int] = [free_blocks]
        self.token_slots: list[int] = [token_slots]
        self.groups = groups
        self.seqs = seqs
        self.finals = [seq.prompt_len + seq.output_len for seq in seqs]
        self.lookahead = lookahead
        self.block_size = block_size
        # each planned iteration's: the blocks each sequence holds once its schedule() ran, and (all but the first's)
        # those it kept of them once the completion before it gave the rejected proposals' back
        self._held: list[list[int]] = [tables]
        self._kept: list[list[int]] = []

    @property
    def num_steps(self) -> int:
        """The iterations planned: batches[0] and those after it."""
        return len(self.batches)

    def accept(self, accepted: list[int]) -> None:
        """The accepted counts of the last planned iteration's decodes, in its order (each within its proposals)."""
        if len(self.accepted) != len(self.batches) - 1:
            raise ValueError(f"accepted counts for iteration {len(self.accepted) + 1} of a stretch planned to "
                             f"{len(self.batches)}")
        self.accepted.append(accepted)

    def extend(self) -> Batch | None:
        """The iteration after the last planned one (whose accepted counts accept() took), planned: its batch, or
        None where the stretch cannot go on past the last one (it finishes a request, or the next one's slots
        need more blocks than are free)."""
        last = self.batches[-1]
        accepted = self.accepted[len(self.batches) - 1]
        k, bs = self.lookahead, self.block_size
        fill, reach = bs - 2, bs - 1  # a length's blocks once its rejected proposals go, and its next slots'
        lengths: list[int] = []
        proposed: list[int] = []
        kept: list[int] = []
        held: list[int] = []
        # the free blocks once each sequence gave back its rejected proposals' and took its next slots': what it
        # held less what it reaches (the blocks it keeps cancel)
        spare = self.free_blocks[-1]
        # one pass over the decodes (a loop costs less here than a list built for each of these)
        for context, count, final, table in zip(last.decode_context_lens, accepted, self.finals, self._held[-1]):
            length = context + count + 1
            if length >= final:
                return None  # it finishes in the last planned iteration: the stretch's last
            left = final - length - 1
            count_next = k if k < left else left  # lookahead_slots: no more than it can still use
            blocks = (length + count_next + reach) // bs  # those its next slots reach
            spare += table - blocks
            lengths.append(length)
            proposed.append(count_next)
            kept.append((length + fill) // bs)  # the blocks its computed tokens fill
            held.append(blocks)
        if spare < 0:
            return None  # its schedule() would preempt
        batch = Batch(decode_seq_ids=last.decode_seq_ids, decode_context_lens=lengths,
                      num_running_groups=last.num_running_groups, decode_proposed=proposed)
        self.batches.append(batch)
        self.free_blocks.append(spare)
        self.token_slots.append(self.token_slots[-1] + len(lengths) + sum(accepted))
        self._kept.append(kept)
        self._held.append(held)
        return batch

    def make(self, num_steps: int, blocks: BlockManager) -> tuple[int, int, int]:
        """Complete the first num_steps - 1 iterations and run the schedule() of each next one, through the block
        manager's own calls in the order the steps make them (the same block ids): every sequence's length and its
        request's counts move on, the rejected proposals' blocks go back, the next proposals' are taken. Returns
        the tokens sampled, proposed and accepted in those iterations."""
        seqs, made = self.seqs, num_steps - 1
        offered = [batch.decode_proposed for batch in self.batches[:made]]
        taken = self.accepted[:made]
        for group, proposed_by, accepted_of in zip(self.groups, map(sum, zip(*offered)), map(sum, zip(*taken))):
            group.num_proposed_tokens += proposed_by
            group.num_accepted_tokens += accepted_of
        for step in range(made):
            # the blocks each step gives back and takes, sequence by sequence in the batch's order (none copied on
            # write after its first: the module's point 3); give_back_lookahead reads the length it goes on from
            lengths, kept, held = self.batches[step + 1].decode_context_lens, self._kept[step], self._held[step + 1]
            for i in compress(range(len(seqs)), map(gt, self._held[step], kept)):
                seqs[i].length = lengths[i]
                blocks.give_back_lookahead(seqs[i])
            blocks.begin_step()
            for i in compress(range(len(seqs)), map(gt, held, kept)):
                blocks.grow_lookahead(seqs[i], held[i] - kept[i])
        for seq, length in zip(seqs, self.batches[made].decode_context_lens):
            seq.length = length
        accepted = sum(map(sum, taken))
        return made * len(seqs) + accepted, sum(map(sum, offered)), accepted

    def context_sums(self, num_steps: int) -> list[int]:
        """Each of the first num_steps iterations' sum of decode contexts (its records' sum_decode_context)."""
        return [sum(batch.decode_context_lens) for batch in self.batches[:num_steps]]

    def speculation(self, num_steps: int) -> list[tuple[int, int]]:
        """Each of the first num_steps iterations' tokens proposed and accepted (its speculation records)."""
        return [(sum(self.batches[i].decode_proposed), sum(self.accepted[i])) for i in range(num_steps)]
