"""Speculative decoding on the control plane: lookahead slots reserved for each decode's proposals, given back
once the step says how many were accepted, and every invariant of the paged pool kept at every step."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.core.batch import Batch
from engine.core.block_manager import BlockManager
from engine.core.sequence import SeqStatus, SequenceCounter, SequenceGroup, make_group
from engine.core.speculative import SpeculativeSpec, lookahead_slots
from engine.core.system import PAPER_SYSTEMS, VLLM_V1
from tests.helpers.core_harness import (
    ChunkedPrefill,
    PrefixCacheInvariants,
    Req,
    StepInvariants,
    check_finished,
    drive,
    hyp,
    scheduler_for,
)
from tests.helpers.core_workloads import FinalState, caching, pool_blocks, requests, workloads

BS = 4


def speculating(k: int) -> SpeculativeSpec:
    return SpeculativeSpec("ngram", k, (0.5,) * k)


def drawn(seed: int):
    """Accepted counts drawn uniformly from 0 to each decode's proposals."""
    rng = random.Random(seed)
    return lambda batch: [rng.randint(0, k) for k in batch.decode_proposed]


def group(rid: int, prompt: int, output: int, counter: SequenceCounter) -> SequenceGroup:
    g = make_group(rid, 0.0, prompt, output, 1, counter)
    g.set_status(SeqStatus.RUNNING)
    return g


# --- the block manager -------------------------------------------------------------------------------------

def test_lookahead_slots_are_k_but_never_more_than_the_sequence_can_use():
    assert lookahead_slots(10, 30, 4) == 4
    assert lookahead_slots(26, 30, 4) == 3  # 26 + 3 accepted + 1 = 30: its last step
    assert lookahead_slots(29, 30, 4) == 0  # one token short: a plain decode
    assert lookahead_slots(30, 30, 4) == 0


def test_append_reserves_a_slot_for_each_proposal_and_the_rejected_ones_go_back():
    bm = BlockManager(BS, 10, 0, watermark=0.0, lookahead=5)
    g = group(0, 7, 20, SequenceCounter())
    seq = g.seqs[0]
    bm.allocate(g)  # 7 prompt tokens: 2 blocks
    seq.length = 8  # its first token sampled
    assert bm.blocks_to_append([seq]) == 2  # positions 7..12 need blocks 1..3: two more
    bm.append_slots([seq], [])
    assert len(bm.block_table(seq)) == 4 and bm.gpu.num_free == 6
    seq.length += 0 + 1  # nothing accepted: the target's own token only
    assert bm.give_back_lookahead(seq) == 2  # positions 0..7 in 2 blocks: the other two held only rejections
    assert len(bm.block_table(seq)) == 2 and bm.gpu.num_free == 8
    bm.append_slots([seq], [])
    seq.length += 5 + 1  # everything accepted
    assert bm.give_back_lookahead(seq) == 0 and len(bm.block_table(seq)) == 4  # positions 0..13
    bm.free(seq)
    assert bm.gpu.num_free == 10


def test_a_block_half_kept_stays_and_only_the_emptied_one_is_freed():
    bm = BlockManager(BS, 10, 0, watermark=0.0, lookahead=4)
    g = group(0, 4, 20, SequenceCounter())
    seq = g.seqs[0]
    bm.allocate(g)
    seq.length = 5
    bm.append_slots([seq], [])  # positions 4..8: blocks 1 and 2
    assert len(bm.block_table(seq)) == 3
    seq.length += 2 + 1  # positions 4..6 kept: block 1 holds them, block 2 held only rejections
    assert bm.give_back_lookahead(seq) == 1 and len(bm.block_table(seq)) == 2


