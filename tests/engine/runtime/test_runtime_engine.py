"""The paged engine against a dense no-cache reference: greedy tokens, forks, preemption, replay."""
import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("engine.core.factory")

from runtime_reference import BACKEND, StepRecorder, dense_greedy  # noqa: E402

from engine.core.records import ITERATION_COLUMNS, REQUEST_COLUMNS  # noqa: E402
from engine.core.system import PAPER_SYSTEMS, SystemSpec  # noqa: E402
from engine.errors import Unschedulable  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402

# lengths around block boundaries (block_size 8): inside one block, exactly one, just over, several
PROMPTS = [[3], [5, 9, 2, 7, 1], list(range(10, 18)), list(range(40, 49)), [11, 400, 77] * 9]
VLLM8 = SystemSpec("vLLM", "vllm", block_size=8)


def make_engine(spec, system=VLLM8, num_gpu_blocks=128, num_cpu_blocks=64, **kw):
    return Engine(spec, system, "cpu", seed=0, num_gpu_blocks=num_gpu_blocks, num_cpu_blocks=num_cpu_blocks,
                  attention_backend=BACKEND, **kw)


def test_greedy_matches_dense_reference(spec):
    engine = make_engine(spec)
    steps = StepRecorder(engine.runner)
    outputs = engine.generate(PROMPTS, max_new_tokens=10)
    for prompt, output in zip(PROMPTS, outputs):
        assert output == dense_greedy(engine.runner.model, prompt, 10)
    assert steps.check_against_dense(engine.runner.model) == 10 * len(PROMPTS)


def test_mixed_prefill_and_decode_batches_match_dense(spec):
    # staggered arrivals at one iteration per second: new prompts join running decodes
    engine = make_engine(spec)
    steps = StepRecorder(engine.runner)
    trace = [(0.0, 5, 8, 1), (1.5, 12, 6, 1), (2.5, 17, 5, 1), (2.7, 3, 4, 1)]
    result = engine.replay(trace, time_fn=lambda batch: 1.0)
    mixed = [it for it in result.iterations if it.num_prefills and it.num_decodes]
    assert mixed, "the trace should put prefills and decodes in one iteration"
    assert steps.check_against_dense(engine.runner.model) == 8 + 6 + 5 + 4


def test_forked_samples_share_prompt_then_diverge_after_copy_on_write(spec):
    engine = make_engine(spec)
    steps = StepRecorder(engine.runner)
    prompt = list(range(100, 112))  # 12 tokens: the second block is shared and half full
    outputs = engine.generate([prompt], max_new_tokens=8, n=2, sampling="random")
    assert len(outputs) == 2 and all(len(o) == 8 for o in outputs)
    assert outputs[0] != outputs[1], "random samples of one prompt should diverge"
    prefill = steps.batches[0]
    assert prefill.prefill_sample_ids == [(0, 1)], "one prompt computation sampled twice"
    assert any(b.blocks_to_copy for b in steps.batches), "the shared last block must be copied on write"
    assert steps.check_against_dense(engine.runner.model) == 16


@pytest.mark.parametrize("system", sorted(PAPER_SYSTEMS))
def test_every_system_serves_forks_correctly(system, opt_tiny):
    engine = make_engine(opt_tiny, dataclasses.replace(PAPER_SYSTEMS[system], block_size=8))
    steps = StepRecorder(engine.runner)
    outputs = engine.generate(PROMPTS[:3], max_new_tokens=5, n=2, sampling="random")
    assert [len(o) for o in outputs] == [5] * 6
    assert steps.check_against_dense(engine.runner.model) == 30


TIGHT_PROMPTS = [list(range(1, 11)), list(range(20, 29)), list(range(30, 41))]


def tiny_pool_engine(spec, preemption, num_gpu_blocks=12):
    system = SystemSpec("vLLM", "vllm", block_size=4, preemption=preemption, watermark=0.0)
    return make_engine(spec, system, num_gpu_blocks=num_gpu_blocks)


def assert_preempted(engine, swapped: bool):
    assert sum(r.num_preemptions for r in engine.records.requests) > 0, "the pool should force preemption"
    assert (sum(it.num_swap_blocks for it in engine.records.iterations) > 0) == swapped


# (recompute, n=2): 16 blocks let two samples recomputed apart grow to 25 tokens alone (2 x (7 + 1))
@pytest.mark.parametrize("preemption, n, blocks", [("recompute", 1, 12), ("swap", 1, 12), ("auto", 2, 12),
                                                   ("recompute", 2, 16)])
