"""Registers and spills of the engine's Triton kernels built for a GPU, on a machine without one.

Compiles each kernel ahead of time for sm_90 (H100/H200) at the shapes the engine launches
(OPT-13B's 40 heads x 128, fp16; a GQA head group; the fp32 test path), specialized as Triton's
JIT specializes a real launch (16-byte aligned pointers and strides, unit strides as constants),
and prints what `ptxas -v` reports. A tile that spills, or that takes so many registers that
one program fills an SM, shows here before any GPU time is spent.

    python benchmarks/gpu/kernel_registers.py [--quick]

Needs triton's bundled ptxas (no GPU, no CUDA driver). TRITON_INTERPRET must be unset: the
script unsets it and re-runs itself if needed. Prints a table; fails only if nothing compiles.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

if os.environ.pop("TRITON_INTERPRET", None) is not None:  # interpreted kernels cannot be compiled
    os.execv(sys.executable, [sys.executable, *sys.argv])
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when unset; 1 was the default

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from engine.kernels import paged_attention, varlen_prefill  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
UNIT_STRIDES = ("stride_qd", "stride_od", "stride_kd", "stride_vd", "stride_bb")
FLOATS = ("out_ptr", "query_ptr", "key_cache_ptr", "value_cache_ptr")
INT_POINTERS = ("block_tables_ptr", "cu_seqlens_ptr", "context_lens_ptr")
PARTIALS = ("max_ptr", "sum_ptr", "acc_ptr")


def ptxas() -> str | None:
    folder = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    for name in ("ptxas-blackwell", "ptxas"):  # the newer one reads the newest PTX
        if (folder / name).exists():
            return str(folder / name)
    return None


def signature(fn, dtype: str, constants: dict) -> tuple[dict, dict]:
    """Argument types, and the divisibility hints a real launch's aligned tensors would give."""
    types = {}
    for name in fn.arg_names:
        if name in constants:
            types[name] = "constexpr"
        elif name in FLOATS:
            types[name] = f"*{dtype}"
        elif name in INT_POINTERS:
            types[name] = "*i32"
        elif name in PARTIALS:
            types[name] = "*fp32"
        else:
            types[name] = "fp32" if name == "scale_log2e" else "i32"
    aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
               if name not in constants and (types[name].startswith("*") or
                                             (name.startswith("stride") and name != "stride_bs"))}
    return types, aligned


def registers(fn, dtype: str, constants: dict, num_warps: int) -> str:
    """ptxas's 'Used N registers' and spill line for one build."""
    constants = {**constants, **{s: 1 for s in UNIT_STRIDES if s in fn.arg_names}}
    types, aligned = signature(fn, dtype, constants)
    kernel = triton.compile(ASTSource(fn, types, constants, aligned), target=TARGET,
                            options=dict(num_warps=num_warps))
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as handle:
        handle.write(kernel.asm["ptx"])
    report = subprocess.run([ptxas(), "--gpu-name", "sm_90a", "-v", handle.name, "-o", os.devnull],
                            capture_output=True, text=True).stderr
    os.unlink(handle.name)
    used = next((line.split("Used ")[1].split(",")[0] for line in report.splitlines() if "Used " in line), "?")
    spills = next((line.split("|")[0].split(",")[-1].strip() if "|" in line else line.split(",", 1)[-1].strip()
                   for line in report.splitlines() if "spill stores" in line), "?")
    return f"{used:>14}  {spills}"


def builds(quick: bool) -> list[tuple[str, object, str, dict, int]]:
    decode = dict(BLOCK_SIZE=16, GROUP=1, GROUP_P2=1, HEAD_DIM=128, HEAD_P2=128, TILE=64, USE_DOT=False,
                  DOT_PRECISION="tf32")
    gqa = dict(decode, GROUP=4, GROUP_P2=4, TILE=16)
    dot = dict(decode, GROUP_P2=16, USE_DOT=True)
    rows = [
        ("prefill fp16 d128 64x64 w4", varlen_prefill._prefill_kernel, "fp16",
         dict(BLOCK_SIZE=16, GROUP=1, HEAD_DIM=128, HEAD_P2=128, BLOCK_M=64, BLOCK_N=64, DOT_PRECISION="tf32"), 4),
        ("decode one pass fp16 d128 t64 w8", paged_attention._paged_decode_kernel, "fp16", decode, 8),
        ("decode partition fp16 d128 t64 w8", paged_attention._paged_decode_partition_kernel, "fp16",
         dict(decode, NUM_HEADS=40, PARTITION=256), 8),
        ("decode reduce fp16 d128 64 parts", paged_attention._paged_decode_reduce_kernel, "fp16",
         dict(NUM_HEADS=40, PARTS_P2=64, PARTITION=256, HEAD_DIM=128, HEAD_P2=128), 4),
    ]
    if quick:
        return rows
    return rows + [
        ("prefill bf16 d128 64x64 w4", varlen_prefill._prefill_kernel, "bf16",
         dict(BLOCK_SIZE=16, GROUP=1, HEAD_DIM=128, HEAD_P2=128, BLOCK_M=64, BLOCK_N=64, DOT_PRECISION="tf32"), 4),
        ("prefill fp16 d128 128x64 w8", varlen_prefill._prefill_kernel, "fp16",
         dict(BLOCK_SIZE=16, GROUP=1, HEAD_DIM=128, HEAD_P2=128, BLOCK_M=128, BLOCK_N=64, DOT_PRECISION="tf32"), 8),
        ("prefill fp16 d256 64x32 w4", varlen_prefill._prefill_kernel, "fp16",
         dict(BLOCK_SIZE=16, GROUP=1, HEAD_DIM=256, HEAD_P2=256, BLOCK_M=64, BLOCK_N=32, DOT_PRECISION="tf32"), 4),
        ("prefill fp32 d128 32x32 w4", varlen_prefill._prefill_kernel, "fp32",
         dict(BLOCK_SIZE=16, GROUP=1, HEAD_DIM=128, HEAD_P2=128, BLOCK_M=32, BLOCK_N=32, DOT_PRECISION="ieee"), 4),
        ("decode one pass fp16 gqa4 t16 w4", paged_attention._paged_decode_kernel, "fp16", gqa, 4),
        ("decode one pass dot fp16 d128 t64 w4", paged_attention._paged_decode_kernel, "fp16", dot, 4),
        ("decode partition dot fp16 d128 t64 w4", paged_attention._paged_decode_partition_kernel, "fp16",
         dict(dot, NUM_HEADS=40, PARTITION=256), 4),
        ("decode partition fp16 gqa4 t16 w4", paged_attention._paged_decode_partition_kernel, "fp16",
         dict(gqa, NUM_HEADS=32, PARTITION=256), 4),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the OPT-13B fp16 builds only")
    args = parser.parse_args()
    if ptxas() is None:
        print("no ptxas in triton's nvidia backend: nothing to compile")
        return 1
    print(f"Triton {triton.__version__} kernels built for sm_90 ({Path(ptxas()).name}), registers per thread")
    print(f"{'kernel':<38} {'registers':>14}  spills")
    for label, fn, dtype, constants, num_warps in builds(args.quick):
        print(f"{label:<38} {registers(fn, dtype, constants, num_warps)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
