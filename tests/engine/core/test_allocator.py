"""Both KV allocators answer the one interface (engine.core.allocator), each scheduler's `allocator`."""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.core.allocator import KVAllocator
from engine.core.block_manager import BlockManager
from engine.core.reservation import ReservationAllocator
from engine.core.sequence import SequenceCounter, make_group
from engine.core.system import PAPER_SYSTEMS
from tests.helpers.core_harness import Req, check_finished, drive, scheduler_for


def test_the_paged_pool_and_the_reservations_are_kv_allocators():
    assert isinstance(BlockManager(4, 8, 8), KVAllocator)
    assert isinstance(ReservationAllocator(8, 4, 16, "max"), KVAllocator)
    assert not isinstance(object(), KVAllocator)


def test_reservations_append_nothing_never_swap_and_fork_by_copying():
    pool = ReservationAllocator(16, 4, 16, "oracle")
    ids = SequenceCounter()
    parent, child = (make_group(i, 0.0, 6, 4, 1, ids) for i in range(2))
    pool.allocate(parent)
    pool.allocate(child)
    copies: list[tuple[int, int]] = []
    pool.append_slots(parent.seqs, copies)
    assert copies == [] and not pool.can_swap_out(parent) and not pool.can_swap_in(parent)
    with pytest.raises(RuntimeError, match="never swapped out"):
        pool.swap_out(parent)
    pool.fork(parent.seqs[0], child.seqs[0], copies)
    assert copies == list(zip(pool.block_table(parent.seqs[0]), pool.block_table(child.seqs[0])))


@pytest.mark.parametrize("name", ["vllm", "orca-oracle", "fastertransformer"])
def test_every_finished_sequence_gives_its_memory_back_to_its_schedulers_allocator(name):
    sched = scheduler_for(replace(PAPER_SYSTEMS[name], block_size=4), num_gpu_blocks=64)
    assert isinstance(sched.allocator, KVAllocator)
    reqs = [Req(0, 5, 3), Req(0, 7, 2, n=2), Req(1, 3, 4)]
    run = drive(sched, reqs)
    check_finished(run, reqs)
    assert sched.allocator.num_free_blocks == 64


def test_a_paged_fork_shares_and_asks_no_copy_now():
    """The paged pool's fork copies nothing at once (its shared last block is copied on the next append):
    vLLM's schedule() never takes fork copies, so one asked here would be lost."""
    bm = BlockManager(4, 8, 0, watermark=0.0)
    ids = SequenceCounter()
    parent, child = (make_group(i, 0.0, 6, 4, 1, ids) for i in range(2))
    bm.allocate(parent)
    bm.allocate(child)
    copies: list[tuple[int, int]] = []
    bm.fork(parent.seqs[0], child.seqs[0], copies)
    assert copies == [] and bm.block_table(child.seqs[0]) == bm.block_table(parent.seqs[0])
