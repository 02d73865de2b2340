"""The paged block manager: ref counts, copy-on-write, fork, free, swap (paper-era rules)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine.core.block_manager import BlockAllocator, BlockManager, shared_prefix
from engine.core.blocks import blocks_for
from engine.core.sequence import SeqStatus, Sequence, SequenceCounter, make_group
from tests.helpers.core_harness import append_one, check_block_manager, hyp

BS = 4


def blocks(n: int) -> int:
    return blocks_for(n, BS)


def fork(bm: BlockManager, parent: Sequence, child: Sequence) -> None:
    """Share every block of the parent with a new sequence (the schedulers never fork mid-run:
    a group's samples share the prompt from allocate(); this reaches sharing patterns beyond it)."""
    table = bm.block_tables[parent.seq_id]
    bm.block_tables[child.seq_id] = list(table)
    for block in table:
        bm.gpu.incref(block)


class BlockManagerMachine(RuleBasedStateMachine):
    """Random allocate / append / fork / free / swap sequences against a small pool."""

    def __init__(self):
        super().__init__()
        self.bm = BlockManager(BS, num_gpu_blocks=24, num_cpu_blocks=24, watermark=0.0)
        self.ids = SequenceCounter()
        self.groups = []
        self.seqs: dict[int, Sequence] = {}
        self.next_request = 0

    # --- helpers ---------------------------------------------------------------
    def _groups_with(self, status):
        return [g for g in self.groups if any(s.status is status for s in g.seqs)]

    def _running_seqs(self):
        return [s for g in self.groups for s in g.seqs if s.status is SeqStatus.RUNNING]

    def _status(self, seq_id):
        return self.seqs[seq_id].status

    # --- rules -----------------------------------------------------------------
    @rule(prompt=st.integers(1, 20), n=st.integers(1, 4))
    def allocate(self, prompt, n):
        group = make_group(self.next_request, float(self.next_request), prompt, 10_000, n, self.ids)
        self.next_request += 1
        can = self.bm.can_allocate(group)
        assert can == (self.bm.gpu.num_free - blocks(prompt) >= self.bm.watermark_blocks)
        if not can:
            return
        free_before = self.bm.gpu.num_free
        self.bm.allocate(group)
        assert self.bm.gpu.num_free == free_before - blocks(prompt), "the prompt is allocated once for all n"
        tables = [self.bm.block_tables[s.seq_id] for s in group.seqs]
        assert all(t == tables[0] for t in tables) and len(tables[0]) == blocks(prompt)
        assert all(self.bm.gpu.ref_counts[b] == n for b in tables[0])
        group.set_status(SeqStatus.RUNNING)
        self.groups.append(group)
        self.seqs.update({s.seq_id: s for s in group.seqs})

    @precondition(lambda self: any(s.status is SeqStatus.RUNNING for s in self.seqs.values()))
    @rule(data=st.data())
    def append(self, data):
        seq = data.draw(st.sampled_from(self._running_seqs()))
        if self.bm.gpu.num_free < 1:
            return
        table_before = list(self.bm.block_tables[seq.seq_id])
        last = table_before[-1]
        last_shared = self.bm.gpu.ref_counts[last] > 1
        seq.length += 1  # the token sampled last step is fed back: it needs a slot
        needs_new_block = blocks(seq.length) > len(table_before)
        free_before = self.bm.gpu.num_free
        copy = append_one(self.bm, seq)
        table = self.bm.block_tables[seq.seq_id]
        if needs_new_block:
            assert copy is None, "a fresh block needs no copy"
            assert table[:-1] == table_before and len(table) == len(table_before) + 1
            assert self.bm.gpu.num_free == free_before - 1
        elif last_shared:
            assert copy is not None and copy[0] == last and copy[1] == table[-1] != last
            assert table[:-1] == table_before[:-1]
            assert self.bm.gpu.num_free == free_before - 1
        else:
            assert copy is None, "copy-on-write only when the last block is shared"
            assert table == table_before and self.bm.gpu.num_free == free_before
        assert self.bm.gpu.ref_counts[table[-1]] == 1, "a sequence writes only into a block it owns alone"

    @precondition(lambda self: any(s.status is SeqStatus.RUNNING for s in self.seqs.values()))
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(self._running_seqs()))
        group = next(g for g in self.groups if parent in g.seqs)
        child = Sequence(self.ids(), parent.prompt_len, parent.output_len, parent.length, SeqStatus.RUNNING)
        free_before = self.bm.gpu.num_free
        refs_before = {b: self.bm.gpu.ref_counts[b] for b in self.bm.block_tables[parent.seq_id]}
        fork(self.bm, parent, child)
        group.seqs.append(child)
        self.seqs[child.seq_id] = child
        assert self.bm.gpu.num_free == free_before, "fork allocates nothing"
        assert self.bm.block_tables[child.seq_id] == self.bm.block_tables[parent.seq_id]
        for b, rc in refs_before.items():
            assert self.bm.gpu.ref_counts[b] == rc + 1

    @precondition(lambda self: any(s.status in (SeqStatus.RUNNING, SeqStatus.SWAPPED) for s in self.seqs.values()))
    @rule(data=st.data())
    def free_one(self, data):
        live = [s for s in self.seqs.values() if s.status in (SeqStatus.RUNNING, SeqStatus.SWAPPED)]
        seq = data.draw(st.sampled_from(live))
        pool = self.bm.cpu if seq.status is SeqStatus.SWAPPED else self.bm.gpu
        table = list(self.bm.block_tables[seq.seq_id])
        sole = {b for b in table if pool.ref_counts[b] == 1}
        free_before = pool.num_free
        self.bm.free(seq)  # freed while still SWAPPED/RUNNING: the manager picks the pool by status
        seq.status = SeqStatus.FINISHED
        assert seq.seq_id not in self.bm.block_tables
        assert pool.num_free == free_before + len(sole)
        self.bm.free(seq)  # a second free of a sequence without a table is a no-op

    @precondition(lambda self: any(s.status is SeqStatus.RUNNING for s in self.seqs.values()))
    @rule(data=st.data())
    def swap_out(self, data):
        group = data.draw(st.sampled_from(self._groups_with(SeqStatus.RUNNING)))
        unique = {b for s in group.live_seqs() for b in self.bm.block_tables[s.seq_id]}
        if not self.bm.can_swap_out(group):
            assert len(unique) > self.bm.cpu.num_free
            return
        refs = {b: self.bm.gpu.ref_counts[b] for b in unique}
        gpu_free, cpu_free = self.bm.gpu.num_free, self.bm.cpu.num_free
        before = {s.seq_id: list(self.bm.block_tables[s.seq_id]) for s in group.live_seqs()}
        mapping = self.bm.swap_out(group)
        group.set_status(SeqStatus.SWAPPED)
        self._check_move(mapping, before, unique, refs, self.bm.cpu)
        assert self.bm.gpu.num_free == gpu_free + len(unique)
        assert self.bm.cpu.num_free == cpu_free - len(unique)

    @precondition(lambda self: any(s.status is SeqStatus.SWAPPED for s in self.seqs.values()))
    @rule(data=st.data())
    def swap_in(self, data):
        group = data.draw(st.sampled_from(self._groups_with(SeqStatus.SWAPPED)))
        unique = {b for s in group.live_seqs() for b in self.bm.block_tables[s.seq_id]}
        can = self.bm.can_swap_in(group)
        assert can == (self.bm.gpu.num_free - len(unique) - len(group.live_seqs()) >= self.bm.watermark_blocks)
        if not can:
            return
        refs = {b: self.bm.cpu.ref_counts[b] for b in unique}
        before = {s.seq_id: list(self.bm.block_tables[s.seq_id]) for s in group.live_seqs()}
        cpu_free = self.bm.cpu.num_free
        mapping = self.bm.swap_in(group)
        group.set_status(SeqStatus.RUNNING)
        self._check_move(mapping, before, unique, refs, self.bm.gpu)
        assert self.bm.cpu.num_free == cpu_free + len(unique)

    def _check_move(self, mapping, before, unique, refs, dst):
        src_blocks = [src for src, _ in mapping]
        assert sorted(src_blocks) == sorted(unique), "every unique block moves exactly once"
        m = dict(mapping)
        assert len(set(m.values())) == len(m)
        for seq_id, old in before.items():
            assert self.bm.block_tables[seq_id] == [m[b] for b in old], "sharing survives the move"
        for src, dst_block in mapping:
            assert dst.ref_counts[dst_block] == refs[src]

    # --- invariants ------------------------------------------------------------
    @invariant()
    def ref_counts_match_tables(self):
        check_block_manager(self.bm, self._status)

    def teardown(self):
        for seq in list(self.seqs.values()):
            if seq.status is not SeqStatus.FINISHED:
                self.bm.free(seq)
                seq.status = SeqStatus.FINISHED
        assert not self.bm.block_tables
        assert self.bm.gpu.num_free == self.bm.gpu.num_blocks
        assert self.bm.cpu.num_free == self.bm.cpu.num_blocks
        assert all(rc == 0 for rc in self.bm.gpu.ref_counts + self.bm.cpu.ref_counts)


