"""Decode stretches in the control plane (Scheduler.decode_stretch / advance_decodes, docs/concepts/fast-forward.md).

Two schedulers get the same requests at the same steps. One runs every iteration; the other, at each
batch that decode_stretch lets repeat k >= 2 times, advances a random number m <= k of them in one call
(advance_decodes) and completes the m-th as any step. Whatever the first scheduled along the way must be
what decode_stretch promised (the same decode batch, every context one longer per step, no prompt, copy,
swap or finish), the usage columns advance_decodes returns must be the first's kv_usage() at each of
those iterations, and afterwards both must hold the same state to the block id, so that everything after
runs the same.
"""
from __future__ import annotations

from collections import deque
from dataclasses import astuple, replace
from itertools import repeat

import numpy as np
import pytest

from engine.core.compiled import is_compiled
from engine.core.factory import make_scheduler
from engine.core.scheduler.vllm import VLLMScheduler
from engine.core.sequence import SequenceCounter, make_group
from engine.core.serving import Request, ServingCore
from engine.core.system import PAPER_SYSTEMS
from tests.helpers.core_harness import StepInvariants, tiny_model

MODEL = tiny_model(max_seq_len=128)
SYSTEMS = {name: replace(system, block_size=4) for name, system in {
    **PAPER_SYSTEMS,
    "vllm-recompute": replace(PAPER_SYSTEMS["vllm"], preemption="recompute"),
    "vllm-swap": replace(PAPER_SYSTEMS["vllm"], preemption="swap"),
    "fastertransformer-b3": replace(PAPER_SYSTEMS["fastertransformer"], max_batch_size=3),
    "vllm-separate": replace(PAPER_SYSTEMS["vllm"], prefill_policy="separate"),
    "vllm-chunked": replace(PAPER_SYSTEMS["vllm"], prefill_policy="chunked", max_num_batched_tokens=32,
                            max_num_seqs=32),  # prompts of up to 50 tokens come in chunks
}.items()}
# (gpu blocks of 4 tokens, cpu blocks): vLLM short enough to preempt, the reservations (32 blocks at most a
# sequence) to queue
POOLS = {"vllm": (64, 160), "orca": (160, 0), "fastertransformer": (200, 0)}


def as_iterables(columns):
    """UsageColumns with each column that stays the same (an int) as that int over and over."""
    return [repeat(c) if isinstance(c, int) else c for c in columns]


def random_requests(seed: int, count: int = 40) -> list[tuple[int, int, int, int, int]]:
    """(arrival step, prompt, output, n, prefix): a shared 8-token prefix in every other run."""
    rng = np.random.default_rng(seed)
    prefix = 8 if seed % 2 else 0
    steps = np.sort(rng.integers(0, 120, count))
    return [(int(s), int(rng.integers(prefix + 1, 50)), int(rng.integers(1, 60)), int(rng.choice([1, 1, 2, 3])),
             prefix) for s in steps]


def state(sched) -> tuple:
    """Everything a later schedule() reads, to the block id."""
    seqs = sorted((s.seq_id, s.length, s.status.value) for g in sched.groups_in_system() for s in g.seqs)
    queues = tuple(tuple(g.request_id for g in queue) for queue in (sched.waiting, sched.running,
                                                                     getattr(sched, "swapped", ())))
    tables = {sid: list(sched.block_table(sid)) for sid, _, status in seqs if status == "running"}
    blocks = None
    if isinstance(sched, VLLMScheduler):
        gpu = sched.allocator.gpu
        blocks = (list(gpu._free), list(gpu.ref_counts), gpu.num_shared_refs, dict(sched.allocator.block_tables))
    return seqs, queues, tables, blocks, sched.kv.token_slots.slots, astuple(sched.kv_usage()), sched.num_running_seqs


def same_batch(stepped, promised) -> None:
    assert not stepped.prefill_seq_ids and not stepped.blocks_to_copy
    assert not stepped.blocks_to_swap_in and not stepped.blocks_to_swap_out
    assert stepped.decode_seq_ids == promised.decode_seq_ids
    assert stepped.decode_context_lens == promised.decode_context_lens
    assert stepped.num_running_groups == promised.num_running_groups


