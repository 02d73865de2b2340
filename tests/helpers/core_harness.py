"""Shared helpers for the engine.core tests: a step-clocked driver for any scheduler,
and the structural invariants every step must keep.

The clock is one second per iteration: what is under test here is the policy, not the
cost model. Requests arrive at whole steps.
"""
from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, settings

from engine.core.batch import Batch
from engine.core.block_allocator import CachingBlockAllocator
from engine.core.block_manager import BlockManager
from engine.core.factory import make_scheduler
from engine.core.scheduler.reservation_scheduler import ReservationScheduler
from engine.core.scheduler.vllm import VLLMScheduler
from engine.core.sequence import SeqStatus, SequenceCounter, SequenceGroup, make_group
from engine.core.system import CHUNKED_POLICIES, SystemSpec
from engine.specs.loader import load_model_spec

# deterministic hypothesis runs: same examples on every machine, no wall-clock deadline
HYPOTHESIS = settings(derandomize=True, deadline=None, database=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                             HealthCheck.filter_too_much])


def hyp(**overrides) -> settings:
    """The deterministic profile with a few overrides (max_examples, stateful_step_count)."""
    return settings(HYPOTHESIS, **overrides)


def tiny_model(max_seq_len: int = 64):
    return replace(load_model_spec("opt-tiny"), max_seq_len=max_seq_len)


@dataclass(frozen=True)
class Req:
    arrival: int  # step at which it is handed to the scheduler
    prompt: int
    output: int
    n: int = 1
    prefix: int = 0  # tokens of the run's one shared prefix at the start of the prompt
    keys: tuple[int, ...] = ()  # prefix caching: its full blocks' keys (SequenceGroup.block_keys)


@dataclass
class Run:
    groups: list[SequenceGroup]
    finished: list[SequenceGroup]
    batches: list[Batch]
    num_steps: int
    waiting_at_step: list[int] = field(default_factory=list)


class Checker:
    """Per-step hooks; `before` sees the scheduler just before schedule()."""

    def before(self, sched, step: int) -> None:  # pragma: no cover - default no-op
        pass

    def after(self, sched, batch: Batch, step: int) -> None:  # pragma: no cover
        pass


def drive(sched, reqs: list[Req], checkers: tuple[Checker, ...] = (), max_steps: int = 50_000,
          accept: Callable[[Batch], list[int]] | None = None) -> Run:
    """Feed requests at their arrival steps, run schedule/complete until all finish. accept: speculative
    decoding's outcome of each batch, the proposals accepted for each decode (None: none accepted)."""
    counter = SequenceCounter()
    pending = deque(sorted(enumerate(reqs), key=lambda item: (item[1].arrival, item[0])))
    groups, finished, batches, waiting = [], [], [], []
    step = 0
    while pending or sched.has_unfinished():
        assert step < max_steps, (f"no end after {max_steps} steps: {sched.num_waiting} waiting, "
                                  f"{len(sched.running)} running")
        while pending and pending[0][1].arrival <= step:
            rid, r = pending.popleft()
            group = make_group(rid, float(r.arrival), r.prompt, r.output, r.n, counter, r.prefix, block_keys=r.keys)
            sched.add_request(group)
            groups.append(group)
        for c in checkers:
            c.before(sched, step)
        batch = sched.schedule()
        waiting.append(sched.num_waiting)
        for c in checkers:
            c.after(sched, batch, step)
        batches.append(batch)
        accepted = accept(batch) if accept is not None and batch.decode_proposed else None
        finished.extend(sched.complete(batch, float(step + 1), None, accepted))
        step += 1
    return Run(groups, finished, batches, step, waiting)


def batch_seq_ids(batch: Batch) -> list[int]:
    ids = [sid for sample_ids in batch.prefill_sample_ids for sid in sample_ids]
    return ids + list(batch.decode_seq_ids)