def test_preemption_leaves_greedy_tokens_unchanged(spec, preemption, n, blocks):
    expected = tiny_pool_engine(spec, preemption, num_gpu_blocks=256).generate(TIGHT_PROMPTS, 14, n=n)
    tight = tiny_pool_engine(spec, preemption, num_gpu_blocks=blocks)
    steps = StepRecorder(tight.runner)
    assert tight.generate(TIGHT_PROMPTS, 14, n=n) == expected
    assert_preempted(tight, swapped=preemption != "recompute")
    steps.check_against_dense(tight.runner.model)


def test_swapped_diverged_samples_keep_their_own_kv(spec):
    # random samples diverge before the swap; each must come back with its own blocks
    tight = tiny_pool_engine(spec, "auto")
    steps = StepRecorder(tight.runner)
    outputs = tight.generate(TIGHT_PROMPTS, 14, n=2, sampling="random")
    assert outputs[0] != outputs[1]
    assert_preempted(tight, swapped=True)
    assert steps.check_against_dense(tight.runner.model) == 14 * 6


def test_recomputed_diverged_samples_re_prefill_their_own_tokens(spec):
    # preemption: recompute drops a group of two diverged samples; each re-prefills its own history
    tight = tiny_pool_engine(spec, "recompute", num_gpu_blocks=16)
    steps = StepRecorder(tight.runner)
    outputs = tight.generate(TIGHT_PROMPTS, 14, n=2, sampling="random")
    assert outputs[0] != outputs[1]
    assert_preempted(tight, swapped=False)
    re_prefills = [b for b in steps.batches if any(len(s) == 1 for s in b.prefill_sample_ids)]
    assert re_prefills, "a group of two samples should have been recomputed apart"
    assert steps.check_against_dense(tight.runner.model) == 14 * 6


def test_replay_records_follow_the_virtual_clock(opt_tiny):
    engine = make_engine(opt_tiny)
    trace = [dict(arrival_s=0.0, prompt_len=6, output_len=3), dict(arrival_s=10.0, prompt_len=4, output_len=2, n=2)]
    result = engine.replay(trace, time_fn=lambda batch: 0.5)
    starts = [it.start_s for it in result.iterations]
    assert starts == [0.0, 0.5, 1.0, 10.0, 10.5]  # idle from 1.5 s: the clock jumps to the arrival
    first, second = result.requests
    assert (first.first_token_s, first.finish_s) == (0.5, 1.5)
    assert (second.first_token_s, second.finish_s, second.n) == (10.5, 11.0, 2)
    assert tuple(result.request_columns()) == REQUEST_COLUMNS
    assert tuple(result.iteration_columns()) == ITERATION_COLUMNS


def test_replay_clock_runs_on_measured_times(opt_tiny):
    engine = make_engine(opt_tiny)
    result = engine.replay([(0.0, 7, 4, 1), (0.0, 9, 3, 2)])
    its = result.iterations
    assert all(it.duration_s > 0 for it in its)
    assert all(b.start_s == a.start_s + a.duration_s for a, b in zip(its, its[1:]))  # never idle
    assert max(r.finish_s for r in result.requests) == its[-1].start_s + its[-1].duration_s


def test_replay_with_given_times_is_deterministic(opt_tiny):
    engine = make_engine(opt_tiny)
    trace = [(0.0, 7, 4, 1), (0.3, 9, 3, 2), (0.35, 20, 6, 1)]
    time_fn = lambda batch: 0.1 + 0.001 * batch.num_tokens  # noqa: E731
    first, again = engine.replay(trace, time_fn=time_fn), engine.replay(trace, time_fn=time_fn)
    assert first == again


def test_control_plane_replay_needs_no_model(opt_tiny):
    engine = Engine(opt_tiny, VLLM8, num_gpu_blocks=64, num_cpu_blocks=0, run_model=False,
                    time_fn=lambda batch: 0.01 + 0.001 * batch.num_tokens)
    assert engine.runner is None
    result = engine.replay([(0.0, 20, 5, 1), (0.02, 30, 5, 1)])
    assert [r.request_id for r in result.requests] == [0, 1]
    with pytest.raises(ValueError, match="run_model=True"):
        engine.generate([[1, 2]], 2)


