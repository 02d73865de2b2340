"""vLLM's paper-era scheduler: paged blocks on demand, latest-arrived preempted first,
recompute for single sequences, swap for groups (preemption: auto; recompute and swap force
one mode), swapped groups block admissions."""
from __future__ import annotations

from engine.core.blocks import blocks_for
from engine.core.scheduler.order import FirstComeFirstServed, Order
from engine.core.scheduler.preemption import PreemptionMode
from engine.core.scheduler.vllm import VLLMScheduler
from engine.core.sequence import SequenceCounter, make_group
from engine.core.system import SystemSpec
from tests.helpers.core_harness import (
    Checker,
    Req,
    StepInvariants,
    check_finished,
    drive,
    scheduler_for,
    seeded_requests,
)
from tests.helpers.vllm_policy import VLLMPolicy, fcfs_key


def vllm(block_size=4, watermark=0.0, cap=None, max_num_seqs=256, preemption="auto") -> SystemSpec:
    return SystemSpec("test-vllm", "vllm", block_size=block_size, max_num_batched_tokens=cap,
                      max_num_seqs=max_num_seqs, watermark=watermark, preemption=preemption)


CONFIGS = [  # (seed, block_size, max_n, cap, max_num_seqs)
    (seed, (4, 8, 16)[seed % 3], 3, (None, 64, 100)[seed % 3], (5, 8, 256)[seed % 3]) for seed in range(12)
]


def test_seeded_workloads_under_memory_pressure():
    totals = dict(recomputed=0, swapped_out=0, blocked=0, swapped_in=0)
    for seed, bs, max_n, cap, max_seqs in CONFIGS:
        reqs = seeded_requests(seed, 30, 10, 24, 24, max_n=max_n)
        pool = max_n * blocks_for(48, bs) + max_n + seed % 5  # the largest request fits an empty pool
        sched = scheduler_for(vllm(bs, cap=cap, max_num_seqs=max_seqs), pool, num_cpu_blocks=1000)
        policy = VLLMPolicy()
        run = drive(sched, reqs, (StepInvariants(), policy))
        check_finished(run, reqs)
        assert sched.allocator.gpu.num_free == pool and sched.allocator.cpu.num_free == 1000
        totals["recomputed"] += policy.recomputed
        totals["swapped_out"] += policy.swapped_out
        totals["blocked"] += policy.blocked_by_swapped
        totals["swapped_in"] += sched.num_swapped_in_blocks
        assert sched.num_swapped_in_blocks == sched.num_swapped_out_blocks
    # the workloads really exercise both preemption modes, or this test proves nothing
    assert all(v > 0 for v in totals.values()), totals


def test_single_sample_waste_is_under_a_block_per_sequence():
    for seed in range(4):
        reqs = seeded_requests(100 + seed, 25, 8, 30, 30)
        sched = scheduler_for(vllm(8), 20, 0)
        run = drive(sched, reqs, (StepInvariants(), VLLMPolicy(single_sample_only=True)))
        check_finished(run, reqs)


def test_latest_arrival_is_preempted_first_and_recomputed():
    # A arrives first and is never touched; D, the latest, goes first, then C, then B
    reqs = [Req(0, 8, 20), Req(1, 4, 20), Req(2, 4, 20), Req(3, 4, 4)]
    sched = scheduler_for(vllm(4), 10, 0)
    order = []

    class Record(Checker):
        def before(self, s, step):
            self.counts = {g.request_id: g.num_preemptions for g in s.running}

        def after(self, s, batch, step):
            order.extend(rid for g in s.waiting for rid in [g.request_id]
                         if rid in self.counts and g.num_preemptions > self.counts[rid])

    run = drive(sched, reqs, (StepInvariants(), VLLMPolicy(), Record()))
    check_finished(run, reqs)
    a, b, c, d = run.groups
    assert a.num_preemptions == 0 and order[:3] == [3, 2, 1]
    assert sched.num_swapped_out_blocks == 0  # single-sequence groups are recomputed, never swapped
    assert a.finish_s == 20.0  # the oldest request runs undisturbed, one token per step


class LatestFirst(Order):
    """An order of another scheduler: the latest arrival is the most urgent."""

    def key(self, group):
        return (-group.arrival_s, -group.request_id)


