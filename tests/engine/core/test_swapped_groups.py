"""Swapped-out groups under every vLLM policy: a group that could not come back by the rules schedule() applies
(can_append's spare block per sequence at every step, can_swap_in's spare blocks and watermark) is refused or
ignored when it arrives, never left to stall the queue; new prompts never keep a swapped group out for good;
and a stall still reported names the swapped group that causes it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from engine.core.beam import beam_parents
from engine.core.blocks import blocks_for
from engine.core.serving import Request, ServingCore
from engine.core.system import PAPER_SYSTEMS, SystemSpec
from engine.errors import RequestTooLarge, Unschedulable, Unservable
from tests.helpers.core_harness import StepInvariants, hyp, scheduler_for


def vllm(policy: str, block_size: int = 16, **overrides) -> SystemSpec:
    overrides.setdefault("max_num_batched_tokens", 512 if policy == "chunked" else 2560)
    return replace(PAPER_SYSTEMS["vllm"], block_size=block_size, prefill_policy=policy, **overrides)


def serve(core: ServingCore, requests: list[Request], max_steps: int = 20_000, admitted=lambda: None) -> float:
    """Admit the requests at their arrivals (one time unit a step) and step until nothing runs; then, as a
    data plane does once arrivals end, check that nothing is left stuck. Returns the clock at the end.
    admitted() is called after each admission."""
    pending = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
    now = 0.0
    for _ in range(max_steps):
        while pending and pending[0].arrival_s <= now:
            core.admit(pending.pop(0))
            admitted()
        step = core.start_step(now)
        if step is None:
            if getattr(core, "idle_preempted", False):  # (getattr: the same driver runs against older code)
                continue
            if not pending:
                core.check_schedulable()
                return now
            now = pending[0].arrival_s
            continue
        now += 1.0
        core.end_step(step, now)
    raise AssertionError(f"no end after {max_steps} steps")


# The user's shape: ShareGPT lengths with n = 4 and a 139-block pool (16 tokens a block, a 1% watermark of 1
# block). Request 0 grows to 4 x 34 = 136 blocks: alone it fits, but at its last decodes can_append asks 4
# free blocks beside them (140), so it is swapped out, and it comes back only with 136 + 4 + 1 = 141 free.
BIG = Request(0, 0.0, 4, 528, n=4)
BEHIND = [Request(i, float(i), 13, 40, n=4) for i in range(1, 6)]
POOL = 139


@pytest.mark.parametrize("policy", ["separate", "chunked"])
def test_a_group_that_could_not_swap_back_in_is_ignored_and_the_rest_is_served(policy):
    core = ServingCore(scheduler_for(vllm(policy), POOL, num_cpu_blocks=1000, max_seq_len=1024))
    serve(core, [BIG, *BEHIND])  # before: "0 waiting requests can never be scheduled: the KV pool ... is too small"
    assert [row.request_id for row in core.records.request_rows()] == [1, 2, 3, 4, 5]
    assert core.records.dropped_rows()[0].request_id == 0 and not core.scheduler.has_unfinished()
    roomy = ServingCore(scheduler_for(vllm(policy), 141, num_cpu_blocks=1000, max_seq_len=1024))
    serve(roomy, [BIG, *BEHIND])  # what it needs, exactly: served
    assert len(roomy.records.request_rows()) == 6


def test_mixed_refuses_it_on_arrival_naming_what_it_needs():
    core = ServingCore(scheduler_for(vllm("mixed"), POOL, num_cpu_blocks=1000, max_seq_len=1024))
    with pytest.raises(RequestTooLarge, match=r"request 0: 4 x \(4 \+ 528\) tokens, swapped out at its last "
                                              r"decode .* need 141 KV blocks .* the pool has 139"):
        core.admit(BIG)
    roomy = ServingCore(scheduler_for(vllm("mixed"), 141, num_cpu_blocks=1000, max_seq_len=1024))
    serve(roomy, [BIG, *BEHIND])
    assert len(roomy.records.request_rows()) == 6


def test_a_stall_names_the_swapped_group_that_cannot_come_back():
    # a scheduler whose admission did not foresee it (as the old rule did not): the stall is reported, and
    # the message blames the swapped group, with what it holds and needs, not the first waiting request
    sched = scheduler_for(vllm("separate"), POOL, num_cpu_blocks=1000, max_seq_len=1024)
    core = ServingCore(sched, replica=2)
    late = [Request(i, 600.0, 13, 40, n=4) for i in range(6, 9)]  # they arrive once request 0 is swapped out
    # each refusal forgotten as it is made (a compiled scheduler's methods cannot be replaced)
    with pytest.raises(Unschedulable) as stall:
        serve(core, [BIG, *BEHIND, *late], admitted=sched.ignoring.why.clear)
    message = str(stall.value)
    assert message.startswith("replica 2: 4 requests can never be scheduled: request 0 (prompt 4 + output 528 "
                              "tokens, n=4) is swapped out holding 136 blocks and needs 141 free to come back")
    assert "the pool has 139 blocks" in message and "request 6" not in message


def test_chunked_prompts_leave_the_oldest_swapped_group_room_to_come_back():
    # groups of 2-3 samples arriving two a step: v0.4 admitted new prompts into the blocks a swapped group
    # needed, so none came back while they arrived, and the 60-block swap space ran out (SwapSpaceExhausted)
    rng = np.random.default_rng(0)
    requests = [Request(i, float(i // 2), int(rng.integers(1, 20)), int(rng.integers(10, 40)),
                        n=int(rng.integers(2, 4))) for i in range(30)]
    system = vllm("chunked", block_size=4, max_num_batched_tokens=64, watermark=0.0)
    sched = scheduler_for(system, 40, num_cpu_blocks=60, max_seq_len=64)
    core = ServingCore(sched)
    serve(core, requests)
    assert len(core.records.request_rows()) == 30 and sched.num_preemptions > 0


# --- any policy, any preemption, small pools: every request finishes, or is ignored or refused -----------

def keys_of(family: int, request_id: int, num_blocks: int, shared_blocks: int = 2) -> tuple[int, ...]:
    """Prefix caching: a family's first blocks are shared (a system prompt), the rest each request's own."""
    return tuple(hash(("family", family, i) if i < shared_blocks else ("own", request_id, i))
                 for i in range(num_blocks))


@st.composite
def workloads(draw, policy: str):
    """A system of the policy and any preemption, with automatic prefix caching, a shared prefix or neither, and
    requests of several samples or beams arriving close together; the pool at most 20 blocks above what the
    old admission rule asked of the largest request alone (the prompt's full blocks shared, each sample's own
    at its final length), where it preempts and swaps."""
    caching = draw(st.sampled_from(["none", "prefix", "apc"]))
    bs = draw(st.sampled_from([2, 4, 8]))
    system = vllm(policy, block_size=bs, preemption=draw(st.sampled_from(["auto", "swap", "recompute"])),
                  watermark=draw(st.sampled_from([0.0, 0.1])), prefix_caching=caching == "apc",
                  max_num_seqs=8, max_num_batched_tokens=32 if policy == "chunked" else 64)
    prefix = 2 * bs if caching == "prefix" else 0
    requests = []
    for i in range(draw(st.integers(1, 10))):
        prompt, output = prefix + draw(st.integers(1, 36 - prefix)), draw(st.integers(1, 28))
        width = draw(st.integers(1, 4))
        beam = width > 1 and draw(st.booleans())
        requests.append(Request(i, float(draw(st.integers(0, 8))), prompt, output,
                                n=1 if beam else width, beam_width=width if beam else 1,
                                prefix_len=prefix,  # the workload's prefix starts every prompt
                                block_keys=keys_of(draw(st.integers(0, 1)), i, (prompt + output) // bs)
                                if caching == "apc" else ()))
    old_rule = max(max(blocks_for(r.prompt_len, bs), (r.prompt_len // bs) * (1 - max(r.n, r.beam_width)) +
                       max(r.n, r.beam_width) * blocks_for(r.prompt_len + r.output_len, bs)) for r in requests)
    pool = old_rule + draw(st.sampled_from([0, 1, 2, 3, 8, 20]))
    return system, pool, requests, draw(st.integers(0, 2**32 - 1))


def serve_checked(sched, requests: list[Request], seed: int, max_steps: int = 20_000) -> tuple[ServingCore, set]:
    """serve(), with every step's invariants checked and random beam choices; a request the scheduler
    refuses on arrival (mixed) is left out. Returns the core and the refused requests' ids."""
    core, invariants, rng = ServingCore(sched), StepInvariants(), np.random.default_rng(seed)
    pending, refused, now = sorted(requests, key=lambda r: (r.arrival_s, r.request_id)), set(), 0.0
    for step_number in range(max_steps):
        while pending and pending[0].arrival_s <= now:
            request = pending.pop(0)
            try:
                core.admit(request)
            except Unservable:
                refused.add(request.request_id)
        invariants.before(sched, step_number)
        step = core.start_step(now)
        if step is None:
            if getattr(core, "idle_preempted", False):  # as the data planes do (sim/core/replica.py)
                continue
            if not pending:
                core.check_schedulable()  # a stall raises Unschedulable here
                return core, refused
            now = pending[0].arrival_s
            continue
        invariants.after(sched, step.batch, step_number)
        prefilled = set(step.batch.prefill_sample_ids)
        forks = {}
        for ids in step.batch.beam_groups:
            if ids not in prefilled:
                forks.update(beam_parents(ids, [ids[j] for j in rng.integers(0, len(ids), len(ids))]))
        now += 1.0
        core.end_step(step, now, forks)
    raise AssertionError(f"no end after {max_steps} steps: {sched.num_waiting} waiting, {len(sched.swapped)} "
                         "swapped out")


