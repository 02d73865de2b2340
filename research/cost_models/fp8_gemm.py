"""The FP8 GEMM fit's held-out error, each figure beside its target and today's spec-sheet roofline's.

    python research/cost_models/fp8_gemm.py [--write]

Refits calibrate/parts/fp8_gemm.py's model from the shipped table (calibrate/gemm_tables/h100_fp8.csv, its sources
in the README there) and judges it two ways per kernel (research/judging/fp8_gemm_heldout.py): the largest M held
out, and each weight shape (N, K) held out in turn. The priced kernel (vLLM's CUTLASS scaled_mm with per-tensor
weight scales, the input quantized per token) is judged with the two shares its rows cannot tell held at the
roofline's, as the shipped fit holds them (research/judging/fp8_gemm_file.py), and with every share free beside it;
the block-scaled CUTLASS kernel is judged free and not priced. Then what the fit changes in the clock: a first
token (short and long) and a Llama-3-70B decode step, before and after. `--write` makes the shipped fit file again
(calibrate/gemm_tables/h100_fp8.fit.yaml). Target: held-out mean |error| <= 10%. Deterministic (a least-squares
fit on a grid). Prints numbers; fails on none.
"""
from __future__ import annotations

import sys

from calibrate.clock.roofline import RooflineCostModel
from calibrate.hardware.hardware import available_hardware, load_hardware
from calibrate.hardware.precision import Precision
from calibrate.parts.fp8_gemm import load_fp8_gemms
from engine.core.batch import Batch
from engine.specs.loader import load_model_spec
from research.judging.fp8_gemm_file import HELD, MEASURED_ON, PRICED_KERNEL, write_fp8_gemm_file
from research.judging.fp8_gemm_fit import Held, fit_fp8_gemms
from research.judging.fp8_gemm_heldout import each_shape, largest_m
from research.judging.gemm_table import H100_FP8, kernel_rows, read_gemm_table

TARGET = 0.10
BLOCK_KERNEL = "cutlass_scaled_mm_blockwise"


def report_kernel(label: str, rows, hw, held: Held) -> None:
    fit = fit_fp8_gemms(rows, hw, held)
    quant = "" if fit.quant is None else (
        f"; quantization {fit.quant[0] * 1e6:.2f} us + its bytes at {fit.quant[1]:.3f} of HBM"
        f"{' (held)' if held.quant_bandwidth_efficiency is not None else ''}")
    print(f"\n{label}: {len(rows)} rows; fit on all: compute {fit.compute_efficiency:.3f} of the FP8 peak"
          f"{' (held)' if held.compute_efficiency is not None else ''}, bandwidth {fit.bandwidth_efficiency:.3f}, "
          f"ridge {fit.ridge_efficiency:.3f}, latency {fit.gemm_latency_s * 1e6:.2f} us{quant}")
    print(f"  {'held out':<24} {'rows':>4} {'mean':>6} {'p95':>6} {'target':>6} {'':>4} "
          f"{'roofline mean':>13} {'roofline p95':>12}")
    for fold in (largest_m(rows, hw, held), each_shape(rows, hw, held)):
        s = fold.summary()
        print(f"  {s['what']:<24} {s['rows']:>4} {s['mean']:>6.1%} {s['p95']:>6.1%} {TARGET:>6.0%} "
              f"{'met' if s['mean'] <= TARGET else 'MISS':>4} {s['roofline_mean']:>13.1%} {s['roofline_p95']:>12.1%}")


def report_carry() -> None:
    print(f"\ncarried by each sheet's shares (latencies as seconds); judged only on {MEASURED_ON}:")
    for name in available_hardware():
        hw = load_hardware(name)
        if hw.peak_flops_fp8 is not None:
            print(f"  {name:<14} FP8 {hw.peak_flops_fp8 / 1e12:>7.1f} TFLOP/s, HBM {hw.hbm_bytes_per_s / 1e12:.2f} TB/s"
                  f"  {'measured' if name == MEASURED_ON else 'unjudged: no FP8 GEMM of it measured here'}")


def report_clock() -> None:
    """The device seconds of three iterations, W8A8 priced on the sheet's rate (before) and by the fit (after)."""
    h100, fp8 = load_hardware("h100-sxm"), Precision("fp8", "fp8")
    cases = [(f"Llama-3-8B, a {n:,}-token first prompt, 1 H100", "llama-3-8b", 1, Batch(
                 prefill_seq_ids=[0], prefill_lens=[n], prefill_sample_ids=[(0,)], num_running_groups=1))
             for n in (128, 2048)]
    cases.append(("Llama-3-70B, a decode step of 64 at 1,024 tokens, tp 4", "llama-3-70b", 4, Batch(
                  decode_seq_ids=list(range(64)), decode_context_lens=[1024] * 64, num_running_groups=64)))
    print("\nwhat it changes (device seconds of one iteration, roofline defaults, FP8 weights and KV cache):")
    for label, name, tp, batch in cases:
        model = load_model_spec(name)
        before, after = (RooflineCostModel(model, h100, tp=tp, precision=fp8, fp8_gemms=measured)
                         for measured in (False, True))
        old, new = before.breakdown(batch).device, after.breakdown(batch).device
        print(f"  {label}: linear {old['linear'] * 1e3:.2f} -> {new['linear'] * 1e3:.2f} ms, device "
              f"{sum(old.values()) * 1e3:.2f} -> {sum(new.values()) * 1e3:.2f} ms "
              f"({sum(new.values()) / sum(old.values()) - 1:+.0%})")


def main(argv: list[str]) -> int:
    if "--write" in argv:
        write_fp8_gemm_file()
        load_fp8_gemms.cache_clear()
    hw, rows = load_hardware(MEASURED_ON), read_gemm_table(H100_FP8)
    print(f"table: calibrate/gemm_tables/{H100_FP8.name} ({len(rows)} rows); judged on {hw.name}")
    priced = kernel_rows(rows, PRICED_KERNEL)
    report_kernel(f"{PRICED_KERNEL} (priced), shares held at the roofline's", priced, hw, HELD)
    report_kernel(f"{PRICED_KERNEL}, every share free", priced, hw, Held())
    report_kernel(f"{BLOCK_KERNEL} (block-scaled, not priced), every share free", kernel_rows(rows, BLOCK_KERNEL),
                  hw, Held())
    report_carry()
    report_clock()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
