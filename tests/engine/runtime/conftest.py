"""Fixtures of the runtime tests: the tiny models.

The runtime tests run the kernels' torch references (attention_backend="torch"): tests/conftest.py
turns on the Triton interpreter, which is far too slow for whole-model runs. One test in
test_runtime_triton.py plugs the Triton kernels in.

`spec` is one tiny decoder of every family the engine builds (Qwen3's dense and mixture both); `attention_spec`
only those whose attention differs (OPT's heads, LLaMA's grouped KV heads, Qwen3's heads wider than hidden /
heads), for the tests that run the interpreted kernels: the other families' attention is LLaMA's.
"""
import pytest

pytest.importorskip("torch")

from engine.specs.loader import load_model_spec  # noqa: E402

TINY_SPECS = ["opt-tiny", "llama-tiny", "qwen2-tiny", "phi-tiny", "mixtral-tiny", "qwen3-tiny", "qwen3-moe-tiny"]


@pytest.fixture(params=TINY_SPECS)
def spec(request):
    return load_model_spec(request.param)


@pytest.fixture(params=["opt-tiny", "llama-tiny", "qwen3-tiny"])
def attention_spec(request):
    return load_model_spec(request.param)


@pytest.fixture
def opt_tiny():
    return load_model_spec("opt-tiny")


@pytest.fixture(autouse=True)
def _single_thread(one_cpu_thread):
    yield
