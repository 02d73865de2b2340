"""The paper-era vLLM rules as a step checker (tests/helpers/core_harness.Checker), shared by the scheduler tests."""
from __future__ import annotations

from engine.core.blocks import blocks_for
from engine.core.sequence import SeqStatus
from tests.helpers.core_harness import Checker


def fcfs_key(group):
    return group.arrival_s, group.request_id


def recomputes(sched, group) -> bool:
    """What system.preemption documents: auto recomputes one sequence and swaps several; swap
    swaps every group; recompute recomputes every group, unless several samples could not be
    served apart: re-prefilled over the token cap, or unable to grow alone to their final
    lengths in their own blocks, one spare each."""
    live, preemption = group.live_seqs(), sched.system.preemption
    if preemption == "swap" or (preemption == "auto" and len(live) > 1):
        return False
    cap = sched.system.max_num_batched_tokens or float("inf")
    blocks = sum(blocks_for(s.final_len, sched.block_size) + 1 for s in live)
    return len(live) == 1 or (sum(s.length for s in live) <= cap
                               and blocks + sched.allocator.watermark_blocks <= sched.num_gpu_blocks)


class VLLMPolicy(Checker):
    """The paper-era rules, checked on every step (D1 of the reference notes)."""

    def __init__(self, single_sample_only: bool = False):
        self.single_sample_only = single_sample_only
        self.recomputed = 0
        self.recomputed_groups = 0  # of several sequences, each re-prefilled on its own
        self.swapped_out = 0
        self.blocked_by_swapped = 0

    def before(self, sched, step):
        self.running = list(sched.running)
        self.waiting = list(sched.waiting)
        self.counts = {id(g): g.num_preemptions for g in self.running}
        self.live = {id(g): len(g.live_seqs()) for g in self.running}
        self.expect_recompute = {id(g): recomputes(sched, g) for g in self.running}

    def after(self, sched, batch, step):
        assert self.running == sorted(self.running, key=fcfs_key), "running is kept in arrival order"
        preempted = [g for g in self.running if g.num_preemptions > self.counts[id(g)]]
        assert all(g.num_preemptions == self.counts[id(g)] + 1 for g in preempted)
        assert preempted == self.running[len(self.running) - len(preempted):], (
            f"step {step}: preempted {[g.request_id for g in preempted]}, not the latest arrivals of "
            f"{[g.request_id for g in self.running]}")
        for group in preempted:
            if self.expect_recompute[id(group)]:  # back to waiting, blocks freed
                self.recomputed += 1
                assert group in sched.waiting and group not in sched.swapped
                assert all(s.seq_id not in sched.allocator.block_tables for s in group.live_seqs())
                assert all(s.status is SeqStatus.WAITING for s in group.live_seqs())
                if self.live[id(group)] > 1:
                    self.recomputed_groups += 1
                    assert not group.shares_prompt, "diverged samples cannot share one re-prefill"
            else:  # swap: the whole group moves to CPU
                self.swapped_out += 1
                assert group in sched.swapped and group not in sched.waiting
                assert all(s.status is SeqStatus.SWAPPED for s in group.live_seqs())
                assert all(s.seq_id in sched.allocator.block_tables for s in group.live_seqs())
        # v0.1's `while self.swapped and not blocks_to_swap_out`: a step that swaps a group out swaps nobody in
        assert not (batch.blocks_to_swap_out and batch.blocks_to_swap_in), (
            f"step {step}: swapped groups in while swapping {[g.request_id for g in preempted]} out")
        if sched.swapped:
            assert not batch.prefill_seq_ids, f"step {step}: admitted a request while groups are swapped out"
            self.blocked_by_swapped += bool(sched.waiting)
        waiting = list(sched.waiting)
        assert waiting == sorted(waiting, key=fcfs_key), "waiting stays FCFS (recomputed groups go back in order)"
        admitted = [g for g in self.waiting if g not in waiting]
        if admitted and waiting:
            assert max(map(fcfs_key, admitted)) < min(map(fcfs_key, waiting)), "admission is FCFS"
        if self.single_sample_only:
            usage = sched.kv_usage()  # vLLM wastes less than one block per sequence
            assert usage.internal < sched.block_size * max(sched.num_running_seqs, 1)