def check_block_manager(bm: BlockManager, status_of) -> None:
    """Ref counts equal block-table entries per pool (plus the manager's own hold on a pinned shared
    prefix); free list and referenced blocks are disjoint; the shared-reference count is their excess."""
    for allocator, on_cpu in ((bm.gpu, False), (bm.cpu, True)):
        refs: Counter = Counter()
        for seq_id, table in bm.block_tables.items():
            if (status_of(seq_id) is SeqStatus.SWAPPED) == on_cpu:
                refs.update(table)
        if not on_cpu:
            refs.update(bm.pinned)
        free = allocator._free
        assert len(free) == len(set(free)), f"{allocator.name}: a block is twice in the free list"
        assert all(0 <= b < allocator.num_blocks for b in list(refs) + free)
        free_set = set(free)
        if isinstance(allocator, CachingBlockAllocator):  # a keyed block nobody holds waits in the evictor
            assert not free_set & set(allocator._evictable), "a block both free-listed and evictable"
            free_set |= set(allocator._evictable)
        for block in range(allocator.num_blocks):
            rc = allocator.ref_counts[block]
            assert rc >= 0, f"{allocator.name} block {block}: negative ref count {rc}"
            assert rc == refs[block], (
                f"{allocator.name} block {block}: ref_count {rc} but {refs[block]} block-table entries")
            assert (block in free_set) == (rc == 0), (
                f"{allocator.name} block {block}: ref_count {rc}, in free list: {block in free_set}")
        assert allocator.num_free == allocator.num_blocks - len(refs)
        assert allocator.num_shared_refs == sum(refs.values()) - len(refs), f"{allocator.name}: shared refs"
    check_sharing(bm, status_of)


def check_sharing(bm: BlockManager, status_of) -> None:
    """The saved and unshared block counts, kept incrementally, equal a recount over the GPU tables:
    without sharing each table entry would be a block; with it, each distinct block is one."""
    holders: Counter = Counter()
    for seq_id, table in bm.block_tables.items():
        if status_of(seq_id) is not SeqStatus.SWAPPED:
            holders.update(table)
    assert bm.num_unshared_blocks == sum(holders.values())
    assert bm.num_saved_blocks == sum(holders.values()) - len(holders)


def check_usage(sched, step: int) -> None:
    usage = sched.kv_usage()
    parts = (usage.token, usage.reserved, usage.internal, usage.external, usage.idle)
    assert all(p >= 0 for p in parts), f"step {step}: negative KV usage part {usage}"
    assert usage.total == sched.num_gpu_blocks * sched.block_size, f"step {step}: {usage} != pool"


def check_rows(sched, step: int) -> None:
    """vLLM keeps its running sequences as rows from step to step (engine.core.running_batch): they are the
    running groups' running sequences, in order, whatever joined, left or finished."""
    if isinstance(sched, VLLMScheduler):
        running = [seq for group in sched.running for seq in group.seqs if seq.status is SeqStatus.RUNNING]
        assert sched.rows.seqs == running, f"step {step}: the rows are not the running sequences in order"
        assert sched.rows.seq_ids == [seq.seq_id for seq in running], f"step {step}: a row's id is wrong"
        assert sched.rows.groups == [group for group in sched.running for seq in group.seqs
                                     if seq.status is SeqStatus.RUNNING], f"step {step}: a row's group is wrong"


