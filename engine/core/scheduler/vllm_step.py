"""What one vLLM schedule() decides, and the iteration it hands the data plane.

A step fills a StepPlan as its parts run (the running sequences' slots, the groups swapped in, the prompts
admitted), asking its SchedulingBudget whether each prompt still fits; batch_of() then turns the plan into the
Batch that runs, the decodes first and then the prefills.
"""
from __future__ import annotations

from engine.core.batch import Batch
from engine.core.scheduler.plan import StepPlan
from engine.core.sequence import Sequence
from engine.core.speculative import lookahead_slots

NO_TOKEN_CAP = 1 << 60  # max_num_batched_tokens unset (mixed): no iteration comes near it


class SchedulingBudget:
    """What one iteration may still take (vLLM v0.4's SchedulingBudget): num_tokens batched so far against
    token_cap, num_seqs running against max_num_seqs, and, where prompts are padded to the longest (separate:
    max_paddings given), their padded size against the cap and their padding against max_paddings."""

    __slots__ = ("token_cap", "max_num_seqs", "num_tokens", "num_seqs", "padded", "max_paddings", "num_prefills",
                 "longest")

    def __init__(self, token_cap: int, max_num_seqs: int, num_tokens: int, num_seqs: int,
                 max_paddings: int | None = None) -> None:
        self.token_cap, self.max_num_seqs = token_cap, max_num_seqs
        self.padded = max_paddings is not None  # prompts padded to the longest (separate's prompt-only iteration)
        self.max_paddings = max_paddings if max_paddings is not None else 0
        self.num_tokens, self.num_seqs = num_tokens, num_seqs
        self.num_prefills, self.longest = 0, 0

    def fit(self, prefill_lens: list[int], num_seqs: int, chunkable: bool) -> int | None:
        """The tokens these prefills of num_seqs new sequences add, or None when they do not fit; a
        chunkable prompt (one prefill) takes what the cap leaves of it."""
        if self.num_seqs + num_seqs > self.max_num_seqs:
            return None
        tokens = sum(prefill_lens)
        if self.padded:
            padded = (self.num_prefills + len(prefill_lens)) * max(self.longest, *prefill_lens)
            if padded > self.token_cap or padded - (self.num_tokens + tokens) > self.max_paddings:
                return None
            return tokens
        left = self.token_cap - self.num_tokens
        if chunkable:
            return min(prefill_lens[0], left) if left > 0 else None
        return tokens if tokens <= left else None

    def take(self, tokens: int, num_seqs: int, prefill_lens: list[int]) -> None:
        """An admitted prompt's: its tokens, its sequences and (padded) its prefills' lengths."""
        self.num_tokens += tokens
        self.num_seqs += num_seqs
        if self.padded:
            self.num_prefills += len(prefill_lens)
            self.longest = max(self.longest, *prefill_lens)

    @property
    def tokens_left(self) -> int:
        return self.token_cap - self.num_tokens


def decode_tokens(seqs: list[Sequence], lookahead: int) -> int:
    """The tokens the decodes put through the model: one each, and a speculating one's proposals too."""
    if not lookahead:
        return len(seqs)
    return sum(1 + lookahead_slots(seq.length, seq.final_len, lookahead) for seq in seqs)


def batch_of(plan: StepPlan, beams: bool, lookahead: int = 0) -> Batch:
    """The iteration the plan makes: the decodes in the order their slots were given, then the prefills (one
    per sample recomputed apart); a chunk that is not its prompt's last samples nothing. Notes in the plan the
    groups whose prompt is computed by the end of it (prefilled). beams: whether any running group is a beam
    search (the batch then names each one's beams). lookahead: speculative decoding's k, each decode's
    proposals (Batch.decode_proposed)."""
    decodes, decode_ids = plan.decode_seqs, plan.decode_ids
    if len(decode_ids) < len(decodes):  # those swapped in or arrived after the rows
        decode_ids.extend([seq.seq_id for seq in decodes[len(decode_ids):]])
    batch = Batch(decode_seq_ids=decode_ids,
                  decode_context_lens=[seq.length for seq in decodes], blocks_to_copy=plan.copies,
                  blocks_to_swap_in=plan.swap_in, blocks_to_swap_out=plan.swap_out,
                  num_running_groups=len(plan.decode_groups) + len(plan.prefills))
    if lookahead:
        batch.decode_proposed = [lookahead_slots(seq.length, seq.final_len, lookahead) for seq in decodes]
    ids, lens, cached, samples = batch.prefill_seq_ids, [], [], batch.prefill_sample_ids
    final = plan.prefilled
    for prefill in plan.prefills:
        group, start = prefill.group, prefill.start
        live = group.live_seqs()
        if group.shares_prompt:  # one prefill for the samples, sampling them all once the prompt is computed
            ids.append(live[0].seq_id)
            lens.append(prefill.stop - start)
            cached.append(start)
            samples.append(tuple(seq.seq_id for seq in live) if prefill.last else ())
        else:  # samples recomputed apart: each prefills its own history whole, and samples itself
            for seq in live:
                ids.append(seq.seq_id)
                lens.append(seq.length - start)
                cached.append(start)
                samples.append((seq.seq_id,))
        if prefill.last:
            final.append(group)
    batch.prefill_lens, batch.prefill_cached_lens = lens, cached
    if beams:
        batch.beam_groups = [tuple(s.seq_id for s in g.live_seqs())
                             for g in (*final, *plan.decode_groups) if g.is_beam]
    return batch
