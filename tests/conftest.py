"""Run Triton kernels in the interpreter unless a compiled (CUDA) run is asked for.

Set before any test module imports a @triton.jit kernel, which is when Triton decides.
SERVESIM_COMPILED=1 (benchmarks/gpu_check.py) keeps kernels compiled on the GPU.
"""
import os

if os.environ.get("SERVESIM_COMPILED") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")
