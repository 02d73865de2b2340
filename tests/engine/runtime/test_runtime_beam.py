"""The engine's beam search against a dense reference beam search on the same random weights.

The reference recomputes every beam's whole sequence each step with plain causal attention (no KV
cache, no paging, no forks) and keeps the k best (score + log-prob) continuations; the engine must
find the same beams with the same scores, whether its forks share blocks (vLLM), copy them into
each beam's reservation (Orca), or its beams are swapped out and back in the middle.
"""
import dataclasses

import pytest

torch = pytest.importorskip("torch")

from runtime_reference import dense_logits  # noqa: E402

from engine.core.system import PAPER_SYSTEMS, SystemSpec  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.model import Decoder  # noqa: E402

PROMPTS = [[5, 9, 2, 7, 1, 33, 8, 4, 90, 61], list(range(200, 213)), [11, 400, 77] * 3]
SCORE_ATOL = 1e-4  # fp32 logits, paged vs dense: summation order differs


def dense_beam_search(model: Decoder, prompt: list[int], new_tokens: int, width: int) -> list[tuple[list[int], float]]:
    """Textbook beam search, best first: every beam's every continuation, the `width` best kept."""
    beams = [([], 0.0)]
    for _ in range(new_tokens):
        candidates = []
        for generated, score in beams:
            logprobs = torch.log_softmax(dense_logits(model, prompt + generated)[-1].double(), dim=-1).tolist()
            candidates.extend((score + lp, generated + [token]) for token, lp in enumerate(logprobs))
        candidates.sort(key=lambda c: -c[0])
        beams = [(generated, score) for score, generated in candidates[:width]]
    return beams


def engine_for(spec, system: SystemSpec, num_gpu_blocks: int = 128, num_cpu_blocks: int = 128) -> Engine:
    return Engine(spec, system, "cpu", seed=0, num_gpu_blocks=num_gpu_blocks, num_cpu_blocks=num_cpu_blocks,
                  attention_backend="torch")


def assert_same_beams(engine: Engine, results, new_tokens: int, width: int) -> None:
    assert len(results) == len(PROMPTS)
    for prompt, beams in zip(PROMPTS, results):
        expected = dense_beam_search(engine.runner.model, prompt, new_tokens, width)
        assert [tokens for tokens, _ in beams] == [tokens for tokens, _ in expected]
        for (_, score), (_, reference) in zip(beams, expected):
            assert score == pytest.approx(reference, abs=SCORE_ATOL)


@pytest.mark.parametrize("width", [2, 4])
def test_vllm_beam_search_equals_the_dense_reference(spec, width):
    engine = engine_for(spec, SystemSpec("vLLM", "vllm", block_size=4))
    results = engine.beam_search(PROMPTS, max_new_tokens=9, beam_width=width)
    assert_same_beams(engine, results, 9, width)
    copies = sum(it.num_copy_blocks for it in engine.records.iterations)
    assert copies > 0, "forked beams share a last block, which is copied on write"


@pytest.mark.parametrize("system", ["orca-oracle", "fastertransformer"])
def test_reservation_systems_copy_forks_into_each_beams_own_region(opt_tiny, system):
    engine = engine_for(opt_tiny, dataclasses.replace(PAPER_SYSTEMS[system], block_size=4), num_gpu_blocks=256)
    results = engine.beam_search(PROMPTS, max_new_tokens=7, beam_width=3)
    assert_same_beams(engine, results, 7, 3)


def test_beam_search_swapped_out_in_the_middle_equals_the_dense_reference(spec):
    # every group alone fits, all three do not: they take turns through the host pool
    system = SystemSpec("vLLM", "vllm", block_size=4, watermark=0.0)
    engine = engine_for(spec, system, num_gpu_blocks=18, num_cpu_blocks=64)
    results = engine.beam_search(PROMPTS, max_new_tokens=10, beam_width=3)
    assert sum(r.num_preemptions for r in engine.records.requests) > 0, "the pool should force a preemption"
    assert sum(it.num_swap_blocks for it in engine.records.iterations) > 0, "beam searches are swapped"
    assert_same_beams(engine, results, 10, 3)


def test_replay_serves_beam_searches_beside_plain_requests(opt_tiny):
    engine = engine_for(opt_tiny, SystemSpec("vLLM", "vllm", block_size=4))
    result = engine.replay([(0.0, 6, 5, 1, 3), (0.0, 4, 6, 2), (1.0, 9, 4)], time_fn=lambda batch: 1.0)
    assert [(r.n, r.output_len) for r in result.requests] == [(3, 5), (2, 6), (1, 4)]


@pytest.mark.parametrize("row, message", [((0.0, 4, 4, 2, 2), "not both"), ((0.0, 4, 4, 1, 0), "beam_width must be"),
                                          ((0.0, 4, 4, 1, 300), "more beams than")])
def test_bad_beam_requests_are_refused(opt_tiny, row, message):
    engine = engine_for(opt_tiny, SystemSpec("vLLM", "vllm", block_size=4))
    with pytest.raises(ValueError, match=message):
        engine.replay([row], time_fn=lambda batch: 1.0)
