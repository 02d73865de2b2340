"""Orca as the paper reimplemented it: FCFS with head-of-line blocking over buddy
reservations held from admission to completion, never preempted."""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.core.factory import make_scheduler
from engine.core.sequence import SequenceCounter, make_group
from engine.core.system import PAPER_SYSTEMS
from engine.specs.loader import load_model_spec
from tests.helpers.core_harness import (
    Checker,
    StepInvariants,
    check_finished,
    drive,
    scheduler_for,
    seeded_requests,
)

ORCAS = ["orca-oracle", "orca-pow2", "orca-max"]


class OrcaPolicy(Checker):
    def __init__(self):
        self.admitted: list[int] = []
        self.reservations: dict[int, tuple[int, int]] = {}

    def before(self, sched, step):
        self.running = list(sched.running)
        self.waiting = list(sched.waiting)

    def after(self, sched, batch, step):
        # running groups stay running with the same reservation until they finish
        assert all(g in sched.running for g in self.running), f"step {step}: a running request was dropped"
        for seq_id, res in sched.allocator.reservations.items():
            key = (res.start, res.chunk_blocks)
            assert self.reservations.setdefault(seq_id, key) == key, "a reservation moved or changed size"
        # admission takes a prefix of the FCFS queue (head-of-line blocking)
        admitted = [g for g in self.waiting if g not in sched.waiting]
        assert admitted == self.waiting[:len(admitted)], f"step {step}: admitted out of FCFS order"
        self.admitted += [g.request_id for g in admitted]
        if sched.waiting:
            head = sched.waiting[0]
            fits = sched.allocator.can_allocate(head)
            room = sched.num_running_seqs + len(head.live_seqs()) <= sched.system.max_num_seqs
            assert not (fits and room), f"step {step}: request {head.request_id} fits but was not admitted"
        assert sched.num_preemptions == 0
        if sched.allocator.reservation == "oracle":
            assert sched.kv_usage().internal == 0, "Orca (Oracle) has no internal fragmentation"


@pytest.mark.parametrize("name", ORCAS)
def test_seeded_workloads_fcfs_no_preemption(name):
    for seed in range(6):
        reqs = seeded_requests(seed, 30, 10, 24, 24, max_n=3)
        system = replace(PAPER_SYSTEMS[name], block_size=(4, 8)[seed % 2], max_num_seqs=(4, 256)[seed % 2])
        sched = scheduler_for(system, 60 + 7 * seed, 0)
        policy = OrcaPolicy()
        run = drive(sched, reqs, (StepInvariants(), policy))
        check_finished(run, reqs)
        arrival_order = [rid for rid, _ in sorted(enumerate(reqs), key=lambda x: (x[1].arrival, x[0]))]
        assert policy.admitted == arrival_order


def test_head_of_line_blocking():
    model = load_model_spec("opt-13b")
    sched = make_scheduler(PAPER_SYSTEMS["orca-oracle"], model, 48, 0)  # roots of 32 and 16 blocks
    counter = SequenceCounter()
    a = make_group(0, 0.0, 320, 100, 1, counter)  # 27 blocks -> 32
    b = make_group(1, 1.0, 400, 100, 1, counter)  # 32 blocks -> 32: must wait for A
    c = make_group(2, 2.0, 10, 10, 1, counter)  # 1 block: fits in the 16-root, but is behind B
    for g in (a, b, c):
        sched.add_request(g)
    now = 0.0
    while a.finish_s is None:
        batch = sched.schedule()
        assert b in sched.waiting and c in sched.waiting, "nobody overtakes the blocked head"
        now += 1.0
        sched.complete(batch, now)
    batch = sched.schedule()
    assert batch.prefill_lens == [400, 10]  # A's chunk freed: B, then C behind it


def test_parallel_samples_each_reserve_and_get_the_prompt_copied():
    model = load_model_spec("opt-13b")
    sched = make_scheduler(PAPER_SYSTEMS["orca-oracle"], model, 983, 0)
    group = make_group(0, 0.0, 40, 5, 3, SequenceCounter())  # 3 blocks of prompt
    sched.add_request(group)
    batch = sched.schedule()
    assert batch.prefill_seq_ids == [group.seqs[0].seq_id] and len(batch.prefill_sample_ids[0]) == 3
    assert not batch.blocks_to_copy
    sched.complete(batch, 1.0)
    batch = sched.schedule()
    tables = [sched.block_table(s.seq_id) for s in group.seqs]
    expected = [(src, dst) for t in tables[1:] for src, dst in zip(tables[0][:3], t[:3])]
    assert batch.blocks_to_copy == expected and len(expected) == 6
    assert len(set(b for t in tables for b in t)) == sum(len(t) for t in tables), "nothing is shared"


def test_oracle_usage_breakdown():
    model = load_model_spec("opt-13b")
    for name, internal in (("orca-oracle", 0), ("orca-pow2", 132 - 125), ("orca-max", 2048 - 125)):
        sched = make_scheduler(PAPER_SYSTEMS[name], model, 983, 0)
        sched.add_request(make_group(0, 0.0, 100, 25, 1, SequenceCounter()))
        sched.schedule()
        usage = sched.kv_usage()
        assert usage.token == 100 and usage.reserved == 25 and usage.internal == internal
        chunk = {"orca-oracle": 8, "orca-pow2": 16, "orca-max": 128}[name] * 16
        assert usage.external == chunk - (125 + internal)
        assert usage.idle == (983 * 16) - chunk and usage.total == 983 * 16
