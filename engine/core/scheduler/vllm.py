"""vLLM's scheduler: paged blocks on demand, the latest arrivals preempted, and three ways to fit prompts in.

Every schedule() tells the same story, vLLM's `Scheduler._schedule` of the version each policy ports:
  1. the running sequences each get a slot for their next token, the latest arrivals preempted while the
     blocks run short (a preempted group swaps out or drops its blocks to re-prefill: PreemptionMode);
  2. groups swapped out come back, oldest first, unless this step swapped one out (separate, chunked: unless
     it preempted anyone);
  3. waiting prompts join in arrival order while `admissible()` finds room for them in the iteration's
     SchedulingBudget (tokens, sequences, padding) and in the free blocks.
The prefill policy, how prompts share an iteration, is a row of PREFILL_RULES; docs/vllm-policies.md says
which vLLM each ports and where servesim departs from it. What a step decides is a StepPlan
(engine.core.scheduler.plan), kept as the step in flight until complete() applies it; batch_of() turns it into
the iteration that runs (engine.core.scheduler.vllm_step). The same class keeps the pool, its queues and the
running rows (engine.core.running_batch), and answers between steps: abort, a decode replica's receiving of
requests prefilled elsewhere (engine.core.scheduler.receiving), why a swapped group stalls the queue. The step
and the decode stretch ask the same
admissible(), so a stretch can never promise what a step would decide otherwise (docs/concepts/fast-forward.md).
"""
from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain

from engine.core.batch import Batch
from engine.core.block_manager import BlockManager, appends_fit
from engine.core.kv_tracker import PagedKVTracker, paged_usage_columns
from engine.core.kv_usage import KVUsage, UsageColumns
from engine.core.running_batch import RunningBatch, in_batch_order
from engine.core.scheduler.base import DecodeStretch
from engine.core.scheduler.common import QueueScheduler
from engine.core.scheduler.ignoring import IgnoredRequests
from engine.core.scheduler.order import FirstComeFirstServed, Order, insert_in_order
from engine.core.scheduler.plan import Prefill, StepPlan
from engine.core.scheduler.preemption import PreemptionMode, PreemptionRule
from engine.core.scheduler.prompt_delay import PromptDelay
from engine.core.scheduler.receiving import IncomingRequests
from engine.core.scheduler.speculating_stretch import SpeculatingSteps
from engine.core.scheduler.stretch import paged_stretch, stretch_appends
from engine.core.scheduler.vllm_step import NO_TOKEN_CAP, SchedulingBudget, batch_of, decode_tokens
from engine.core.sequence import SeqStatus, Sequence, SequenceGroup
from engine.core.system import SystemSpec


@dataclass(frozen=True)
class PrefillRules:
    """Where a prefill policy's step differs from the others': each difference named once, read in schedule()."""

    prompt_only: bool  # prompts run in iterations of their own, padded to their longest
    chunked: bool  # a prompt takes what the token budget leaves, and goes on in the next steps
    prompts_while_swapped: bool  # new prompts are admitted while a group is swapped out
    # groups swap back in only after a step that preempted nobody (v0.2+'s `if not preempted`); else (v0.1) after
    # any step that swapped no group out, one that preempted only by recomputation included
    any_preemption_holds_swap_in: bool
    ignores_unservable: bool  # a request that can never run is ignored at the queue's head, not refused on arrival
    # V1's allocate_slots: a running sequence takes a block only where its next token needs one, and preempts only
    # then; else a free block per running sequence is asked for whether it needs one or not (appends_fit)
    appends_as_needed: bool = False
    # V1 keeps its running requests in the order it admitted them (a request recomputed after a preemption runs
    # again last); else they keep the scheduler's Order (arrival), and preemption takes the latest arrival
    admission_order: bool = False
    # V1 admits no waiting prompt in a step that preempted anyone; else only the group just preempted waits
    admits_after_preemption: bool = True


PREFILL_RULES = {  # the four policies side by side
    #                       prompt_only chunked prompts_while_swapped any_preemption_holds_swap_in ignores_unservable
    "mixed": PrefillRules(        False,  False,                False,                       False,            False),
    "separate": PrefillRules(      True,  False,                False,                        True,             True),
    "chunked": PrefillRules(      False,   True,                 True,                        True,             True),
    "v1": PrefillRules(           False,   True,                 True,                        True,             True,
                       appends_as_needed=True, admission_order=True, admits_after_preemption=False),
}  # mixed: the paper's code (v0.1); separate: v0.2-v0.3; chunked: v0.4 (Sarathi-Serve); v1: the V1 engine (0.8+)


