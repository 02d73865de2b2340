"""Swapped-out groups under every vLLM policy: a group that could not come back by the rules schedule() applies
(can_append's spare block per sequence at every step, can_swap_in's spare blocks and watermark) is refused or
ignored when it arrives, never left to stall the queue; new prompts never keep a swapped group out for good;
and a stall still reported names the swapped group that causes it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine.core.errors import RequestTooLarge, Unschedulable
from engine.core.serving import Request, ServingCore
from engine.core.system import PAPER_SYSTEMS, SystemSpec
from tests.helpers.core_harness import scheduler_for


def vllm(policy: str, block_size: int = 16, **overrides) -> SystemSpec:
    overrides.setdefault("max_num_batched_tokens", 512 if policy == "chunked" else 2560)
    return replace(PAPER_SYSTEMS["vllm"], block_size=block_size, prefill_policy=policy, **overrides)


def serve(core: ServingCore, requests: list[Request], max_steps: int = 20_000) -> float:
    """Admit the requests at their arrivals (one time unit a step) and step until nothing runs; then, as a
    data plane does once arrivals end, check that nothing is left stuck. Returns the clock at the end."""
    pending = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
    now = 0.0
    for _ in range(max_steps):
        while pending and pending[0].arrival_s <= now:
            core.admit(pending.pop(0))
        step = core.start_step(now)
        if step is None:
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
    sched._blocks_needed_alone = lambda group: 0
    core = ServingCore(sched, replica=2)
    late = [Request(i, 600.0, 13, 40, n=4) for i in range(6, 9)]  # they arrive once request 0 is swapped out
    with pytest.raises(Unschedulable) as stall:
        serve(core, [BIG, *BEHIND, *late])
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
