"""All of an iteration's prompts attend in one variable-length prefill call per layer.

Mixed prompt lengths, parallel samples, beams and cached prefixes go through that one call, on
the torch reference and on the Triton kernel (interpreted on a CPU), and every sampled token's
logits equal a dense no-cache forward over the sequence's own tokens (the per-prompt reference).
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("engine.core.factory")

from runtime_reference import StepRecorder  # noqa: E402

import engine.kernels  # noqa: E402
from engine.core.system import SystemSpec  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from tests.helpers.kernel_checks import DEVICE, TRITON_RUNNABLE  # noqa: E402

NEEDS_TRITON = pytest.mark.skipif(not TRITON_RUNNABLE, reason="needs CUDA or TRITON_INTERPRET=1")
BACKENDS = ["torch", pytest.param("triton", marks=NEEDS_TRITON)]
# the interpreted Triton kernels are slow: the default tier runs one test's families on them, the cached prefixes'
SLOW_TRITON = ["torch", pytest.param("triton", marks=[NEEDS_TRITON, pytest.mark.slow])]
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [42], list(range(100, 113))]


class PrefillCalls:
    """Counts prefill_attention calls per executed batch, and the prompts each call carried."""

    def __init__(self, monkeypatch, runner):
        self.per_batch = []  # [(prefills in the batch, [prompts per call])]
        calls = []
        real_call, execute = engine.kernels.prefill_attention, runner.execute

        def counting_call(query, key_cache, value_cache, block_tables, cu_seqlens, *args, **kwargs):
            calls.append(cu_seqlens.shape[0] - 1)
            return real_call(query, key_cache, value_cache, block_tables, cu_seqlens, *args, **kwargs)

        def counting_execute(batch, *args, **kwargs):
            calls.clear()
            result = execute(batch, *args, **kwargs)
            self.per_batch.append((len(batch.prefill_lens), list(calls)))
            return result

        monkeypatch.setattr(engine.kernels, "prefill_attention", counting_call)
        runner.execute = counting_execute

    def check_one_call_per_layer(self, num_layers: int) -> int:
        """Every batch with prefills made exactly one call per layer, carrying all of them."""
        most = 0
        for prefills, calls in self.per_batch:
            assert calls == ([prefills] * num_layers if prefills else []), (prefills, calls)
            most = max(most, prefills)
        return most


def engine_for(spec, backend, **system):
    system = SystemSpec("vLLM", "vllm", block_size=4, **system)
    return Engine(spec, system, DEVICE, dtype=torch.float32, seed=0, num_gpu_blocks=64, num_cpu_blocks=16,
                  attention_backend=backend)


@pytest.mark.parametrize("backend", SLOW_TRITON)
def test_mixed_prompts_and_parallel_samples_in_one_call(attention_spec, backend, monkeypatch):
    spec = attention_spec
    engine = engine_for(spec, backend)
    steps = StepRecorder(engine.runner)  # wrapped first: the counter sees the recorder's batches
    calls = PrefillCalls(monkeypatch, engine.runner)
    engine.generate(PROMPTS, 3, n=2, sampling="random")
    assert calls.check_one_call_per_layer(spec.num_layers) == len(PROMPTS), "all prompts in one iteration"
    assert steps.check_against_dense(engine.runner.model) == 2 * 3 * len(PROMPTS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cached_prefixes_beside_fresh_prompts_in_one_call(attention_spec, backend, monkeypatch):
    # 9-token shared prefix, 4-token blocks: later prompts attend over 2 cached blocks
    spec = attention_spec
    engine = engine_for(spec, backend)
    steps = StepRecorder(engine.runner)
    calls = PrefillCalls(monkeypatch, engine.runner)
    rows = [dict(arrival_s=0.0, prompt_len=12, output_len=3, prefix_len=9),
            dict(arrival_s=1.5, prompt_len=10, output_len=2, prefix_len=9),
            dict(arrival_s=1.5, prompt_len=14, output_len=2, prefix_len=9),
            dict(arrival_s=1.5, prompt_len=5, output_len=2)]
    engine.replay(rows, time_fn=lambda batch: 1.0)
    mixed = [b for b in steps.batches if 0 in b.prefill_cached_lens and any(b.prefill_cached_lens)]
    assert mixed, "one iteration should prefill cached and uncached prompts together"
    assert calls.check_one_call_per_layer(spec.num_layers) >= 3
    assert steps.check_against_dense(engine.runner.model) == 3 + 2 + 2 + 2


@pytest.mark.skipif(not TRITON_RUNNABLE, reason="needs CUDA or TRITON_INTERPRET=1")
def test_beams_on_the_triton_kernel_equal_the_torch_reference(opt_tiny):
    results = {}
    for backend in ("torch", "triton"):
        engine = engine_for(opt_tiny, backend)
        results[backend] = engine.beam_search(PROMPTS[:2], max_new_tokens=3, beam_width=2)
    for beams, reference in zip(results["triton"], results["torch"]):
        assert [tokens for tokens, _ in beams] == [tokens for tokens, _ in reference]
        assert [score for _, score in beams] == pytest.approx([score for _, score in reference], abs=1e-4)
