"""Beam search in the control plane: forks by reference count (vLLM), by copy (Orca), and the slots.

Hypothesis plays a data plane that picks any parents it likes after every decode step; the block
manager's books must hold after every step and be empty at the end.
"""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.core.beam import beam_parents, continue_beams
from engine.core.block_manager import BlockManager
from engine.core.blocks import blocks_for
from engine.core.sequence import SeqStatus, SequenceCounter, make_group
from engine.core.serving import Request, ServingCore
from engine.core.system import SystemSpec
from tests.helpers.core_harness import HYPOTHESIS, StepInvariants, append_one, check_block_manager, hyp, scheduler_for

# --- the slots -------------------------------------------------------------------------------


def test_a_surviving_beam_keeps_its_slot_and_dead_slots_take_the_extra_children():
    # beams 10, 11, 12: candidates continue 12, 10, 12; beam 11 died
    assert continue_beams([10, 11, 12], [12, 10, 12]) == [1, 2, 0]
    assert beam_parents([10, 11, 12], [12, 10, 12]) == {11: 12}


def test_every_beam_continuing_itself_forks_nothing():
    assert beam_parents([4, 5, 6], [6, 5, 4]) == {}


def test_one_parent_for_all_children_forks_every_other_slot():
    assert beam_parents([1, 2, 3, 4], [3, 3, 3, 3]) == {1: 3, 2: 3, 4: 3}


@pytest.mark.parametrize("parents, message", [([1, 1], "needs 3 parent choices"),
                                              ([1, 2, 9], "not a beam of its group")])
def test_bad_parent_choices_are_refused(parents, message):
    with pytest.raises(ValueError, match=message):
        continue_beams([1, 2, 3], parents)


@given(st.integers(1, 8).flatmap(lambda k: st.lists(st.integers(0, k - 1), min_size=k, max_size=k)))
@HYPOTHESIS
def test_slots_are_a_permutation_of_the_candidates_and_parents_stay_in_place(choice):
    seq_ids = [100 + j for j in range(len(choice))]
    parents = [seq_ids[j] for j in choice]
    chosen = continue_beams(seq_ids, parents)
    assert sorted(chosen) == list(range(len(seq_ids)))
    forks = beam_parents(seq_ids, parents)
    assert not set(forks) & set(forks.values()), "a parent is never replaced in the step that forks it"
    assert Counter(parents) == Counter(forks.get(s, s) for s in seq_ids)


# --- the block manager under random beam steps --------------------------------------------------


def check_all_freed(bm: BlockManager) -> None:
    assert bm.gpu.num_free == bm.gpu.num_blocks and not any(bm.gpu.ref_counts), "a GPU block leaked"
    assert bm.cpu.num_free == bm.cpu.num_blocks and not any(bm.cpu.ref_counts), "a CPU block leaked"
    assert not bm.block_tables


@st.composite
def beam_runs(draw):
    width = draw(st.integers(1, 8))
    block_size = draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    prompt = draw(st.integers(1, 40))
    steps = draw(st.integers(1, 40))
    parents = draw(st.lists(st.lists(st.integers(0, width - 1), min_size=width, max_size=width),
                            min_size=steps, max_size=steps))
    return width, block_size, prompt, parents


@given(beam_runs())
@hyp(max_examples=150)
def test_block_manager_books_hold_after_every_beam_step(run):
    width, bs, prompt, steps = run
    bm = BlockManager(bs, num_gpu_blocks=width * (blocks_for(prompt + len(steps), bs) + 1), num_cpu_blocks=0,
                      watermark=0.0)
    group = make_group(0, 0.0, prompt, len(steps), 1, SequenceCounter(), beam_width=width)
    bm.allocate(group)
    group.set_status(SeqStatus.RUNNING)
    seqs = {s.seq_id: s for s in group.seqs}
    status = {s: SeqStatus.RUNNING for s in seqs}.__getitem__
    check_block_manager(bm, status)
    for step, choice in enumerate(steps):
        for seq in group.seqs:
            seq.length += 1  # the token the last step sampled, fed back now: it needs a slot
            table = bm.block_tables[seq.seq_id]
            needs_block = len(table) * bs < seq.length
            last, shared = table[-1], bm.gpu.ref_counts[table[-1]] > 1
            copy = append_one(bm, seq)
            if copy is not None:
                assert not needs_block and shared, "copy-on-write only of a shared last block"
                assert copy[0] == last and bm.block_tables[seq.seq_id][-1] == copy[1]
            else:
                assert needs_block or not shared, "a write into a shared block must copy it first"
        check_block_manager(bm, status)
        if step:  # the prefill's step has one row of logits for every beam: nothing to fork
            ids = [s.seq_id for s in group.seqs]
            for child, parent in beam_parents(ids, [ids[j] for j in choice]).items():
                bm.fork(seqs[parent], seqs[child], [])
                assert bm.block_tables[child] == bm.block_tables[parent]
            check_block_manager(bm, status)
    for seq in group.seqs:
        bm.free(seq)
    check_all_freed(bm)


