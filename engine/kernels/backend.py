"""Which implementation runs a kernel call: Triton or the torch reference."""
from __future__ import annotations

import functools
import os

import torch

BACKENDS = ("auto", "triton", "torch")


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401  (harmless: only @triton.jit modules must wait for TRITON_INTERPRET)
    except ImportError:
        return False
    return True


def interpreting() -> bool:
    # Read at call time: tests and scripts set it after this module is imported.
    return os.environ.get("TRITON_INTERPRET") == "1"


def resolve_backend(backend: str, device: torch.device) -> str:
    """'auto' picks Triton where it can run (CUDA tensors, or the interpreter), else torch."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "torch":
        return "torch"
    runnable = device.type == "cuda" or interpreting()
    if backend == "auto":
        return "triton" if runnable and triton_available() else "torch"
    if not triton_available():
        raise ValueError("backend='triton' but triton is not installed; use backend='auto' or 'torch'")
    if not runnable:
        raise ValueError(
            f"backend='triton' needs CUDA tensors or TRITON_INTERPRET=1, got tensors on {device}"
        )
    return "triton"
