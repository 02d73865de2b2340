"""FasterTransformer behind the paper's custom dynamic batcher: request-level batching.

Up to B earliest-arrived requests form a batch; it runs until its longest request ends,
and only then does the next batch start. Every sequence reserves the model's maximum
length (FasterTransformer manages memory "like Orca (Max)", Kwon et al. 6.2), so B is
as large as memory allows unless configured. Responses return when the batch ends.
"""
from __future__ import annotations

from collections.abc import Mapping

from engine.core.batch import Batch
from engine.core.scheduler.reservation_scheduler import ReservationScheduler
from engine.core.sequence import SequenceGroup
from engine.core.system import SystemSpec


class FasterTransformerScheduler(ReservationScheduler):
    def __init__(self, system: SystemSpec, max_seq_len: int, num_gpu_blocks: int, num_cpu_blocks: int):
        super().__init__(system, max_seq_len, num_gpu_blocks, num_cpu_blocks)
        self.max_batch_size = system.max_batch_size or system.max_num_seqs
        self._batch_groups: list[SequenceGroup] = []

    def schedule(self) -> Batch:
        if self._batch_groups:
            batch = self._batch_for([], list(self.running))
        else:
            batch = self._batch_for(self._form_batch(), [])
        batch.num_running_groups = len(self._batch_groups)
        batch.blocks_to_copy = self._take_copies()
        return batch

    def _form_batch(self) -> list[SequenceGroup]:
        while self.waiting:
            group = self.waiting[0]
            # B counts sequences: FasterTransformer batches sequences, an n-sample request is n of them
            if self.num_running_seqs + len(group.live_seqs()) > self.max_batch_size:
                break
            if not self.allocator.can_allocate(group):
                break
            self.waiting.popleft()
            self.allocator.allocate(group)
            self._start_running(group)
            self.running.append(group)
            self._batch_groups.append(group)
        return list(self._batch_groups)

    def complete(self, batch: Batch, now_s: float,
                 beam_parents: Mapping[int, int] | None = None,
                 accepted: list[int] | None = None) -> list[SequenceGroup]:
        prefilled = self._step_in_flight().prefilled
        super().complete(batch, now_s, beam_parents)  # requests finish together below, not one by one
        self._fork_prompt_copies(prefilled)
        if self.running:
            return []
        # the whole batch is answered together when its longest request ends
        done, self._batch_groups = self._batch_groups, []
        for group in done:
            group.finish_s = now_s
        return done