EVERY_ARRIVAL = float("inf")  # what a synchronous schedule() sees: every request the data plane handed it


class VLLMScheduler(QueueScheduler):
    """vLLM under one of its prefill policies (mixed, separate, chunked, v1): its paged pool (a BlockManager, blocks
    one at a time as sequences grow), its queues (waiting, running in the scheduler's Order and as rows from step to
    step, swapped), the story of its step, and what it answers between steps."""

    def __init__(self, system: SystemSpec, max_seq_len: int, num_gpu_blocks: int, num_cpu_blocks: int,
                 order: Order | None = None):
        super().__init__(system, max_seq_len)
        rules = PREFILL_RULES[system.prefill_policy]  # how this policy differs from the others
        self.rules = rules
        self.ignoring = IgnoredRequests(rules.ignores_unservable)  # asked by the skeleton's add_request
        self.order = order if order is not None else FirstComeFirstServed()  # engine.core.scheduler.order
        self.num_gpu_blocks = num_gpu_blocks
        self.num_cpu_blocks = num_cpu_blocks
        self.allocator = BlockManager(system.block_size, num_gpu_blocks, num_cpu_blocks, system.watermark,
                                      system.prefix_caching, rules.chunked, rules.appends_as_needed,
                                      system.num_lookahead_slots)
        self.lookahead = system.num_lookahead_slots  # speculative decoding's k (0: none)
        self.kv = PagedKVTracker(self.allocator, self._beam_group_of)
        self.rows = RunningBatch(self.allocator, system.block_size)
        self.caches_prefixes = system.prefix_caching
        self.swapped: deque[SequenceGroup] = deque()
        self.num_swapped_out_blocks = 0
        self.num_swapped_in_blocks = 0
        cap = system.max_num_batched_tokens  # never None when chunked (SystemSpec.validate)
        self.token_cap = cap if cap is not None else NO_TOKEN_CAP
        self.preemption = PreemptionRule(system, self.allocator, num_gpu_blocks, self.token_cap)
        # chunked: request id -> its prompt tokens in the cache (earlier chunks, a cached prefix), while it prefills
        self.prefill_progress: dict[int, int] = {}
        self.incoming = IncomingRequests()  # a decode replica's requests prefilled elsewhere (receive)
        # separate: padding, v0.2's prompt_limit min(max_model_len, max_num_batched_tokens), and v0.3's
        # delay_factor (engine.core.scheduler.prompt_delay)
        self.max_paddings = system.max_paddings if rules.prompt_only else None
        self.prompt_limit = min(max_seq_len, self.token_cap) if rules.prompt_only else NO_TOKEN_CAP
        self.prompt_delay = PromptDelay(system.delay_factor)
        self.async_scheduling = system.async_scheduling
        self.num_proposed_tokens = 0  # speculative decoding: proposals so far, and those accepted
        self.num_accepted_tokens = 0

    # --- one step ----------------------------------------------------------------
    def schedule(self) -> Batch:
        plan = StepPlan()
        self.allocator.begin_step()  # the prefix cache's clock of least-recently-used
        if self.rules.prompt_only and not self.swapped:  # a prompt-only iteration whenever a prompt fits
            self.prompt_delay.step_began(self.now_s)
            self._admit(plan, self._budget(0))  # no decodes in a prompt-only iteration: the whole budget
            # v0.3 times a prompt run, even of ignored ones only (the data plane takes them every step)
            if plan.prefills or self.ignoring.ignored:
                self.prompt_delay.prompt_ran()
            if plan.prefills:
                return self._batch(plan)
        self._reserve_running(plan)
        # groups swap back in unless this step swapped one out (mixed) or preempted anyone (separate, chunked)
        preempted = plan.preempted if self.rules.any_preemption_holds_swap_in else plan.swap_out
        if not preempted:
            self._swap_in(plan)
        if self.incoming.arrived:  # a decode replica of a split fleet: requests whose KV was copied in
            self._join_arrived(plan)
        # prompts beside the decodes (mixed, chunked; separate's ran above, alone), and under mixed only while
        # no swapped-out group waits to come back first
        if (self.waiting or self.prefill_progress) and not self.rules.prompt_only and (
                self.rules.prompts_while_swapped or not self.swapped):
            # a token per decode (and one per proposal, speculating)
            budget = self._budget(decode_tokens(plan.decode_seqs, self.lookahead))
            self._continue_prefills(plan, budget)  # chunked: the prompts part way through, first
            self._admit(plan, budget)
        return self._batch(plan)

    def _budget(self, num_tokens: int) -> SchedulingBudget:
        return SchedulingBudget(self.token_cap, self.system.max_num_seqs, num_tokens, self.num_running_seqs,
                                self.max_paddings)

    def next_budget(self) -> SchedulingBudget:
        """The budget the next schedule()'s prompts would find if it kept every running sequence decoding (as
        in a decode stretch, where no prompt is part way through its chunks: every running sequence decodes)."""
        return self._budget(0 if self.rules.prompt_only else self.num_running_seqs)

    def _reserve_running(self, plan: StepPlan) -> None:
        """A slot for every decoding sequence, preempting the latest arrivals when short. Where every running
        sequence decodes and the free blocks are sure to suffice, only the rows due for a block take one and no
        group is walked; otherwise the groups are walked one by one, preempting as they go (_walk_running)."""
        due: list[Sequence] = []  # the rows due for a block
        if self.lookahead:  # each speculating row takes its proposals' slots every step: the calendar cannot tell
            self.rows.stale = True
            if self.prefill_progress or not self._lookahead_fits_all(plan):
                self._walk_running(plan)
            return
        if self.prefill_progress:  # prompts part way through their chunks run without decoding: the rows fall behind
            self.rows.stale = True
        else:
            due = self.rows.due_now()
            if self._appends_fit_all(due):
                plan.decode_groups = list(self.running)
                plan.decode_seqs = self.rows.reserve(due, plan.copies)
                plan.decode_ids = list(self.rows.seq_ids)
                return
        self._walk_running(plan)
        self.rows.walked(due)

    def _lookahead_fits_all(self, plan: StepPlan) -> bool:
        """Speculating: where the free blocks hold every running sequence's next slot and proposals at once, they take
        them in the running order, as the walk would give them group by group with nobody preempted (each group's
        need is then within what the groups before it left), without walking the groups."""
        seqs: list[Sequence] = []
        for group in self.running:
            seqs.extend(group.running_seqs())
        if not self.allocator.append_lookahead_if_fits(seqs, plan.copies):
            return False
        plan.decode_groups = list(self.running)
        plan.decode_seqs = seqs
        return True

    def _appends_fit_all(self, due: list[Sequence]) -> bool:
        """Whether every running sequence surely takes its next slot with nobody preempted. Each of the rows due
        takes at most one block. V1 asks only those (appends_as_needed); the paper-era can_append asks a free block
        per running sequence of the group it checks: while the widest group (rows.widest: at least the widest,
        never less) would still find its own after the rows due took theirs, no group can fail it (appends_fit:
        nobody at all can)."""
        free = self.allocator.gpu.num_free
        if self.rules.appends_as_needed:
            return free >= len(due)
        return free - len(due) >= self.rows.widest or appends_fit(self.num_running_seqs, free)

    def _walk_running(self, plan: StepPlan) -> None:
        """The running groups in order, each given its slots once the latest arrivals behind it are preempted
        for them (itself, when it is the latest left); a group part way through its prefill keeps running."""
        prefilling = self.prefill_progress
        queue = deque(self.running)
        kept: list[SequenceGroup] = []
        while queue:
            group = queue.popleft()
            if prefilling and group.request_id in prefilling:
                kept.append(group)
                continue
            seqs = group.running_seqs()  # a victim's preemption leaves them be
            if self._preempt_for(group, seqs, queue, plan):
                self._decode(group, seqs, plan)
                kept.append(group)
        self.running = kept

    def _preempt_for(self, group: SequenceGroup, seqs: list[Sequence], queue: deque[SequenceGroup],
                     plan: StepPlan) -> bool:
        """Preempt the latest (the queue's last) until the group's running sequences, seqs, can each append a
        slot: whether they can, or the group had to be preempted itself, nobody being left behind it."""
        while not self.allocator.can_append(seqs):
            victim = queue.pop() if queue else group
            self._preempt(victim, plan)
            if victim is group:
                return False
        return True

    def _decode(self, group: SequenceGroup, seqs: list[Sequence], plan: StepPlan) -> None:
        """The group's running sequences, seqs, take their next slots and decode in this step."""
        self.allocator.append_slots(seqs, plan.copies)
        plan.decode_seqs.extend(seqs)
        plan.decode_groups.append(group)

    def _swap_in(self, plan: StepPlan) -> None:
        """Swapped-out groups back in, oldest first, while their blocks fit and sequences are left. None of them
        was swapped out in this step: such a step swaps nobody in (PrefillRules.any_preemption_holds_swap_in)."""
        while self.swapped and self.allocator.can_swap_in(self.swapped[0]) and self._seqs_fit(self.swapped[0]):
            group = self.swapped.popleft()
            mapping = self.allocator.swap_in(group)
            plan.swap_in.extend(mapping)
            self.num_swapped_in_blocks += len(mapping)
            self._join(group, plan)

    def _join_arrived(self, plan: StepPlan) -> None:
        """Requests whose KV arrived decode from this step, in the order they arrived, while sequences are left.
        Their blocks hold the prompt and a slot for the first token (receive): they append nothing new now."""
        incoming = self.incoming
        group = incoming.next_to_run()
        while group is not None and self._seqs_fit(group) and (
                not self.lookahead or self.allocator.can_append(group.live_seqs())):
            incoming.run(self.kv.slots_of(group))
            self._join(group, plan)
            group = incoming.next_to_run()

    def _join(self, group: SequenceGroup, plan: StepPlan) -> None:
        """A group swapped back in, or arrived, runs again and decodes in this step, after the others."""
        self._start_running(group)
        self._decode(group, group.running_seqs(), plan)
        self._insert_running(group)
        plan.joined.append(group)

    def _seqs_fit(self, group: SequenceGroup) -> bool:
        """Whether the group's sequences can run beside those running, under max_num_seqs."""
        return self.num_running_seqs + len(group.live_seqs()) <= self.system.max_num_seqs

    def _continue_prefills(self, plan: StepPlan, budget: SchedulingBudget) -> None:
        """Chunked: the next chunk of each prompt part way through its prefill, in the running order."""
        progress = self.prefill_progress
        if not progress:
            return
        for group in self.running:
            left = budget.tokens_left
            if left <= 0:
                break
            done = progress.get(group.request_id)
            if done is not None:
                length = group.live_seqs()[0].length  # its samples share the prompt until it is computed
                stop = min(length, done + left)
                plan.prefills.append(Prefill(group, done, stop, stop == length))
                self._key_computed(group, stop)
                budget.num_tokens += stop - done  # its sequences run already

    def _admit(self, plan: StepPlan, budget: SchedulingBudget) -> None:
        """Waiting prompts in arrival order while admissible() finds them room; one that can never run is
        ignored on the way (separate, chunked)."""
        if plan.preempted and not self.rules.admits_after_preemption:
            return
        visible_s = self._visible_until()
        while self.waiting and self._may_try_next_prompt(budget):
            group = self.waiting[0]
            if id(group) in plan.preempted:  # recomputed in this step, back at the queue's head: it waits a step
                break
            if group.arrival_s > visible_s:  # arrived after the host scheduled this step (async_scheduling)
                break
            if self._must_ignore(group):
                self._ignore(self.waiting.popleft())
                continue
            tokens = self.admissible(group, budget)
            if tokens is None:
                break
            # the padding's lengths before the prompt's blocks are allocated: the first request to use a shared
            # prefix caches it then, and cached_tokens() would count it for that request too
            lens = self._prefill_lens(group) if self.rules.prompt_only else []
            self.waiting.popleft()
            self.allocator.allocate(group)  # its prompt's blocks: it runs from this step on
            self._start_running(group)
            self._insert_running(group)
            live = group.live_seqs()
            budget.take(tokens, len(live), lens)
            start = group.num_cached_tokens
            if self.rules.chunked:  # in progress until complete() sees its last chunk run (this one, if it fit)
                # its first chunk [start, stop); samples recomputed apart prefill whole, each its own length
                stop = start + tokens if group.shares_prompt else max(s.length for s in live)
                self.prefill_progress[group.request_id] = start  # computed so far; complete() moves it to stop
                self._key_computed(group, stop)
                plan.prefills.append(Prefill(group, start, stop, stop == live[0].length or not group.shares_prompt))
            else:
                plan.prefills.append(Prefill(group, start, live[0].length, True))

    def admissible(self, group: SequenceGroup, budget: SchedulingBudget) -> int | None:
        """The prompt tokens the group's prefill (chunked: its first chunk) would add to the iteration `budget`
        describes, or None while it must wait: too few free blocks above the watermark, or those the oldest
        swapped-out group needs to come back; the budget's tokens, sequences or padding. The step asks it of
        each waiting prompt, the decode stretch of the oldest: what it refuses, no step admits."""
        if not self.allocator.can_allocate(group) or not self._leaves_room_to_swap_in(group):
            return None
        live = group.live_seqs()
        return budget.fit(self._prefill_lens(group, live), len(live), self.rules.chunked and group.shares_prompt)

    def _visible_until(self) -> float:
        """The latest arrival this step's schedule() sees. V1 with async_scheduling decides a step while the one
        before it runs on the GPU, from the requests that had arrived when that one started
        (previous_step_start_s); when it would have found nothing to run then (nobody running, nobody arrived),
        the engine schedules again once that step ends, seeing every arrival. Synchronous: every arrival (the data
        plane hands the scheduler each request as it arrives)."""
        start = self.previous_step_start_s
        if not self.async_scheduling or start is None or not self.waiting:
            return EVERY_ARRIVAL
        if self.running or any(group.arrival_s <= start for group in self.waiting):
            return start
        return EVERY_ARRIVAL

    def _may_try_next_prompt(self, budget: SchedulingBudget) -> bool:
        """Whether the next waiting prompt is worth asking: chunked, while tokens are left (a prompt may take
        part of them); separate, while v0.3's delay_factor lets prompts run; mixed, always."""
        if self.rules.chunked:
            return budget.tokens_left > 0
        return not self.rules.prompt_only or self.prompt_delay.passed(self.now_s, self.waiting, bool(self.running))

    def _prefill_lens(self, group: SequenceGroup, live: list[Sequence] | None = None) -> list[int]:
        """The tokens each of the group's prefills computes (its samples share one, unless recomputed apart);
        a cached prefix is attended over, not computed. live: the group's live sequences, where the caller has them."""
        live = group.live_seqs() if live is None else live
        cached = self.allocator.cached_tokens(group)
        if group.shares_prompt:
            return [live[0].length - cached]
        return [seq.length - cached for seq in live]

    def _must_ignore(self, group: SequenceGroup) -> bool:
        if not self.ignoring.ignores:
            return False
        if self.ignoring.is_unservable(group.request_id):
            return True
        return self.rules.prompt_only and max(self._prefill_lens(group)) > self.prompt_limit

    def _leaves_room_to_swap_in(self, group: SequenceGroup) -> bool:
        """Whether admitting the group leaves the oldest swapped-out group the free blocks it needs to come back:
        its own, a spare per sequence and the watermark (can_swap_in). Only chunked admits while a group is
        swapped out; v0.4 took those blocks too, and swapped groups piled up (docs/vllm-policies.md)."""
        if not self.swapped:
            return True
        blocks = self.allocator
        needed = blocks.blocks_to_swap_in(self.swapped[0]) + blocks.watermark_blocks
        return blocks.gpu.num_free - blocks.blocks_to_allocate(group) >= needed

    def _key_computed(self, group: SequenceGroup, stop: int) -> None:
        """Chunked: the prefix cache keys the full blocks this iteration's chunk fills, up to stop, now (as a whole
        prompt's are at admission under mixed) and holds them for the group instead of its own token slots. The
        prompt's progress (prefill_progress) moves to stop only in complete(), once the chunk has run."""
        keyed = self.allocator.prompt_computed(group, stop)
        if keyed:  # the cache counts them now (a sharing prompt: one table's)
            self.kv.token_slots.slots -= keyed * self.block_size

    def _batch(self, plan: StepPlan) -> Batch:
        batch = batch_of(plan, self.num_running_beam_groups > 0, self.lookahead)
        self.in_flight = plan
        return batch

    def complete(self, batch: Batch, now_s: float, beam_parents: Mapping[int, int] | None = None,
                 accepted: list[int] | None = None) -> list[SequenceGroup]:
        """accepted: speculative decoding, the proposals the target accepted for each decode (decode_seq_ids'
        order), each from 0 to its decode_proposed; None: none accepted."""
        plan = self._step_in_flight()
        speculated = [self._seqs[seq_id] for seq_id in batch.decode_seq_ids] if batch.decode_proposed else []
        if speculated:
            self._accept(plan, batch, speculated, accepted)
        progress = self.prefill_progress
        if progress:  # chunked: each prompt computed as far as its chunk went; one whose last chunk ran decodes
            for prefill in plan.prefills:
                if prefill.last:
                    progress.pop(prefill.group.request_id, None)
                else:
                    progress[prefill.group.request_id] = prefill.stop
        finished = super().complete(batch, now_s, beam_parents)
        running = SeqStatus.RUNNING
        for seq in speculated:  # the rejected proposals' slots go back
            if seq.status is running:
                self.allocator.give_back_lookahead(seq)
        return finished

    def _accept(self, plan: StepPlan, batch: Batch, seqs: list[Sequence], accepted: list[int] | None) -> None:
        """Each speculating sequence moves on by its accepted proposals (complete() then adds the target's own
        token); the counts are checked against what it proposed, and kept for the records."""
        proposed = batch.decode_proposed
        if accepted is not None and len(accepted) != len(seqs):
            raise ValueError(f"{len(accepted)} accepted counts for {len(seqs)} decodes")
        total, i = 0, 0
        running = SeqStatus.RUNNING
        for group in plan.decode_groups:  # the decodes are the groups' running sequences, in this order
            for seq in group.seqs:
                if seq.status is not running:
                    continue
                count = accepted[i] if accepted is not None else 0
                if not 0 <= count <= proposed[i]:
                    raise ValueError(f"sequence {seq.seq_id}: {count} proposals accepted of {proposed[i]} proposed")
                seq.length += count
                group.num_proposed_tokens += proposed[i]
                group.num_accepted_tokens += count
                total += count
                i += 1
        if i != len(proposed):
            raise RuntimeError(f"{len(proposed)} decodes proposed, but the groups that decoded run {i} sequences")
        self.kv.token_slots.sampled(total)
        self.num_proposed_tokens += batch.num_proposed
        self.num_accepted_tokens += total

    # --- preemption ----------------------------------------------------------------
    def preemption_mode(self, group: SequenceGroup) -> PreemptionMode:
        return self.preemption.mode(group, group.request_id in self.prefill_progress)

    def _preempt(self, group: SequenceGroup, plan: StepPlan) -> None:
        plan.preempted.add(id(group))
        group.num_preemptions += 1
        self.num_preemptions += 1
        self.running = [g for g in self.running if g is not group]
        if self.preemption_mode(group) is PreemptionMode.RECOMPUTE:
            live = group.live_seqs()
            self._stop_running(group, SeqStatus.WAITING)
            for seq in live:
                self.allocator.free(seq)
            # samples that diverged re-prefill each its own history in its own blocks; a prompt part way
            # through its chunks sampled nothing yet, so its samples still share it
            if self.prefill_progress.pop(group.request_id, None) is None and len(live) > 1:
                group.shares_prompt = False
            self._insert_waiting(group)
        else:
            if not self.allocator.can_swap_out(group):
                raise self.preemption.swap_space_exhausted(group)
            self._stop_running(group, SeqStatus.SWAPPED)  # before the swap changes its cache_blocks
            mapping = self.allocator.swap_out(group)
            plan.swap_out.extend(mapping)
            self.num_swapped_out_blocks += len(mapping)
            insert_in_order(self.swapped, group, self.order)

    # --- decode stretches (engine.core.scheduler.stretch) ---------------------------------
    def _decode_stretch(self, batch: Batch) -> DecodeStretch:
        """Points 2 and 3 of the stretch's argument, the paged pool's way: nothing swapped out to come back,
        no prompt part way through its chunks, and the oldest waiting request refused now by admissible(), as
        the next step would ask it; paged_stretch then counts the steps to the first finish or preemption."""
        # speculating (lookahead): how far each step advances is drawn after it, so those runs are stepped through
        if (self.swapped or batch.num_swap_blocks or self.prefill_progress or self.incoming.pending()
                or self.lookahead):
            return DecodeStretch(batch, 1)
        head = self.waiting[0] if self.waiting else None
        if head is not None and (self._must_ignore(head) or self.admissible(head, self.next_budget()) is not None):
            # ignored or admitted next step (refused in this one's schedule() only as just preempted, or
            # held back by a delay_factor that may pass meanwhile)
            return DecodeStretch(batch, 1)
        return paged_stretch(batch, self.running, self.allocator, self.num_running_seqs, self.block_size)

    # --- speculating stretches (engine.core.scheduler.speculating_stretch) ------------------------------------
    def speculating_stretch(self, batch: Batch) -> SpeculatingSteps | None:
        """The points the stretch's module checks where it starts: the batch decode-only and nothing else in the
        system but the running requests, each decoding one sequence; planned from the pool as it stands."""
        decodes = batch.decode_seq_ids
        if (not self.lookahead or batch.prefill_seq_ids or not decodes or batch.num_swap_blocks or self.waiting
                or self.swapped or self.prefill_progress or self.incoming.pending()
                or self.num_running_beam_groups):
            return None
        groups = self._step_in_flight().decode_groups
        if not len(groups) == len(decodes) == self.num_running_seqs == len(self.running):
            return None  # a request of several sequences (refused where a system speculates), or one not decoding
        tables = self.allocator.block_tables
        return SpeculatingSteps(batch, list(groups), [self._seqs[seq_id] for seq_id in decodes],
                                [len(tables[seq_id]) for seq_id in decodes], self.lookahead, self.block_size,
                                self.allocator.gpu.num_free, self.kv.token_slots.slots)

    def advance_speculating(self, steps: SpeculatingSteps, num_steps: int, arrived: int = 0) -> UsageColumns:
        if not 2 <= num_steps <= len(steps.accepted):
            raise ValueError(f"advance_speculating: {num_steps} steps of a stretch accepted to {len(steps.accepted)}")
        someone_waited = len(self.waiting) > arrived
        sampled, proposed, accepted = steps.make(num_steps, self.allocator)
        self.kv.token_slots.sampled(sampled)
        self.rows.tick += num_steps - 1  # the rows' clock: a step each completion (RunningBatch.advance)
        self.num_proposed_tokens += proposed
        self.num_accepted_tokens += accepted
        return paged_usage_columns(self.allocator, steps.token_slots[1:num_steps], steps.free_blocks[1:num_steps],
                                   someone_waited)

    # --- the running groups, in order and as rows ------------------------------------------------------------
    def _insert_waiting(self, group: SequenceGroup) -> None:
        insert_in_order(self.waiting, group, self.order)

    def _insert_running(self, group: SequenceGroup) -> None:
        order = self.order
        key = order.key(group)
        if not self.running or self.rules.admission_order or order.key(self.running[-1]) <= key:
            self.running.append(group)
            self.rows.insert(group, None)
            return
        keys = [order.key(g) for g in self.running]
        at = bisect.bisect(keys, key)
        self.rows.insert(group, self.running[at])
        self.running.insert(at, group)

    def _stop_running(self, group: SequenceGroup, status: SeqStatus) -> None:
        self.rows.remove(group)
        super()._stop_running(group, status)

    def _fork_beam(self, parent: Sequence, child: Sequence) -> None:
        self.allocator.fork(parent, child, self._pending_copies)  # shared, copied on its next append
        self.rows.forked(parent, child)

    def _free_seq(self, seq: Sequence) -> None:
        self.allocator.free(seq)

    def block_table(self, seq_id: int) -> list[int]:
        return self.allocator.block_table(self._seqs[seq_id])

    def _sample(self, plan: StepPlan, num_samples: int, num_steps: int, now_s: float) -> list[SequenceGroup]:
        """QueueScheduler._sample, row by row where every row sampled once in the order the groups ran (the
        prompts just computed, then the decodes); else group by group, and the rows read again."""
        rows = self.rows
        if num_samples != len(rows.seqs):
            finished = super()._sample(plan, num_samples, num_steps, now_s)
            rows.rebuild(self.running)
            return finished
        self.kv.token_slots.sampled(num_steps * num_samples)
        done_rows = rows.advance(num_steps)
        if not done_rows:
            return []
        touched = rows.drop_rows(done_rows)
        if len(touched) > 1 and (plan.prefilled or plan.joined):
            touched = in_batch_order(touched, plan.prefilled, plan.joined)
        finished = [group for group in touched if self._finish_reached(group, now_s)]
        for group in finished:
            self.running.remove(group)
        return finished

    def _stretch_usage(self, stretch: DecodeStretch, num_steps: int, token_slots: range,
                       someone_waited: bool) -> UsageColumns:
        free_blocks = stretch_appends(stretch, num_steps, self.allocator, self.block_size)
        self.rows.stale = True  # the stretch's appends, made at once
        return self.kv.stretch_usage(token_slots, free_blocks, someone_waited)

    # --- between steps -----------------------------------------------------------------------------------------
    def abort(self, request_id: int) -> SequenceGroup | None:
        """vLLM's abort_seq_group, between steps: the request leaves whichever queue holds it, its blocks
        (GPU, or host when swapped out) go back, and it never runs again."""
        for queue in (self.waiting, self.swapped):
            for group in queue:
                if group.request_id == request_id:
                    queue.remove(group)
                    for seq in group.live_seqs():
                        self.allocator.free(seq)  # by its status: host blocks when swapped out, none when waiting
                    return self._aborted(group)
        for group in self.running:
            if group.request_id == request_id:
                plan = self.in_flight
                if plan is not None and any(group is g for g in chain(plan.prefilled, plan.decode_groups)):
                    raise RuntimeError(f"abort request {request_id}: its iteration is running; abort between steps")
                self.running = [g for g in self.running if g is not group]
                for seq in group.live_seqs():
                    self.allocator.free(seq)
                self._stop_running(group, SeqStatus.FINISHED)
                return self._aborted(group)
        return None

    def _aborted(self, group: SequenceGroup) -> SequenceGroup:
        self.prefill_progress.pop(group.request_id, None)
        group.set_status(SeqStatus.FINISHED)
        for seq in group.seqs:
            self._seqs.pop(seq.seq_id, None)
        self.ignoring.forget(group.request_id)
        return group

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped) or self.incoming.pending()

    def groups_in_system(self) -> list[SequenceGroup]:
        return [*self.waiting, *self.running, *self.swapped, *self.incoming.groups()]

    def stall_culprit(self) -> str | None:
        return self.preemption.stall_culprit(self.swapped[0]) if self.swapped else None

    def _blocks_needed_alone(self, group: SequenceGroup) -> int:
        return self.preemption.blocks_needed_alone(group)

    def _reservation_note(self, group: SequenceGroup) -> str:
        return self.preemption.note(group)

    def kv_usage(self) -> KVUsage:
        return self.incoming.counted(self.kv.usage(bool(self.waiting)))

    def release_cache(self) -> None:
        self.allocator.unpin()  # the shared prefix's blocks (the cache stops counting them by itself)

    # --- disaggregated serving: a decode replica takes requests prefilled elsewhere --------------------------
    def can_receive(self, group: SequenceGroup) -> bool:
        """Whether the blocks of a request prefilled elsewhere (its prompt and first token) fit above the
        watermark now."""
        return self.allocator.can_allocate(group)

    def receive(self, group: SequenceGroup) -> None:
        """Reserve the blocks of a request prefilled elsewhere (can_receive), its KV to be copied into them
        (block_table); it decodes once kv_arrived says the copy is done. A request too long for the model or
        too large for this pool even alone is refused, as on arrival."""
        refusal = self._refusal(group)
        if refusal is not None:
            raise refusal
        self.allocator.allocate(group)
        self.incoming.received(group, self.kv.slots_of(group))
        for seq in group.seqs:
            self._seqs[seq.seq_id] = seq

    def kv_arrived(self, request_id: int) -> None:
        """The request's KV is in its blocks: it decodes from the next schedule() on."""
        self.incoming.copied(request_id)
