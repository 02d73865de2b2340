"""Run Triton kernels in the interpreter unless a compiled (CUDA) run is asked for.

Set before any test module imports a @triton.jit kernel, which is when Triton decides.
SERVESIM_COMPILED=1 (benchmarks/gpu/gpu_check.py) keeps kernels compiled on the GPU.
"""
import os

import pytest

from tests.helpers.tiers import COLLECTED

if os.environ.get("SERVESIM_COMPILED") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    config.stash[COLLECTED] = list(items)


@pytest.fixture
def one_cpu_thread():
    """Tiny models on one torch thread: more only spin against each other (and a busy CI box)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def opt13b():
    """The paper's OPT-13B spec (the calibrate and reproduce tests price it)."""
    from engine.specs.loader import load_model_spec

    return load_model_spec("opt-13b")


@pytest.fixture(scope="module")
def a100():
    """The A100-40GB spec sheet."""
    from calibrate.hardware.hardware import load_hardware

    return load_hardware("a100-40gb")
