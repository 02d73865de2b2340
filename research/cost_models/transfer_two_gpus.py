"""The transfer judged holding one GPU out, both ways round: a fit on Vidur's A100 tables alone predicts the H100
tables, a fit on the H100 tables alone predicts the A100's; per regime of the target's own ridge, beside the
spec-sheet roofline (RooflineParams() defaults: what a GPU nobody measured gets without a profile). What a GPU
nobody measured gets is chosen with every measured GPU held out in turn (hold_one_gpu_out.py), not by this pair.

    python research/cost_models/transfer_two_gpus.py [TABLES]   # default ../shared/reference/gpu-measurements

Targets, each printed beside its figure: LLaMA-2-7B decode 1-1,024 tokens (tp 1) and each held-out model, mean
|error| <= 5%, worst <= 10%; in every regime no worse than the roofline. Errors are per iteration (a model's layers
x one layer's non-attention operations + the embedding lookup, every tp and token count of the held-out tables),
then per operation. Prints numbers; fails on none.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from calibrate.fitting.op_fit import fit_linear_on
from calibrate.hardware.hardware import load_hardware
from calibrate.judging.op_import import load_tables
from calibrate.judging.regime_errors import two_gpu_choice
from calibrate.judging.transfer_two_gpus import GpuTables, both_ways, judgement
from calibrate.parts.transfer import LATENCY_BAND, RIDGE_BAND, ridge_tokens
from calibrate.work.layer_ops import GEMMS

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TABLES = ROOT.parent / "shared" / "reference" / "gpu-measurements"
TARGET_MEAN, TARGET_WORST = 0.05, 0.10
GPUS = (("a100", "a100-80gb"), ("h100", "h100-sxm"))


def verdict(mean: float, worst: float) -> str:
    misses = [m for m, bad in (("mean > 5%", mean > TARGET_MEAN), ("worst > 10%", worst > TARGET_WORST)) if bad]
    return "meets both" if not misses else "misses: " + ", ".join(misses)


def read(folder: Path, sub: str, hardware: str) -> GpuTables:
    paths = sorted((folder / sub).glob("*.mlp.csv"))
    if not paths:
        raise SystemExit(f"no {sub}/*.mlp.csv under {folder}: give the folder of Vidur's tables")
    ops = pd.concat([t.ops for t in load_tables(paths, 4096)], ignore_index=True)
    return GpuTables(load_hardware(hardware), ops)


def sheet_check(gpu: GpuTables) -> None:
    """Which spec sheet the tables' times fit: the fastest GEMM and the fastest weight read they achieved."""
    gemm = gpu.ops[gpu.ops["op"].isin(GEMMS)]
    big, one = gemm[gemm["tokens"] == gemm["tokens"].max()], gemm[gemm["tokens"] == 1]
    flops = (big["flops"] / big["time_s"]).max()
    read_rate = (one["weight_bytes"] / one["time_s"]).max()
    print(f"- {gpu.hw.name}: fastest GEMM {flops / 1e12:.0f} TFLOP/s (sheet {gpu.hw.peak_flops / 1e12:.0f}), "
          f"fastest one-token weight read {read_rate / 1e9:.0f} GB/s (sheet {gpu.hw.hbm_bytes_per_s / 1e9:.0f})")


def regime_table(holdouts) -> None:
    print("| held out | regime | rows | transfer mean | transfer worst | roofline mean | roofline worst | "
          "beats the roofline |")
    print("|---|---|---|---|---|---|---|---|")
    for e in judgement(holdouts):
        print(f"| {e.direction} | {e.regime} | {e.rows} | {e.mean:.1%} | {e.worst:.1%} | {e.roofline_mean:.1%} | "
              f"{e.roofline_worst:.1%} | {'yes' if e.beats_roofline else 'no'} |")


