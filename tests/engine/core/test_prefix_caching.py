"""Automatic prefix caching in the control plane (engine/core/block_manager.py): hypothesis-driven runs of
requests with shared prefixes keep the ref-count, evictor and free-count invariants at every step; a
hand-built case's hits are exact; the evictor takes the least recently used block first, the deepest on a
tie; and without the option nothing changes."""
from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from engine.core.block_manager import BlockManager
from engine.core.sequence import SeqStatus, SequenceCounter, make_group
from engine.core.system import PAPER_SYSTEMS, SystemSpec
from engine.errors import SpecError
from tests.helpers.core_harness import (
    ChunkedPrefill,
    KeyedOnceComputed,
    PrefixCacheInvariants,
    Req,
    StepInvariants,
    check_finished,
    drive,
    hyp,
    scheduler_for,
)
from tests.helpers.core_workloads import BS, caching, stream_keys, workloads


@hyp(max_examples=60)
@given(workloads(max_n=1), st.sampled_from(["auto", "recompute", "swap"]), st.integers(9, 40))
def test_single_sequences_keep_the_invariants_and_count_tokens_exactly(reqs, preemption, num_gpu_blocks):
    sched = scheduler_for(caching(preemption), num_gpu_blocks, num_cpu_blocks=64)
    run = drive(sched, reqs, (StepInvariants(), PrefixCacheInvariants(exact_tokens=True)))
    check_finished(run, reqs)
    cache = sched.allocator.gpu
    assert cache.num_in_use == 0 and all(r == 0 for r in cache.ref_counts)
    assert cache.num_free == num_gpu_blocks, "every block free or evictable at the end"


@hyp(max_examples=40)
@given(workloads(max_n=3), st.sampled_from(["auto", "recompute", "swap"]), st.integers(30, 60))
def test_samples_keep_the_invariants(reqs, preemption, num_gpu_blocks):
    # (pools of 30+ blocks: in smaller ones a group of 3 samples may be refused, _blocks_needed_alone)
    sched = scheduler_for(caching(preemption), num_gpu_blocks, num_cpu_blocks=128)
    run = drive(sched, reqs, (StepInvariants(), PrefixCacheInvariants()))
    check_finished(run, reqs)
    assert sched.allocator.gpu.num_in_use == 0


def test_hits_of_a_hand_built_case_are_exact():
    # family 0 shares 3 blocks (12 tokens). Request 0 caches them; request 1 (same family, 14 tokens) finds
    # all 3; request 2 (exactly the 12 shared tokens) finds 2: its prefill computes its last block; request 3
    # (another family) finds none; request 4 arrives after request 0 finished and finds its prompt's 3 blocks
    # and its generated block (keys over prompt + output: the same stream continued, a chat's next round)
    first = stream_keys(0, 3, 0, 5)
    reqs = [Req(0, 13, 7, keys=first), Req(1, 14, 2, keys=stream_keys(0, 3, 1, 4)),
            Req(1, 12, 2, keys=stream_keys(0, 3, 2, 3)), Req(1, 9, 2, keys=stream_keys(1, 1, 3, 2)),
            Req(20, 17, 2, keys=first[:4] + (77,))]
    sched = scheduler_for(caching(), 64)
    run = drive(sched, reqs, (StepInvariants(), PrefixCacheInvariants(exact_tokens=True)))
    cached = {g.request_id: g.cached_prompt_tokens for g in run.groups}
    assert cached == {0: 0, 1: 12, 2: 8, 3: 0, 4: 16}
    assert sched.allocator.hit_rate == sum(cached.values()) / (13 + 14 + 12 + 9 + 17)
    prefills = [(list(b.prefill_lens), list(b.prefill_cached_lens)) for b in run.batches if b.prefill_lens]
    assert prefills[0] == ([13], [0])
    assert prefills[1] == ([2, 4, 9], [12, 8, 0])
    assert prefills[2] == ([1], [16])


def lone_group(counter, rid: int, keys: tuple[int, ...], length: int):
    group = make_group(rid, float(rid), length, 1, 1, counter, block_keys=keys)
    return group