def test_a_shared_last_block_is_copied_before_the_proposals_write_past_it():
    bm = BlockManager(BS, 12, 0, watermark=0.0, lookahead=3)
    parent = make_group(0, 0.0, 6, 20, 2, SequenceCounter())  # two samples share the prompt's blocks
    parent.set_status(SeqStatus.RUNNING)
    bm.allocate(parent)
    a, b = parent.seqs
    a.length = b.length = 7  # each sampled its first token: position 6 is in the shared block 1
    copies: list[tuple[int, int]] = []
    assert bm.blocks_to_append([a]) == 1 + 1  # a copy on write, and block 2 for positions 8..9
    bm.append_slots([a, b], copies)
    assert len(copies) == 1  # the first copies; the second then holds the block alone
    assert bm.block_table(a)[0] == bm.block_table(b)[0] and bm.block_table(a)[1] != bm.block_table(b)[1]
    assert all(bm.gpu.ref_counts[block] == 1 for block in bm.block_table(a)[1:] + bm.block_table(b)[1:])
    a.length += 1
    b.length += 1
    bm.give_back_lookahead(a)
    bm.give_back_lookahead(b)
    bm.free(a)
    bm.free(b)
    assert bm.gpu.num_free == 12 and not any(bm.gpu.ref_counts)


def test_a_swapped_group_comes_back_only_with_room_for_its_proposals():
    plain = BlockManager(BS, 20, 20, watermark=0.0)
    spec = BlockManager(BS, 20, 20, watermark=0.0, lookahead=6)
    counter = SequenceCounter()
    g = group(0, 8, 20, counter)
    for bm in (plain, spec):
        bm.allocate(g)
    assert plain.blocks_to_swap_in(g) == 2 + 1
    assert spec.blocks_to_swap_in(g) == 2 + 1 + 2  # its next token's block, and up to two more for 6 proposals


# --- the scheduler -------------------------------------------------------------------------------------------

def test_the_token_budget_counts_each_speculating_decode_as_k_plus_one():
    system = replace(PAPER_SYSTEMS["vllm"], block_size=BS, max_num_batched_tokens=20, speculative=speculating(4))
    sched = scheduler_for(system, 64, max_seq_len=64)
    counter = SequenceCounter()
    for rid in range(3):
        sched.add_request(make_group(rid, 0.0, 5, 30, 1, counter))
    first = sched.schedule()
    assert first.prefill_lens == [5, 5, 5] and not first.decode_proposed
    sched.complete(first, 1.0)
    sched.add_request(make_group(3, 1.0, 6, 30, 1, counter))
    second = sched.schedule()
    assert second.decode_proposed == [4, 4, 4]
    assert not second.prefill_seq_ids  # 3 x 5 tokens leave 5 of 20: a prompt of 6 waits
    sched.complete(second, 2.0, None, [4, 0, 2])
    assert [s.length for g in sched.running for s in g.seqs] == [5 + 1 + 4 + 1, 5 + 1 + 0 + 1, 5 + 1 + 2 + 1]
    assert (sched.num_proposed_tokens, sched.num_accepted_tokens) == (12, 6)


def one_decode_proposing(k: int):
    """A scheduler whose one request, its prompt done, is scheduled to decode proposing k tokens; and that step."""
    system = replace(PAPER_SYSTEMS["vllm"], block_size=BS, speculative=speculating(k))
    sched = scheduler_for(system, 64, max_seq_len=64)
    sched.add_request(make_group(0, 0.0, 5, 30, 1, SequenceCounter()))
    sched.complete(sched.schedule(), 1.0)
    return sched, sched.schedule()


def test_accepted_counts_outside_the_proposals_are_refused():
    sched, batch = one_decode_proposing(2)
    with pytest.raises(ValueError, match="3 proposals accepted of 2 proposed"):
        sched.complete(batch, 2.0, None, [3])


def test_a_step_whose_lookahead_slots_do_not_fit_preempts_the_latest_arrival():
    # 2 requests of 4-token prompts in 7 blocks of 4: plain decodes fit; with 8 proposals each they do not
    system = replace(PAPER_SYSTEMS["vllm"], block_size=BS, watermark=0.0, preemption="recompute",
                     speculative=speculating(8))
    sched = scheduler_for(system, 7, max_seq_len=64)
    counter = SequenceCounter()
    for rid in range(2):
        sched.add_request(make_group(rid, 0.0, 4, 20, 1, counter))
    sched.complete(sched.schedule(), 1.0)
    batch = sched.schedule()  # each needs positions 4..12: 3 blocks more, 6 for both, 5 free
    assert sched.num_preemptions == 1 and batch.decode_proposed == [8]
    assert [g.request_id for g in sched.running] == [0] and sched.waiting[0].request_id == 1