def run_both(name: str, seed: int, policy=None) -> int:
    """policy: a scheduler class of the system's kind to run instead of the factory's."""
    system = SYSTEMS[name]
    gpu, cpu = POOLS[system.kind]
    stepped, forwarded = ((policy or make_scheduler)(system, MODEL, gpu, cpu) for _ in range(2))
    counters = SequenceCounter(), SequenceCounter()
    rng = np.random.default_rng(seed + 100)
    pending = deque(enumerate(random_requests(seed)))
    invariants = StepInvariants()
    step, skipped = 0, 0
    while pending or stepped.has_unfinished():
        assert step < 20_000
        while pending and pending[0][1][0] <= step:
            request_id, (arrival, prompt, output, n, prefix) = pending.popleft()
            for sched, counter in zip((stepped, forwarded), counters):
                sched.add_request(make_group(request_id, float(arrival), prompt, output, n, counter, prefix))
        batch, ahead = stepped.schedule(), forwarded.schedule()
        assert (batch.prefill_seq_ids, batch.decode_seq_ids) == (ahead.prefill_seq_ids, ahead.decode_seq_ids)
        assert state(stepped) == state(forwarded)
        stretch = forwarded.decode_stretch(ahead)
        allowed = stretch.num_steps
        assert allowed == stepped.decode_stretch(batch).num_steps
        # a request arriving ends a stretch at the iteration it arrives in (sim/core/fast_forward.py)
        room = pending[0][1][0] - step if pending else allowed
        steps = min(int(rng.integers(2, allowed + 1)), room) if allowed >= 2 else 1
        if steps >= 2:
            usages = []
            for i in range(1, steps):
                stepped.complete(batch, float(step + i))
                later = stepped.schedule()
                invariants.after(stepped, later, step + i)
                same_batch(later, ahead.decode_later(i))
                usages.append(astuple(stepped.kv_usage()))
                batch = later
            columns = forwarded.advance_decodes(stretch, steps)
            assert list(zip(*as_iterables(columns))) == usages
            skipped += steps - 1
            step += steps - 1
            assert state(stepped) == state(forwarded)
        done = [g.request_id for g in stepped.complete(batch, float(step + 1))]
        assert done == [g.request_id for g in forwarded.complete(ahead, float(step + 1))]
        assert steps == allowed or not done  # a stretch's last step finishes requests only where it ends
        assert state(stepped) == state(forwarded)
        step += 1
    assert not forwarded.has_unfinished()
    return skipped


@pytest.mark.parametrize("name", sorted(SYSTEMS))
@pytest.mark.parametrize("seed", range(6))
def test_a_forwarded_stretch_leaves_the_scheduler_as_stepping_does(name, seed):
    assert run_both(name, seed) > 0


class AdmitsOnceContextsGrow(VLLMScheduler):
    """A deliberately wrong policy: it admits a prompt only once the running contexts add up past a line.
    The step and the stretch ask the same admissible(), so both agree the head is refused when the stretch
    is planned; but a decode stretch grows the contexts, so the promise that it stays refused breaks."""

    def admissible(self, group, budget):
        contexts = sum(seq.length for g in self.running for seq in g.live_seqs())
        return super().admissible(group, budget) if contexts >= 40 * len(self.running) else None


@pytest.mark.skipif(is_compiled(), reason="a compiled scheduler takes no interpreted subclass; CI runs "
                    "tests/engine/core on the pure-Python path too")
def test_an_admission_a_stretch_can_change_is_caught_by_the_stretch_check():
    for seed in range(6):  # the right policy passes the same check (the test above)
        run_both("vllm", seed)
    caught = 0
    for seed in range(6):
        try:
            run_both("vllm", seed, policy=lambda system, model, gpu, cpu: AdmitsOnceContextsGrow(
                system, model.max_seq_len, gpu, cpu))
        except AssertionError:
            caught += 1
    assert caught, "the stretch check passed a policy whose admission a stretch changes"