def test_the_evictor_takes_the_least_recently_used_block_then_the_deepest():
    bm = BlockManager(BS, 10, 0, watermark=0.0, prefix_caching=True)
    counter = SequenceCounter()
    groups = [lone_group(counter, rid, (10 * rid + 1, 10 * rid + 2), 9) for rid in range(3)]  # 2 keyed + 1
    bm.begin_step()
    for group in groups[:2]:
        bm.allocate(group)
    bm.begin_step()
    bm.allocate(groups[2])
    for group in (groups[1], groups[0]):  # freed in one step: on the tie, the deepest first, then the first freed
        group.seqs[0].status = SeqStatus.FINISHED
        bm.free(group.seqs[0])
    assert bm.gpu.num_evictable == 4 and bm.gpu.num_free == 4 + 3  # the never-keyed ones are plain free
    of = bm.gpu.block_of_key
    assert bm.gpu.eviction_order() == [of[12], of[2], of[11], of[1]]
    bm.begin_step()
    groups[2].seqs[0].status = SeqStatus.FINISHED
    bm.free(groups[2].seqs[0])  # used later: evicted last
    assert bm.gpu.eviction_order() == [of[12], of[2], of[11], of[1], of[22], of[21]]
    fresh = [bm.gpu.allocate() for _ in range(6)]  # the 4 plain free ones go first, then the least recently used
    assert 12 not in of and 2 not in of and {11, 1, 22, 21} <= set(of)
    assert len(set(fresh)) == 6 and bm.gpu.num_evictions == 2


def test_a_hit_brings_a_block_back_from_the_evictor():
    bm = BlockManager(BS, 6, 0, watermark=0.0, prefix_caching=True)
    counter = SequenceCounter()
    first = lone_group(counter, 0, (1, 2), 9)
    bm.begin_step()
    bm.allocate(first)
    first.seqs[0].status = SeqStatus.FINISHED
    bm.free(first.seqs[0])
    again = lone_group(counter, 1, (1, 2), 10)
    assert bm.blocks_to_allocate(again) == 3, "admission asks for every block, hit or not (vLLM v0.4)"
    bm.allocate(again)
    assert again.num_cached_tokens == 8 and bm.gpu.num_evictable == 0 and bm.gpu.num_in_use == 2


def test_the_option_is_checked():
    try:
        dataclasses.replace(PAPER_SYSTEMS["orca-max"], prefix_caching=True).validate("c.yaml", "systems[0]")
    except SpecError as e:
        assert "systems[0].prefix_caching" in str(e) and "vllm" in str(e)
    else:
        raise AssertionError("Orca with prefix caching accepted")
    for policy in ("separate", "chunked"):  # vLLM >= 0.4 runs the cache with chunked prefill
        dataclasses.replace(caching(), prefill_policy=policy).validate("c.yaml", "systems[0]")
    assert scheduler_for(caching(), 8).allocator.prefix_caching
    assert not scheduler_for(PAPER_SYSTEMS["vllm"], 8).allocator.prefix_caching


# --- under the later prefill policies ------------------------------------------------------------
def caching_chunked(preemption: str = "auto", budget: int = 12) -> SystemSpec:
    return caching(preemption, prefill_policy="chunked", max_num_batched_tokens=budget, max_num_seqs=8)


@hyp(max_examples=60)
@given(workloads(max_n=1), st.sampled_from(["auto", "recompute", "swap"]), st.integers(12, 40),
       st.sampled_from([8, 12, 30]))
def test_chunked_prompts_with_cached_blocks_keep_every_invariant(reqs, preemption, num_gpu_blocks, budget):
    # a chunk starts where the prompt's cache ends (a hit counts as computed), the last leaves exactly its
    # tokens in the cache, no iteration passes the budget, blocks are keyed only once computed
    sched = scheduler_for(caching_chunked(preemption, budget), num_gpu_blocks, num_cpu_blocks=64)
    chunks = ChunkedPrefill()
    run = drive(sched, reqs, (StepInvariants(), PrefixCacheInvariants(exact_tokens=True), chunks,
                              KeyedOnceComputed()))
    check_finished(run, reqs)
    cache = sched.allocator.gpu
    assert cache.num_in_use == 0 and all(r == 0 for r in cache.ref_counts) and not sched.prefill_progress
    assert cache.num_free == num_gpu_blocks, "every block free or evictable at the end"
    # hits counted once per request, at its first admission (a prompt preempted part way is admitted again)
    assert sched.allocator.num_hit_tokens == sum(g.cached_prompt_tokens for g in run.groups)
    assert sched.allocator.num_prompt_tokens == sum(r.prompt for r in reqs)


