"""vLLM V1's scheduler (prefill_policy: v1) in the control plane: random workloads keep every step's invariants
and finish exactly, and hand-built cases show each rule where it departs from the v0.4 chunked scheduler it
shares its skeleton with: blocks only where a step needs one, the running requests in admission order, no
admission in a step that preempted, recompute as the only preemption, and asynchronous scheduling's one-step
lag for a request that arrives during a busy step."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.core.blocks import blocks_for
from engine.core.records import ServingRecords
from engine.core.sequence import SequenceCounter, make_group
from engine.core.serving import Request, ServingCore
from engine.core.system import PRESETS, VLLM_V1, SystemSpec, v1_limits
from engine.errors import SpecError
from tests.helpers.core_harness import (
    Checker,
    ChunkedPrefill,
    Req,
    StepInvariants,
    check_finished,
    drive,
    hyp,
    scheduler_for,
)

MAX_LEN = 64


def v1(budget: int = 16, block_size: int = 4, max_num_seqs: int = 8, async_scheduling: bool = False) -> SystemSpec:
    return replace(VLLM_V1, block_size=block_size, max_num_batched_tokens=budget, max_num_seqs=max_num_seqs,
                   prefix_caching=False, async_scheduling=async_scheduling)


def requests():
    # one sample a request: V1 fans n samples out into n requests (sim.experiment.config refuses n > 1 for it)
    req = st.builds(Req, arrival=st.integers(0, 6), prompt=st.integers(1, 40), output=st.integers(1, 20))
    return st.lists(req, min_size=1, max_size=20)


class V1Rules(Checker):
    """V1's order on every step: the running requests stay in admission order (the newly admitted after the rest),
    the preempted are the last of them, and a step that preempts admits nobody."""

    def before(self, sched, step: int) -> None:
        self.running = list(sched.running)
        self.waiting = {id(g) for g in sched.waiting}
        self.preemptions = sched.num_preemptions

    def after(self, sched, batch, step: int) -> None:
        kept = [g for g in self.running if any(g is r for r in sched.running)]
        assert list(sched.running[:len(kept)]) == kept, f"step {step}: the running order changed"
        preempted = [g for g in self.running if not any(g is r for r in sched.running)]  # finished ones left earlier
        assert preempted == self.running[len(self.running) - len(preempted):], (
            f"step {step}: preempted {[g.request_id for g in preempted]}, not the last admitted")
        joined = [g for g in sched.running[len(kept):] if id(g) in self.waiting]
        if sched.num_preemptions > self.preemptions:
            assert not joined, f"step {step}: admitted {[g.request_id for g in joined]} in a step that preempted"


@hyp(max_examples=60)
@given(reqs=requests(), block_size=st.sampled_from([4, 8]), extra=st.integers(0, 40),
       max_num_seqs=st.sampled_from([3, 8]), spare=st.sampled_from([0, 5, 30]))
def test_random_workloads_keep_the_invariants_and_finish_exactly(reqs, block_size, extra, max_num_seqs, spare):
    system = v1(max_num_seqs + spare, block_size, max_num_seqs)
    blocks = 3 * blocks_for(MAX_LEN, block_size) + 3 + extra // 4
    sched = scheduler_for(system, blocks, num_cpu_blocks=0, max_seq_len=MAX_LEN)
    run = drive(sched, reqs, checkers=(StepInvariants(), ChunkedPrefill(), V1Rules()))
    check_finished(run, reqs)
    assert not sched.has_unfinished() and not sched.prefill_progress and not sched.swapped
    assert sched.allocator.gpu.num_free == blocks and not sched.allocator.block_tables


def decoding_pool(num_blocks: int, lengths: list[int], block_size: int = 4):
    """A v1 scheduler and, for comparison, a v0.4 chunked one, each running single requests of these prompt
    lengths after their prefill step (so that every request decodes next)."""
    out = []
    for policy in ("v1", "chunked"):
        system = replace(v1(budget=64, block_size=block_size), prefill_policy=policy, async_scheduling=False)
        sched = scheduler_for(system, num_blocks, max_seq_len=MAX_LEN)
        counter = SequenceCounter()
        for i, length in enumerate(lengths):
            sched.add_request(make_group(i, 0.0, length, 10, 1, counter))
        sched.complete(sched.schedule(), 1.0)
        out.append(sched)
    return out


def test_a_step_takes_only_the_blocks_it_needs_where_the_paper_era_rule_asked_one_per_sequence():
    # three requests of 5 tokens in blocks of 4: 2 blocks each, the pool's 6 all used; the next token (the 6th)
    # fits the second block, so no request needs a block, yet the paper-era rule asks a free one of each group
    new, old = decoding_pool(6, [5, 5, 5])
    assert new.allocator.gpu.num_free == old.allocator.gpu.num_free == 0
    batch = new.schedule()
    assert batch.decode_seq_ids == [0, 1, 2] and new.num_preemptions == 0
    batch = old.schedule()
    assert old.num_preemptions > 0 and len(batch.decode_seq_ids) < 3


def test_preemption_takes_the_last_admitted_and_a_recomputed_request_runs_last_again():
    system = v1(budget=64, block_size=4, max_num_seqs=4)
    sched = scheduler_for(system, 6, max_seq_len=MAX_LEN)  # 24 slots
    counter = SequenceCounter()
    a, b = make_group(0, 0.0, 8, 12, 1, counter), make_group(1, 0.1, 8, 12, 1, counter)
    sched.add_request(a)
    sched.add_request(b)
    step = 0
    while not b.num_preemptions:
        sched.complete(sched.schedule(), float(step))
        step += 1
    assert a.num_preemptions == 0, "the later admission is the victim"
    c = make_group(2, 5.0, 1, 1, 1, counter)  # arrives after b, served before it? no: b waits at the head
    sched.add_request(c)
    while b not in sched.running:
        sched.complete(sched.schedule(), float(step))
        step += 1
    assert sched.running[-1] is b, "re-admitted after a preemption, it runs last (V1's running list)"


def test_v1_recomputes_on_auto_and_refuses_swap():
    sched = scheduler_for(v1(), 32, max_seq_len=MAX_LEN)
    group = make_group(0, 0.0, 4, 4, 2, SequenceCounter())
    assert sched.preemption.mode(group).value == "recompute", "V1 has no swap space"
    with pytest.raises(SpecError, match="no swap space"):
        replace(VLLM_V1, preemption="swap").validate("test.yaml", "systems[0]")


def test_the_limits_are_vllms_for_the_gpu_unless_given():
    from engine.specs.loader import system_from_dict

    assert v1_limits(79.1, ("NVIDIA H100 80GB HBM3",)) == (8192, 1024)
    assert v1_limits(79.2, ("NVIDIA A100-SXM4-80GB",)) == (2048, 256), "vLLM keeps A100s at the smaller budget"
    assert v1_limits(22.0, ("NVIDIA GeForce RTX 4090",)) == (2048, 256)
    assert v1_limits(None) == (2048, 256)
    h100 = (79.1, ("NVIDIA H100 80GB HBM3",))
    system = system_from_dict("vllm-v1", "test.yaml", "systems[0]", h100)
    assert (system.max_num_batched_tokens, system.max_num_seqs) == (8192, 1024)
    given_ = system_from_dict({"preset": "vllm-v1", "max_num_seqs": 128}, "test.yaml", "systems[0]", h100)
    assert (given_.max_num_batched_tokens, given_.max_num_seqs) == (8192, 128)
    assert system.prefix_caching and system.async_scheduling and system.watermark == 0
    assert PRESETS["vllm-v1"] is VLLM_V1


def test_async_scheduling_is_a_v1_key():
    with pytest.raises(SpecError, match="prefill_policy: v1"):
        replace(PRESETS["vllm"], async_scheduling=True).validate("test.yaml", "systems[0]", given=["async_scheduling"])


# --- asynchronous scheduling: the one-step lag ----------------------------------------------------------------
def serve(system: SystemSpec, arrivals: list[tuple[float, int, int]], step_s: float = 1.0):
    """Drive a ServingCore as a data plane does, each iteration taking step_s; returns each request's first
    token time."""
    core = ServingCore(scheduler_for(system, 64, max_seq_len=MAX_LEN), ServingRecords())
    pending = [Request(i, t, p, o) for i, (t, p, o) in enumerate(arrivals)]
    groups, now = {}, 0.0
    while pending or core.scheduler.has_unfinished():
        while pending and pending[0].arrival_s <= now:
            request = pending.pop(0)
            groups[request.request_id] = core.admit(request)
        step = core.start_step(now)
        if step is None:
            now = pending[0].arrival_s if pending else now
            continue
        now += step_s
        core.end_step(step, now)
    return {rid: g.first_token_s for rid, g in groups.items()}


def test_a_request_arriving_during_a_busy_step_joins_one_step_later():
    arrivals = [(0.0, 4, 6), (1.5, 4, 2)]  # the second arrives during step 2 (1.0-2.0) of the first's decodes
    sync = serve(v1(), arrivals)
    lagged = serve(v1(async_scheduling=True), arrivals)
    assert sync[1] == 3.0, "scheduled at 2.0, first token at 3.0"
    assert lagged[1] == 4.0, "the schedule at 2.0 was decided as step 2 began (1.0): it joins the next"
    assert sync[0] == lagged[0] == 1.0


def test_an_idle_engine_sees_an_arrival_at_once():
    arrivals = [(0.0, 4, 1), (5.0, 4, 1)]
    lagged = serve(v1(async_scheduling=True), arrivals)
    assert lagged == {0: 1.0, 1: 6.0}


def test_with_nobody_running_the_next_step_sees_every_arrival():
    # the only running request finishes at the end of step 1; one arriving during it would have found nothing
    # to run beside it when step 2 was decided at 0.0, so the engine decides again at 1.0 and sees it
    lagged = serve(v1(async_scheduling=True), [(0.0, 4, 1), (0.5, 4, 1)])
    assert lagged == {0: 1.0, 1: 2.0}
