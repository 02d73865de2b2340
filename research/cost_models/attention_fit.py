"""The A100 attention fit's held-out error, decode and prefill, each beside its target and the roofline's defaults.

    python research/cost_models/attention_fit.py [GPU_MEASUREMENTS]

Reads Vidur's A100 attention table (GPU_MEASUREMENTS/a100-attention/attention.csv; default
../shared/reference/gpu-measurements from the repository root), fits calibrate/parts/attention_fit.py's model and
reports, per kind, the mean |error| on the held-out region (the longest decode contexts, the largest prefill
chunks) fitted on the rest, on a 5-fold random split, and in sample; the roofline's default attention
(RooflineParams, nothing fitted) priced on the same rows beside them. The decode rows are judged twice: by
today's fit (latency + bytes) and by the wave model (calibrate/parts/attention_waves.py: the kernel's grid counted in
waves over the A100's 108 SMs), on the same regions and folds. Target: held-out mean |error| <= 5%.
Deterministic (a least-squares fit, a seeded split). Prints numbers; fails on none.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from calibrate.clock.roofline import RooflineParams
from calibrate.hardware.hardware import HardwareSpec, load_hardware
from calibrate.parts.attention_fit import AttentionWork, fit_attention, heldout_errors
from calibrate.tables.attention_table import AttentionTable, read_attention_table

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT.parent / "shared" / "reference" / "gpu-measurements"
TARGET = 0.05


def roofline_errors(table: AttentionTable, hw: HardwareSpec) -> tuple[float, float]:
    """The roofline's default attention on the table's rows, per layer (RooflineCostModel's formulas): decode
    K/V bytes at its bandwidth share plus its per-block term, prefill the causal FLOPs at its compute share plus
    the cached K/V read."""
    params, shape = RooflineParams(), table.shape
    work = AttentionWork.of_table(shape)
    bandwidth, flops = hw.hbm_bytes_per_s * params.bandwidth_efficiency, hw.peak_flops * params.compute_efficiency
    d = table.decode
    blocks = d["batch"] * np.ceil(d["context"] / shape.block_size)
    tokens = d["batch"] * d["context"] + blocks * params.block_read_overhead_tokens
    decode = tokens * work.kv_bytes_per_token / bandwidth
    p = table.prefill
    hidden = shape.q_heads * shape.head_dim
    prefill = (2 * p["chunk"] * (p["chunk"] + 2 * p["cached"]) * hidden / flops
               + p["cached"] * work.kv_bytes_per_token / bandwidth)
    return (float((np.abs(decode - d["time_s"]) / d["time_s"]).mean()),
            float((np.abs(prefill - p["time_s"]) / p["time_s"]).mean()))


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else DEFAULT
    path = folder / "a100-attention" / "attention.csv"
    hw = load_hardware("a100-80gb")
    table = read_attention_table(path)
    fit = fit_attention(table, hw)
    errors = heldout_errors(table, hw)
    print(f"A100 attention table: {path} ({len(table.decode)} decode rows, {len(table.prefill)} prefill rows; "
          f"{table.shape.q_heads} query / {table.shape.kv_heads} KV heads per GPU, head dim {table.shape.head_dim})")
    print(f"fit on every row: decode latency {fit.decode_latency_s * 1e6:.1f} us, K/V bandwidth "
          f"{fit.decode_bandwidth_efficiency:.3f} of peak; prefill latency {fit.prefill_latency_s * 1e6:.1f} us, "
          f"compute {fit.prefill_compute_efficiency:.3f} of peak, K/V bandwidth "
          f"{fit.prefill_kv_bandwidth_efficiency:.3f}, output bandwidth {fit.prefill_output_bandwidth_efficiency:.3f}")
    roofline = dict(zip(("decode", "prefill"), roofline_errors(table, hw)))
    roofline["decode_waves"] = roofline["decode"]
    if fit.waves is not None:
        w = fit.waves
        print(f"waves on every row: latency {w.latency_s * 1e6:.1f} us, split {w.split_latency_s * 1e6:.1f} us, "
              f"per wave {w.wave_latency_s * 1e6:.1f} us, K/V bandwidth {w.bandwidth_efficiency:.3f} of peak; "
              f"{w.blocks_per_sm} blocks per SM, floors {', '.join(f'{f:.3f}' for f in w.floor_shares)} x SMs, "
              f"splits as for {w.heuristic_sm_multiple} x SMs, launched {w.launch_tokens} tokens wide")
    print(f"{'mean |error|':<12} {'held-out region':<26} {'held out':>9} {'target':>7} {'':>5} {'5-fold':>7} "
          f"{'in sample':>9} {'roofline defaults':>18}")
    for kind, e in errors.items():
        held = e["heldout_region"]["mean"]
        print(f"{kind:<12} {e['region']:<26} {held:>9.1%} {TARGET:>7.0%} {'met' if held <= TARGET else 'MISS':>5} "
              f"{e['kfold']['mean']:>7.1%} {e['in_sample']['mean']:>9.1%} {roofline[kind]:>18.1%}")
        print(f"{'':<12} p95 {e['heldout_region']['p95']:.1%}, signed mean {e['heldout_region']['signed_mean']:+.1%} "
              f"held out; trained region {e['trained_region']['mean']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
