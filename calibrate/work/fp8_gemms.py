"""An FP8 (W8A8) GEMM's work: its FLOPs, the bytes it moves, and the bytes of quantizing its input.

A GEMM of M activation rows against an N x K weight reads the FP8 weight (N K bytes) and the FP8 activations
(M K), and writes a 16-bit output (2 M N): vLLM's FP8 linear layers return the model's 16-bit dtype. Quantizing
the input dynamically per token reads the M x K 16-bit activations, writes them as FP8 and writes one 32-bit
scale per token. The counts take numbers or numpy arrays alike.
"""
from __future__ import annotations

FP8_BYTES = 1
OUTPUT_BYTES = 2  # the layer's 16-bit output
INPUT_BYTES = 2  # the 16-bit activations a quantization reads
SCALE_BYTES = 4  # one float32 scale per token


def gemm_flops(m, n, k):
    return 2.0 * m * n * k


def gemm_bytes(m, n, k):
    """FP8 weight and activations read, the 16-bit output written."""
    return FP8_BYTES * n * k + FP8_BYTES * m * k + OUTPUT_BYTES * m * n


def quant_bytes(m, k):
    """Per-token dynamic quantization of an M x K input: the 16-bit values read, FP8 values and scales written."""
    return (INPUT_BYTES + FP8_BYTES) * m * k + SCALE_BYTES * m