def test_a_speculating_batch_promises_no_plain_stretch_but_begins_a_speculating_one():
    # how far its steps advance is the accepted counts': planned on them (engine.core.scheduler.speculating_stretch)
    sched, batch = one_decode_proposing(2)
    assert sched.decode_stretch(batch).num_steps == 1
    steps = sched.speculating_stretch(batch)
    assert steps is not None and steps.batches == [batch]


def test_with_nothing_accepted_every_request_gets_what_it_would_without_speculation():
    reqs_by_seed = random.Random(3)
    reqs = [Req(reqs_by_seed.randint(0, 6), reqs_by_seed.randint(1, 20), reqs_by_seed.randint(1, 20))
            for _ in range(20)]
    plain = replace(PAPER_SYSTEMS["vllm"], block_size=BS)
    runs = [drive(scheduler_for(system, 200, max_seq_len=64), reqs)
            for system in (plain, replace(plain, speculative=speculating(3)))]
    assert [(g.request_id, g.first_token_s, g.finish_s, [s.length for s in g.seqs]) for g in runs[0].groups] == \
        [(g.request_id, g.first_token_s, g.finish_s, [s.length for s in g.seqs]) for g in runs[1].groups]
    assert [b.decode_seq_ids for b in runs[0].batches] == [b.decode_seq_ids for b in runs[1].batches]


# --- the invariant harness on speculating workloads --------------------------------------------------------

SPECULATING = {"mixed": PAPER_SYSTEMS["vllm"], "chunked": replace(PAPER_SYSTEMS["vllm"], prefill_policy="chunked"),
               "separate": replace(PAPER_SYSTEMS["vllm"], prefill_policy="separate"), "v1": VLLM_V1}


@pytest.mark.parametrize("policy", sorted(SPECULATING))
@hyp(max_examples=25)
@given(reqs=requests(max_n=1), block_size=st.sampled_from([4, 8, 16]), extra=st.integers(0, 40),
       k=st.integers(1, 6), seed=st.integers(0, 1000), token_cap=st.sampled_from([64, 100]),
       preemption=st.sampled_from(["auto", "swap"]))
def test_speculating_workloads_keep_invariants_and_finish_exactly(policy, reqs, block_size, extra, k, seed,
                                                                  token_cap, preemption):
    system = replace(SPECULATING[policy], block_size=block_size, max_num_seqs=8, max_num_batched_tokens=token_cap,
                     speculative=speculating(k), prefix_caching=False,
                     preemption="recompute" if policy == "v1" else preemption)
    sched = scheduler_for(system, pool_blocks(block_size, extra, "vllm"), num_cpu_blocks=1000, max_seq_len=64)
    checkers = (StepInvariants(), ChunkedPrefill()) if policy == "chunked" else (StepInvariants(),)
    run = drive(sched, reqs, checkers=checkers, accept=drawn(seed))
    check_finished(run, reqs)
    FinalState(sched).check()
    assert sched.num_accepted_tokens <= sched.num_proposed_tokens


@hyp(max_examples=40)
# 12 blocks hold the largest request alone: a 29-token prompt and 12 outputs, recomputed at its last decode with
# 5 lookahead slots (45 tokens in blocks of 4); a smaller pool refuses it on arrival, which is not what this tests
@given(workloads(max_n=1), st.sampled_from(["auto", "recompute", "swap"]), st.integers(12, 40), st.integers(1, 5),
       st.integers(0, 1000))
def test_speculating_with_a_prefix_cache_keeps_its_invariants(reqs, preemption, num_gpu_blocks, k, seed):
    system = replace(caching(preemption), speculative=speculating(k))
    sched = scheduler_for(system, num_gpu_blocks, num_cpu_blocks=64)
    run = drive(sched, reqs, (StepInvariants(), PrefixCacheInvariants(exact_tokens=True)), accept=drawn(seed))
    check_finished(run, reqs)
    cache = sched.allocator.gpu
    assert cache.num_in_use == 0 and all(r == 0 for r in cache.ref_counts)


def test_an_empty_batch_proposes_nothing():
    assert Batch().num_proposed == 0 and Batch(decode_proposed=[2, 3]).num_proposed == 5
