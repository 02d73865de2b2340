"""Automatic prefix caching on the real engine: prefills that reuse cached blocks give the tokens a run
without the cache gives (greedy), through preemptions too, and the engine's replay keeps taking the
simulator's decisions, block for block."""
import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("simpy")

from runtime_reference import BACKEND, StepRecorder, replay_as_simulated  # noqa: E402

from engine.core.system import PAPER_SYSTEMS, SystemSpec  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.prefix_keys import segment_token_ids, token_block_keys  # noqa: E402
from sim.workload.tokens import system_prompt_segments  # noqa: E402
from sim.workload.trace import TokenSegments, Trace  # noqa: E402


def caching_engine(spec, caching, num_gpu_blocks, preemption="auto", policy="mixed"):
    budget = {"max_num_batched_tokens": 8, "max_num_seqs": 8} if policy == "chunked" else {}  # chunks of <= 8
    system = SystemSpec("vLLM", "vllm", block_size=4, preemption=preemption, watermark=0.0, prefix_caching=caching,
                        prefill_policy=policy, **budget)
    return Engine(spec, system, "cpu", seed=0, num_gpu_blocks=num_gpu_blocks, num_cpu_blocks=64,
                  attention_backend=BACKEND)


def shared_prompts(vocab):
    rng = np.random.default_rng(5)
    system = rng.integers(0, vocab, 11).tolist()  # 2 whole blocks of 4 and 3 tokens more
    other = rng.integers(0, vocab, 8).tolist()
    return [system + rng.integers(0, vocab, k).tolist() for k in (3, 6, 1, 9)] + [
        other + rng.integers(0, vocab, 5).tolist(), system[:8], system[:8] + [3]]


@pytest.mark.parametrize("preemption, blocks", [("auto", 128), ("recompute", 14), ("swap", 14)])
def test_generate_with_the_cache_gives_the_tokens_without_it(spec, preemption, blocks):
    prompts = shared_prompts(spec.vocab_size)
    expected = caching_engine(spec, False, blocks, preemption).generate(prompts, 7)
    engine = caching_engine(spec, True, blocks, preemption)
    steps = StepRecorder(engine.runner)
    assert engine.generate(prompts, 7) == expected
    cached = [c for b in steps.batches for c in b.prefill_cached_lens if c]
    assert cached, "prompts after the first with the system prompt attend over its cached blocks"
    if blocks == 128:  # (a request recomputed after a preemption finds its own prompt's blocks cached too)
        assert max(cached) <= 8, "only the 2 whole blocks of the shared system prompt can be cached"
    assert steps.check_against_dense(engine.runner.model) == 7 * len(prompts)


@pytest.mark.parametrize("preemption, blocks", [("auto", 128), ("recompute", 14)])
def test_chunked_prefill_with_the_cache_gives_the_tokens_without_it(spec, preemption, blocks):
    # chunks of at most 8 tokens over cached blocks: the same tokens as one-shot prefills without the cache
    prompts = shared_prompts(spec.vocab_size)
    expected = caching_engine(spec, False, blocks, preemption).generate(prompts, 7)
    engine = caching_engine(spec, True, blocks, preemption, "chunked")
    steps = StepRecorder(engine.runner)
    assert engine.generate(prompts, 7) == expected
    assert any(not samples for b in steps.batches for samples in b.prefill_sample_ids), "a prompt ran in chunks"
    first_chunk: dict[int, int] = {}  # each sequence's first prefill: what it found cached
    for batch in steps.batches:
        for seq_id, cached in zip(batch.prefill_seq_ids, batch.prefill_cached_lens):
            first_chunk.setdefault(seq_id, cached)
    assert any(first_chunk.values()), "a later prompt's first chunk starts after its cached blocks"
    assert all(b.num_tokens <= 8 for b in steps.batches), "no iteration over the budget"


def test_a_prompt_of_cached_blocks_only_computes_its_last_block(opt_tiny):
    prompts = [list(range(1, 13)), list(range(1, 13))]  # 3 whole blocks each, the same
    engine = caching_engine(opt_tiny, True, 64)
    steps = StepRecorder(engine.runner)
    assert engine.generate(prompts, 3) == caching_engine(opt_tiny, False, 64).generate(prompts, 3)
    assert [list(b.prefill_cached_lens) for b in steps.batches if b.prefill_lens][0] == [0, 8]


def test_keys_and_token_ids():
    assert token_block_keys([1, 2, 3, 4, 5, 6, 7, 8, 9], 4) == token_block_keys([1, 2, 3, 4, 5, 6, 7, 8], 4)
    assert token_block_keys([1, 2, 3, 4, 5, 6, 7, 8], 4)[1] != token_block_keys([0, 2, 3, 4, 5, 6, 7, 8], 4)[1]
    first = segment_token_ids([(3, 0, 10), (5, 0, 4)], 1000, 0, 14)
    assert segment_token_ids([(3, 4, 6)], 1000, 0, 6) == first[4:10]
    assert len(first) == 14 and segment_token_ids([(3, 0, 10), (5, 0, 4)], 1000, 0, 12) == first[:12]


def system_prompt_trace(num_requests=14, seed=3):
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(0.005, num_requests))
    prompt, output = rng.integers(3, 20, num_requests) + 10, rng.integers(2, 20, num_requests)
    segments = system_prompt_segments(rng.integers(0, 2, num_requests), 10, prompt, output)
    return Trace(arrival, prompt, output, rng.integers(1, 3, num_requests), segments=segments)


@pytest.mark.parametrize("run_model", [False, True])
def test_engine_replay_with_the_cache_equals_the_simulator(opt_tiny, run_model):
    trace = system_prompt_trace()
    system = dataclasses.replace(PAPER_SYSTEMS["vllm"], block_size=4, prefix_caching=True)
    requests = replay_as_simulated(opt_tiny, system, trace, 24, 64, run_model=run_model)
    assert sum(requests["cached_tokens"]) > 0
    assert sum(requests["num_preemptions"]) > 0


def test_segments_of_a_trace_are_its_token_identities():
    segments = TokenSegments.of([[(0, 0, 10), (-2, 0, 5)], [(0, 0, 10), (-3, 0, 7)]])
    assert segments.request(1) == [(0, 0, 10), (-3, 0, 7)] and segments.num_tokens().tolist() == [15, 17]
