"""Chunked prefill (Sarathi-Serve, vLLM >= 0.4) in the control plane: random workloads keep every step's
invariants, the budget and the chunks' continuity (tests/helpers/core_harness.ChunkedPrefill), and finish
every request with exactly its output; and hand-built cases show the chunks themselves."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from engine.core.batch import Batch
from engine.core.blocks import blocks_for
from engine.core.scheduler.vllm import VLLMScheduler
from engine.core.sequence import SequenceCounter, make_group
from engine.core.system import SystemSpec
from tests.helpers.core_harness import ChunkedPrefill, Req, StepInvariants, check_finished, drive, hyp, scheduler_for

MAX_LEN = 64


def chunked(budget: int, block_size: int = 4, max_num_seqs: int = 8, preemption: str = "auto") -> SystemSpec:
    return SystemSpec("vLLM chunked", "vllm", block_size=block_size, prefill_policy="chunked",
                      max_num_batched_tokens=budget, max_num_seqs=max_num_seqs, preemption=preemption, watermark=0.0)


def requests():
    req = st.builds(Req, arrival=st.integers(0, 6), prompt=st.integers(1, 40), output=st.integers(1, 20),
                    n=st.integers(1, 3), prefix=st.sampled_from([0]))
    return st.lists(req, min_size=1, max_size=20)


@hyp(max_examples=60)
@given(reqs=requests(), block_size=st.sampled_from([4, 8]), extra=st.integers(0, 40),
       max_num_seqs=st.sampled_from([3, 8]), spare=st.sampled_from([0, 5, 30]),
       preemption=st.sampled_from(["auto", "recompute", "swap"]))
def test_random_workloads_keep_the_chunked_invariants_and_finish_exactly(reqs, block_size, extra, max_num_seqs,
                                                                         spare, preemption):
    system = chunked(max_num_seqs + spare, block_size, max_num_seqs, preemption)
    blocks = 3 * blocks_for(MAX_LEN, block_size) + 3 + extra // 4  # three whole samples: preempts, never stalls
    sched = scheduler_for(system, blocks, num_cpu_blocks=1000, max_seq_len=MAX_LEN)
    checker = ChunkedPrefill()
    run = drive(sched, reqs, checkers=(StepInvariants(), checker))
    check_finished(run, reqs)
    assert not sched.has_unfinished() and not sched.prefill_progress
    pool = sched.allocator
    assert pool.gpu.num_free == blocks and pool.cpu.num_free == 1000 and not pool.block_tables


def test_a_long_prompt_runs_in_chunks_beside_the_decodes_and_samples_once():
    sched = scheduler_for(chunked(budget=8), 64, max_seq_len=MAX_LEN)
    assert isinstance(sched, VLLMScheduler) and sched.rules.chunked
    counter = SequenceCounter()
    sched.add_request(make_group(0, 0.0, 3, 10, 1, counter))  # decodes from step 1 on
    first = sched.schedule()
    assert first.prefill_lens == [3]
    sched.complete(first, 1.0)
    long = make_group(1, 1.0, 19, 2, 1, counter)
    sched.add_request(long)
    steps: list[Batch] = []
    while long.first_token_s is None:
        batch = sched.schedule()
        steps.append(batch)
        sched.complete(batch, 2.0 + len(steps))
    # 7 tokens a step after the one decode: chunks of 7, 7 and 5, each over what came before
    assert [(b.prefill_lens, b.prefill_cached_lens, b.prefill_sample_ids) for b in steps] == [
        ([7], [0], [()]), ([7], [7], [()]), ([5], [14], [(1,)])]
    assert all(b.decode_seq_ids == [0] for b in steps), "the running request decodes in every step"
    assert long.first_token_s == 2.0 + 3, "the first token comes with the last chunk"
    assert sched.sequence(1).length == 20 and len(sched.block_table(1)) == blocks_for(19, 4)


def test_a_group_preempted_in_the_middle_of_its_prompt_starts_it_again():
    sched = scheduler_for(chunked(budget=8, max_num_seqs=4), 12, max_seq_len=MAX_LEN)  # 48 slots
    counter = SequenceCounter()
    old = make_group(0, 0.0, 20, 20, 1, counter)  # 10 blocks at the end: the pool cannot hold both
    new = make_group(1, 0.5, 24, 4, 2, counter)  # two samples of one prompt, which they share
    sched.add_request(old)
    sched.add_request(new)
    step, preempted = 0, False
    while not preempted:
        batch = sched.schedule()
        step += 1
        preempted = new.num_preemptions > 0
        sched.complete(batch, float(step))
        assert step < 100
    assert new.request_id not in sched.prefill_progress and new in sched.waiting
    assert new.shares_prompt, "nothing was sampled: its samples still share one prompt"
    assert not sched.swapped, "recomputed (its chunks dropped), not swapped, though it has two samples"


def test_the_budget_defaults_to_vllms_and_must_hold_every_decode():
    from engine.specs.loader import system_from_dict

    system = system_from_dict({"preset": "vllm", "prefill_policy": "chunked"}, "test.yaml", "systems[0]")
    assert system.max_num_batched_tokens == 512
    given = system_from_dict({"preset": "vllm", "prefill_policy": "chunked", "max_num_batched_tokens": 1024},
                             "test.yaml", "systems[0]")
    assert given.max_num_batched_tokens == 1024
    assert replace(system, prefill_policy="mixed").max_num_batched_tokens == 512
