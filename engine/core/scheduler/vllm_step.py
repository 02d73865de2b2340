"""What one vLLM schedule() decides, and the iteration it hands the data plane.

A step fills a StepPlan as its parts run (the running sequences' slots, the groups swapped in, the prompts
admitted), asking its SchedulingBudget whether each prompt still fits; batch_of() then turns the plan into the
Batch that runs, the decodes first and then the prefills.
"""
from __future__ import annotations

from engine.core.batch import Batch
from engine.core.sequence import Sequence, SequenceGroup
from engine.core.speculative import lookahead_slots

NO_TOKEN_CAP = 1 << 60  # max_num_batched_tokens unset (mixed): no iteration comes near it


class StepPlan:
    """What one schedule() decides, as its parts add to it: the groups that decode (and their running
    sequences, in order), the prompts that prefill, the blocks to copy and swap, and the groups preempted in
    this step (a group preempted now does not come back in the same step)."""

    __slots__ = ("decode_groups", "decode_seqs", "decode_ids", "prefills", "copies", "swap_in", "swap_out",
                 "preempted", "joined")

    def __init__(self) -> None:  # plain lists: a dataclass's default factories cost a call each, every step
        self.decode_groups: list[SequenceGroup] = []
        self.decode_seqs: list[Sequence] = []
        self.decode_ids: list[int] = []  # the first of decode_seqs' ids, where they were the rows
        self.prefills: list[Prefill] = []
        self.copies: list[tuple[int, int]] = []
        self.swap_in: list[tuple[int, int]] = []
        self.swap_out: list[tuple[int, int]] = []
        self.preempted: set[int] = set()
        # groups swapped in or arrived, which decode after the others whatever their place in the running order
        self.joined: list[SequenceGroup] = []


class Prefill:
    """A group's prompt tokens [start, stop) computed in this iteration: the whole prompt, or under chunked a
    chunk of it (samples recomputed apart: each its own history, from start to its length). last: whether the
    prompt is computed by the end of it (its samples then sample their first token)."""

    # plain classes, these two, with their __init__ written out: a dataclass's generated one runs interpreted
    __slots__ = ("group", "start", "stop", "last")

    def __init__(self, group: SequenceGroup, start: int, stop: int, last: bool) -> None:
        self.group, self.start, self.stop, self.last = group, start, stop, last


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


def batch_of(plan: StepPlan, beams: bool, lookahead: int = 0) -> tuple[Batch, list[SequenceGroup]]:
    """The iteration the plan makes: the decodes in the order their slots were given, then the prefills (one
    per sample recomputed apart); a chunk that is not its prompt's last samples nothing. Also the groups whose
    prompt is computed by the end of it. beams: whether any running group is a beam search (the batch then
    names each one's beams). lookahead: speculative decoding's k, each decode's proposals (Batch.decode_proposed)."""
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
    final: list[SequenceGroup] = []
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
    return batch, final
