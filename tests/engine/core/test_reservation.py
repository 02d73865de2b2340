"""Orca's reservation rule (authors' code): est_out by policy, then a power-of-two buddy chunk."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.core.buddy import BuddyAllocator
from engine.core.reservation import ReservationAllocator, estimated_output
from engine.core.sequence import SequenceCounter, make_group
from tests.helpers.core_harness import hyp

MAX_LEN, BS = 2048, 16


def expected_chunk(prompt: int, output: int, policy: str) -> int:
    est = {"oracle": output, "pow2": 1 << (output - 1).bit_length(), "max": MAX_LEN}[policy]
    blocks = math.ceil(min(prompt + est, MAX_LEN) / BS)
    chunk = 1
    while chunk < blocks:
        chunk *= 2
    return chunk


def test_estimated_output_by_policy():
    assert estimated_output(25, "oracle", MAX_LEN) == 25
    assert estimated_output(25, "pow2", MAX_LEN) == 32  # the paper's example
    assert estimated_output(32, "pow2", MAX_LEN) == 32
    assert estimated_output(33, "pow2", MAX_LEN) == 64
    assert estimated_output(1, "pow2", MAX_LEN) == 1
    assert estimated_output(25, "max", MAX_LEN) == 2048
    with pytest.raises(ValueError, match="unknown reservation"):
        estimated_output(25, "mean", MAX_LEN)


def reserve(prompt, output, policy, n=1, num_blocks=983):
    alloc = ReservationAllocator(num_blocks, BS, MAX_LEN, policy)
    group = make_group(0, 0.0, prompt, output, n, SequenceCounter())
    assert alloc.can_allocate(group)
    alloc.allocate(group)
    return alloc, group


def test_pow2_example_sizes():
    alloc, group = reserve(100, 25, "pow2")
    res = alloc.reservations[group.seqs[0].seq_id]
    assert res.estimate_len == 132 and res.chunk_blocks == 16  # ceil(132/16) = 9 -> 16
    alloc, group = reserve(100, 25, "oracle")
    res = alloc.reservations[group.seqs[0].seq_id]
    assert res.estimate_len == 125 and res.chunk_blocks == 8
    alloc, group = reserve(100, 25, "max")
    res = alloc.reservations[group.seqs[0].seq_id]
    assert res.estimate_len == 2048 and res.chunk_blocks == 128


@pytest.mark.parametrize("policy", ["oracle", "pow2", "max"])
@pytest.mark.parametrize("output", [1, 25, 300, 1024])
def test_a_1024_token_prompt_reserves_2048_tokens_whatever_the_policy(policy, output):
    # Kwon et al. 6.5: "the Orca baselines reserve the space for 1024 tokens for the outputs"
    alloc, group = reserve(1024, output, policy)
    assert alloc.reservations[group.seqs[0].seq_id].chunk_blocks == 128
    assert alloc.num_free_blocks == 983 - 128


@hyp(max_examples=200)
@given(prompt=st.integers(1, 2047), data=st.data(), policy=st.sampled_from(["oracle", "pow2", "max"]))
def test_chunk_size_rule(prompt, data, policy):
    output = data.draw(st.integers(1, MAX_LEN - prompt))
    alloc, group = reserve(prompt, output, policy)
    seq = group.seqs[0]
    res = alloc.reservations[seq.seq_id]
    assert res.chunk_blocks == expected_chunk(prompt, output, policy)
    assert res.chunk_blocks * BS >= res.estimate_len >= seq.final_len, "a reservation holds the whole sequence"
    assert alloc.num_free_blocks == 983 - res.chunk_blocks
    if policy == "oracle":
        assert res.estimate_len == seq.final_len
    if policy == "pow2":
        assert res.estimate_len - prompt < 2 * output or res.estimate_len == MAX_LEN  # at most 2x over
    # the table grows with the sequence inside its own contiguous chunk
    seq.length = seq.final_len
    assert alloc.block_table(seq) == list(range(res.start, res.start + math.ceil(seq.final_len / BS)))
    assert list(alloc.table_blocks(seq)) == alloc.block_table(seq)  # what a fork pairs its copies from


def test_every_sample_of_a_group_reserves_its_own_chunk():
    alloc, group = reserve(100, 100, "oracle", n=4)
    starts = sorted(alloc.reservations[s.seq_id].start for s in group.seqs)
    assert len(set(starts)) == 4
    assert alloc.num_free_blocks == 983 - 4 * 16
    for seq in group.seqs:
        alloc.free(seq)
    assert alloc.num_free_blocks == 983


def test_group_admission_needs_room_for_all_samples():
    alloc = ReservationAllocator(48, BS, MAX_LEN, "oracle")  # roots 32 + 16
    counter = SequenceCounter()
    assert alloc.can_allocate(make_group(0, 0.0, 200, 56, 2, counter))  # 16 blocks each: 32 and 16 roots
    assert not alloc.can_allocate(make_group(1, 0.0, 200, 56, 4, counter))
    assert not alloc.can_allocate(make_group(2, 0.0, 400, 100, 2, counter))  # 32 blocks each


def test_a_refused_group_is_asked_again_once_a_reservation_comes_or_goes():
    # can_allocate keeps its last answer while the buddy allocator stands still (a saturated queue's head is
    # asked every iteration); an allocation or a free must be seen
    alloc = ReservationAllocator(48, BS, MAX_LEN, "oracle")  # roots 32 + 16
    counter = SequenceCounter()
    first, head = make_group(0, 0.0, 400, 100, 1, counter), make_group(1, 0.0, 200, 56, 1, counter)
    alloc.allocate(first)  # the 32-block root
    assert alloc.can_allocate(head)  # 16 blocks: the other root
    alloc.allocate(make_group(2, 0.0, 200, 56, 1, counter))
    assert not alloc.can_allocate(head)
    assert not alloc.can_allocate(head)  # asked again, nothing changed
    alloc.free(first.seqs[0])
    assert alloc.can_allocate(head)


@hyp(max_examples=200)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=6), st.integers(0, 5))
def test_the_quick_refusal_agrees_with_placing_every_chunk(sizes, taken):
    # can_allocate refuses at once when the chunks outsize the free blocks; otherwise it places them: the same
    # verdict as placing them in an allocator with the same history
    buddy = BuddyAllocator(96, 64)
    for _ in range(taken):
        buddy.allocate(8)
    placed = True
    trial = BuddyAllocator(96, 64)
    for _ in range(taken):
        trial.allocate(8)
    for size in sorted((trial.chunk_size(n) for n in sizes), reverse=True):
        try:
            trial.allocate(size)
        except RuntimeError:
            placed = False
            break
    assert buddy.can_allocate(sizes) == placed
