"""Speculating decode stretches in the control plane (VLLMScheduler.speculating_stretch / advance_speculating,
engine/core/scheduler/speculating_stretch.py).

Two schedulers get the same requests at the same steps and the same accepted counts. One runs every iteration; the
other, at each batch that begins a speculating stretch, plans a random number of its iterations from the counts
(SpeculatingSteps.extend) and makes them in one call. Whatever the first schedules along the way must be the batch
planned (the same decodes, contexts and proposals, nothing copied, swapped or prefilled), the usage columns must be
its kv_usage() at each of them, and afterwards both must hold the same state to the block id. A stretch the plan
ends early ends where the next step would finish a request or preempt one.
"""
from __future__ import annotations

from collections import deque
from dataclasses import astuple, replace
from itertools import repeat

import numpy as np
import pytest

from engine.core.sequence import SequenceCounter, make_group
from engine.core.speculative import SpeculativeSpec
from engine.core.system import PAPER_SYSTEMS, VLLM_V1
from tests.helpers.core_harness import scheduler_for
from tests.helpers.core_workloads import caching

SYSTEMS = {
    "mixed": PAPER_SYSTEMS["vllm"],
    "swap": replace(PAPER_SYSTEMS["vllm"], preemption="swap"),
    "separate": replace(PAPER_SYSTEMS["vllm"], prefill_policy="separate"),
    "chunked": replace(PAPER_SYSTEMS["vllm"], prefill_policy="chunked", max_num_batched_tokens=48),
    "v1": replace(VLLM_V1, prefix_caching=False, max_num_batched_tokens=48),
    "v1-cached": caching("recompute"),  # a prefix cache over prompts that share their first blocks
}


def state(sched) -> tuple:
    """Everything a later schedule() reads, to the block id, and the speculation's counts."""
    groups = sched.groups_in_system()
    seqs = sorted((s.seq_id, s.length, s.status.value) for g in groups for s in g.seqs)
    counts = sorted((g.request_id, g.num_proposed_tokens, g.num_accepted_tokens) for g in groups)
    queues = tuple(tuple(g.request_id for g in queue) for queue in (sched.waiting, sched.running, sched.swapped))
    gpu, blocks = sched.allocator.gpu, sched.allocator
    pool = (list(gpu._free), list(gpu.ref_counts), gpu.num_shared_refs, dict(gpu._evictable),
            {sid: list(table) for sid, table in blocks.block_tables.items()}, blocks.tick)
    return (seqs, counts, queues, pool, sched.kv.token_slots.slots, astuple(sched.kv_usage()), sched.num_running_seqs,
            sched.num_proposed_tokens, sched.num_accepted_tokens, sched.num_preemptions, sched.rows.tick)