def target_table(holdouts) -> None:
    print("| held out | rows | transfer mean | transfer worst | roofline mean | roofline worst | targets "
          "(mean <= 5%, worst <= 10%) |")
    print("|---|---|---|---|---|---|---|")
    for h in holdouts:
        mean, worst, roof_mean, roof_worst = h.reference()
        print(f"| {h.direction}: LLaMA-2-7B decode 1-1,024 tokens, tp 1 | - | {mean:.1%} | {worst:.1%} | "
              f"{roof_mean:.1%} | {roof_worst:.1%} | {verdict(mean, worst)} |")
        rows = h.ours.groupby("model").size()
        for model, r in h.by_model().iterrows():
            print(f"| {h.direction}: {model} | {rows[model]} | {r['mean']:.1%} | {r['worst']:.1%} | "
                  f"{r['roofline_mean']:.1%} | {r['roofline_worst']:.1%} | {verdict(r['mean'], r['worst'])} |")


def op_table(holdouts) -> None:
    print("| operation | " + " | ".join(f"{h.direction}: transfer mean (worst) / roofline mean" for h in holdouts)
          + " |")
    print("|---" * (len(holdouts) + 1) + "|")
    per_op = [h.per_op() for h in holdouts]
    for op in per_op[0].index:
        print(f"| {op} | " + " | ".join(f"{p.loc[op, 'mean']:.1%} ({p.loc[op, 'worst']:.1%}) / "
                                        f"{p.loc[op, 'roofline_mean']:.1%}" for p in per_op) + " |")


def parameter_table(a: GpuTables, b: GpuTables, holdouts) -> None:
    """Each GPU's own fit beside the joint one: what agrees across the two GPUs, and what does not."""
    fits = [("a100-80gb alone", holdouts[0].fit), ("h100-sxm alone", holdouts[1].fit),
            ("both (shipped)", fit_linear_on([(a.ops, a.hw), (b.ops, b.hw)]))]
    print("| parameter | " + " | ".join(name for name, _ in fits) + " |")
    print("|---" * (len(fits) + 1) + "|")
    rows = [("GEMM compute share", lambda f: f"{f.compute_efficiency:.3f}"),
            ("GEMM bandwidth share", lambda f: f"{f.bandwidth_efficiency:.3f}"),
            ("GEMM ridge efficiency", lambda f: f"{f.ridge_efficiency:.3f}"),
            ("GEMM latency (us)", lambda f: f"{f.gemm_latency_s * 1e6:.1f}")]
    for op in fits[0][1].elementwise:
        rows.append((f"{op} latency (us) / bandwidth share",
                     lambda f, op=op: f"{f.elementwise[op][0] * 1e6:.2f} / {f.elementwise[op][1]:.3f}"))
    for label, cell in rows:
        print(f"| {label} | " + " | ".join(cell(f) for _, f in fits) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="?", default=str(DEFAULT_TABLES), help="the folder of Vidur's tables")
    folder = Path(parser.parse_args().tables)
    a, b = (read(folder, sub, hw) for sub, hw in GPUS)
    print("Spec sheets the tables fit (an H100 PCIe peaks at 756 TFLOP/s and 2,000 GB/s):")
    for gpu in (a, b):
        sheet_check(gpu)
    print("\nRegimes by the target's ridge: fixed latency below ridge/"
          f"{LATENCY_BAND:g}, memory-bound below ridge/{RIDGE_BAND:g}, compute-bound above ridge x {RIDGE_BAND:g} "
          f"(a100-80gb {ridge_tokens(a.hw):.0f} tokens, h100-sxm {ridge_tokens(b.hw):.0f})")
    holdouts = both_ways(a, b)
    print("\nPer regime, per iteration, every held-out model, tp and token count:")
    regime_table(holdouts)
    print("\nAgainst the targets, per iteration:")
    target_table(holdouts)
    print("\nPer operation (the roofline charges no elementwise kernel: 100% off on each):")
    op_table(holdouts)
    print("\nParameters fitted on each GPU alone and on both:")
    parameter_table(a, b, holdouts)
    print("\non these two GPUs alone: " + two_gpu_choice(judgement(holdouts)).describe())
    print("(the default on a GPU neither measured is chosen with every measured GPU held out in turn: "
          "research/cost_models/hold_one_gpu_out.py)")


if __name__ == "__main__":
    main()
