"""Chunked prefill on the real engine: a prompt computed in chunks, each attending over the earlier chunks'
blocks in the paged cache, gives the logits of a dense no-cache forward and the tokens of a one-shot prefill;
and the prompt-only steps of vLLM v0.2-v0.3 (separate) give the same tokens too."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("engine.core.factory")

from runtime_reference import BACKEND, StepRecorder  # noqa: E402

from engine.core.batch import Batch  # noqa: E402
from engine.core.system import SystemSpec  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.runner import ModelRunner  # noqa: E402

# (arrival, prompt, output): prompts up to 3 x the 8-token budget, arriving while others decode
ROWS = [(0.0, 21, 6), (0.0, 5, 9), (1.5, 17, 5), (2.5, 11, 7), (2.5, 24, 3)]


def engine_for(spec, policy, num_gpu_blocks=128, preemption="auto"):
    system = SystemSpec("vLLM", "vllm", block_size=4, watermark=0.0, prefill_policy=policy, preemption=preemption,
                        max_num_batched_tokens=8 if policy == "chunked" else 64, max_num_seqs=8)
    return Engine(spec, system, "cpu", seed=0, num_gpu_blocks=num_gpu_blocks, num_cpu_blocks=64,
                  attention_backend=BACKEND)


def outputs(engine, n):
    rows = [dict(arrival_s=a, prompt_len=p, output_len=o, n=n) for a, p, o in ROWS]
    engine.replay(rows, time_fn=lambda batch: 1.0)
    return engine


@pytest.mark.parametrize("n, blocks, preemption", [(1, 128, "auto"), (2, 128, "auto"), (1, 14, "recompute")])
def test_chunked_prefills_match_the_dense_reference_and_a_one_shot_prefill(spec, n, blocks, preemption):
    engine = engine_for(spec, "chunked", blocks, preemption)
    steps = StepRecorder(engine.runner)
    outputs(engine, n)
    chunks = [(length, cached) for b in steps.batches
              for length, cached, ids in zip(b.prefill_lens, b.prefill_cached_lens, b.prefill_sample_ids) if not ids]
    assert chunks, "some prompt was computed in several chunks"
    assert all(sum(b.prefill_lens) + len(b.decode_seq_ids) <= 8 for b in steps.batches), "the budget holds"
    assert any(b.prefill_lens and b.decode_seq_ids for b in steps.batches), "chunks share iterations with decodes"
    assert steps.check_against_dense(engine.runner.model) == n * sum(o for _, _, o in ROWS)
    if blocks < 128:
        assert sum(r.num_preemptions for r in engine.records.requests) > 0, "the pool should force preemption"
    chunked_tokens = {seq_id: steps.full_tokens(seq_id) for seq_id in steps.steps}

    one_shot = engine_for(spec, "mixed")
    reference = StepRecorder(one_shot.runner)
    outputs(one_shot, n)
    assert all(len(ids) for b in reference.batches for ids in b.prefill_sample_ids)
    assert {s: reference.full_tokens(s) for s in reference.steps} == chunked_tokens


def test_prompt_only_steps_give_the_same_tokens(opt_tiny):
    separate = engine_for(opt_tiny, "separate")
    steps = StepRecorder(separate.runner)
    outputs(separate, 2)
    assert not any(b.prefill_lens and b.decode_seq_ids for b in steps.batches), "no step mixes prompts and decodes"
    assert steps.check_against_dense(separate.runner.model) == 2 * sum(o for _, _, o in ROWS)


def test_a_chunk_that_samples_nothing_must_be_a_chunk(opt_tiny):
    runner = ModelRunner(opt_tiny, "cpu", num_gpu_blocks=8, block_size=4, attention_backend=BACKEND)
    tokens, tables = {0: list(range(1, 13))}, {0: [0, 1, 2]}
    whole = Batch(prefill_seq_ids=[0], prefill_lens=[4], prefill_sample_ids=[()], prefill_cached_lens=[8])
    with pytest.raises(ValueError, match="only a prompt's last chunk samples"):
        runner.execute(whole, tokens, tables.__getitem__)
    first = Batch(prefill_seq_ids=[0], prefill_lens=[8], prefill_sample_ids=[()], prefill_cached_lens=[0])
    sampled, _ = runner.execute(first, tokens, tables.__getitem__)
    assert sampled == {}, "a chunk that is not the prompt's last samples nobody"


def test_a_beam_search_whose_prompt_comes_in_chunks_finds_the_same_beams(opt_tiny):
    prompts = [list(range(3, 24)), list(range(40, 47))]  # 21 tokens: three chunks of the 8-token budget
    chunked = engine_for(opt_tiny, "chunked").beam_search(prompts, 5, beam_width=3)
    one_shot = engine_for(opt_tiny, "mixed").beam_search(prompts, 5, beam_width=3)
    assert [[tokens for tokens, _ in beams] for beams in chunked] == [[tokens for tokens, _ in beams]
                                                                      for beams in one_shot]
    for got, want in zip(chunked, one_shot):
        assert [score for _, score in got] == pytest.approx([score for _, score in want], abs=1e-4)
