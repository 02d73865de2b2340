"""A queue scheduler over a paged pool: what vLLM's scheduler keeps besides the story of its step.

Its BlockManager and the KV tracker that reads it; the running groups, kept in the scheduler's Order and as
rows from step to step (engine.core.running_batch); the swapped-out groups; and what the scheduler answers
between steps: abort, a decode replica's receiving of requests prefilled elsewhere (engine.core.scheduler.receiving
keeps them), why a swapped group
stalls the queue. engine.core.scheduler.vllm decides each step on top of it.
"""
from __future__ import annotations

import bisect
from collections import deque
from itertools import chain

from engine.core.block_manager import BlockManager
from engine.core.kv_tracker import PagedKVTracker
from engine.core.kv_usage import KVUsage, UsageColumns
from engine.core.running_batch import RunningBatch, in_batch_order
from engine.core.scheduler.base import DecodeStretch
from engine.core.scheduler.common import QueueScheduler
from engine.core.scheduler.order import FirstComeFirstServed, Order, insert_in_order
from engine.core.scheduler.plan import StepPlan
from engine.core.scheduler.preemption import PreemptionRule
from engine.core.scheduler.receiving import IncomingRequests
from engine.core.scheduler.stretch import stretch_appends
from engine.core.scheduler.vllm_step import NO_TOKEN_CAP
from engine.core.sequence import SeqStatus, Sequence, SequenceGroup
from engine.core.system import CHUNKED_POLICIES, SystemSpec


class PagedScheduler(QueueScheduler):
    """The paged pool, its queues and rows; blocks come from a BlockManager one at a time as sequences grow."""

    def __init__(self, system: SystemSpec, max_seq_len: int, num_gpu_blocks: int, num_cpu_blocks: int,
                 order: Order | None = None, appends_as_needed: bool = False, runs_in_admission_order: bool = False):
        super().__init__(system, max_seq_len)
        self.order = order if order is not None else FirstComeFirstServed()  # engine.core.scheduler.order
        self.num_gpu_blocks = num_gpu_blocks
        self.num_cpu_blocks = num_cpu_blocks
        self.allocator = BlockManager(system.block_size, num_gpu_blocks, num_cpu_blocks, system.watermark,
                                      system.prefix_caching, system.prefill_policy in CHUNKED_POLICIES,
                                      appends_as_needed, system.num_lookahead_slots)
        self.lookahead = system.num_lookahead_slots  # speculative decoding's k (0: none)
        self.kv = PagedKVTracker(self.allocator, self._beam_group_of)
        self.rows = RunningBatch(self.allocator, system.block_size)
        self.caches_prefixes = system.prefix_caching
        # else the running groups keep the order's (vLLM V1's run in the order it admitted them: PrefillRules)
        self.runs_in_admission_order = runs_in_admission_order
        self.swapped: deque[SequenceGroup] = deque()
        self.num_swapped_out_blocks = 0
        self.num_swapped_in_blocks = 0
        cap = system.max_num_batched_tokens  # never None when chunked (SystemSpec.validate)
        self.token_cap = cap if cap is not None else NO_TOKEN_CAP
        self.preemption = PreemptionRule(system, self.allocator, num_gpu_blocks, self.token_cap)
        # chunked: request id -> its prompt tokens in the cache (earlier chunks, a cached prefix), while it prefills
        self.prefill_progress: dict[int, int] = {}
        self.incoming = IncomingRequests()  # a decode replica's requests prefilled elsewhere (receive)

    # --- the running groups, in order and as rows ------------------------------------------------------------
    def _insert_waiting(self, group: SequenceGroup) -> None:
        insert_in_order(self.waiting, group, self.order)

    def _insert_running(self, group: SequenceGroup) -> None:
        order = self.order
        key = order.key(group)
        if not self.running or self.runs_in_admission_order or order.key(self.running[-1]) <= key:
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
        self.unservable.pop(group.request_id, None)
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