def requests(seed: int, count: int, shared: bool) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """(arrival step, prompt, output, block keys): short prompts, long outputs; with `shared`, prompts whose first
    two blocks of 4 are one prefix."""
    rng = np.random.default_rng(seed)
    steps = np.sort(rng.integers(0, 150, count))
    out = []
    for i, arrival in enumerate(steps):
        prompt = int(rng.integers(2, 24))
        keys = tuple(range(min(prompt // 4, 2))) + tuple(1000 * (i + 1) + b for b in range(2, prompt // 4)) \
            if shared else ()
        out.append((int(arrival), prompt, int(rng.integers(1, 70)), keys))
    return out


def run_both(name: str, seed: int, k: int, gpu_blocks: int) -> tuple[int, int]:
    """The two schedulers through one workload; returns (iterations made in stretches, stretches the pool ended)."""
    system = replace(SYSTEMS[name], block_size=4, speculative=SpeculativeSpec("ngram", k, (0.5,) * k))
    stepped, forwarded = (scheduler_for(system, gpu_blocks, num_cpu_blocks=400, max_seq_len=128) for _ in range(2))
    rng = np.random.default_rng(seed)
    pending = deque(enumerate(requests(seed, 30, name == "v1-cached")))
    counters = SequenceCounter(), SequenceCounter()

    def draw(batch) -> list[int]:
        return [int(rng.integers(0, p + 1)) for p in batch.decode_proposed]

    step, made, ended_by_pool = 0, 0, 0
    while pending or stepped.has_unfinished():
        assert step < 20_000
        while pending and pending[0][1][0] <= step:
            request_id, (arrival, prompt, output, keys) = pending.popleft()
            for sched, counter in zip((stepped, forwarded), counters):
                sched.add_request(make_group(request_id, float(arrival), prompt, output, 1, counter,
                                             block_keys=keys))
        batch, ahead = stepped.schedule(), forwarded.schedule()
        assert (batch.prefill_seq_ids, batch.decode_seq_ids) == (ahead.prefill_seq_ids, ahead.decode_seq_ids)
        assert state(stepped) == state(forwarded)
        steps = forwarded.speculating_stretch(ahead)
        if steps is None:
            accepted = draw(batch) if batch.decode_proposed else None
        else:
            room = pending[0][1][0] - step if pending else 10_000  # an arrival ends the stretch before its step
            wanted = min(int(rng.integers(2, 40)), room)
            steps.accept(draw(ahead))
            stopped = False
            while steps.num_steps < wanted:
                later = steps.extend()
                if later is None:
                    stopped = True
                    break
                steps.accept(draw(later))
            count = steps.num_steps
            if count >= 2:
                usages = []
                for i in range(1, count):
                    stepped.complete(batch, float(step + i), None, steps.accepted[i - 1])
                    later = stepped.schedule()
                    planned = steps.batches[i]
                    assert not later.prefill_seq_ids and not later.blocks_to_copy and not later.num_swap_blocks
                    assert (later.decode_seq_ids, later.decode_context_lens, later.decode_proposed,
                            later.num_running_groups) == (planned.decode_seq_ids, planned.decode_context_lens,
                                                          planned.decode_proposed, planned.num_running_groups)
                    usages.append(astuple(stepped.kv_usage()))
                    batch = later
                columns = forwarded.advance_speculating(steps, count)
                assert list(zip(*[repeat(c) if isinstance(c, int) else c for c in columns])) == usages
                made += count - 1
                step += count - 1
                assert state(stepped) == state(forwarded)
            ahead, accepted = steps.batches[count - 1], steps.accepted[count - 1]
        done = [g.request_id for g in stepped.complete(batch, float(step + 1), None, accepted)]
        assert done == [g.request_id for g in forwarded.complete(ahead, float(step + 1), None, accepted)]
        if steps is not None and stopped and not done:
            # ended by the pool, not a finish: the next step's slots do not fit, and its schedule() preempts
            preempted = stepped.num_preemptions
            assert stepped.allocator.blocks_to_append([s for g in stepped.running for s in g.running_seqs()]) > \
                stepped.allocator.gpu.num_free
            ended_by_pool += 1
            assert preempted == forwarded.num_preemptions
        assert state(stepped) == state(forwarded)
        step += 1
    assert not forwarded.has_unfinished()
    return made, ended_by_pool


@pytest.mark.parametrize("name", sorted(SYSTEMS))
@pytest.mark.parametrize("seed", range(4))
def test_a_speculating_stretch_leaves_the_scheduler_as_stepping_does(name, seed):
    made, _ = run_both(name, seed, k=(1, 2, 4, 6)[seed], gpu_blocks=400)
    assert made > 0


@pytest.mark.parametrize("name", ["mixed", "swap", "v1", "v1-cached"])
@pytest.mark.parametrize("seed", range(3))
def test_a_speculating_stretch_stops_before_the_step_whose_slots_do_not_fit(name, seed):
    # v1-cached: the proposals' blocks come out of the prefix cache's evictable ones too, evicting in the steps' order
    made, ended_by_pool = run_both(name, seed, k=5, gpu_blocks=24)
    assert made > 0 and ended_by_pool > 0


def test_no_speculating_stretch_while_a_request_waits_or_without_speculation():
    system = replace(PAPER_SYSTEMS["vllm"], block_size=4, speculative=SpeculativeSpec("ngram", 2, (0.5, 0.5)))
    sched = scheduler_for(system, 20, max_seq_len=128)
    counter = SequenceCounter()
    sched.add_request(make_group(0, 0.0, 4, 30, 1, counter))
    prefill = sched.schedule()
    assert sched.speculating_stretch(prefill) is None  # a prompt in the batch
    sched.complete(prefill, 1.0)
    sched.add_request(make_group(1, 1.0, 76, 2, 1, counter))  # 19 blocks of prompt, 18 free: it waits
    decodes = sched.schedule()
    assert decodes.decode_proposed == [2] and sched.waiting
    assert sched.speculating_stretch(decodes) is None
    plain = scheduler_for(replace(system, speculative=None), 20, max_seq_len=128)
    plain.add_request(make_group(0, 0.0, 4, 30, 1, SequenceCounter()))
    plain.complete(plain.schedule(), 1.0)
    assert plain.speculating_stretch(plain.schedule()) is None
