"""Buddy allocation over KV blocks: Orca's allocator as the paper's authors wrote it."""
from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from engine.core.buddy import BuddyAllocator, next_pow2
from tests.helpers.core_harness import hyp


def greedy_roots(num_blocks: int, max_chunk: int) -> list[tuple[int, int]]:
    """The pre-split layout, computed independently: largest powers of two first."""
    roots, start, size = [], 0, max_chunk
    while size >= 1:
        while start + size <= num_blocks:
            roots.append((start, size))
            start += size
        size //= 2
    return roots


def free_chunks(buddy: BuddyAllocator) -> list[tuple[int, int]]:
    return sorted((start, size) for size, starts in buddy._free.items() for start in starts)


def root_of(roots, start):
    for r_start, r_size in roots:
        if r_start <= start < r_start + r_size:
            return r_start, r_size
    raise AssertionError(f"block {start} is in no root")


def check_layout(buddy: BuddyAllocator, allocated: dict[int, int], roots) -> None:
    """Allocated and free chunks tile the pool exactly, each aligned inside its root."""
    chunks = [(s, z, "used") for s, z in allocated.items()] + [(s, z, "free") for s, z in free_chunks(buddy)]
    chunks.sort()
    pos = 0
    for start, size, _ in chunks:
        assert start == pos, f"gap or overlap at block {pos}: next chunk starts at {start}"
        assert size & (size - 1) == 0, f"chunk size {size} is not a power of two"
        r_start, r_size = root_of(roots, start)
        assert start + size <= r_start + r_size, f"chunk {start}+{size} crosses its root {r_start}+{r_size}"
        assert (start - r_start) % size == 0, f"chunk {start}+{size} misaligned in root at {r_start}"
        pos = start + size
    assert pos == buddy.num_blocks
    assert buddy.num_free == sum(z for _, z in free_chunks(buddy))
    assert buddy.num_free == buddy.num_blocks - sum(allocated.values())


def test_next_pow2():
    assert [next_pow2(n) for n in (1, 2, 3, 4, 5, 9, 64, 65, 128)] == [1, 2, 4, 4, 8, 16, 64, 128, 128]


def test_pre_split_of_the_opt13b_pool():
    buddy = BuddyAllocator(983, 128)
    assert free_chunks(buddy) == greedy_roots(983, 128)
    sizes = [z for _, z in free_chunks(buddy)]
    assert sizes == [128] * 7 + [64, 16, 4, 2, 1]
    assert buddy.num_free == 983 and max(sizes) == 128


def test_allocation_takes_the_smallest_fit_and_splits_it():
    buddy = BuddyAllocator(12, 8)  # roots: 8 at 0, 4 at 8
    assert buddy.allocate(3) == 8  # the 4-root fits exactly; the 8-root stays whole
    assert buddy.allocate(1) == 0  # splits 8 -> 4 + 2 + 1 + 1
    assert free_chunks(buddy) == [(1, 1), (2, 2), (4, 4)]
    assert buddy.allocate(2) == 2
    buddy.free(0)
    buddy.free(2)
    assert free_chunks(buddy) == [(0, 8)]
    assert buddy.num_free == 8


def test_errors():
    buddy = BuddyAllocator(8, 8)
    with pytest.raises(RuntimeError):
        buddy.allocate(9)  # larger than any chunk
    start = buddy.allocate(8)
    with pytest.raises(RuntimeError):
        buddy.allocate(1)
    buddy.free(start)
    with pytest.raises(RuntimeError):
        buddy.free(start)  # double free


def test_never_merges_across_pre_split_roots():
    buddy = BuddyAllocator(12, 8)  # 8 + 4: freeing everything must not form a 16
    a, b = buddy.allocate(8), buddy.allocate(4)
    buddy.free(b)
    buddy.free(a)
    assert free_chunks(buddy) == [(0, 8), (8, 4)]


ops = st.lists(st.tuples(st.booleans(), st.integers(1, 80), st.integers(0, 10_000)), max_size=60)


@hyp(max_examples=150)
@given(num_blocks=st.integers(1, 300), max_chunk=st.sampled_from([1, 2, 4, 8, 16, 32, 64]), ops=ops)
def test_random_alloc_free_keeps_the_layout_and_merges_back(num_blocks, max_chunk, ops):
    buddy = BuddyAllocator(num_blocks, max_chunk)
    roots = greedy_roots(num_blocks, max_chunk)
    initial = free_chunks(buddy)
    assert initial == roots
    allocated: dict[int, int] = {}
    for is_alloc, size, pick in ops:
        if is_alloc or not allocated:
            size = min(size, 2 * max_chunk)
            chunk = next_pow2(size)
            fits = any(z >= chunk for _, z in free_chunks(buddy))
            assert buddy.can_allocate([size]) == fits
            if fits:
                start = buddy.allocate(size)
                assert start not in allocated
                allocated[start] = chunk
            else:
                with pytest.raises(RuntimeError):
                    buddy.allocate(size)
        else:
            start = sorted(allocated)[pick % len(allocated)]
            buddy.free(start)
            del allocated[start]
        check_layout(buddy, allocated, roots)
    for start in sorted(allocated, key=lambda s: (s * 7919) % 101):  # an arbitrary order
        buddy.free(start)
    assert buddy.num_free == num_blocks
    assert free_chunks(buddy) == initial, "freeing everything restores the pre-split layout"


@hyp(max_examples=200)
@given(num_blocks=st.integers(1, 64), max_chunk=st.sampled_from([2, 4, 8, 16]),
       setup=st.lists(st.tuples(st.integers(1, 16), st.booleans()), max_size=12),
       sizes=st.lists(st.integers(1, 20), min_size=1, max_size=8))
@example(num_blocks=8, max_chunk=8, setup=[], sizes=[1, 1])  # one chunk split for both
@example(num_blocks=12, max_chunk=8, setup=[(4, True)], sizes=[2, 4, 2])
def test_can_allocate_agrees_with_allocating_in_order(num_blocks, max_chunk, setup, sizes):
    def fragmented() -> BuddyAllocator:
        buddy = BuddyAllocator(num_blocks, max_chunk)
        for size, keep in setup:  # fragment the pool: allocate some, free every other one
            if buddy.can_allocate([size]):
                start = buddy.allocate(size)
                if not keep:
                    buddy.free(start)
        return buddy

    buddy = fragmented()
    layout_before = free_chunks(buddy)
    said = buddy.can_allocate(sizes)
    assert free_chunks(buddy) == layout_before, "asking must not change the allocator"
    trial = fragmented()  # the same pool again (a compiled allocator cannot be deep-copied)
    assert free_chunks(trial) == layout_before
    try:
        for size in sizes:
            trial.allocate(size)
        did = True
    except RuntimeError:
        did = False
    assert said == did, f"can_allocate({sizes}) said {said}, allocating them in order {'worked' if did else 'failed'}"