@hyp(max_examples=40)
@given(workloads(max_n=3), st.sampled_from(["auto", "recompute", "swap"]), st.integers(30, 60),
       st.sampled_from(["chunked", "separate"]))
def test_samples_keep_the_invariants_under_the_later_policies(reqs, preemption, num_gpu_blocks, policy):
    system = caching_chunked(preemption, 30) if policy == "chunked" else caching(preemption, prefill_policy=policy)
    sched = scheduler_for(system, num_gpu_blocks, num_cpu_blocks=128)
    checkers = (StepInvariants(), PrefixCacheInvariants()) + (
        (ChunkedPrefill(), KeyedOnceComputed()) if policy == "chunked" else ())
    run = drive(sched, reqs, checkers)
    check_finished(run, reqs)
    assert sched.allocator.gpu.num_in_use == 0


@hyp(max_examples=40)
@given(workloads(max_n=1), st.sampled_from(["auto", "recompute", "swap"]), st.integers(12, 40))
def test_separate_prompt_runs_keep_the_invariants(reqs, preemption, num_gpu_blocks):
    # (no exact token count: in a prompt-only step the decoders' newest tokens have no slot yet, with the
    # cache or without it)
    sched = scheduler_for(caching(preemption, prefill_policy="separate"), num_gpu_blocks, num_cpu_blocks=64)
    run = drive(sched, reqs, (StepInvariants(), PrefixCacheInvariants()))
    check_finished(run, reqs)
    assert sched.allocator.gpu.num_free == num_gpu_blocks
    assert sched.allocator.tick == run.num_steps, "schedule() advances the LRU clock every step"


def test_hits_of_a_hand_built_chunked_case_are_exact():
    # budget 8, blocks of 4, family 0 shares 3 blocks. Request 0 (20 tokens) prefills in chunks of 8, 8, 4;
    # request 1 (14 tokens, arrives at step 1) waits while request 0's chunks take the budget and is admitted
    # beside its last chunk, by when the 3 shared blocks are computed and keyed: it hits all 3 (12 tokens)
    # and computes 2. Request 2 (13 tokens, step 4) hits the 3 too and computes its last token.
    first = stream_keys(0, 3, 0, 6)
    reqs = [Req(0, 20, 2, keys=first), Req(1, 14, 2, keys=stream_keys(0, 3, 1, 4)),
            Req(4, 13, 1, keys=stream_keys(0, 3, 2, 3))]
    sched = scheduler_for(caching_chunked(budget=8), 64)
    run = drive(sched, reqs, (StepInvariants(), PrefixCacheInvariants(exact_tokens=True), ChunkedPrefill(),
                              KeyedOnceComputed()))
    cached = {g.request_id: g.cached_prompt_tokens for g in run.groups}
    assert cached == {0: 0, 1: 12, 2: 12}
    assert sched.allocator.hit_rate == 24 / (20 + 14 + 13)
    prefills = [(list(b.prefill_lens), list(b.prefill_cached_lens)) for b in run.batches if b.prefill_lens]
    assert prefills == [([8], [0]), ([8], [8]), ([4, 2], [16, 12]), ([1], [12])]


def test_a_prompt_stopped_part_way_leaves_only_its_computed_blocks_cached():
    # request 0 (20 tokens) runs its first chunk (8 tokens: 2 blocks) and is aborted; request 1 of the same
    # family then hits exactly those 2 blocks, not the third shared one nobody computed
    sched = scheduler_for(caching_chunked(budget=8), 64)
    counter = SequenceCounter()
    sched.add_request(make_group(0, 0.0, 20, 2, 1, counter, block_keys=stream_keys(0, 3, 0, 5)))
    batch = sched.schedule()
    assert (batch.prefill_lens, batch.prefill_sample_ids) == ([8], [()])
    assert len(sched.allocator.gpu.key_of_block) == 2, "only the computed blocks are keyed"
    sched.complete(batch, 1.0)
    sched.abort(0)
    assert sched.allocator.gpu.num_evictable == 2 and sched.allocator.gpu.num_free == 64
    later = make_group(1, 1.0, 14, 2, 1, counter, block_keys=stream_keys(0, 3, 1, 3))
    sched.add_request(later)
    batch = sched.schedule()
    assert (batch.prefill_lens, batch.prefill_cached_lens) == ([6], [8]) and later.cached_prompt_tokens == 8
