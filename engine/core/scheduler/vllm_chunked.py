"""Chunked prefill (Sarathi-Serve; vLLM since v0.4, the default of its V1 engine): decodes first, then prompt
chunks, under one token budget per iteration.

Ported from vllm/core/scheduler.py `Scheduler._schedule_chunked_prefill` of v0.4.x: every iteration holds
at most max_num_batched_tokens tokens (vLLM's default for chunked prefill is 512,
engine.core.system.CHUNKED_TOKEN_BUDGET). The running sequences decode first, one token each, preempting
the latest arrivals when blocks run short; swapped groups come back (they decode too) when nobody was
preempted; the budget left goes to prompts in arrival order: first those already part way through their
prefill, then new ones, a prompt taking what is left when it does not fit whole. A prompt's blocks are
allocated whole when its first chunk runs (vLLM's block manager did the same); a later chunk is a prefill
of n new tokens over the c tokens earlier chunks computed (Batch.prefill_cached_lens), and only the last
chunk samples, so the request's first token comes when its last chunk runs. A too-long or never-fitting
request is ignored when it reaches the head of the queue, as vLLM's ignored_seq_groups.

With automatic prefix caching (vLLM v0.4's default pairing) a prompt's cached leading blocks count as
computed: its first chunk starts after them (group.num_cached_tokens), and each chunk has the cache key the
full blocks it fills (BlockManager.prompt_computed), so no block is keyed before it is computed.

Differences from vLLM, each where servesim's requests differ: a group preempted part way through its
prefill is recomputed (its chunks dropped) whatever the preemption mode, since nothing it generated would
be lost; samples recomputed apart after diverging (forced recompute) prefill whole, in one iteration with
room for all of them. And one where v0.4 starved its swapped groups: new prompts are admitted whatever is
swapped out, as there, but not into the blocks the oldest swapped group needs to come back
(_leaves_room_to_swap_in).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine.core.batch import Batch
from engine.core.scheduler.base import DecodeStretch
from engine.core.scheduler.vllm import PreemptionMode, StepPlan, VLLMScheduler
from engine.core.sequence import SequenceGroup
from engine.core.system import SystemSpec


@dataclass(eq=False, slots=True)
class Chunk:
    """A group's prompt tokens [start, stop) computed in this iteration (its samples' own histories, each
    from start to its length, when they were recomputed apart)."""

    group: SequenceGroup
    start: int
    stop: int


class VLLMChunkedScheduler(VLLMScheduler):
    """Decodes first, then prompt chunks, within max_num_batched_tokens per iteration."""

    def __init__(self, system: SystemSpec, max_seq_len: int, num_gpu_blocks: int, num_cpu_blocks: int):
        super().__init__(system, max_seq_len, num_gpu_blocks, num_cpu_blocks)
        self.ignores_unservable = True
        cap = system.max_num_batched_tokens  # never None here (SystemSpec.validate)
        self.token_budget: int = cap if cap is not None else max_seq_len
        # request id -> its prompt tokens in the cache (earlier chunks, a cached prefix), while it prefills
        self.prefill_progress: dict[int, int] = {}
        self._partial: list[Chunk] = []  # this iteration's chunks that are not their prompt's last

    # --- one step ----------------------------------------------------------------------
    def schedule(self) -> Batch:
        plan = StepPlan()
        self.blocks.begin_step()  # the prefix cache's LRU clock
        self._reserve_running(plan, self.prefill_progress)  # a prompt part way through needs no slot
        if not plan.preempted:  # v0.4: swap in only when nobody had to be preempted
            self._swap_in(plan)
        budget = self.token_budget - len(plan.decode_seqs)  # decodes <= max_num_seqs <= the budget (SystemSpec)
        chunks: list[Chunk] = []
        budget = self._continue_prefills(chunks, budget)
        self._admit_prompts(plan, chunks, budget)
        return self._chunked_batch(plan, chunks)

    def _continue_prefills(self, chunks: list[Chunk], budget: int) -> int:
        """The next chunk of each prompt part way through its prefill, in arrival order; the budget left."""
        progress = self.prefill_progress
        for group in self.running:
            if budget <= 0:
                break
            done = progress.get(group.request_id)
            if done is not None:
                stop = min(group.live_seqs()[0].length, done + budget)
                chunks.append(Chunk(group, done, stop))
                self._computes(group, stop)
                budget -= stop - done
        return budget

    def _admit_prompts(self, plan: StepPlan, chunks: list[Chunk], budget: int) -> None:
        """New prompts in arrival order while the budget, blocks and max_num_seqs allow, the last one perhaps
        only in part; a request that can never run is ignored on the way."""
        while self.waiting and budget > 0:
            group = self.waiting[0]
            if id(group) in plan.preempted:
                break
            if group.request_id in self.unservable:
                self._ignore(self.waiting.popleft())
                continue
            tokens = self._admission_tokens(group, self.token_budget - budget)
            if tokens is None:
                break
            self._start_prompt(self.waiting.popleft())
            start = group.num_cached_tokens
            self.prefill_progress[group.request_id] = start
            stop = start + tokens
            chunks.append(Chunk(group, start, stop))
            self._computes(group, stop if group.shares_prompt else max(s.length for s in group.live_seqs()))
            budget -= tokens

    def _leaves_room_to_swap_in(self, group: SequenceGroup) -> bool:
        """Whether admitting the group leaves the oldest swapped-out group the free blocks it needs to come back
        (can_swap_in). v0.4 admitted new prompts whatever was swapped out: while they kept the pool full, every
        step preempted someone, so no swapped group came back, and groups of several samples piled up in the
        swap space until it ran out. Holding back only the admissions that would take those blocks keeps
        v0.4's order (swapped groups before new prompts, new prompts beside them when there is room) and lets
        the swapped group come back once the running ones give the blocks back."""
        if not self.swapped:
            return True
        blocks = self.blocks
        needed = blocks.blocks_to_swap_in(self.swapped[0]) + blocks.watermark_blocks
        return blocks.gpu.num_free - blocks.blocks_to_allocate(group) >= needed

    def _computes(self, group: SequenceGroup, stop: int) -> None:
        """This iteration's chunk computes the group's prompt up to stop: the prefix cache keys the full
        blocks it fills (in the iteration that computes them, as a whole prompt's are at admission under
        mixed), which the cache then holds for the group instead of the group's own token slots."""
        keyed = self.blocks.prompt_computed(group, stop)
        if keyed:
            self.token_slots.slots -= keyed * self.block_size  # a sharing prompt: one table's worth

    def _admission_tokens(self, group: SequenceGroup, num_tokens: int) -> int | None:
        """The tokens the group's first chunk would compute in an iteration already holding num_tokens, or
        None while it is refused (blocks for its whole prompt, max_num_seqs, the budget); an unservable
        head of the queue counts as admitted (the next schedule() ignores it, which is a change)."""
        if group.request_id in self.unservable:
            return 0
        budget = self.token_budget - num_tokens
        live = group.live_seqs()
        if budget <= 0 or not self.blocks.can_allocate(group) or not self._leaves_room_to_swap_in(group) or \
                self.num_running_seqs + len(live) > self.system.max_num_seqs:
            return None
        cached = self.blocks.cached_tokens(group)
        if group.shares_prompt:
            return min(live[0].length - cached, budget)
        whole = sum(seq.length - cached for seq in live)  # samples recomputed apart prefill whole
        return whole if whole <= budget else None

    def _chunked_batch(self, plan: StepPlan, chunks: list[Chunk]) -> Batch:
        """The decodes as _batch_for lays them out, then a prefill per chunk (per sample recomputed apart);
        only a prompt's last chunk samples."""
        batch = self._batch_for([], plan.decode_groups, plan.decode_seqs)
        final: list[SequenceGroup] = []
        partial: list[Chunk] = []
        for chunk in chunks:
            group, start = chunk.group, chunk.start
            live = group.live_seqs()
            if not group.shares_prompt:
                for seq in live:
                    _add_prefill(batch, seq.seq_id, seq.length - start, start, (seq.seq_id,))
                final.append(group)
            elif chunk.stop == live[0].length:
                _add_prefill(batch, live[0].seq_id, chunk.stop - start, start, tuple(s.seq_id for s in live))
                final.append(group)
            else:
                _add_prefill(batch, live[0].seq_id, chunk.stop - start, start, ())
                partial.append(chunk)
        batch.num_running_groups += len(chunks)
        if self.num_running_beam_groups:
            batch.beam_groups = [tuple(s.seq_id for s in g.live_seqs())
                                 for g in (*final, *plan.decode_groups) if g.is_beam]
        batch.blocks_to_copy, batch.blocks_to_swap_in, batch.blocks_to_swap_out = (
            plan.copies, plan.swap_in, plan.swap_out)
        self._prefilled, self._partial = final, partial
        return batch

    def complete(self, batch: Batch, now_s: float,
                 beam_parents: Mapping[int, int] | None = None) -> list[SequenceGroup]:
        for chunk in self._partial:
            self.prefill_progress[chunk.group.request_id] = chunk.stop
        for group in self._prefilled:  # their last chunk ran: they decode from now on
            self.prefill_progress.pop(group.request_id, None)
        self._partial = []
        return super().complete(batch, now_s, beam_parents)

    # --- preemption, abort -------------------------------------------------------------
    def preemption_mode(self, group: SequenceGroup) -> PreemptionMode:
        if group.request_id in self.prefill_progress:
            return PreemptionMode.RECOMPUTE  # part way through its prompt: nothing generated to keep
        return super().preemption_mode(group)

    def _preempt(self, group: SequenceGroup, plan: StepPlan) -> None:
        prefilling = group.request_id in self.prefill_progress
        shares_prompt = group.shares_prompt
        super()._preempt(group, plan)
        if prefilling:
            del self.prefill_progress[group.request_id]
            group.shares_prompt = shares_prompt  # nothing sampled yet: its samples still share one prompt

    def abort(self, request_id: int) -> SequenceGroup | None:
        group = super().abort(request_id)
        self.prefill_progress.pop(request_id, None)
        return group

    # --- decode stretches ----------------------------------------------------------------
    def _decode_stretch(self, batch: Batch) -> DecodeStretch:
        if self.prefill_progress:  # a prompt part way through waits for budget: its chunk changes the batch
            return DecodeStretch(batch, 1)
        return super()._decode_stretch(batch)


def _add_prefill(batch: Batch, seq_id: int, length: int, cached: int, sample_ids: tuple[int, ...]) -> None:
    batch.prefill_seq_ids.append(seq_id)
    # Batch types its length lists as read-only sequences (one list per batch, built by _batch_for)
    batch.prefill_lens = [*batch.prefill_lens, length]
    batch.prefill_cached_lens = [*batch.prefill_cached_lens, cached]
    batch.prefill_sample_ids.append(sample_ids)
