"""A shared prefix on the real engine: prefills that attend over the cached prefix's blocks give the
logits of a dense no-cache forward over the whole sequence, through preemptions too."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("engine.core.factory")

from runtime_reference import BACKEND, StepRecorder  # noqa: E402

from engine.core.batch import Batch  # noqa: E402
from engine.core.system import SystemSpec  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.runner import ModelRunner  # noqa: E402

PREFIX = 9  # 4-token blocks: 2 whole blocks (8 tokens) are shared, the 9th token is each request's own
ROWS = [(0.0, 12, 8), (0.0, 15, 6), (1.5, 10, 7), (2.5, 14, 5), (2.5, 9 + 8, 4)]


def prefix_engine(spec, preemption, num_gpu_blocks):
    system = SystemSpec("vLLM", "vllm", block_size=4, preemption=preemption, watermark=0.0)
    return Engine(spec, system, "cpu", seed=0, num_gpu_blocks=num_gpu_blocks, num_cpu_blocks=64,
                  attention_backend=BACKEND)


@pytest.mark.parametrize("preemption, n, blocks", [("auto", 1, 128), ("recompute", 1, 12), ("swap", 1, 12),
                                                   ("auto", 2, 20)])
def test_prefix_prefills_match_the_dense_reference(spec, preemption, n, blocks):
    engine = prefix_engine(spec, preemption, blocks)
    steps = StepRecorder(engine.runner)
    rows = [dict(arrival_s=a, prompt_len=p, output_len=o, n=n, prefix_len=PREFIX) for a, p, o in ROWS]
    result = engine.replay(rows, time_fn=lambda batch: 1.0)
    cached = [c for b in steps.batches for c in b.prefill_cached_lens if c]
    assert cached and set(cached) == {8}, "later prefills attend over the 2 cached prefix blocks"
    prompts = [steps.steps[s][0][0] for s in steps.steps]
    assert len({tuple(p[:PREFIX]) for p in prompts}) == 1, "every request starts with the same prefix"
    assert len({tuple(p[PREFIX:]) for p in prompts}) > 1
    assert steps.check_against_dense(engine.runner.model) == n * sum(o for _, _, o in ROWS)
    if blocks < 128:
        assert sum(r.num_preemptions for r in result.requests) > 0, "the pool should force preemption"
    assert engine.records.iterations[0].saved_blocks >= 2, "two requests hold the prefix's 2 blocks at once"


def test_a_cached_prefill_needs_the_right_inputs(opt_tiny):
    runner = ModelRunner(opt_tiny, "cpu", num_gpu_blocks=8, block_size=4, attention_backend=BACKEND)
    tokens = {0: list(range(1, 13))}
    tables = {0: [0, 1, 2]}
    bad = [Batch(prefill_seq_ids=[0], prefill_lens=[4], prefill_sample_ids=[(0,)], prefill_cached_lens=[8, 0]),
           Batch(prefill_seq_ids=[0], prefill_lens=[4], prefill_sample_ids=[(0,)], prefill_cached_lens=[4]),
           Batch(prefill_seq_ids=[0], prefill_lens=[0], prefill_sample_ids=[(0,)], prefill_cached_lens=[12])]
    for batch, message in zip(bad, ["one entry per prefill", "has 12 tokens", "at least one new token"]):
        with pytest.raises(ValueError, match=message):
            runner.execute(batch, tokens, tables.__getitem__)