@pytest.mark.parametrize("policy", [pytest.param("mixed", marks=pytest.mark.slow),
                                    pytest.param("separate", marks=pytest.mark.slow), "chunked"])
@given(data=st.data())
@hyp(max_examples=25)
def test_every_request_finishes_or_is_ignored_or_refused_never_stalls(policy, data):
    system, pool, requests, seed = data.draw(workloads(policy))
    sched = scheduler_for(system, pool, num_cpu_blocks=10_000, max_seq_len=64)
    core, refused = serve_checked(sched, requests, seed)
    finished = {row.request_id for row in core.records.request_rows()}
    ignored = {row.request_id for row in core.records.dropped_rows()}
    assert sorted([*finished, *ignored, *refused]) == [r.request_id for r in requests]
    assert not refused or system.prefill_policy == "mixed"
    event(f"{'swapped' if sched.num_swapped_out_blocks else 'no swap'}, "
          f"{'preempted' if sched.num_preemptions else 'no preemption'}, "
          f"{'some dropped' if ignored or refused else 'all served'}")
    assert not sched.has_unfinished() and sched.allocator.cpu.num_free == 10_000


def test_mixed_swaps_nobody_in_while_it_swaps_a_group_out():
    """vLLM v0.1 swapped in only `while self.swapped and not blocks_to_swap_out`. With arrival-order preemption a
    colocated replica never meets the case (whoever it swaps out is older than every group swapped out before), but
    a decode replica does: a request prefilled elsewhere joins younger than a group swapped out, and is the one
    swapped out next, freeing blocks the older group could come back into in that very step."""
    from engine.core.scheduler.vllm import VLLMScheduler
    from engine.core.sequence import SequenceCounter, make_group

    system = SystemSpec("v01", "vllm", block_size=4, max_num_batched_tokens=None, watermark=0.0, preemption="swap")
    sched, ids = VLLMScheduler(system, 64, 6, 100), SequenceCounter()

    def received(request_id: int, arrival_s: float, prompt: int, output: int) -> None:
        group = make_group(request_id, arrival_s, prompt, output, 1, ids)
        group.seqs[0].length, group.first_token_s = prompt + 1, arrival_s  # its first token came from elsewhere
        sched.receive(group)
        sched.kv_arrived(request_id)

    def step(now_s: float) -> tuple[int, int, list[int]]:
        sched.now_s = now_s
        batch = sched.schedule()
        sched.complete(batch, now_s + 1.0)
        return len(batch.blocks_to_swap_out), len(batch.blocks_to_swap_in), [g.request_id for g in sched.swapped]

    received(3, -1.0, 11, 2)  # finishes after one step, leaving its blocks to request 2
    received(0, 0.0, 6, 10)
    received(1, 1.0, 2, 8)  # 1 block
    assert step(0.0) == (0, 0, [])
    received(2, 2.0, 11, 8)  # 3 blocks, younger than request 1: the pool is full
    assert step(1.0) == (1, 0, [1])  # request 0 grows: request 1, then the latest, goes out
    # request 0 grows again: request 2 (the latest) goes out, and its 3 blocks would let request 1 back at once
    assert step(2.0) == (3, 0, [1, 2])
    assert step(3.0) == (0, 1, [2])  # back in the next step, which swapped nobody out