TestBlockManagerStateful = BlockManagerMachine.TestCase
TestBlockManagerStateful.settings = hyp(max_examples=60, stateful_step_count=30)


# --- deterministic cases ---------------------------------------------------------

def test_allocator_double_free_raises_and_out_of_blocks_raises():
    alloc = BlockAllocator(2)
    a = alloc.allocate()
    b = alloc.allocate()
    assert {a, b} == {0, 1} and alloc.num_free == 0
    with pytest.raises(RuntimeError, match="out of gpu blocks"):
        alloc.allocate()
    alloc.free(a)
    with pytest.raises(RuntimeError, match="double free"):
        alloc.free(a)


def test_parallel_samples_share_the_prompt_and_copy_on_write_the_partial_last_block():
    bm = BlockManager(4, 10, 0, watermark=0.0)
    group = make_group(0, 0.0, 6, 5, 3, SequenceCounter())  # 6 tokens: one full block + a half one
    bm.allocate(group)
    group.set_status(SeqStatus.RUNNING)
    assert bm.num_used_gpu_blocks == 2
    full, half = bm.block_tables[0]
    copies = []
    for seq in group.seqs:  # the first sampled token lands in the shared half block
        seq.length += 1
        copies.append(append_one(bm, seq))
    # the first two samples copy the shared block; the last one then owns it alone
    assert copies[0] is not None and copies[1] is not None and copies[2] is None
    assert all(src == half for src, _ in copies[:2])
    assert [bm.block_tables[s.seq_id][0] for s in group.seqs] == [full] * 3
    assert bm.gpu.ref_counts[full] == 3 and bm.gpu.ref_counts[half] == 1
    assert bm.num_used_gpu_blocks == 4