def test_another_order_keeps_the_running_in_it_and_preempts_its_last():
    # the same workload as above, served latest first: now A, the last in that order, is preempted first
    reqs = [Req(0, 8, 20), Req(1, 4, 20), Req(2, 4, 20), Req(3, 4, 4)]
    system = vllm(4)
    sched = VLLMScheduler(system, 64, 10, 0, order=LatestFirst())
    preempted = []

    class Record(Checker):
        def before(self, s, step):
            self.counts = {g.request_id: g.num_preemptions for g in s.running}

        def after(self, s, batch, step):
            assert [g.request_id for g in s.running] == sorted((g.request_id for g in s.running), reverse=True)
            preempted.extend(g.request_id for g in s.waiting
                             if g.request_id in self.counts and g.num_preemptions > self.counts[g.request_id])

    run = drive(sched, reqs, (StepInvariants(), Record()))
    check_finished(run, reqs)
    assert preempted and preempted[0] == 0
    assert isinstance(scheduler_for(system, 10, 0).order, FirstComeFirstServed)  # the default


def test_recompute_prefills_prompt_plus_generated_tokens():
    reqs = [Req(0, 8, 20), Req(1, 4, 20), Req(2, 4, 20), Req(3, 4, 4)]
    sched = scheduler_for(vllm(4), 10, 0)
    run = drive(sched, reqs)
    prefills = {}
    for batch in run.batches:
        for seq_id, length in zip(batch.prefill_seq_ids, batch.prefill_lens):
            prefills.setdefault(seq_id, []).append(length)
    d_seq = run.groups[3].seqs[0].seq_id
    assert prefills[d_seq][0] == 4 and len(prefills[d_seq]) == 1 + run.groups[3].num_preemptions
    assert all(later > 4 for later in prefills[d_seq][1:]), "a recomputed prefill covers generated tokens too"
    check_finished(run, reqs)


def test_multi_sequence_groups_are_swapped_and_block_admissions():
    reqs = [Req(0, 8, 20, 1), Req(1, 4, 20, 2), Req(2, 4, 20, 2), Req(3, 4, 4, 1)]
    sched = scheduler_for(vllm(4), 14, 64)
    policy = VLLMPolicy()
    run = drive(sched, reqs, (StepInvariants(), policy))
    check_finished(run, reqs)
    assert policy.swapped_out >= 2 and policy.blocked_by_swapped >= 1
    assert sched.num_swapped_out_blocks > 0
    assert sched.num_swapped_in_blocks == sched.num_swapped_out_blocks
    swap_steps = [b for b in run.batches if b.blocks_to_swap_out or b.blocks_to_swap_in]
    assert swap_steps and all(b.num_swap_blocks == len(b.blocks_to_swap_in) + len(b.blocks_to_swap_out)
                              for b in swap_steps)


def test_preemption_mode_follows_the_system():
    counter = SequenceCounter()
    single, pair = make_group(0, 0.0, 4, 4, 1, counter), make_group(1, 0.0, 4, 4, 2, counter)
    modes = {mode: scheduler_for(vllm(preemption=mode), 10, 10) for mode in ("auto", "recompute", "swap")}
    assert modes["auto"].preemption_mode(single) is PreemptionMode.RECOMPUTE
    assert modes["auto"].preemption_mode(pair) is PreemptionMode.SWAP
    for group in (single, pair):
        assert modes["recompute"].preemption_mode(group) is PreemptionMode.RECOMPUTE
        assert modes["swap"].preemption_mode(group) is PreemptionMode.SWAP
    # a forced swap of single sequences goes through the CPU, never back to waiting
    reqs = [Req(0, 8, 20), Req(1, 4, 20), Req(2, 4, 20)]
    sched = scheduler_for(vllm(4, preemption="swap"), 10, 64)
    run = drive(sched, reqs, (StepInvariants(),))
    check_finished(run, reqs)
    assert sched.num_preemptions > 0 and sched.num_swapped_out_blocks > 0


def test_token_cap_and_max_num_seqs_limit_admission():
    sched = scheduler_for(vllm(16, cap=64), 200, 0, max_seq_len=2048)
    counter = SequenceCounter()
    for rid, prompt in enumerate((34, 30, 63)):
        sched.add_request(make_group(rid, float(rid), prompt, 2, 1, counter))
    batch = sched.schedule()
    assert batch.prefill_lens == [34, 30] and batch.num_tokens == 64  # exactly the cap
    sched.complete(batch, 1.0)
    batch = sched.schedule()
    assert batch.num_tokens == 2 and not batch.prefill_lens  # 2 decodes + 63 > 64
    assert sched.complete(batch, 2.0) and not sched.running
    batch = sched.schedule()
    assert batch.prefill_lens == [63]

    sched = scheduler_for(vllm(16, max_num_seqs=3), 200, 0, max_seq_len=2048)
    for rid in range(3):
        sched.add_request(make_group(rid, float(rid), 10, 10, 2, counter))
    batch = sched.schedule()
    assert len(batch.prefill_seq_ids) == 1 and batch.prefill_sample_ids[0].__len__() == 2