class StepInvariants(Checker):
    """What every scheduler must keep at every step, whatever its policy."""

    def before(self, sched, step: int) -> None:  # i.e. right after the previous complete()
        check_usage(sched, step)
        check_rows(sched, step)
        if getattr(sched, "lookahead", 0):  # the rejected proposals' slots went back: each table holds its KV, no more
            for group in sched.running:
                for seq in group.running_seqs():
                    if group.request_id not in sched.prefill_progress and seq.length > seq.prompt_len:
                        table = sched.block_table(seq.seq_id)
                        assert len(table) == -(-(seq.length - 1) // sched.block_size), (
                            f"step {step}: seq {seq.seq_id} of {seq.length} tokens holds {len(table)} blocks")

    def after(self, sched, batch: Batch, step: int) -> None:
        system: SystemSpec = sched.system
        bs = sched.block_size
        ids = batch_seq_ids(batch)
        assert len(ids) == len(set(ids)), "a sequence appears twice in one batch"
        assert len(ids) <= system.max_num_seqs, (
            f"step {step}: {len(ids)} sequences in the batch > max_num_seqs {system.max_num_seqs}")
        if isinstance(sched, VLLMScheduler):  # the iteration's SchedulingBudget, never exceeded
            # (but by speculating decodes alone, which always run: a prompt joins only while their tokens leave room)
            tokens = batch.num_tokens + batch.num_proposed
            assert tokens <= sched.token_cap or not batch.prefill_seq_ids, f"step {step}: {tokens} tokens over the cap"
            lens = batch.prefill_lens
            if sched.rules.prompt_only and lens:  # a prompt-only iteration, padded to its longest prompt
                padded = len(lens) * max(lens)
                assert not batch.decode_seq_ids, f"step {step}: prompts and decodes in one iteration"
                assert padded <= sched.token_cap and padded - sum(lens) <= sched.max_paddings, (
                    f"step {step}: {len(lens)} prompts padded to {max(lens)} exceed the budget")
        assert len(batch.prefill_seq_ids) == len(batch.prefill_lens) == len(batch.prefill_sample_ids)
        assert len(batch.decode_seq_ids) == len(batch.decode_context_lens)

        check_usage(sched, step)
        check_rows(sched, step)

        # every written slot exists in the sequence's table and no two writes hit one slot
        written: set[tuple[int, int]] = set()

        def write(table: list[int], pos: int, seq_id: int) -> None:
            assert pos // bs < len(table), f"seq {seq_id}: no block for position {pos} (table {table})"
            block = table[pos // bs]
            assert 0 <= block < sched.num_gpu_blocks
            slot = (block, pos % bs)
            assert slot not in written, f"step {step}: two sequences write KV slot {slot}"
            written.add(slot)

        cached_lens = batch.prefill_cached_lens or [0] * len(batch.prefill_seq_ids)
        chunked = system.prefill_policy in CHUNKED_POLICIES  # earlier chunks are cached too: ChunkedPrefill checks them
        for seq_id, length, cached, samples in zip(batch.prefill_seq_ids, batch.prefill_lens, cached_lens,
                                                   batch.prefill_sample_ids):
            seq = sched.sequence(seq_id)
            if samples:
                assert cached + length == seq.length, "a prefill that samples covers the whole current sequence"
            else:
                assert chunked and cached + length < seq.length, "only a prompt's earlier chunks sample nothing"
            table = sched.block_table(seq_id)
            if cached and not chunked:  # the cached tokens are blocks found by their keys, which nobody writes
                keys, blocks = sched.allocator._seq_keys[seq_id], sched.allocator
                assert cached % bs == 0 and [blocks.gpu.key_of_block[b] for b in table[:cached // bs]] == \
                    list(keys[:cached // bs])
                if not blocks.prefix_caching:  # only a shared prefix is keyed, and it is pinned
                    assert table[:cached // bs] == blocks.pinned[:cached // bs]
            for pos in range(cached, cached + length):
                write(table, pos, seq_id)
        proposed = batch.decode_proposed or [0] * len(batch.decode_seq_ids)
        assert len(proposed) == len(batch.decode_seq_ids)
        for seq_id, ctx, k in zip(batch.decode_seq_ids, batch.decode_context_lens, proposed):
            seq = sched.sequence(seq_id)
            assert seq.status is SeqStatus.RUNNING
            assert ctx == seq.length
            assert 0 <= k <= max(seq.final_len - seq.length - 1, 0), f"seq {seq_id}: {k} proposals it cannot use"
            for pos in range(ctx - 1, ctx + k):  # its next token, and a lookahead slot per proposal
                write(sched.block_table(seq_id), pos, seq_id)

        if isinstance(sched, VLLMScheduler):
            check_block_manager(sched.allocator, lambda sid: sched.sequence(sid).status)
        if isinstance(sched, ReservationScheduler):
            owner: dict[int, int] = {}
            for seq_id, res in sched.allocator.reservations.items():
                for block in range(res.start, res.start + res.chunk_blocks):
                    assert block not in owner, f"blocks {block} reserved by seqs {owner.get(block)} and {seq_id}"
                    owner[block] = seq_id
                table = sched.block_table(seq_id)
                assert table == list(range(res.start, res.start + len(table)))
                assert len(table) <= res.chunk_blocks


class ChunkedPrefill(Checker):
    """vLLM's chunked prefill (engine/core/scheduler/vllm.py), every step: no iteration holds more
    than the budget; every running sequence not part way through its prompt decodes (decodes go first);
    each chunk starts exactly where the prompt's cache ends (its earlier chunks, or a cached prefix); and a
    prompt's last chunk leaves exactly its tokens in the cache, in exactly their blocks."""

    def __init__(self) -> None:
        self.progress: dict[int, int] = {}  # before schedule(): request id -> prompt tokens in the cache
        self.chunks = 0  # prefills that sampled nothing: the runs really chunked

    def before(self, sched, step: int) -> None:
        self.progress = dict(sched.prefill_progress)

    def after(self, sched, batch: Batch, step: int) -> None:
        assert batch.num_tokens <= sched.token_cap, f"step {step}: {batch.num_tokens} tokens over the budget"
        group_of = {s.seq_id: g for g in sched.groups_in_system() for s in g.seqs}
        running = {s.seq_id for g in sched.running if g.request_id not in sched.prefill_progress
                   for s in g.seqs if s.status is SeqStatus.RUNNING}
        assert set(batch.decode_seq_ids) == running, f"step {step}: a decoding sequence was left out"
        for seq_id, length, cached, samples in zip(batch.prefill_seq_ids, batch.prefill_lens,
                                                   batch.prefill_cached_lens, batch.prefill_sample_ids):
            group = group_of[seq_id]
            expected = self.progress.get(group.request_id, group.num_cached_tokens)
            assert cached == expected, f"step {step}: seq {seq_id}'s chunk starts at {cached}, its cache ends at " \
                                       f"{expected}"
            if not samples:
                self.chunks += 1
                continue
            seq = sched.sequence(seq_id)
            assert cached + length == seq.length
            assert len(sched.block_table(seq_id)) == -(-seq.length // sched.block_size), "exactly its blocks"


def check_finished(run: Run, reqs: list[Req]) -> None:
    assert len(run.finished) == len(reqs), "every request finishes, exactly once"
    assert len({id(g) for g in run.finished}) == len(reqs)
    for group in run.groups:
        req = reqs[group.request_id]
        assert group.finish_s is not None and group.first_token_s is not None
        assert group.arrival_s < group.first_token_s <= group.finish_s
        assert len(group.seqs) == req.n
        for seq in group.seqs:
            assert seq.status is SeqStatus.FINISHED
            assert seq.num_generated == req.output, (
                f"request {group.request_id}: generated {seq.num_generated}, wanted {req.output}")


def scheduler_for(system: SystemSpec, num_gpu_blocks: int, num_cpu_blocks: int = 0, max_seq_len: int = 64):
    return make_scheduler(system, tiny_model(max_seq_len), num_gpu_blocks, num_cpu_blocks)


def seeded_requests(seed: int, count: int, max_arrival: int, max_prompt: int, max_output: int,
                    max_n: int = 1) -> list[Req]:
    """A reproducible random workload (numpy Generator with a fixed seed)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [Req(int(rng.integers(0, max_arrival + 1)), int(rng.integers(1, max_prompt + 1)),
                int(rng.integers(1, max_output + 1)), int(rng.integers(1, max_n + 1)))
            for _ in range(count)]


def append_one(bm: BlockManager, seq) -> tuple[int, int] | None:
    """BlockManager.append_slots for one sequence: the (src, dst) copy it asked for, if its last block was shared."""
    copies: list[tuple[int, int]] = []
    bm.append_slots((seq,), copies)
    return copies[0] if copies else None


def check_prefix_cache(sched) -> None:
    """The prefix cache's bookkeeping: keys and blocks one to one; a keyed block nobody holds is in the
    evictor, and only such a block; the keyed blocks in use counted; each running group's cache_blocks
    leading blocks keyed by its own keys."""
    bm: BlockManager = sched.allocator
    cache = bm.gpu
    assert {b: k for k, b in cache.block_of_key.items()} == cache.key_of_block, "keys and blocks one to one"
    assert set(cache.depth_of_block) == set(cache.key_of_block)
    assert not set(cache._free) & set(cache.key_of_block), "a keyed block on the free list"
    assert set(cache._evictable) == {b for b in cache.key_of_block if cache.ref_counts[b] == 0}
    assert cache.num_in_use == sum(1 for b in cache.key_of_block if cache.ref_counts[b] > 0)
    live = [e for e in cache._heap if cache._evictable.get(e[3]) == e[2]]
    assert len(live) == len(cache._evictable), "every evictable block has one live evictor entry"
    for group in sched.running:
        for seq in group.live_seqs():
            table, keys = bm.block_tables[seq.seq_id], bm._seq_keys.get(seq.seq_id, ())
            for i in range(group.cache_blocks):
                assert cache.key_of_block.get(table[i]) == keys[i], f"seq {seq.seq_id}: block {i} not its key's"


class KeyedOnceComputed(Checker):
    """Chunked prefill with prefix caching, every step: a prompt part way through its prefill has keyed
    only blocks its chunks computed (this iteration's chunk included), so nobody hits a block a later chunk
    has yet to fill."""

    def after(self, sched, batch: Batch, step: int) -> None:
        stop_of = {seq_id: cached + length for seq_id, cached, length
                   in zip(batch.prefill_seq_ids, batch.prefill_cached_lens, batch.prefill_lens)}
        keyed, bs = sched.allocator.gpu.key_of_block, sched.block_size
        for group in sched.running:
            done = sched.prefill_progress.get(group.request_id)
            if done is None:
                continue
            seq = group.live_seqs()[0]
            computed = stop_of.get(seq.seq_id, done)
            for i, block in enumerate(sched.allocator.block_tables[seq.seq_id]):
                if block in keyed:
                    assert (i + 1) * bs <= computed, (
                        f"step {step}: request {group.request_id}'s block {i} keyed with {computed} tokens computed")


def distinct_token_slots(sched) -> int:
    """Slots holding a token's K/V, recounted: every distinct GPU block of the running sequences, filled
    as far as its fullest holder fills it (right after schedule(), every token has its slot)."""
    fill: dict[int, int] = {}
    bs = sched.block_size
    for group in sched.running:
        for seq in group.live_seqs():
            for i, block in enumerate(sched.allocator.block_tables[seq.seq_id]):
                fill[block] = max(fill.get(block, 0), min(bs, seq.length - i * bs))
    return sum(fill.values())


class PrefixCacheInvariants(Checker):
    """check_prefix_cache every step; with `exact_tokens` (no group of several samples: their copies on
    write hold a prompt token twice, which the paper's usage counts once) the usage's token slots equal
    the recount."""

    def __init__(self, exact_tokens: bool = False):
        self.exact_tokens = exact_tokens

    def after(self, sched, batch: Batch, step: int) -> None:
        check_prefix_cache(sched)
        if self.exact_tokens:
            assert sched.kv_usage().token == distinct_token_slots(sched), f"step {step}: token slots"