def test_prompt_ending_on_a_block_boundary_needs_no_copy():
    bm = BlockManager(4, 10, 0, watermark=0.0)
    group = make_group(0, 0.0, 8, 5, 2, SequenceCounter())
    bm.allocate(group)
    group.set_status(SeqStatus.RUNNING)
    for seq in group.seqs:
        seq.length += 1
        assert append_one(bm, seq) is None
    assert bm.num_used_gpu_blocks == 4  # 2 shared prompt blocks + one fresh block each


def test_watermark_blocks_admission():
    bm = BlockManager(16, 100, 0, watermark=0.01)
    assert bm.watermark_blocks == 1
    counter = SequenceCounter()
    assert bm.can_allocate(make_group(0, 0.0, 99 * 16, 1, 1, counter))
    assert not bm.can_allocate(make_group(1, 0.0, 99 * 16 + 1, 1, 1, counter))


def test_swap_round_trip_keeps_sharing_and_frees_the_source_pool():
    bm = BlockManager(4, 8, 8, watermark=0.0)
    group = make_group(0, 0.0, 6, 5, 2, SequenceCounter())
    bm.allocate(group)
    group.set_status(SeqStatus.RUNNING)
    for seq in group.seqs:
        seq.length += 1
        append_one(bm, seq)
    assert bm.can_swap_out(group)
    out = bm.swap_out(group)
    group.set_status(SeqStatus.SWAPPED)
    assert len(out) == 3 and bm.gpu.num_free == 8 and bm.cpu.num_free == 5
    shared_cpu = bm.block_tables[0][0]
    assert bm.block_tables[1][0] == shared_cpu and bm.cpu.ref_counts[shared_cpu] == 2
    assert bm.can_swap_in(group)  # 3 blocks + 2 sequences <= 8 free
    back = bm.swap_in(group)
    group.set_status(SeqStatus.RUNNING)
    assert len(back) == 3 and bm.cpu.num_free == 8 and bm.gpu.num_free == 5
    assert bm.block_tables[0][0] == bm.block_tables[1][0]


def test_can_swap_in_keeps_one_block_per_sequence_and_the_watermark():
    bm = BlockManager(4, 6, 8, watermark=0.0)
    group = make_group(0, 0.0, 16, 5, 2, SequenceCounter())  # 4 shared blocks
    bm.allocate(group)
    group.set_status(SeqStatus.RUNNING)
    bm.swap_out(group)
    group.set_status(SeqStatus.SWAPPED)
    assert bm.can_swap_in(group)  # 6 free - (4 + 2) = 0 >= 0
    bm.gpu.allocate()
    assert not bm.can_swap_in(group)  # 5 free - 6 < 0


@hyp(max_examples=200)
@given(shared=st.integers(0, 40), own=st.integers(0, 5), others=st.integers(0, 5))
def test_shared_prefix_finds_where_two_tables_part(shared, own, others):
    # two beams' tables after a fork: a common prefix, then blocks of their own (distinct numbers)
    table = list(range(shared)) + list(range(100, 100 + own))
    other = list(range(shared)) + list(range(200, 200 + others))
    assert shared_prefix(table, other) == shared_prefix(other, table) == shared
    assert shared_prefix(table, table) == len(table)