def test_no_stretch_while_beams_run_or_a_prompt_is_in_the_batch():
    sched = make_scheduler(SYSTEMS["vllm"], MODEL, 40, 80)
    counter = SequenceCounter()
    sched.add_request(make_group(0, 0.0, 10, 30, 1, counter))
    sched.add_request(make_group(1, 0.0, 10, 30, 1, counter, beam_width=2))
    prefill = sched.schedule()
    assert sched.decode_stretch(prefill).num_steps == 1
    sched.complete(prefill, 1.0)
    assert sched.decode_stretch(sched.schedule()).num_steps == 1  # decodes, but the beams fork as the data plane draws


def test_vllm_stops_a_stretch_before_the_step_whose_appends_could_preempt():
    sched = make_scheduler(SYSTEMS["vllm"], MODEL, 12, 0)  # 48 slots, 4 a block
    counter = SequenceCounter()
    for rid in range(3):
        sched.add_request(make_group(rid, 0.0, 8, 40, 1, counter))  # two blocks each to start
    sched.complete(sched.schedule(), 1.0)
    batch = sched.schedule()  # 3 decodes at context 9: a third block each, 3 of 12 left
    stretch = sched.decode_stretch(batch)
    steps = stretch.num_steps
    # every 4 steps each takes a block: step 5 takes the last 3; step 6 needs none, but its schedule() finds
    # fewer free blocks than running sequences and vLLM's can_append (a block each, needed or not) preempts
    assert steps == 5
    columns = sched.advance_decodes(stretch, steps)
    free = [row[4] // 4 for row in zip(*as_iterables(columns))]  # idle slots: nobody waits
    assert free == [3, 3, 3, 0]
    sched.complete(batch, 6.0)
    assert sched.schedule().decode_seq_ids == batch.decode_seq_ids[:2]  # and so it is: the latest is preempted


@pytest.mark.parametrize("name", ["fastertransformer", "orca-max", "vllm", "vllm-swap"])
def test_a_stretch_ended_at_once_records_what_its_steps_record_one_by_one(name):
    """ServingCore.end_steps over k iterations of a decode stretch, against end_step k times: the same
    records to the byte, the same requests finished, the same scheduler state."""
    system = SYSTEMS[name]
    gpu, cpu = POOLS[system.kind]
    stepped, stretched = (ServingCore(make_scheduler(system, MODEL, gpu, cpu)) for _ in range(2))
    for core in (stepped, stretched):
        for request_id, (prompt, output, n) in enumerate([(10, 30, 1), (20, 12, 2), (5, 40, 1), (9, 25, 3)]):
            core.admit(Request(request_id, 0.0, prompt, output, n))
    now, stretches = 0.0, 0
    while stepped.scheduler.has_unfinished():
        step, ahead = stepped.start_step(now), stretched.start_step(now)
        allowed = stretched.decode_stretch(ahead)
        count = allowed - 1 if allowed > 2 and stretches % 2 else allowed  # every other one cut short
        stretches += allowed > 1
        ends = [now + 1.0 + i for i in range(count)]
        done = []
        for i, end in enumerate(ends):
            step = step if i == 0 else stepped.start_step(now)
            done += stepped.end_step(step, end)
            now = end
        assert [g.request_id for g in stretched.end_steps(ahead, ends)] == [g.request_id for g in done]
        assert state(stepped.scheduler) == state(stretched.scheduler)
    assert stretches > 2
    assert stretched.records.iteration_values == stepped.records.iteration_values
    assert stretched.records.request_values == stepped.records.request_values


def test_several_ends_need_the_stretch_asked_first():
    core = ServingCore(make_scheduler(SYSTEMS["vllm"], MODEL, 64, 160))
    core.admit(Request(0, 0.0, 10, 30))
    core.end_step(core.start_step(0.0), 1.0)
    with pytest.raises(ValueError, match="decode_stretch was not asked"):
        core.end_steps(core.start_step(1.0), [2.0, 3.0])
