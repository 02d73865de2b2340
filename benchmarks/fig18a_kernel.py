"""Fig. 18a as a microbenchmark: the engine's paged decode attention against dense attention.

One layer of decode attention at the paper's shapes (batch 8 and 32, contexts 64, 128 and 256; OPT-13B's
40 heads of 128), on whatever device runs it: the engine's Triton kernel on a GPU, its torch path on a
CPU (`engine.kernels.paged_attention_decode`, backend auto). The paged side reads K/V through block
tables of scattered blocks, as a serving pool holds them; the dense side is
`scaled_dot_product_attention` over contiguous K/V of the same sizes. Prints both medians, their ratio,
and the roofline's A100 figures for the same shapes (calibrate/ablations.py). The paper measured its
paged kernel 20-26% slower than FasterTransformer's dense one on an A100.

    PYTHONPATH=. python benchmarks/fig18a_kernel.py [--device auto|cpu|cuda] [--block-size 16] [--repeats 30]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from calibrate.ablations import FIG18A_BATCHES, FIG18A_CONTEXTS, kernel_latency
from calibrate.device import device_name
from calibrate.hardware import load_hardware
from engine.kernels import paged_attention_decode
from engine.kernels.backend import resolve_backend
from engine.specs.loader import load_model_spec


def timed(fn, device: torch.device, repeats: int, warmup: int = 3) -> float:
    """Median seconds of fn() over `repeats` runs, each synchronized on a GPU."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def shape_inputs(batch: int, context: int, heads: int, head_dim: int, block_size: int, dtype, device, gen):
    """Query, the paged cache (blocks in a shuffled order) with its tables, and the same K/V dense."""
    blocks_per_seq = -(-context // block_size)
    num_blocks = batch * blocks_per_seq
    query = torch.randn(batch, heads, head_dim, generator=gen).to(device, dtype)
    key_cache = torch.randn(num_blocks, block_size, heads, head_dim, generator=gen).to(device, dtype)
    value_cache = torch.randn(num_blocks, block_size, heads, head_dim, generator=gen).to(device, dtype)
    tables = torch.randperm(num_blocks, generator=gen).view(batch, blocks_per_seq).to(device, torch.int32)
    context_lens = torch.full((batch,), context, dtype=torch.int32, device=device)

    def dense(cache):  # [batch, heads, context, head_dim], contiguous, as a dense kernel reads it
        rows = cache[tables.long()].reshape(batch, blocks_per_seq * block_size, heads, head_dim)[:, :context]
        return rows.transpose(1, 2).contiguous()

    return query, key_cache, value_cache, tables, context_lens, dense(key_cache), dense(value_cache)


def time_shape(inputs, scale: float, backend: str, device: torch.device, repeats: int) -> tuple[float, float]:
    """(dense seconds, paged seconds) for one shape's inputs (shape_inputs)."""
    q, key_cache, value_cache, tables, lens, k, v = inputs
    q4 = q.unsqueeze(2)  # [batch, heads, 1, head_dim]
    with torch.inference_mode():
        dense_s = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q4, k, v, scale=scale),
                        device, repeats)
        paged_s = timed(lambda: paged_attention_decode(q, key_cache, value_cache, tables, lens, scale, backend,
                                                       check_bounds=False), device, repeats)
    return dense_s, paged_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="auto (cuda if present), cpu or cuda")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="CPU: torch threads (a shared machine: 1)")
    args = parser.parse_args()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else "cpu" if args.device == "auto" else args.device)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    model = load_model_spec("opt-13b")
    heads, head_dim = model.num_heads, model.head_dim
    scale = head_dim ** -0.5
    backend = resolve_backend("auto", device)
    gen = torch.Generator().manual_seed(0)
    print(f"Fig. 18a: one layer of OPT-13B decode attention ({heads} heads x {head_dim}, {dtype}), block size "
          f"{args.block_size}, on {device_name(str(device))} ({backend} paged kernel), median of {args.repeats}")
    print(f"{'batch':>5} {'context':>7} {'dense_us':>9} {'paged_us':>9} {'ratio':>6}   "
          f"{'A100 model: dense':>17} {'paged':>6} {'ratio':>6}")
    a100 = load_hardware("a100-40gb")
    for batch in FIG18A_BATCHES:
        for context in FIG18A_CONTEXTS:
            inputs = shape_inputs(batch, context, heads, head_dim, args.block_size, dtype, device, gen)
            dense_s, paged_s = time_shape(inputs, scale, backend, device, args.repeats)
            model_k = kernel_latency(model, a100, batch, context, args.block_size)
            print(f"{batch:>5} {context:>7} {dense_s * 1e6:>9.1f} {paged_s * 1e6:>9.1f} {paged_s / dense_s:>6.2f}   "
                  f"{model_k.dense_s * 1e6:>17.1f} {model_k.paged_s * 1e6:>6.1f} {model_k.ratio:>6.2f}")


if __name__ == "__main__":
    main()
