"""A shared prefix (the paper's Fig. 16) and the blocks sharing saves (Fig. 15), in the control plane.

vLLM keeps the prefix's whole blocks once, referenced by every request that uses it, and computes
their KV once; Orca and FasterTransformer reserve the prefix inside every request. The saved and
unshared block counts are kept incrementally by the allocator; core_harness.check_sharing recounts
them from the block tables after every step of every scheduler test.
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.core.block_manager import BlockManager
from engine.core.blocks import blocks_for
from engine.core.scheduler.vllm import VLLMScheduler
from engine.core.sequence import SeqStatus, SequenceCounter, make_group
from engine.core.system import PAPER_SYSTEMS
from tests.helpers.core_harness import (
    Req,
    StepInvariants,
    append_one,
    check_block_manager,
    check_finished,
    drive,
    hyp,
    scheduler_for,
)

BS = 4
MAX_LEN = 64


def running(group):
    group.set_status(SeqStatus.RUNNING)
    return group


def status_of(groups):
    seqs = {s.seq_id: s for g in groups for s in g.seqs}
    return lambda seq_id: seqs[seq_id].status


# --- hand-computed memory saving -----------------------------------------------------------
def test_n_samples_of_one_prompt_save_the_prompt_blocks_until_copy_on_write():
    bm = BlockManager(BS, num_gpu_blocks=32, num_cpu_blocks=0, watermark=0.0)
    group = running(make_group(0, 0.0, prompt_len=10, output_len=5, n=3, next_seq_id=SequenceCounter()))
    bm.allocate(group)
    # 10 tokens: 3 blocks, held by 3 tables: 9 without sharing, 6 of them saved
    assert (bm.num_unshared_blocks, bm.num_saved_blocks) == (9, 6)
    for seq in group.seqs:  # the first sampled token goes into the shared, partly filled last block
        seq.length += 1
        append_one(bm, seq)
    # two samples copied the last block on write, the third kept it: blocks 0-1 still shared by 3
    assert (bm.num_unshared_blocks, bm.num_saved_blocks) == (9, 4)
    assert bm.num_used_gpu_blocks == 5
    for seq in group.seqs:
        seq.length += 1  # length 12: fits the last block, no new block
        append_one(bm, seq)
    assert (bm.num_unshared_blocks, bm.num_saved_blocks) == (9, 4)
    bm.free(group.seqs[0])
    assert (bm.num_unshared_blocks, bm.num_saved_blocks) == (6, 2)
    check_block_manager(bm, status_of([group]))


def test_a_prefix_shared_by_three_requests_saves_two_copies_not_three():
    bm = BlockManager(BS, num_gpu_blocks=32, num_cpu_blocks=0, watermark=0.0)
    ids = SequenceCounter()
    # a 9-token prefix is 2 whole blocks (8 tokens); its 9th token is part of each request's own input
    groups = [running(make_group(i, 0.0, prompt_len=12, output_len=4, n=1, next_seq_id=ids, prefix_len=9))
              for i in range(3)]
    cached = []
    for group in groups:
        assert bm.blocks_to_allocate(group) == (3 if not cached else 1)  # the first caches the prefix too
        bm.allocate(group)
        cached.append(group.num_cached_tokens)
    assert cached == [0, 8, 8], "the first request computes the prefix, the others attend over it"
    assert [bm.block_tables[g.seqs[0].seq_id][:2] for g in groups] == [bm.pinned] * 3
    assert [bm.gpu.ref_counts[b] for b in bm.pinned] == [4, 4], "3 tables + the manager's own hold (pinned)"
    # without sharing: 3 tables x 3 blocks = 9; with it: 2 prefix blocks + 3 own = 5; saved (3 - 1) x 2
    assert bm.num_used_gpu_blocks == 5
    assert (bm.num_unshared_blocks, bm.num_saved_blocks) == (9, 4)
    check_block_manager(bm, status_of(groups))
    bm.free(groups[0].seqs[0])
    bm.free(groups[1].seqs[0])
    assert (bm.num_unshared_blocks, bm.num_saved_blocks) == (3, 0), "one request left: nothing shared"
    bm.free(groups[2].seqs[0])
    assert (bm.num_unshared_blocks, bm.num_saved_blocks) == (0, 0)
    assert bm.num_used_gpu_blocks == 2, "the cache still holds the prefix"
    bm.unpin()
    assert bm.gpu.num_free == 32 and bm.gpu.num_shared_refs == 0


def test_a_swapped_group_takes_a_copy_of_the_prefix_and_comes_back_with_it():
    bm = BlockManager(BS, num_gpu_blocks=32, num_cpu_blocks=32, watermark=0.0)
    ids = SequenceCounter()
    first, second = (running(make_group(i, 0.0, 12, 4, n=2, next_seq_id=ids, prefix_len=8)) for i in range(2))
    bm.allocate(first)
    bm.allocate(second)
    mapping = bm.swap_out(second)
    second.set_status(SeqStatus.SWAPPED)
    assert len(mapping) == 3 and second.cache_blocks == 0  # 2 prefix blocks + 1 own block, copied
    check_block_manager(bm, status_of([first, second]))
    bm.swap_in(second)
    second.set_status(SeqStatus.RUNNING)
    table = bm.block_tables[second.seqs[0].seq_id]
    assert table[:2] != bm.pinned, "its own copy of the prefix now"
    check_block_manager(bm, status_of([first, second]))


# --- schedulers --------------------------------------------------------------------------
def test_vllm_computes_the_prefix_once_and_attends_over_it_after():
    sched = scheduler_for(replace(PAPER_SYSTEMS["vllm"], block_size=BS), num_gpu_blocks=40, max_seq_len=MAX_LEN)
    reqs = [Req(0, 12, 3, prefix=9), Req(0, 14, 3, prefix=9), Req(1, 13, 3, prefix=9), Req(1, 5, 3)]
    run = drive(sched, reqs, checkers=(StepInvariants(),))
    check_finished(run, reqs)
    first, second = run.batches[0], run.batches[1]
    # step 0: the first request caches and computes the prefix; the second, admitted with it, reads it
    assert (first.prefill_lens, first.prefill_cached_lens) == ([12, 14 - 8], [0, 8])
    assert (second.prefill_lens, second.prefill_cached_lens) == ([13 - 8, 5], [8, 0])
    assert sched.allocator.pinned and sched.allocator.gpu.num_free == 40 - 2, "the prefix stays cached"
    sched.release_cache()
    assert sched.allocator.gpu.num_free == 40 and sched.kv_usage().idle == 40 * BS


def test_chunked_prefill_pins_the_prefix_block_by_block_as_chunks_compute_it():
    """The shared prefix is keyed as the prefix cache keys a chunked prompt, in the iteration whose chunk
    computes it: nobody attends over a prefix block a later chunk has yet to compute."""
    system = replace(PAPER_SYSTEMS["vllm"], block_size=BS, prefill_policy="chunked", max_num_batched_tokens=6,
                     max_num_seqs=8)
    sched = scheduler_for(system, num_gpu_blocks=40, max_seq_len=MAX_LEN)
    ids = SequenceCounter()
    for rid in range(2):
        sched.add_request(make_group(rid, 0.0, 12, 3, 1, ids, prefix_len=8))
    first = sched.schedule()
    assert (first.prefill_lens, first.prefill_cached_lens) == ([6], [0])
    assert len(sched.allocator.pinned) == 1, "6 tokens computed: the prefix's first block, keyed and pinned"
    assert sched.allocator.cached_tokens(sched.waiting[0]) == 4, "the second block is not computed yet"
    sched.complete(first, 1.0)
    second = sched.schedule()
    assert (second.prefill_lens, second.prefill_cached_lens) == ([6], [6])
    assert len(sched.allocator.pinned) == 2 and sched.allocator.cached_tokens(sched.waiting[0]) == 8


@pytest.mark.parametrize("name", ["orca-oracle", "orca-max", "fastertransformer"])
def test_reservations_hold_the_prefix_inside_every_request(name):
    system = replace(PAPER_SYSTEMS[name], block_size=BS)
    sched = scheduler_for(system, num_gpu_blocks=64, max_seq_len=MAX_LEN)
    reqs = [Req(0, 12, 3, prefix=9), Req(0, 14, 3, prefix=9)]
    run = drive(sched, reqs, checkers=(StepInvariants(),))
    check_finished(run, reqs)
    assert run.batches[0].prefill_lens == [12, 14] and not any(run.batches[0].prefill_cached_lens)
    usage = sched.kv_usage()
    assert usage.saved_blocks == 0


def test_a_prefix_shorter_than_the_prompt_and_longer_prefixes_sharing_its_blocks():
    sched = scheduler_for(replace(PAPER_SYSTEMS["vllm"], block_size=BS), num_gpu_blocks=40, max_seq_len=MAX_LEN)
    ids = SequenceCounter()
    with pytest.raises(ValueError, match="shorter than its prompt"):
        sched.add_request(make_group(0, 0.0, 8, 3, 1, ids, prefix_len=8))
    sched.add_request(make_group(1, 0.0, 12, 3, 1, ids, prefix_len=8))
    sched.add_request(make_group(2, 0.0, 20, 3, 1, ids, prefix_len=16))
    batch = sched.schedule()
    # the shared prefix is one text: the longer prefix's first two blocks are the shorter one's, cached by
    # the first request in this step; its next two blocks it computes, and they are pinned too
    assert (batch.prefill_lens, batch.prefill_cached_lens) == ([12, 20 - 8], [0, 8])
    assert len(sched.allocator.pinned) == 4


# --- random workloads -----------------------------------------------------------------------
def prefix_requests(draw_prefix: int):
    req = st.builds(Req, arrival=st.integers(0, 4), prompt=st.integers(1, 20), output=st.integers(1, 20),
                    n=st.integers(1, 3), prefix=st.sampled_from([0, draw_prefix, draw_prefix]))
    return st.lists(req, min_size=1, max_size=20).map(
        lambda reqs: [replace(r, prompt=r.prompt + r.prefix) for r in reqs])  # prefix + own input


@pytest.mark.parametrize("name", sorted(PAPER_SYSTEMS))
@pytest.mark.parametrize("preemption", ["auto", "swap", "recompute"])
@hyp(max_examples=20)
@given(data=st.data(), block_size=st.sampled_from([1, 4, 8, 16]), prefix=st.integers(1, 20),
       extra=st.integers(0, 24))
def test_random_prefix_workloads_keep_the_invariants(name, preemption, data, block_size, prefix, extra):
    system = replace(PAPER_SYSTEMS[name], block_size=block_size)
    if system.kind == "vllm":
        system = replace(system, preemption=preemption)
    elif preemption != "auto":
        return  # only vLLM preempts
    reqs = data.draw(prefix_requests(prefix))
    per_seq = blocks_for(MAX_LEN, block_size) + 2
    pool = 3 * per_seq + blocks_for(prefix, block_size) + extra
    if system.kind != "vllm":  # three Max reservations, buddy-rounded
        pool = 3 * (1 << (blocks_for(MAX_LEN, block_size) - 1).bit_length()) + extra
    sched = scheduler_for(system, pool, num_cpu_blocks=1000, max_seq_len=MAX_LEN)
    run = drive(sched, reqs, checkers=(StepInvariants(),))
    check_finished(run, reqs)
    if isinstance(sched, VLLMScheduler):
        bm = sched.allocator
        assert not bm.block_tables and bm.cpu.num_free == bm.cpu.num_blocks
        held = len(bm.pinned)
        assert held == (prefix // block_size if any(r.prefix >= block_size for r in reqs) else 0)
        assert bm.gpu.num_free == bm.gpu.num_blocks - held, "everything but the cached prefix is free"
        assert all(bm.gpu.ref_counts[b] == 1 for b in bm.pinned), "held by the cache alone"
        assert (bm.num_unshared_blocks, bm.num_saved_blocks) == (0, 0)
    sched.release_cache()
    assert sched.kv.token_slots.slots == 0
    usage = sched.kv_usage()
    assert usage.idle == sched.num_gpu_blocks * sched.block_size, f"memory left behind: {usage}"
