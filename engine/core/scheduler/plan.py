"""What one schedule() decides, for complete() to apply: a StepPlan, its prompts Prefills.

Every scheduler's schedule() makes one and keeps it as the step in flight; complete() reads which groups sampled
(the prompts computed, the decodes), which joined the running set this step, and how far each chunk went.
"""
from __future__ import annotations

from engine.core.sequence import Sequence, SequenceGroup


class StepPlan:
    """What one schedule() decides, as its parts add to it: the groups that decode (and their running
    sequences, in order), the prompts that prefill, the blocks to copy and swap, and the groups preempted in
    this step (a group preempted now does not come back in the same step). schedule() keeps it as the step in
    flight (QueueScheduler.in_flight) and complete() applies it: prefilled, the groups whose prompt is computed
    by the end of the iteration, sample their first token; decode_groups their next."""

    __slots__ = ("decode_groups", "decode_seqs", "decode_ids", "prefills", "prefilled", "copies", "swap_in",
                 "swap_out", "preempted", "joined")

    def __init__(self) -> None:  # plain lists: a dataclass's default factories cost a call each, every step
        self.decode_groups: list[SequenceGroup] = []
        self.decode_seqs: list[Sequence] = []
        self.decode_ids: list[int] = []  # the first of decode_seqs' ids, where they were the rows
        self.prefills: list[Prefill] = []
        self.prefilled: list[SequenceGroup] = []  # set as the batch is made (batch_of; Orca's and FT's _batch_for)
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
