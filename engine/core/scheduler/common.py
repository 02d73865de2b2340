"""Bookkeeping every iteration-level scheduler shares: queues, lengths, finishing."""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from engine.core.batch import Batch
from engine.core.kv_usage import KVTracker, KVUsage, UsageColumns
from engine.core.scheduler.base import DecodeStretch, Scheduler
from engine.core.scheduler.ignoring import IgnoredRequests
from engine.core.scheduler.plan import StepPlan
from engine.core.scheduler.stretch import running_seqs, steps_to_first_finish
from engine.core.sequence import SeqStatus, Sequence, SequenceGroup
from engine.core.system import SystemSpec
from engine.errors import RequestTooLarge, RequestTooLong, Unservable

__all__ = ["QueueScheduler", "RequestTooLarge", "RequestTooLong"]


class QueueScheduler(Scheduler):
    """FCFS queues and the per-step update; subclasses decide admission and memory. Each keeps its KV memory as
    `allocator`, of its own type (both answer engine.core.allocator's interface), and frees, forks and reads tables
    through it (_free_seq, _fork_beam, block_table), and sets `kv`, the tracker of the pool's breakdown
    (engine.core.kv_tracker), told as groups start and stop running."""

    kv: KVTracker

    def __init__(self, system: SystemSpec, max_seq_len: int):
        self.system = system
        self.block_size = system.block_size
        self.max_seq_len = max_seq_len
        self.waiting: deque[SequenceGroup] = deque()
        self.running: list[SequenceGroup] = []
        self._seqs: dict[int, Sequence] = {}
        # the step in flight: what the last schedule() decided, until complete() applies it (None between steps)
        self.in_flight: StepPlan | None = None
        self._pending_copies: list[tuple[int, int]] = []  # the forks' block copies, for the next batch
        self.num_preemptions = 0
        self.num_running_seqs = 0
        self.num_running_beam_groups = 0
        self._beam_group_of: dict[int, SequenceGroup] = {}  # the running beam searches, by their sequences' ids
        self.now_s = 0.0  # Scheduler.now_s
        self.previous_step_start_s: float | None = None
        # a policy that ignores an unservable request at schedule time instead of refusing it at admission
        # (vLLM >= v0.2) makes its own
        self.ignoring = IgnoredRequests(False)
        # disaggregated serving, on a prefill replica (hand_off_kv): a finished request's blocks keep its KV until
        # a decode replica has it (release_kv); held_kv holds those requests by id
        self.hands_off_kv = False
        self.held_kv: dict[int, SequenceGroup] = {}

    # --- the contract ----------------------------------------------------------
    def add_request(self, group: SequenceGroup) -> None:
        if not 0 <= group.prefix_len < group.prompt_len:
            raise ValueError(f"request {group.request_id}: a shared prefix of {group.prefix_len} tokens must be "
                             f"shorter than its prompt of {group.prompt_len}")
        refusal = self._refusal(group)
        if refusal is not None:
            if not self.ignoring.ignores:
                raise refusal
            self.ignoring.noted(group.request_id, str(refusal))  # ignored when it reaches the queue's head
        for seq in group.seqs:
            self._seqs[seq.seq_id] = seq
        self.waiting.append(group)

    def _refusal(self, group: SequenceGroup) -> Unservable | None:
        """Why the request can never be served here (too long for the model, too large for the pool), or None."""
        final_len = group.prompt_len + group.output_len
        if final_len > self.max_seq_len:
            return RequestTooLong(
                f"request {group.request_id}: prompt {group.prompt_len} + output {group.output_len} = "
                f"{final_len} tokens exceeds the model's max_seq_len {self.max_seq_len}")
        needed = self._blocks_needed_alone(group)
        if needed > self.num_gpu_blocks:
            fewer = " or fewer sequences per request (a smaller beam_width or n)" if group.num_seqs > 1 else ""
            return RequestTooLarge(
                f"request {group.request_id}: {group.num_seqs} x ({group.prompt_len} + {group.output_len}) tokens"
                f"{self._reservation_note(group)} need {needed} KV blocks under {self.system.name} even alone, but "
                f"the pool has {self.num_gpu_blocks}; give the KV cache more memory{fewer}")
        return None

    def take_ignored(self) -> list[SequenceGroup]:
        return self.ignoring.take()

    def _ignore(self, group: SequenceGroup) -> None:
        """vLLM's FINISHED_IGNORED: the group, just taken off the waiting queue, will never run."""
        group.set_status(SeqStatus.FINISHED)
        for seq in group.seqs:
            self._seqs.pop(seq.seq_id, None)
        self.ignoring.ignore(group)

    def complete(self, batch: Batch, now_s: float,
                 beam_parents: Mapping[int, int] | None = None,
                 accepted: list[int] | None = None) -> list[SequenceGroup]:
        plan = self._step_in_flight()
        if beam_parents:  # before the lengths advance: a child takes the parent's KV as the batch left it
            self._apply_beam_parents(plan, beam_parents)
        for group in plan.prefilled:
            if group.first_token_s is None:
                group.first_token_s = now_s
        finished = self._sample(plan, len(batch.decode_seq_ids) + sum(map(len, batch.prefill_sample_ids)), 1, now_s)
        self.in_flight = None
        return finished

    def _step_in_flight(self) -> StepPlan:
        """What the last schedule() decided (a plan of nothing where no step is in flight)."""
        plan = self.in_flight
        return plan if plan is not None else StepPlan()

    def _sample(self, plan: StepPlan, num_samples: int, num_steps: int, now_s: float) -> list[SequenceGroup]:
        """num_steps iterations of the plan's batch, each sampling a token for num_samples sequences: every
        running sequence of its groups grows by num_steps and finishes at its final length, a group when none
        of its sequences runs on. complete() takes one step; a decode stretch the steps before its last
        (advance_decodes), which by its construction finish nobody."""
        self.kv.token_slots.sampled(num_steps * num_samples)
        finished = []
        running = SeqStatus.RUNNING
        for groups in (plan.prefilled, plan.decode_groups):
            for group in groups:
                for seq in group.seqs:
                    if seq.status is running:
                        seq.length += num_steps
                if self._finish_reached(group, now_s):
                    finished.append(group)
        for group in finished:
            self.running.remove(group)  # by identity (eq=False): C speed, where a rebuilt list was not
        return finished

    def _finish_reached(self, group: SequenceGroup, now_s: float) -> bool:
        """The group's running sequences at their final length finish; True when none runs on: the group is
        finished too."""
        done = True
        running = SeqStatus.RUNNING
        for seq in group.seqs:
            if seq.status is running:
                if seq.length >= seq.prompt_len + seq.output_len:
                    self._finish_seq(seq)
                else:
                    done = False
        if done:
            self._finish(group, now_s)
        return done

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def kv_usage(self) -> KVUsage:
        return self.kv.usage(bool(self.waiting))

    def release_cache(self) -> None:
        """Reservations keep nothing across requests; the paged scheduler overrides."""

    # --- disaggregated serving: a prefill replica hands its requests' KV over ---------------------------
    def hand_off_kv(self) -> None:
        """From now on a finished request keeps its blocks (and its tokens counted in the pool's breakdown)
        until release_kv: a prefill replica's requests finish with their first token, and their KV is still to
        be copied to a decode replica."""
        self.hands_off_kv = True

    def release_kv(self, request_id: int) -> None:
        """The decode replica has the request's KV: its blocks go back."""
        group = self.held_kv.pop(request_id)
        self.kv.token_slots.stopped(group)
        for seq in group.seqs:
            self._free_seq(seq)

    def groups_in_system(self) -> list[SequenceGroup]:
        return [*self.waiting, *self.running]

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def sequence(self, seq_id: int) -> Sequence:
        return self._seqs[seq_id]

    # --- decode stretches (docs/concepts/fast-forward.md) ---------------------------------------------
    def decode_stretch(self, batch: Batch) -> DecodeStretch:
        if batch.prefill_seq_ids or not batch.decode_seq_ids or self.num_running_beam_groups:
            return DecodeStretch(batch, 1)  # a prompt changes the next batch; beams fork as the data plane draws
        return self._decode_stretch(batch)

    def _decode_stretch(self, batch: Batch) -> DecodeStretch:
        """decode_stretch for a decode-only batch without beams (engine.core.scheduler.stretch): reservations
        stay as they are while no request finishes, and the oldest waiting request, refused by this schedule(),
        stays refused, so the stretch lasts until the first sequence finishes."""
        return DecodeStretch(batch, steps_to_first_finish(running_seqs(self._step_in_flight().decode_groups)))

    def advance_decodes(self, stretch: DecodeStretch, num_steps: int, arrived: int = 0) -> UsageColumns:
        if not 2 <= num_steps <= stretch.num_steps:
            raise ValueError(f"advance_decodes: {num_steps} steps of a stretch of {stretch.num_steps}")
        num_decodes = len(stretch.batch.decode_seq_ids)
        first = self.kv.token_slots.slots + num_decodes  # each completion samples a token per decode
        token_slots = range(first, first + (num_steps - 1) * num_decodes, num_decodes)
        someone_waited = len(self.waiting) > arrived
        if self._sample(self._step_in_flight(), num_decodes, num_steps - 1, math.nan):
            raise RuntimeError("a decode stretch finished a request before its last step")
        return self._stretch_usage(stretch, num_steps, token_slots, someone_waited)

    def _stretch_usage(self, stretch: DecodeStretch, num_steps: int, token_slots: range,
                       someone_waited: bool) -> UsageColumns:
        """Run the schedule() of the stretch's iterations 2..num_steps (the allocator's part of it) and return
        the KV usage each found, with token_slots filled and someone waiting or not as when the stretch was
        scheduled. The lengths are already those of iteration num_steps. Reservations stay as they are."""
        return self.kv.stretch_usage(token_slots, [], someone_waited)

    # --- beam search -------------------------------------------------------------
    def _apply_beam_parents(self, plan: StepPlan, beam_parents: Mapping[int, int]) -> None:
        """Fork every child from its parent, after checking the data plane's choice: both beams of one
        group that decoded in this batch, and no parent replaced in the same step."""
        decoded = {group.request_id for group in plan.decode_groups if group.is_beam}
        group_of, finished = self._beam_group_of, SeqStatus.FINISHED
        for child, parent in beam_parents.items():
            group = group_of.get(child)
            if (group is None or group.request_id not in decoded or group_of.get(parent) is not group
                    or self._seqs[child].status is finished or self._seqs[parent].status is finished):
                raise ValueError(f"beam fork {parent} -> {child}: both must be beams of one beam search "
                                 "that decoded in this batch")
            if beam_parents.get(parent, parent) != parent:
                raise ValueError(f"beam fork {parent} -> {child}: sequence {parent} is itself replaced in "
                                 "this step (engine.core.beam.continue_beams keeps every parent in place)")
        for child, parent in beam_parents.items():
            seq = self._seqs[child]
            # on its last token a beam's KV is never read again: its fork is the data plane's alone
            if child != parent and seq.length + 1 < seq.final_len:
                self._fork_beam(self._seqs[parent], seq)

    def _fork_beam(self, parent: Sequence, child: Sequence) -> None:
        """The child continues the parent's beam: its KV becomes the parent's (the allocator's way: shared by
        the paged pool, copied before the next forward by reservations)."""
        raise NotImplementedError

    def _take_copies(self) -> list[tuple[int, int]]:
        """The block copies forks asked for since the last step, for the next batch."""
        copies, self._pending_copies = self._pending_copies, []
        return copies

    # --- shared steps ----------------------------------------------------------
    def _finish_seq(self, seq: Sequence) -> None:
        """The sequence sampled its last token: its blocks go back (its group may run on)."""
        seq.status = SeqStatus.FINISHED
        self.num_running_seqs -= 1
        if not self.hands_off_kv:
            self._free_seq(seq)

    def _finish(self, group: SequenceGroup, now_s: float) -> None:
        self._stop_running(group, SeqStatus.FINISHED)
        group.finish_s = now_s
        for seq in group.seqs:
            self._seqs.pop(seq.seq_id, None)
        if self.hands_off_kv:  # its blocks hold its tokens until released: counted as before
            self.held_kv[group.request_id] = group
            self.kv.token_slots.started(group)

    def _blocks_needed_alone(self, group: SequenceGroup) -> int:
        """Blocks the request needs with the pool to itself; subclasses know their allocators."""
        raise NotImplementedError

    def _reservation_note(self, group: SequenceGroup) -> str:
        """What the pool must hold for a request beyond its tokens, in words ('' where it holds just them)."""
        return ""

    def _start_running(self, group: SequenceGroup) -> None:
        group.set_status(SeqStatus.RUNNING)
        self.num_running_seqs += len(group.live_seqs())
        self.num_running_beam_groups += group.is_beam
        self.kv.started(group)
        if group.is_beam:
            for seq in group.live_seqs():
                self._beam_group_of[seq.seq_id] = group

    def _stop_running(self, group: SequenceGroup, status: SeqStatus) -> None:
        """Out of the running set: preempted (WAITING, SWAPPED) or done (FINISHED, its
        sequences already finished one by one as they sampled their last token)."""
        self.num_running_seqs -= len(group.live_seqs())
        self.num_running_beam_groups -= group.is_beam
        self.kv.stopped(group)
        group.set_status(status)
        if group.is_beam:
            for seq in group.seqs:
                self._beam_group_of.pop(seq.seq_id, None)

    def _batch_for(self, prefill_groups: list[SequenceGroup], decode_groups: list[SequenceGroup],
                   decode_seqs: list[Sequence] | None = None) -> Batch:
        """decode_seqs: the running sequences of decode_groups in order, where the caller has them already."""
        batch = Batch(num_running_groups=len(prefill_groups) + len(decode_groups))
        prefill_lens: list[int] = []
        cached_lens: list[int] = []
        batch.prefill_lens, batch.prefill_cached_lens = prefill_lens, cached_lens
        for group in prefill_groups:
            live = group.live_seqs()
            cached = group.num_cached_tokens  # a cached prefix: attended over, not computed
            if group.shares_prompt:  # one prompt computation, sampled by every sample
                batch.prefill_seq_ids.append(live[0].seq_id)
                prefill_lens.append(live[0].length - cached)
                batch.prefill_sample_ids.append(tuple(s.seq_id for s in live))
                cached_lens.append(cached)
                continue
            for seq in live:  # recomputed apart: each sample's own history
                batch.prefill_seq_ids.append(seq.seq_id)
                prefill_lens.append(seq.length - cached)
                batch.prefill_sample_ids.append((seq.seq_id,))
                cached_lens.append(cached)
        running = SeqStatus.RUNNING
        if self.num_running_beam_groups:
            batch.beam_groups = [tuple(s.seq_id for s in g.live_seqs())
                                 for g in (*prefill_groups, *decode_groups) if g.is_beam]
        decodes = (decode_seqs if decode_seqs is not None
                   else [seq for group in decode_groups for seq in group.seqs if seq.status is running])
        batch.decode_seq_ids = [seq.seq_id for seq in decodes]
        batch.decode_context_lens = [seq.length for seq in decodes]
        plan = StepPlan()
        plan.prefilled, plan.decode_groups = prefill_groups, decode_groups
        self.in_flight = plan
        return batch

    def _free_seq(self, seq: Sequence) -> None:
        """The sequence's memory goes back to the allocator (by its status: host blocks when swapped out)."""
        raise NotImplementedError
