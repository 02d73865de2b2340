"""FasterTransformer behind the paper's dynamic batcher: request-level batches of up to B
earliest arrivals, each batch running until its longest request ends."""
from __future__ import annotations

from dataclasses import replace

from engine.core.sequence import SeqStatus
from engine.core.system import PAPER_SYSTEMS
from tests.helpers.core_harness import (
    Checker,
    Req,
    StepInvariants,
    check_finished,
    drive,
    scheduler_for,
    seeded_requests,
)


class RequestLevel(Checker):
    def __init__(self):
        self.batches: list[list] = []

    def before(self, sched, step):
        self.waiting = list(sched.waiting)

    def after(self, sched, batch, step):
        admitted = [g for g in self.waiting if g not in sched.waiting]
        if admitted:
            for earlier in self.batches:
                assert all(s.status is SeqStatus.FINISHED for g in earlier for s in g.seqs), (
                    f"step {step}: a new batch started before the last one finished")
            assert admitted == self.waiting[:len(admitted)], "the B earliest arrivals"
            assert len(batch.prefill_seq_ids) == len(admitted) and not batch.decode_seq_ids
            self.batches.append(admitted)
        else:
            assert not batch.prefill_seq_ids
        assert sched.num_preemptions == 0


def test_seeded_workloads_run_batch_by_batch():
    for seed in range(6):
        reqs = seeded_requests(seed, 30, 15, 24, 24, max_n=2)
        system = replace(PAPER_SYSTEMS["fastertransformer"], block_size=4, max_batch_size=(None, 3)[seed % 2])
        sched = scheduler_for(system, 50 + 9 * seed, 0)
        policy = RequestLevel()
        run = drive(sched, reqs, (StepInvariants(), policy))
        check_finished(run, reqs)
        assert sum(map(len, policy.batches)) == len(reqs)
        if system.max_batch_size:
            assert max(map(len, policy.batches)) <= system.max_batch_size
        for batch in policy.batches:
            finish = {g.finish_s for g in batch}
            assert len(finish) == 1, "every request of a batch gets the batch's finish time"
            longest = max(g.output_len for g in batch)
            assert finish.pop() == min(g.first_token_s for g in batch) + longest - 1
        # responses come back together, when the batch ends
        finished_at = {}
        for g in run.finished:
            finished_at.setdefault(g.finish_s, []).append(g)
        assert sorted(map(len, finished_at.values())) == sorted(map(len, policy.batches))


def test_batch_boundaries_by_hand():
    reqs = [Req(0, 4, 3), Req(0, 4, 9), Req(0, 4, 1), Req(0, 4, 2)]
    system = replace(PAPER_SYSTEMS["fastertransformer"], block_size=4, max_batch_size=2)
    sched = scheduler_for(system, 64, 0)
    run = drive(sched, reqs, (StepInvariants(),))
    a, b, c, d = run.groups
    assert a.finish_s == b.finish_s == 9.0  # the longest of the first pair runs 9 steps
    assert c.first_token_s == 10.0 and c.finish_s == d.finish_s == 11.0
    assert [g.request_id for g in run.finished] == [0, 1, 2, 3]
    assert all(batch.num_running_groups == 2 for batch in run.batches)


def test_max_num_seqs_counts_sequences_not_requests():
    # Bug: with max_batch_size unset, B falls back to max_num_seqs but is compared with the
    # number of *requests*: four 2-sample requests put 8 sequences in a batch capped at 4.
    system = replace(PAPER_SYSTEMS["fastertransformer"], block_size=4, max_num_seqs=4)
    sched = scheduler_for(system, 256, 0)
    reqs = [Req(0, 4, 4, 2) for _ in range(4)]
    run = drive(sched, reqs, (StepInvariants(),))
    check_finished(run, reqs)