def test_pool_too_small_for_a_request_stops_with_its_id(opt_tiny):
    engine = make_engine(opt_tiny, num_gpu_blocks=2)  # 16 tokens
    # Unschedulable from the engine's loop, or the scheduler's own refusal: both name it
    with pytest.raises(ValueError, match="request 0"):
        engine.generate([list(range(1, 30))], 2)
    assert issubclass(Unschedulable, ValueError)


@pytest.mark.parametrize("trace, message", [
    ([(0.0, 200, 100, 1)], "max_seq_len"),
    ([(0.0, 0, 5, 1)], "prompt_len"),
    ([(-1.0, 5, 5, 1)], "arrival_s"),
    ([dict(arrival_s=0.0, prompt_len=5)], "output_len"),
])
def test_bad_requests_are_rejected_before_serving(opt_tiny, trace, message):
    engine = make_engine(opt_tiny)
    with pytest.raises(ValueError, match=message):
        engine.replay(trace)


def test_bad_prompts_are_rejected(opt_tiny):
    engine = make_engine(opt_tiny)
    with pytest.raises(ValueError, match="vocabulary"):
        engine.generate([[1, 2, 512]], 2)
    with pytest.raises(ValueError, match="empty"):
        engine.generate([[]], 2)


def test_the_step_clock_adds_each_steps_host_work(opt_tiny):
    trace = [(0.0, 7, 4, 1), (0.0, 9, 3, 2), (0.01, 20, 6, 1)]
    results, forwards = {}, {}
    for clock in ("forward", "step"):
        engine, measured = make_engine(opt_tiny, clock=clock), []
        execute = engine.runner.execute

        def timed(*args, execute=execute, measured=measured, **kw):
            sampled, seconds = execute(*args, **kw)
            measured.append(seconds)  # each timed forward, as the engine got it
            return sampled, seconds

        engine.runner.execute = timed
        results[clock], forwards[clock] = engine.replay(trace), measured
    for result in results.values():  # the host work is measured either way, one value per iteration
        assert len(result.host_s) == len(result.iterations) and all(h > 0 for h in result.host_s)
    assert [it.duration_s for it in results["forward"].iterations] == pytest.approx(forwards["forward"], abs=1e-12)
    step = results["step"]  # an iteration lasts its forward plus its host work
    expected = [f + h for f, h in zip(forwards["step"], step.host_s)]
    assert [it.duration_s for it in step.iterations] == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError, match="clock must be one of"):
        Engine(opt_tiny, VLLM8, num_gpu_blocks=64, num_cpu_blocks=0, run_model=False,
               time_fn=lambda b: 0.01, clock="wall")


def test_the_default_host_swap_is_vllms_4_gib_but_never_more_blocks_than_the_device_pool(opt_tiny):
    # a small pool (a CPU's) gets as many host blocks as it has: 4 GiB beside it was set aside, zeroed, for nothing
    engine = Engine(opt_tiny, VLLM8, "cpu", num_gpu_blocks=48, attention_backend=BACKEND)
    assert engine.num_cpu_blocks == engine.runner.num_cpu_blocks == 48
    assert Engine(opt_tiny, VLLM8, num_gpu_blocks=40, run_model=False, time_fn=lambda b: 1.0).num_cpu_blocks == 40
    # a GPU-sized pool keeps vLLM's 4 GiB
    from engine.runtime.cache import DEFAULT_SWAP_SPACE_BYTES, GIB, default_swap_blocks, kv_block_bytes

    block = kv_block_bytes(opt_tiny, 8, torch.float16)
    assert DEFAULT_SWAP_SPACE_BYTES == 4 * GIB
    assert default_swap_blocks(opt_tiny, 8, torch.float16, 10 * 4 * GIB // block) == 4 * GIB // block


def test_a_request_that_preempts_itself_is_recomputed_at_once(opt_tiny):
    # 8 + 40 tokens in 6 blocks of 8: at each of its last 6 decodes it holds all 6 and can_append asks one more
    # free, so that step runs nothing but preempts it; the next re-prefills it (before: "can never be scheduled")
    prompt = list(range(1, 9))
    expected = make_engine(opt_tiny, num_gpu_blocks=64).generate([prompt], 40)
    tight = make_engine(opt_tiny, num_gpu_blocks=6)
    assert tight.generate([prompt], 40) == expected
    assert tight.records.requests[0].num_preemptions == 6
