"""The Triton kernels plug into the engine: same tokens and logits as the torch references.

Runs under the Triton interpreter on a CPU (tests/conftest.py sets TRITON_INTERPRET=1), or
compiled on a GPU. Kept small: the interpreter is slow.
"""
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
pytest.importorskip("engine.core.factory")

from runtime_reference import StepRecorder  # noqa: E402

from engine.core.system import SystemSpec  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.specs.loader import load_model_spec  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
RUNNABLE = DEVICE == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


@pytest.mark.skipif(not RUNNABLE, reason="needs CUDA or TRITON_INTERPRET=1")
# 4 heads over 4 KV heads, and over 2 (GQA); opt-tiny on the Triton kernels stays in the default tier in
# test_runtime_varlen_prefill.py
@pytest.mark.parametrize("name", [pytest.param("opt-tiny", marks=pytest.mark.slow), "llama-tiny"])
def test_engine_runs_on_triton_kernels(name):
    # n=2 with random sampling: prefill, cache writes, paged decode and copy-on-write all run
    spec = load_model_spec(name)
    system = SystemSpec("vLLM", "vllm", block_size=4)
    prompts = [[5, 6, 7, 8, 9, 10], [42]]
    runs = {}
    for backend in ("triton", "torch"):
        engine = Engine(spec, system, DEVICE, dtype=torch.float32, num_gpu_blocks=16, num_cpu_blocks=4,
                        attention_backend=backend)
        steps = StepRecorder(engine.runner)
        runs[backend] = (engine.generate(prompts, 4, n=2, sampling="random"), steps)
    assert runs["triton"][0] == runs["torch"][0]
    assert any(b.blocks_to_copy for b in runs["triton"][1].batches)
    for seq_id, steps in runs["triton"][1].steps.items():
        for (_, logits, _), (_, ref_logits, _) in zip(steps, runs["torch"][1].steps[seq_id]):
            torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=0)


@pytest.mark.skipif(not RUNNABLE, reason="needs CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("sampling", ["greedy", "random"])
def test_a_speculating_engine_verifies_with_the_triton_rejection_kernel(monkeypatch, sampling):
    """Triton kernels (auto on CUDA, or interpreted) choose through the Triton rejection sampler, the torch
    references through the torch one; from the same draws, the same tokens."""
    import dataclasses

    from engine.core.speculative import SpeculativeSpec
    from engine.kernels import rejection, rejection_sampler

    calls = []
    for module, name in ((rejection, "rejection_sample_ref"), (rejection, "rejection_sample_greedy_ref"),
                         (rejection_sampler, "rejection_sample_triton"),
                         (rejection_sampler, "rejection_sample_greedy_triton")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _f=original, _n=name: calls.append(_n) or _f(*a))
    spec = load_model_spec("llama-tiny")
    system = dataclasses.replace(SystemSpec("vLLM", "vllm", block_size=4),
                                 speculative=SpeculativeSpec("ngram", 2, (0.5, 0.5)))
    prompts = [[5, 6, 5, 6, 5], [42, 43]]
    runs = {}
    for backend in ("auto", "torch"):
        calls.clear()
        engine = Engine(spec, system, DEVICE, dtype=torch.float32, num_gpu_blocks=16, attention_backend=backend)
        runs[backend] = engine.generate(prompts, 4, sampling=sampling)
        assert calls and {name.endswith("_triton") for name in calls} == {backend == "auto"}
    assert runs["auto"] == runs["torch"]