def test_admission_respects_the_watermark():
    counter = SequenceCounter()
    for second_prompt, admitted in ((8 * 16, True), (8 * 16 + 1, False)):
        sched = scheduler_for(vllm(16, watermark=0.1), 20, 0, max_seq_len=2048)  # 2 watermark blocks
        sched.add_request(make_group(0, 0.0, 10 * 16, 5, 1, counter))  # 10 of 20 blocks
        sched.add_request(make_group(1, 0.0, second_prompt, 5, 1, counter))
        batch = sched.schedule()
        # 10 free - 8 = 2 >= 2 is admitted; 10 free - 9 = 1 < 2 waits
        assert len(batch.prefill_lens) == (2 if admitted else 1)
        assert sched.num_waiting == (0 if admitted else 1)


def test_parallel_samples_share_the_prompt_in_memory_and_in_the_usage_breakdown():
    sched = scheduler_for(vllm(16), 20, 0, max_seq_len=2048)
    group = make_group(0, 0.0, 40, 10, 3, SequenceCounter())
    sched.add_request(group)
    batch = sched.schedule()
    assert batch.prefill_lens == [40] and batch.prefill_sample_ids == [tuple(s.seq_id for s in group.seqs)]
    usage = sched.kv_usage()
    assert sched.allocator.num_used_gpu_blocks == 3  # the prompt's 3 blocks, once for the 3 samples
    assert (usage.token, usage.internal, usage.idle) == (40, 8, 17 * 16)
    sched.complete(batch, 1.0)
    batch = sched.schedule()
    assert len(batch.blocks_to_copy) == 2  # two samples copy the shared, half-full last block
    usage = sched.kv_usage()
    assert sched.allocator.num_used_gpu_blocks == 5
    assert (usage.token, usage.internal) == (40 + 3, 5 * 16 - 43)


# --- bugs found ------------------------------------------------------------------

class SwapInFCFS(Checker):
    """Paper-era step 2: swap groups back in FCFS order, stopping at the first one that
    was preempted this step (so a later arrival never takes an earlier one's memory)."""

    def before(self, sched, step):
        self.swapped = list(sched.swapped)
        self.running = list(sched.running)

    def after(self, sched, batch, step):
        preempted_now = [g for g in self.running if g in sched.swapped]
        queue = sorted(self.swapped + preempted_now, key=fcfs_key)
        swapped_in = [g for g in self.swapped if g not in sched.swapped]
        ids = lambda groups: [g.request_id for g in groups]  # noqa: E731
        assert ids(swapped_in) == ids(queue[:len(swapped_in)]), (
            f"step {step}: swapped in {[g.request_id for g in swapped_in]} ahead of "
            f"{[g.request_id for g in queue[:len(swapped_in)] if g not in swapped_in]} (arrived earlier)")


def test_swapped_groups_come_back_in_arrival_order():
    # B (n=2) is swapped out to let A grow; C (n=2, later) must not be swapped in in its place
    reqs = [Req(0, 8, 20, 1), Req(1, 4, 20, 2), Req(2, 4, 20, 2), Req(3, 4, 4, 1)]
    sched = scheduler_for(vllm(4), 14, 64)
    run = drive(sched, reqs, (StepInvariants(), SwapInFCFS()))
    check_finished(run, reqs)


def test_forced_recompute_of_a_group_recomputes_each_sample_own_tokens():
    # Once, preemption: recompute re-admitted a preempted n=2 group as ONE shared table of
    # sample 0's length and a single prefill of sample 0 "for" both samples: sample 1's
    # generated tokens were silently replaced by sample 0's. Now every sample re-prefills
    # its own history.
    reqs = [Req(0, 8, 20, 1), Req(1, 4, 20, 2), Req(2, 4, 20, 2)]
    sched = scheduler_for(vllm(4, preemption="recompute"), 14, 64)
    run = drive(sched, reqs, (StepInvariants(), VLLMPolicy()))
    check_finished(run, reqs)
    groups = [g for g in run.groups if g.num_seqs > 1]
    assert sum(g.num_preemptions for g in groups) > 0, "the scenario must preempt a multi-sequence group"
    for group in groups:
        live = {s.seq_id for s in group.seqs}
        prefills = [b for b in run.batches if live & set(b.prefill_seq_ids)]
        for batch in prefills[1:]:  # re-admissions after a recompute
            covered = {sid for sid in batch.prefill_seq_ids if sid in live}
            assert covered == live, (f"request {group.request_id}: re-prefilled only {sorted(covered)} "
                                     f"for samples {sorted(live)}")


