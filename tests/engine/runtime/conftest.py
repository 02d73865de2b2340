"""Fixtures of the runtime tests: the tiny models.

The runtime tests run the kernels' torch references (attention_backend="torch"): tests/conftest.py
turns on the Triton interpreter, which is far too slow for whole-model runs. One test in
test_runtime_triton.py plugs the Triton kernels in.
"""
import pytest

pytest.importorskip("torch")

from engine.core.spec import load_model_spec  # noqa: E402


@pytest.fixture(params=["opt-tiny", "llama-tiny"])
def spec(request):
    return load_model_spec(request.param)


@pytest.fixture
def opt_tiny():
    return load_model_spec("opt-tiny")


@pytest.fixture(autouse=True)
def one_cpu_thread():
    # tiny models: intra-op threads only spin against each other (and a busy CI box)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