def test_fork_shares_the_parent_blocks_and_allocates_nothing():
    bm = BlockManager(4, num_gpu_blocks=16, num_cpu_blocks=0, watermark=0.0)
    group = make_group(0, 0.0, 6, 8, 1, SequenceCounter(), beam_width=2)
    bm.allocate(group)
    a, b = group.seqs
    for seq in group.seqs:
        seq.length += 1
        append_one(bm, seq)  # 7 tokens: the shared second block is copied for b
    free = bm.gpu.num_free
    bm.fork(a, b, [])
    assert bm.block_tables[b.seq_id] == bm.block_tables[a.seq_id]
    assert bm.gpu.num_free == free + 1, "b's own copy is freed; nothing new is allocated"
    assert [bm.gpu.ref_counts[x] for x in bm.block_tables[a.seq_id]] == [2, 2]
    b.length += 1
    a.length += 1
    assert append_one(bm, a) is not None, "the shared last block is copied on the next write"


# --- the schedulers under random beam steps ----------------------------------------------------


class RandomParents:
    """A data plane choosing parents from hypothesis' draws (any choice, even the same one each time)."""

    def __init__(self, draw):
        self.draw = draw

    def __call__(self, sched, batch) -> dict[int, int]:
        forks = {}
        prefilled = {ids for ids in batch.prefill_sample_ids}
        for ids in batch.beam_groups:
            if ids in prefilled:
                continue
            choice = self.draw(st.lists(st.integers(0, len(ids) - 1), min_size=len(ids), max_size=len(ids)))
            forks.update(beam_parents(ids, [ids[j] for j in choice]))
        return forks


def drive_beams(sched, requests: list[Request], choose, max_steps: int = 5000) -> ServingCore:
    """All requests arrive at once; every step is checked, and the parents come from `choose`."""
    core = ServingCore(sched)
    for request in requests:
        core.admit(request)
    invariants, now = StepInvariants(), 0.0
    for step in range(max_steps):
        invariants.before(sched, step)
        served = core.start_step(now)
        if served is None:
            break
        invariants.after(sched, served.batch, step)
        now += 1.0
        core.end_step(served, now, choose(sched, served.batch))
    assert not sched.has_unfinished(), "every beam search finishes"
    return core


@st.composite
def beam_workloads(draw):
    block_size = draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    requests = [Request(i, 0.0, draw(st.integers(1, 20)), draw(st.integers(1, 20)),
                              beam_width=draw(st.integers(1, 8))) for i in range(draw(st.integers(1, 4)))]
    return block_size, requests


@given(beam_workloads(), st.sampled_from(["roomy", "tight"]), st.data())
@hyp(max_examples=60)
def test_vllm_beam_searches_keep_the_books_through_swaps(workload, pool, data):
    bs, requests = workload
    # tight: the largest request alone just fits, so the others are swapped out and back
    largest = max(r.beam_width * blocks_for(r.prompt_len + r.output_len, bs) + r.beam_width for r in requests)
    num_gpu_blocks = largest if pool == "tight" else 4 * sum(
        r.beam_width * blocks_for(r.prompt_len + r.output_len, bs) + r.beam_width for r in requests)
    sched = scheduler_for(SystemSpec("vLLM", "vllm", block_size=bs, watermark=0.0), num_gpu_blocks,
                          num_cpu_blocks=num_gpu_blocks * len(requests), max_seq_len=64)
    core = drive_beams(sched, requests, RandomParents(data.draw))
    check_all_freed(sched.allocator)
    rows = core.records.request_rows()
    assert [r.n for r in rows] == [r.beam_width for r in requests], "a beam search is beam_width sequences"


@pytest.mark.parametrize("reservation", ["oracle", "pow2", "max"])
def test_orca_gives_every_beam_its_own_reservation_and_copies_on_fork(reservation):
    sched = scheduler_for(SystemSpec("Orca", "orca", reservation=reservation, block_size=4), 256, max_seq_len=64)
    core = ServingCore(sched)
    group = core.admit(Request(0, 0.0, 6, 10, beam_width=3))
    prefill = core.start_step(0.0)
    reservations = [sched.allocator.reservations[s.seq_id] for s in group.seqs]
    assert len({r.start for r in reservations}) == 3, "one reservation per beam"
    assert {r.chunk_blocks for r in reservations} == {sched.allocator.buddy.chunk_size(
        sched.allocator.reserved_blocks(group.seqs[0]))}, "each of the group's size"
    assert prefill.batch.beam_groups == [tuple(s.seq_id for s in group.seqs)]
    core.end_step(prefill, 1.0)
    decode = core.start_step(1.0)
    assert len(decode.batch.blocks_to_copy) == 2 * blocks_for(6, 4), "the prompt copied into two beams"
    a, b, c = group.seqs
    parent_table = sched.block_table(a.seq_id)  # 7 tokens: 2 blocks, as the decode left them
    core.end_step(decode, 2.0, {c.seq_id: a.seq_id})
    after = core.start_step(2.0)
    assert after.batch.blocks_to_copy == list(zip(parent_table, sched.allocator.block_table(c)[:2])), \
        "the fork copies every block of the parent into the child's own reservation"
    assert sched.allocator.reservations[c.seq_id].start == reservations[2].start, "the child keeps its region"


