"""vLLM's own scheduler tests of its released v0.2.x-v0.3.x era (tests/core/test_scheduler.py there), rewritten
for servesim's control plane, under prefill_policy=separate: the prompt-only step, the padded token budget,
max_num_seqs, preemption then abort, and the too-long request that is ignored when it is scheduled. Then
the same rules on random workloads, every step (hypothesis), and abort and ignore through ServingCore."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.core.batch import Batch
from engine.core.scheduler.vllm import VLLMScheduler
from engine.core.sequence import SeqStatus, SequenceCounter, SequenceGroup, make_group
from engine.core.serving import Request, ServingCore
from engine.core.system import SystemSpec
from engine.errors import SpecError
from tests.helpers.core_harness import Checker, Req, StepInvariants, check_finished, drive, hyp, scheduler_for


def separate(max_num_batched_tokens: int = 64, max_num_seqs: int = 256, max_paddings: int = 256,
             block_size: int = 4) -> SystemSpec:
    return SystemSpec("vLLM v0.2", "vllm", block_size=block_size, prefill_policy="separate", watermark=0.01,
                      max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                      max_paddings=max_paddings)


class Fixture:
    """A scheduler and its requests: request i is sequence i (one sample each, one counter)."""

    def __init__(self, system: SystemSpec, num_gpu_blocks: int, num_cpu_blocks: int = 8, max_seq_len: int = 16):
        self.sched = scheduler_for(system, num_gpu_blocks, num_cpu_blocks, max_seq_len)
        assert isinstance(self.sched, VLLMScheduler) and self.sched.rules.prompt_only
        self.counter = SequenceCounter()
        self.groups: list[SequenceGroup] = []
        self.step = 0

    def add(self, prompt: int, output: int = 4) -> SequenceGroup:
        group = make_group(len(self.groups), 0.0, prompt, output, 1, self.counter)
        self.groups.append(group)
        self.sched.add_request(group)
        return group

    def schedule(self) -> Batch:
        """One step, scheduled and completed."""
        batch = self.sched.schedule()
        self.step += 1
        self.sched.complete(batch, float(self.step))
        return batch


def ran(batch: Batch) -> set[int]:
    return set(batch.prefill_seq_ids) | set(batch.decode_seq_ids)


def test_add_then_abort_leaves_nothing_unfinished():  # vLLM: test_scheduler_add_seq_group, _abort_seq_group
    fx = Fixture(separate(), 8)
    for _ in range(4):
        fx.add(4)
    assert fx.sched.num_waiting == 4 and fx.sched.has_unfinished()
    assert [fx.sched.abort(i) for i in range(4)] == fx.groups
    assert not fx.sched.has_unfinished() and fx.sched.abort(0) is None


def test_a_prompt_run_then_a_decode_run():  # vLLM: test_scheduler_schedule_simple
    fx = Fixture(separate(max_num_seqs=4), 8)
    for _ in range(4):
        fx.add(4)
    prompts = fx.schedule()
    assert ran(prompts) == {0, 1, 2, 3} and prompts.num_prefill_tokens == 16 and not prompts.decode_seq_ids
    assert not (prompts.blocks_to_copy or prompts.blocks_to_swap_in or prompts.blocks_to_swap_out)
    decodes = fx.schedule()
    assert ran(decodes) == {0, 1, 2, 3} and decodes.num_tokens == 4 and not decodes.prefill_seq_ids


def test_a_waiting_prompt_runs_alone_before_the_decodes():  # servesim's mixed step decodes beside it
    fx = Fixture(separate(), 8)
    fx.add(4)
    fx.schedule()
    fx.add(4)
    prompt_only = fx.schedule()
    assert prompt_only.prefill_seq_ids == [1] and not prompt_only.decode_seq_ids
    assert fx.schedule().decode_seq_ids == [0, 1]


def test_preempt_then_abort():  # vLLM: test_scheduler_schedule_preempt_abort
    fx = Fixture(separate(max_num_seqs=2), 2, num_cpu_blocks=2)  # a block of 4 tokens for each prompt
    a, b = fx.add(4), fx.add(4)
    prompts = fx.schedule()
    assert ran(prompts) == {0, 1} and prompts.num_prefill_tokens == 8
    # each decode needs a second block: the latest arrival is preempted (recomputed) so that a runs
    decode = fx.schedule()
    assert decode.decode_seq_ids == [0] and decode.num_tokens == 1 and not decode.blocks_to_swap_out
    assert b.num_preemptions == 1 and list(fx.sched.waiting) == [b] and fx.sched.running == [a]
    assert fx.sched.abort(0) is a and fx.sched.allocator.gpu.num_free == 2
    again = fx.schedule()  # b's prompt again, with the token it had generated
    assert again.prefill_seq_ids == [1] and again.prefill_lens == [5] and not again.decode_seq_ids


def test_max_num_seqs():  # vLLM: test_scheduler_max_seqs
    fx = Fixture(separate(max_num_seqs=2), 8)
    fx.add(4)
    assert ran(fx.schedule()) == {0}
    assert ran(fx.schedule()) == {0}
    fx.add(4)
    fx.add(4)
    assert ran(fx.schedule()) == {1}, "one running and one prompting make max_num_seqs 2"
    assert ran(fx.schedule()) == {0, 1}


def test_the_budget_counts_padding():  # vLLM v0.2: len(prompts) * max(prompt_len) <= max_num_batched_tokens
    fx = Fixture(separate(max_num_batched_tokens=24), 16, max_seq_len=24)
    for prompt in (3, 12, 12):
        fx.add(prompt, 2)
    first = fx.schedule()
    assert first.prefill_lens == [3, 12], "2 x 12 = 24 fits; 3 x 12 = 36 (27 tokens) would not"
    assert fx.schedule().prefill_lens == [12]


def test_max_paddings():  # vLLM v0.2: at most max_paddings padding slots in a prompt run
    fx = Fixture(separate(max_paddings=10), 16)
    fx.add(1)
    fx.add(12)
    assert fx.schedule().prefill_lens == [1], "padding the 1-token prompt to 12 wastes 11 > 10 slots"
    assert fx.schedule().prefill_lens == [12]


def test_a_too_long_prompt_is_ignored_when_scheduled_not_refused():  # vLLM: ignored_seq_groups
    fx = Fixture(separate(max_num_batched_tokens=12), 32, max_seq_len=16)
    fx.add(4)
    too_long = fx.add(13, 1)  # over min(max_seq_len 16, max_num_batched_tokens 12), not over the model
    over_model = fx.add(4, 13)  # prompt + output over max_seq_len
    fx.add(4)
    assert fx.sched.num_waiting == 4, "admitted: the scheduler decides, not add_request"
    batch = fx.sched.schedule()
    assert batch.prefill_seq_ids == [0, 3]
    assert fx.sched.take_ignored() == [too_long, over_model] and fx.sched.take_ignored() == []
    assert all(s.status is SeqStatus.FINISHED for s in too_long.seqs + over_model.seqs)


def test_serving_core_records_the_ignored_and_the_aborted():
    core = ServingCore(scheduler_for(separate(max_num_batched_tokens=12), 32, max_seq_len=16))
    for i, (prompt, output) in enumerate([(4, 4), (13, 1), (4, 4), (5, 4)]):
        core.admit(Request(i, 0.1 * i, prompt, output))
    step = core.start_step(1.0)
    assert step is not None and step.batch.prefill_seq_ids == [0, 2]
    core.end_step(step, 2.0)
    assert core.abort(3, 2.0) and not core.abort(3, 2.0) and not core.abort(1, 2.0)
    with pytest.raises(RuntimeError, match="between steps"):
        step = core.start_step(2.0)
        core.abort(0, 2.5)
    assert [(r.request_id, r.status, r.dropped_s) for r in core.records.dropped_rows()] == [
        (1, "ignored", 1.0), (3, "aborted", 2.0)]
    assert core.outstanding == 2


class PromptOnly(Checker):
    """vLLM v0.2-v0.3's rules, every step: a step runs prompts or decodes, never both; a prompt run holds
    every admissible prompt's padded tokens within the cap and max_paddings; a decode step runs only when no
    waiting prompt could have run instead (or something is swapped out), and then decodes every sequence."""

    def before(self, sched, step: int) -> None:
        self.swapped = bool(sched.swapped)
        head = sched.waiting[0] if sched.waiting else None  # the oldest prompt, if it can run alone now
        self.must_prompt = (not self.swapped and head is not None and not sched.ignoring.is_unservable(head.request_id)
                            and sched.admissible(head, sched.next_budget()) is not None)

    def after(self, sched, batch: Batch, step: int) -> None:
        assert not (batch.prefill_seq_ids and batch.decode_seq_ids), f"step {step}: prompts and decodes mixed"
        if batch.prefill_lens:
            assert not self.swapped
            padded = len(batch.prefill_lens) * max(batch.prefill_lens)
            assert padded <= sched.token_cap and padded - sum(batch.prefill_lens) <= sched.max_paddings
            return
        assert not self.must_prompt, f"step {step}: decodes ran where a prompt could have"
        running = {s.seq_id for g in sched.running for s in g.seqs if s.status is SeqStatus.RUNNING}
        assert set(batch.decode_seq_ids) == running


@hyp(max_examples=40)
@given(reqs=st.lists(st.builds(Req, arrival=st.integers(0, 6), prompt=st.integers(1, 30),
                               output=st.integers(1, 20), n=st.integers(1, 3)), min_size=1, max_size=20),
       cap=st.sampled_from([64, 100]), max_paddings=st.sampled_from([0, 8, 256]),
       max_num_seqs=st.sampled_from([3, 8, 256]), extra=st.integers(0, 20),
       preemption=st.sampled_from(["auto", "recompute", "swap"]))
def test_random_workloads_keep_the_prompt_only_rules_and_finish_exactly(reqs, cap, max_paddings, max_num_seqs,
                                                                        extra, preemption):
    system = replace(separate(cap, max_num_seqs, max_paddings), preemption=preemption)
    sched = scheduler_for(system, 3 * 16 + 3 + extra, num_cpu_blocks=1000, max_seq_len=64)
    run = drive(sched, reqs, checkers=(StepInvariants(), PromptOnly()))
    check_finished(run, reqs)
    assert sched.allocator.gpu.num_free == sched.num_gpu_blocks and not sched.allocator.block_tables


def test_delay_factor_holds_new_prompts_for_a_share_of_the_last_prompt_run():  # vLLM v0.3: test_scheduler_delay_factor
    system = SystemSpec("vLLM v0.3", "vllm", block_size=4, prefill_policy="separate", delay_factor=0.5)
    core = ServingCore(scheduler_for(system, 32, max_seq_len=32))
    core.admit(Request(0, 0.0, 4, 8))
    first = core.start_step(0.0)  # nothing runs: no delay
    assert first is not None and first.batch.prefill_seq_ids == [0]
    core.end_step(first, 1.0)  # a prompt run of 1 s
    core.admit(Request(1, 1.0, 4, 8))
    held = core.start_step(1.0)  # the last prompt run took 1 s: request 1 waits until it has waited 0.5 s
    assert held is not None and held.batch.decode_seq_ids == [0] and not held.batch.prefill_seq_ids
    core.end_step(held, 1.25)
    still = core.start_step(1.25)  # waited 0.25 s
    assert still is not None and still.batch.decode_seq_ids == [0] and not still.batch.prefill_seq_ids
    core.end_step(still, 1.51)
    admitted = core.start_step(1.51)
    assert admitted is not None and admitted.batch.prefill_seq_ids == [1], "waited 0.51 s > 0.5 x 1 s"


def test_delay_factor_belongs_to_separate():
    with pytest.raises(SpecError, match=r"systems\[0\].delay_factor: is vLLM v0.3's"):
        SystemSpec("v", "vllm", delay_factor=1.0).validate("exp.yaml", "systems[0]")
    with pytest.raises(SpecError, match=r"systems\[0\].delay_factor: must be a finite number >= 0, got -1"):
        SystemSpec("v", "vllm", prefill_policy="separate", delay_factor=-1).validate("exp.yaml", "systems[0]")
