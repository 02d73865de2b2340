"""Orca as the paper reimplemented it: iteration-level FCFS over buddy reservations.

Each sequence holds one contiguous reservation from admission to completion, sized by one
of the paper's three rules (`system.reservation`, applied by engine.core.reservation): Oracle
reserves the prompt plus the true output length, Pow2 the output rounded up to a power of
two, Max the model's maximum length. There is no preemption, and the first request that does
not fit blocks all later ones. Prompts and decodes share an iteration with no token cap.
"""
from __future__ import annotations

from collections.abc import Mapping

from engine.core.batch import Batch
from engine.core.scheduler.reservation_scheduler import ReservationScheduler
from engine.core.sequence import SequenceGroup


class OrcaScheduler(ReservationScheduler):
    def schedule(self) -> Batch:
        decode_groups = list(self.running)
        prefill_groups = []
        while self.waiting:
            group = self.waiting[0]
            if self.num_running_seqs + len(group.live_seqs()) > self.system.max_num_seqs:
                break
            if not self.allocator.can_allocate(group):
                break  # head-of-line: later requests wait behind this one
            self.waiting.popleft()
            self.allocator.allocate(group)
            self._start_running(group)
            self.running.append(group)
            prefill_groups.append(group)
        batch = self._batch_for(prefill_groups, decode_groups)
        batch.blocks_to_copy = self._take_copies()
        return batch

    def complete(self, batch: Batch, now_s: float,
                 beam_parents: Mapping[int, int] | None = None,
                 accepted: list[int] | None = None) -> list[SequenceGroup]:
        prefilled = self._step_in_flight().prefilled
        finished = super().complete(batch, now_s, beam_parents)
        self._fork_prompt_copies([g for g in prefilled if g.finish_s is None])
        return finished