def test_fastertransformer_beams_fork_by_copy_like_orca():
    sched = scheduler_for(SystemSpec("FT", "fastertransformer", block_size=4), 256, max_seq_len=64)
    core = drive_beams(sched, [Request(0, 0.0, 5, 6, beam_width=2)],
                       lambda sched, batch: {ids[1]: ids[0] for ids in batch.beam_groups
                                             if ids not in set(batch.prefill_sample_ids)})
    copies = [r.num_copy_blocks for r in core.records.iteration_rows()]
    # the prompt's 2 blocks after the prefill, then a fork after the decodes at contexts 6..9 (2, 2, 2
    # and 3 blocks); the last decode's fork is not copied: nobody reads that KV again
    assert copies == [0, 2, 2, 2, 2, 3]


def test_forks_after_a_prefill_or_across_groups_are_refused():
    sched = scheduler_for(SystemSpec("vLLM", "vllm", block_size=4), 64, max_seq_len=64)
    core = ServingCore(sched)
    one = core.admit(Request(0, 0.0, 5, 6, beam_width=2))
    two = core.admit(Request(1, 0.0, 5, 6, beam_width=2))
    prefill = core.start_step(0.0)
    with pytest.raises(ValueError, match="decoded in this batch"):
        core.end_step(prefill, 1.0, {one.seqs[1].seq_id: one.seqs[0].seq_id})
    sched = scheduler_for(SystemSpec("vLLM", "vllm", block_size=4), 64, max_seq_len=64)
    core = ServingCore(sched)
    one, two = (core.admit(Request(i, 0.0, 5, 6, beam_width=2)) for i in range(2))
    core.end_step(core.start_step(0.0), 1.0)
    decode = core.start_step(1.0)
    with pytest.raises(ValueError, match="one beam search"):
        core.end_step(decode, 2.0, {one.seqs[1].seq_id: two.seqs[0].seq_id})


def test_a_request_with_samples_and_beams_is_refused():
    with pytest.raises(ValueError, match="not both"):
        make_group(0, 0.0, 4, 4, 2, SequenceCounter(), beam_width=2)


def test_vllm_preempts_a_beam_search_by_swapping_even_when_told_to_recompute():
    sched = scheduler_for(SystemSpec("vLLM", "vllm", block_size=4, preemption="recompute"), 64, 64, max_seq_len=64)
    group = make_group(0, 0.0, 5, 6, 1, SequenceCounter(), beam_width=2)
    assert sched.preemption_mode(group).value == "swap"


def test_beam_token_slots_count_shared_blocks_once():
    sched = scheduler_for(SystemSpec("vLLM", "vllm", block_size=4, watermark=0.0), 64, max_seq_len=64)
    core = ServingCore(sched)
    group = core.admit(Request(0, 0.0, 4, 8, beam_width=2))
    a, b = group.seqs
    for t in range(4):  # the prefill, then decodes at contexts 5, 6, 7
        core.end_step(core.start_step(float(t)), t + 1.0)
    step = core.start_step(4.0)  # decode at context 8: each beam's second block is full
    assert step.usage.token == 4 + 2 * 4
    core.end_step(step, 5.0, {b.seq_id: a.seq_id})  # b continues a: they share a's full second block
    step = core.start_step(5.0)  # each beam's ninth token in a block of its own
    assert sched.allocator.held_token_slots(group) == step.usage.token == 4 + 4 + 2 * 1


def test_a_tight_pool_swaps_beam_searches_out_and_back_with_their_sharing():
    import numpy as np

    rng = np.random.default_rng(0)

    def seeded(sched, batch):
        forks = {}
        for ids in batch.beam_groups:
            if ids not in set(batch.prefill_sample_ids):
                forks.update(beam_parents(ids, [ids[j] for j in rng.integers(0, len(ids), len(ids))]))
        return forks

    requests = [Request(i, 0.0, 9, 30, beam_width=4) for i in range(3)]
    sched = scheduler_for(SystemSpec("vLLM", "vllm", block_size=4, watermark=0.0), 40, num_cpu_blocks=200,
                          max_seq_len=64)
    core = drive_beams(sched, requests, seeded)
    assert sched.num_preemptions > 0 and sched.num_swapped_out_blocks > 0
    assert all(r.finish_s is not None for r in core.records.request_rows())
    check_all_freed(sched.allocator)
