"""Fixtures of the runtime tests: the tiny models.

The runtime tests run the kernels' torch references (attention_backend="torch"): tests/conftest.py
turns on the Triton interpreter, which is far too slow for whole-model runs. One test in
test_runtime_triton.py plugs the Triton kernels in.
"""
import pytest

pytest.importorskip("torch")

from engine.specs.loader import load_model_spec  # noqa: E402


@pytest.fixture(params=["opt-tiny", "llama-tiny"])
def spec(request):
    return load_model_spec(request.param)


@pytest.fixture
def opt_tiny():
    return load_model_spec("opt-tiny")


@pytest.fixture(autouse=True)
def _single_thread(one_cpu_thread):
    yield
