"""Variable-length prefill attention against SDPA over the same tokens: k prompts of T tokens in all.

For each total T and prompt count k, the T tokens are split into k prompts of T/k (k = 1 is
one prompt of T). The engine's call (`engine.kernels.prefill_attention`, backend auto: the
Triton kernel on a GPU, the torch reference on a CPU) attends all k in one call, reading K/V
through shuffled block tables as a serving pool holds them; the dense side is one
`scaled_dot_product_attention(is_causal=True)` over contiguous [k, heads, T/k, head_dim] K/V.
Printed: both times, their ratio, the same prompts as one call each (`per_prompt_us`, the
engine's way before), and the varlen call's time against its own one-prompt time at the same T
(`vs_one`; the target: k prompts within 15% of one; at the kernel k prompts do 1/k of
one prompt's attention work, so anything much above 1 is per-prompt overhead).

    PYTHONPATH=. python benchmarks/gpu/prefill_kernel.py [--device auto|cpu|cuda] [--quick] [--repeats 10]

On a CPU it times the torch path only: a check that the script works, not a GPU figure.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.gpu.kernel_inputs import dense_kv, shuffled_pool  # noqa: E402
from benchmarks.gpu.kernel_timing import format_table, time_cpu, time_gpu  # noqa: E402
from engine.kernels import prefill_attention  # noqa: E402
from engine.kernels.backend import resolve_backend  # noqa: E402

RATIO_TARGET = 1.3  # the kernel-against-dense target, stated for paged decode (gpu_check.DECODE_TARGET)
PROMPTS_TARGET = 1.15  # k prompts of T tokens within 15% of one prompt of T
GPU_TOTALS, GPU_PROMPTS = (512, 2048), (1, 2, 4, 8)
CPU_TOTALS, CPU_PROMPTS = (128, 256), (1, 4)
MISMATCH_ATOL = {torch.float16: 1e-2, torch.float32: 1e-4}
# (BLOCK_M, BLOCK_N, num_warps) timed on a GPU beside the default: all build without spills for sm_90
# (benchmarks/gpu/kernel_registers.py), so the session's numbers can pick the default.
SWEEP_TILES = ((64, 64, 4), (128, 64, 8), (64, 32, 4), (128, 32, 4))


def build_prefill(num_prompts, prompt_len, heads, head_dim, block_size, dtype, device, seed):
    """A paged pool holding every prompt's K/V in shuffled block order, the concatenated queries,
    and the same K/V laid out densely for SDPA."""
    gen = torch.Generator(device=device).manual_seed(seed)
    key_cache, value_cache, block_tables, context_lens = shuffled_pool(
        num_prompts, prompt_len, heads, head_dim, block_size, dtype, device, gen)
    cu_seqlens = torch.arange(0, num_prompts + 1, dtype=torch.int32, device=device) * prompt_len
    query = torch.randn(num_prompts * prompt_len, heads, head_dim, generator=gen, device=device, dtype=dtype)
    dense_k, dense_v = dense_kv(key_cache, value_cache, block_tables, context_lens, block_size, prompt_len)
    dense_q = query.view(num_prompts, prompt_len, heads, head_dim).transpose(1, 2)
    varlen = (query, key_cache, value_cache, block_tables, cu_seqlens, context_lens, head_dim ** -0.5)
    return varlen, (dense_q, dense_k, dense_v)


def measure(total, num_prompts, cuda, heads, head_dim, dtype, block_size=16, repeats=10) -> dict:
    device = torch.device("cuda" if cuda else "cpu")
    prompt_len = total // num_prompts
    varlen, dense = build_prefill(num_prompts, prompt_len, heads, head_dim, block_size, dtype,
                                  device.type, seed=total + num_prompts)
    scale = varlen[-1]
    backend = resolve_backend("auto", device)
    host_lens = ([prompt_len] * num_prompts, [prompt_len] * num_prompts)

    def varlen_fn():  # as the model calls it: metadata checked on the host once per step
        return prefill_attention(*varlen, backend=backend, check_bounds=False, max_query_len=prompt_len,
                                 max_context=prompt_len, host_lens=host_lens)

    query, key_cache, value_cache, tables, _, lens, _ = varlen
    one_prompt = torch.tensor([0, prompt_len], dtype=torch.int32, device=query.device)

    def per_prompt_fn():  # the engine before one call per iteration: a call per prompt
        for p in range(num_prompts):
            prefill_attention(query[p * prompt_len:(p + 1) * prompt_len], key_cache, value_cache,
                              tables[p:p + 1], one_prompt, lens[p:p + 1], scale, backend=backend,
                              check_bounds=False, max_query_len=prompt_len, max_context=prompt_len,
                              host_lens=([prompt_len], [prompt_len]))

    def dense_fn():
        return F.scaled_dot_product_attention(*dense, is_causal=True, scale=scale)

    extra = {}
    with torch.inference_mode():
        if cuda:
            varlen_us, dense_us, per_prompt_us = time_gpu(varlen_fn), time_gpu(dense_fn), time_gpu(per_prompt_fn)
            extra = best_tiles(varlen, prompt_len)
        else:
            for _ in range(3):  # glibc settles its mmap threshold for these buffers after a few calls
                varlen_fn(), dense_fn()
            varlen_us, dense_us = time_cpu(varlen_fn, repeats), time_cpu(dense_fn, repeats)
            per_prompt_us = time_cpu(per_prompt_fn, repeats)
        expected = dense_fn().transpose(1, 2).reshape(total - total % num_prompts, heads, head_dim)
        difference = float((varlen_fn().float() - expected.float()).abs().max())
    return dict(tokens=total, prompts=num_prompts, varlen_us=varlen_us, sdpa_us=dense_us,
                per_prompt_us=per_prompt_us, ratio=varlen_us / dense_us, vs_one=float("nan"), max_abs_diff=difference,
                match=difference <= MISMATCH_ATOL[dtype], **extra)


def best_tiles(varlen, prompt_len: int) -> dict:
    """The fastest of SWEEP_TILES for this shape, straight through the Triton launcher."""
    from engine.kernels.varlen_prefill import prefill_attention_triton

    times = {tiles: time_gpu(lambda tiles=tiles: prefill_attention_triton(
        *varlen, prompt_len, prompt_len, tiles=tiles)) for tiles in SWEEP_TILES}
    best = min(times, key=times.get)
    return dict(best_tiles="x".join(map(str, best)), best_us=times[best])


def prefill_rows(cuda: bool, quick: bool, repeats: int = 10) -> tuple[list[dict], str]:
    """Every (T, k) row, each with its time against the one-prompt row of the same T, and a title."""
    if cuda:
        totals, prompts = (GPU_TOTALS[-1:], (1, 8)) if quick else (GPU_TOTALS, GPU_PROMPTS)
        heads, head_dim, dtype = 40, 128, torch.float16
        title = (f"varlen prefill ({resolve_backend('auto', torch.device('cuda'))}) vs SDPA on "
                 f"{torch.cuda.get_device_name()}: {heads} heads x {head_dim}, fp16, block 16, us")
    else:
        totals, prompts = (CPU_TOTALS[:1], CPU_PROMPTS) if quick else (CPU_TOTALS, CPU_PROMPTS)
        heads, head_dim, dtype = 8, 64, torch.float32
        title = f"CPU path: torch reference vs SDPA, {heads} heads x {head_dim}, fp32, us (not a GPU figure)"
    rows = [measure(total, k, cuda, heads, head_dim, dtype, repeats=repeats) for total in totals for k in prompts]
    one = {row["tokens"]: row["varlen_us"] for row in rows if row["prompts"] == 1}
    for row in rows:
        row["vs_one"] = row["varlen_us"] / one[row["tokens"]]
    return rows, title


def targets_line() -> str:
    return (f"targets: varlen/SDPA ratio <= {RATIO_TARGET} (the paged decode kernel's target); "
            f"k prompts within {PROMPTS_TARGET:.2f}x of one prompt of the same T (vs_one)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="auto (cuda if present), cpu or cuda")
    parser.add_argument("--quick", action="store_true", help="a few shapes only")
    parser.add_argument("--repeats", type=int, default=10, help="CPU: timed runs per shape (a GPU uses do_bench)")
    parser.add_argument("--threads", type=int, default=1, help="CPU: torch threads (a shared machine: 1)")
    args = parser.parse_args()
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if not cuda:
        torch.set_num_threads(args.threads)
    rows, title = prefill_rows(cuda, args.quick, args.repeats)
    print(format_table(rows, title))
    print(targets_line())


if __name__ == "__main__":
    main()
