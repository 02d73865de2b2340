"""One serving replica as a SimPy process: schedule, pay the cost model's time, apply.

The scheduler is engine.core's, the same object the real engine runs; only the clock
differs: here it advances by CostModel.step_time(batch) instead of a measured forward.
"""
from __future__ import annotations

import simpy

from calibrate.costmodel import CostModel
from engine.core.errors import Unschedulable
from engine.core.scheduler.base import Scheduler
from engine.core.sequence import SequenceCounter, SequenceGroup, make_group
from sim.records import Records


class Replica:
    def __init__(self, env: simpy.Environment, index: int, scheduler: Scheduler, cost_model: CostModel,
                 records: Records, horizon_s: float):
        self.env = env
        self.index = index
        self.scheduler = scheduler
        self.cost_model = cost_model
        self.records = records
        self.horizon_s = horizon_s
        self.next_seq_id = SequenceCounter()
        self.outstanding = 0  # admitted to this replica, not yet finished (the router reads it)
        self.arrivals_done = False
        self._wake = env.event()
        self.process = env.process(self.serve())

    # --- called by the router ----------------------------------------------------------
    def submit(self, request_id: int, arrival_s: float, prompt_len: int, output_len: int, n: int) -> None:
        self.scheduler.add_request(make_group(request_id, arrival_s, prompt_len, output_len, n, self.next_seq_id))
        self.outstanding += 1
        self._notify()

    def close(self) -> None:
        """No more arrivals will come."""
        self.arrivals_done = True
        self._notify()

    def _notify(self) -> None:
        if not self._wake.triggered:
            self._wake.succeed()

    # --- the process ----------------------------------------------------------------------
    def serve(self):
        scheduler, env = self.scheduler, self.env
        while env.now < self.horizon_s:
            batch = scheduler.schedule()
            if batch.is_empty:
                if self.arrivals_done and scheduler.has_unfinished():
                    raise Unschedulable(
                        f"replica {self.index}: {scheduler.num_waiting} waiting requests can never be "
                        f"scheduled (the KV pool is too small for the first of them)")
                if self.arrivals_done:
                    return
                self._wake = env.event()
                yield self._wake
                continue
            usage = scheduler.kv_usage()
            start = env.now
            yield env.timeout(self.cost_model.step_time(batch))
            self._record_iteration(batch, usage, start, env.now - start)
            for group in scheduler.complete(batch, env.now):
                self._record_request(group)

    def _record_iteration(self, batch, usage, start: float, duration: float) -> None:
        it = self.records.iterations
        it["replica"].append(self.index)
        it["start_s"].append(start)
        it["duration_s"].append(duration)
        it["num_prefill_tokens"].append(batch.num_prefill_tokens)
        it["num_prefills"].append(len(batch.prefill_lens))
        it["num_decodes"].append(batch.num_decodes)
        it["sum_decode_context"].append(batch.sum_decode_context)
        it["num_running_groups"].append(batch.num_running_groups)
        it["num_waiting"].append(self.scheduler.num_waiting)
        it["num_swap_blocks"].append(batch.num_swap_blocks)
        it["num_copy_blocks"].append(len(batch.blocks_to_copy))
        it["kv_token"].append(usage.token)
        it["kv_reserved"].append(usage.reserved)
        it["kv_internal"].append(usage.internal)
        it["kv_external"].append(usage.external)
        it["kv_idle"].append(usage.idle)

    def _record_request(self, group: SequenceGroup) -> None:
        self.outstanding -= 1
        self.records.add_request(
            request_id=group.request_id, replica=self.index, arrival_s=group.arrival_s,
            first_token_s=group.first_token_s, finish_s=group.finish_s, prompt_len=group.prompt_len,
            output_len=group.output_len, n=group.num_seqs, num_preemptions=group.num_preemptions)

    def unfinished_groups(self) -> list[SequenceGroup]:
        """Requests still in the system at the horizon (the run was cut off)."""
        s = self.scheduler
        groups = list(s.waiting) + list(s.running) + list(getattr(s, "swapped", []))
        return groups
