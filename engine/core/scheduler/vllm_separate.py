"""Released vLLM v0.2-v0.3 (late 2023 to early 2024): prompt-only and decode-only iterations.

Ported from vllm/core/scheduler.py `Scheduler._schedule` of v0.2.7 (the same rule through v0.3.3):
while nothing is swapped out, the waiting prompts that fit form a prompt-only iteration (no decode runs
beside them); only when none can be admitted does the iteration decode every running sequence, preempting
the latest arrivals when blocks run short, and swap groups back in if nobody was preempted. A prompt batch
is padded to its longest prompt, so its budget is `len(prompts) * max(prompt_len) <= max_num_batched_tokens`
with at most `max_paddings` padding slots. A prompt longer than min(max_seq_len, max_num_batched_tokens),
or one that could never fit the pool, is ignored when it reaches the head of the queue (recorded, not an
error), as vLLM's `ignored_seq_groups`.

Two differences from vLLM, both where servesim's step must run something: a step that only ignores
requests goes on to decode (vLLM returned an empty prompt run and decoded at the next call), and a request
whose prompt fits but whose fixed output would pass max_seq_len is ignored too (vLLM stopped it at the
limit; servesim's requests have their output length given).

delay_factor (vLLM v0.3.x, `Scheduler._passed_delay`): with it above 0, new prompts wait until the oldest
waiting one has waited delay_factor times the last prompt run's latency (the time from the schedule() that
made it to the next), or nothing runs, so that more prompts batch into one run. The clock is the step's
(ServingCore sets Scheduler.now_s), the same on both data planes.
"""
from __future__ import annotations

from engine.core.batch import Batch
from engine.core.scheduler.vllm import StepPlan, VLLMScheduler
from engine.core.sequence import SequenceGroup
from engine.core.system import SystemSpec


class VLLMSeparateScheduler(VLLMScheduler):
    """vLLM v0.2-v0.3: a prompt-only step when prompts fit, else a decode-only step."""

    def __init__(self, system: SystemSpec, max_seq_len: int, num_gpu_blocks: int, num_cpu_blocks: int):
        super().__init__(system, max_seq_len, num_gpu_blocks, num_cpu_blocks)
        self.ignores_unservable = True
        self.max_paddings = system.max_paddings
        # vLLM v0.2's prompt_limit: min(max_model_len, max_num_batched_tokens)
        cap = system.max_num_batched_tokens
        self.prompt_limit = max_seq_len if cap is None else min(max_seq_len, cap)
        # v0.3's delay_factor: the last prompt run's latency, measured from schedule() to schedule()
        self.delay_factor = system.delay_factor
        self.last_prompt_latency = 0.0
        self.prev_time_s = 0.0
        self.prev_prompt = False

    def schedule(self) -> Batch:
        plan = StepPlan()
        self.blocks.begin_step()  # the prefix cache's LRU clock
        if not self.swapped:
            self._admit_prompts(plan)
            if plan.prefill_groups or self.ignored:  # v0.3: a prompt run (even of ignored ones only) is timed
                self.prev_prompt = True
            if plan.prefill_groups:  # a prompt run: nothing decodes beside it
                return self._batch_for(plan.prefill_groups, [])
        self._reserve_running(plan)
        if not plan.preempted:  # v0.2: swap in only in a step that preempted nobody
            self._swap_in(plan)
        batch = self._batch_for([], plan.decode_groups, plan.decode_seqs)
        batch.blocks_to_copy, batch.blocks_to_swap_in, batch.blocks_to_swap_out = (
            plan.copies, plan.swap_in, plan.swap_out)
        return batch

    def _prefill_lens(self, group: SequenceGroup) -> list[int]:
        """The tokens each of the group's prefills computes (its samples share one, unless recomputed apart)."""
        live, cached = group.live_seqs(), self.blocks.cached_tokens(group)
        if group.shares_prompt:
            return [live[0].length - cached]
        return [seq.length - cached for seq in live]

    def _admit_prompts(self, plan: StepPlan) -> None:
        """Waiting prompts in arrival order while blocks, the padded budget, max_num_seqs and max_paddings
        allow; a prompt that can never run is ignored on the way."""
        num_seqs, lens = self.num_running_seqs, 0
        longest, count = 0, 0
        while self._passed_delay() and self.waiting:  # v0.3 calls it first, whatever waits
            group = self.waiting[0]
            if self._must_ignore(group):
                self._ignore(self.waiting.popleft())
                continue
            if not self.blocks.can_allocate(group):
                break
            new_lens = self._prefill_lens(group)
            new_longest, new_count = max(longest, *new_lens), count + len(new_lens)
            padded = new_count * new_longest
            if padded > self.token_cap:
                break
            live = len(group.live_seqs())
            if num_seqs + live > self.system.max_num_seqs:
                break
            if padded - (lens + sum(new_lens)) > self.max_paddings:
                break
            longest, count, lens = new_longest, new_count, lens + sum(new_lens)
            num_seqs += live
            self._start_prompt(self.waiting.popleft())
            plan.prefill_groups.append(group)

    def _passed_delay(self) -> bool:
        """vLLM v0.3's Scheduler._passed_delay, called before each waiting prompt as there: new prompts wait
        until the oldest of them has waited delay_factor x the last prompt run's latency, or nothing runs."""
        now = self.now_s
        if self.prev_prompt:
            self.last_prompt_latency = now - self.prev_time_s
        self.prev_time_s, self.prev_prompt = now, False
        if not self.delay_factor or not self.waiting:
            return True
        earliest = min(group.arrival_s for group in self.waiting)
        return now - earliest > self.delay_factor * self.last_prompt_latency or not self.running

    def _must_ignore(self, group: SequenceGroup) -> bool:
        if group.request_id in self.unservable:
            return True
        return max(self._prefill_lens(group)) > self.prompt_limit

    def _admission_tokens(self, group: SequenceGroup, num_tokens: int) -> int | None:
        """Whether the head of the queue would make a prompt run of its own (for the decode stretch: it
        cannot while a decode-only step repeats): its tokens, or None while it is refused."""
        if self._must_ignore(group):
            return 0  # ignored at the next schedule(), which then changes
        # (a delay_factor that holds it back now may pass during a stretch: admissible counts as a change)
        if not self.blocks.can_allocate(group) or self.num_running_seqs + len(group.live_seqs()) > \
                self.system.max_num_seqs:
            return None
        lens = self._prefill_lens(group)
        padded = len(lens) * max(lens)
        if padded > self.token_cap or padded - sum(lens) > self.max_paddings:
            return None
        return sum(lens)