# --- preemption: auto, recompute, swap ----------------------------------------------

def run_mode(preemption, seed):
    reqs = seeded_requests(200 + seed, 30, 10, 24, 24, max_n=3)
    pool = 3 * blocks_for(48, 4) + 3 + seed % 4  # tight: the largest request fits an empty pool
    sched = scheduler_for(vllm(4, preemption=preemption), pool, num_cpu_blocks=1000)
    policy = VLLMPolicy()
    run = drive(sched, reqs, (StepInvariants(), policy))  # VLLMPolicy checks recomputes() per group
    check_finished(run, reqs)
    return sched, policy, run


def test_auto_and_recompute_differ_on_parallel_samples():
    """auto swaps a preempted group of several samples (vLLM's rule), recompute re-prefills it,
    swap swaps even single sequences; on an n > 1 workload the three schedules differ."""
    for seed in range(4):
        runs = {mode: run_mode(mode, seed) for mode in ("auto", "recompute", "swap")}
        auto, recompute, swap = (runs[m][0] for m in ("auto", "recompute", "swap"))
        auto_policy, recompute_policy, swap_policy = (runs[m][1] for m in ("auto", "recompute", "swap"))
        # auto: single sequences recomputed, groups swapped
        assert auto_policy.recomputed > 0 and auto_policy.swapped_out > 0 and auto_policy.recomputed_groups == 0
        # recompute: nothing ever goes to the CPU, groups of several samples are recomputed too
        assert recompute_policy.swapped_out == 0 and recompute.num_swapped_out_blocks == 0
        assert recompute_policy.recomputed_groups > 0
        # swap: nothing is recomputed
        assert swap_policy.recomputed == 0 and swap_policy.swapped_out > 0
        # the same trace, three different schedules
        shapes = {m: [(b.prefill_lens, b.decode_context_lens, b.num_swap_blocks) for b in runs[m][2].batches]
                  for m in runs}
        assert shapes["auto"] != shapes["recompute"] and shapes["auto"] != shapes["swap"]


def test_a_group_recomputed_apart_re_prefills_each_sample_in_its_own_blocks():
    reqs = [Req(0, 8, 20, 1), Req(1, 4, 20, 2), Req(2, 4, 20, 2)]
    sched = scheduler_for(vllm(4, preemption="recompute"), 14, 64)

    class ReAdmission(Checker):
        seen = 0

        def after(self, sched, batch, step):
            for group in sched.running:
                ids = [s.seq_id for s in group.live_seqs()]
                if group.shares_prompt or not set(ids) & set(batch.prefill_seq_ids):
                    continue
                self.seen += 1
                lengths = [sched.sequence(i).length for i in ids]
                entries = [(sid, n, samples) for sid, n, samples
                           in zip(batch.prefill_seq_ids, batch.prefill_lens, batch.prefill_sample_ids) if sid in ids]
                assert entries == [(sid, n, (sid,)) for sid, n in zip(ids, lengths)], "one prefill per sample"
                tables = [sched.block_table(i) for i in ids]
                assert not set(tables[0]) & set(tables[1]), "no block shared between the samples"
                assert [len(t) for t in tables] == [blocks_for(n, 4) for n in lengths]

    check = ReAdmission()
    run = drive(sched, reqs, (StepInvariants(), check))
    check_finished(run, reqs)
    assert check.seen > 0, "the scenario must re-admit a group recomputed apart"


def test_every_prefill_policy_has_its_row_of_rules_and_the_rows_differ_where_vllm_did():
    from engine.core.scheduler.vllm import PREFILL_RULES
    from engine.core.system import PREFILL_POLICIES

    assert set(PREFILL_RULES) == set(PREFILL_POLICIES)
    for policy, rules in PREFILL_RULES.items():
        assert rules.prompt_only == (policy == "separate") and rules.chunked == (policy in ("chunked", "v1"))
        assert rules.prompts_while_swapped == rules.chunked  # v0.4 admitted beside swapped-out groups
        # v0.1 swapped in after a recomputation; v0.2+ only after a step that preempted nobody
        assert rules.any_preemption_holds_swap_in == (policy != "mixed")
        assert rules.ignores_unservable == (policy != "mixed")  # v0.2+'s ignored_seq_groups
        # V1's allocate_slots, running list and `if not preempted_reqs`; every earlier one the paper-era rules
        v1 = policy == "v1"
        assert (rules.appends_as_needed, rules.admission_order, rules.admits_after_preemption) == (v1, v1, not v1)
