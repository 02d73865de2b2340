"""Fig. 18a as a microbenchmark: the engine's paged decode attention against dense attention.

One layer of decode attention at the paper's shapes (batch 8 and 32, contexts 64, 128 and 256; OPT-13B's
40 heads of 128), on whatever device runs it: the engine's Triton kernel on a GPU, its torch path on a
CPU (`engine.kernels.paged_attention_decode`, backend auto). The paged side reads K/V through block
tables of scattered blocks, as a serving pool holds them; the dense side is
`scaled_dot_product_attention` over contiguous K/V of the same sizes (both built, and timed, by
benchmarks/gpu/gpu_check.py's helpers: do_bench on a GPU, medians on a CPU). Prints both, their ratio,
and the roofline's A100 figures for the same shapes (sim/reproduce/ablations.py). The paper measured its
paged kernel 20-26% slower than FasterTransformer's dense one on an A100; the target is 1.3x.
On a GPU the paged side is timed twice: one pass (one program per sequence and head) and as chosen
automatically (flash-decoding where one pass leaves the GPU underfilled); `split` is the partition
size that choice took (0: one pass).

    PYTHONPATH=. python benchmarks/gpu/fig18a_kernel.py [--device auto|cpu|cuda] [--block-size 16] [--repeats 30]
        [--quick]
"""
from __future__ import annotations

import argparse

import torch

from benchmarks.gpu.gpu_check import DECODE_TARGET, auto_partition
from benchmarks.gpu.kernel_inputs import build_decode, dense_attention
from benchmarks.gpu.kernel_timing import time_cpu, time_gpu
from calibrate.hardware.device import device_name
from calibrate.hardware.hardware import load_hardware
from engine.kernels import paged_attention_decode
from engine.kernels.backend import resolve_backend
from engine.specs.loader import load_model_spec
from sim.reproduce.ablations import FIG18A_BATCHES, FIG18A_CONTEXTS, kernel_latency


def time_shape(batch: int, context: int, block_size: int, device: torch.device, repeats: int) -> dict:
    """Dense, paged (and on a GPU one-pass) us for one Fig. 18a shape: OPT-13B's 40 heads of 128,
    blocks in shuffled order."""
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    paged, dense = build_decode(batch, context, 40, 128, block_size, dtype, device.type, seed=batch)
    query, key_cache, value_cache, tables, lens, scale = paged
    backend = resolve_backend("auto", device)

    def paged_fn(partition_size="auto"):  # as the runner calls it: metadata checked on the host once per step
        return paged_attention_decode(query, key_cache, value_cache, tables, lens, scale, backend,
                                      check_bounds=False, partition_size=partition_size)

    def dense_fn():
        return dense_attention(*dense, scale)

    with torch.inference_mode():
        if device.type == "cuda":
            split = auto_partition(paged, context) or 0
            return dict(dense=time_gpu(dense_fn), paged=time_gpu(paged_fn),
                        one_pass=time_gpu(lambda: paged_fn(None)), split=split)
        return dict(dense=time_cpu(dense_fn, repeats), paged=time_cpu(paged_fn, repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="auto (cuda if present), cpu or cuda")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=30, help="CPU: timed runs per shape (a GPU uses do_bench)")
    parser.add_argument("--threads", type=int, default=1, help="CPU: torch threads (a shared machine: 1)")
    parser.add_argument("--quick", action="store_true", help="batch 8 at contexts 64 and 256 only")
    args = parser.parse_args()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else "cpu" if args.device == "auto" else args.device)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    model, a100 = load_model_spec("opt-13b"), load_hardware("a100-40gb")
    print(f"Fig. 18a: one layer of OPT-13B decode attention (40 heads x 128, "
          f"{'fp16' if device.type == 'cuda' else 'fp32'}), block size {args.block_size}, on "
          f"{device_name(str(device))} ({resolve_backend('auto', device)} paged kernel), times in us")
    cuda = device.type == "cuda"
    print(f"{'batch':>5} {'context':>7} {'dense_us':>9} {'paged_us':>9} {'ratio':>6}"
          + (f" {'1pass_us':>9} {'ratio':>6} {'split':>5}" if cuda else "")
          + f"   {'A100 model: dense':>17} {'paged':>6} {'ratio':>6}")
    batches, contexts = ((FIG18A_BATCHES[:1], (FIG18A_CONTEXTS[0], FIG18A_CONTEXTS[-1])) if args.quick
                         else (FIG18A_BATCHES, FIG18A_CONTEXTS))
    for batch in batches:
        for context in contexts:
            t = time_shape(batch, context, args.block_size, device, args.repeats)
            predicted = kernel_latency(model, a100, batch, context, args.block_size)
            one_pass = (f" {t['one_pass']:>9.1f} {t['one_pass'] / t['dense']:>6.2f} {t['split']:>5}"
                        if cuda else "")
            print(f"{batch:>5} {context:>7} {t['dense']:>9.1f} {t['paged']:>9.1f} {t['paged'] / t['dense']:>6.2f}"
                  f"{one_pass}   {predicted.dense_s * 1e6:>17.1f} {predicted.paged_s * 1e6:>6.1f} "
                  f"{predicted.ratio:>6.2f}")
    print(f"target: paged/dense <= {DECODE_TARGET} (the paper's CUDA kernel: 1.20-1.26)"
          + ("" if cuda else "; this CPU run times the torch path, not a GPU figure"))


if __name__ == "__main__":
    main()
