"""Each model of the public per-operation tables held out in turn: the device clock's error on its own table.

For every model of Vidur's A100 (8 models) and H100 (6) tables, the linear part is fitted on the other models'
tables of the same GPU (calibrate/judging/op_import.heldout) and priced on the held-out model's rows: each
(tensor-parallel degree, token count) a layer's non-attention operations, as `calibrate import` judges it. Beside
it, the spec-sheet roofline (nothing fitted, so every row is held out). Prints a markdown table, each model's mean
|error| beside the 5% target; deterministic (least squares), the machine changes only the time.

A second table per GPU: the tile-aware GEMM form (research/judging/tile_heldout.py), each matmul's FLOPs on its tokens
padded to whole tiles of rows, at fixed tiles and at the tile chosen on the other models alone, beside today's
smooth form; the chosen form's verdict against the same target.

    python research/cost_models/model_heldout.py [../shared/reference/gpu-measurements]
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from calibrate.fitting.op_fit import fit_linear, today_roofline  # noqa: E402
from calibrate.hardware.hardware import load_hardware  # noqa: E402
from calibrate.judging.op_import import heldout, in_sample, load_tables  # noqa: E402
from research.judging.tile_heldout import chosen, heldout_at  # noqa: E402
from research.judging.transfer_shape import padded_gemms  # noqa: E402

TARGET = 0.05
GPUS = (("a100", "a100-80gb"), ("h100", "h100-sxm"))
MAX_TOKENS = 4096
FIXED_TILES = (64, 128)  # rows of fp16 tensor-core GEMM tiles; 1 (the smooth form) is today's column


def load_ops(paths: list[Path]) -> pd.DataFrame:
    return pd.concat([t.ops for t in load_tables(paths, MAX_TOKENS)], ignore_index=True)


def per_model(paths: list[Path], hardware: str) -> pd.DataFrame:
    """Each model's mean and worst |error| held out, and the roofline's on the same rows."""
    hw = load_hardware(hardware)
    ops = load_ops(paths)
    held = heldout(ops, hw, "model").layers.groupby("model")["ape"].agg(["mean", "max", "size"])
    roof = in_sample(today_roofline(), ops, hw).layers.groupby("model")["ape"].mean()
    return held.assign(roofline=roof).rename(columns={"size": "rows"})


def tiled_per_model(paths: list[Path], hardware: str, fixed=FIXED_TILES) -> pd.DataFrame:
    """Each model's held-out mean |error|: smooth (tile 1), at each fixed tile, and at the tile chosen on the
    other models (`tile`), with the chosen form's worst row."""
    hw, ops = load_hardware(hardware), load_ops(paths)
    columns = {f"tile {tile}": heldout_at(ops, hw, "model", tile).layers.groupby("model")["ape"].mean()
               for tile in (1, *fixed)}
    best = chosen(ops, hw, "model")
    by_model = best.errors.layers.groupby("model")["ape"]
    return pd.DataFrame({**columns, "chosen": by_model.mean(), "chosen worst": by_model.max(),
                         "tile": pd.Series(best.tiles)})


def tiled_lines(gpu: str, frame: pd.DataFrame) -> list[str]:
    fixed = [c for c in frame.columns if c.startswith("tile ")]
    lines = [f"| {gpu} | model | " + " | ".join(f"{c} mean" for c in fixed)
             + f" | chosen tile | chosen mean | chosen worst | target <= {TARGET:.0%} |",
             "|---|---|" + "---|" * (len(fixed) + 4)]
    for model, r in frame.iterrows():
        verdict = "met" if r["chosen"] <= TARGET else "MISSED"
        lines.append(f"| {gpu} | {model} | " + " | ".join(f"{r[c]:.1%}" for c in fixed)
                     + f" | {int(r['tile'])} | {r['chosen']:.1%} | {r['chosen worst']:.1%} | {verdict} |")
    return lines


def shares_lines(paths: list[Path], hardware: str, fixed=FIXED_TILES) -> list[str]:
    """The fit on every model at each tile: its shares of the spec sheet's peaks. A bandwidth share above 1
    reads the weights faster than the sheet allows: the padded FLOPs are then pricing part of the weight read."""
    hw, ops = load_hardware(hardware), load_ops(paths)
    lines = []
    for tile in (1, *fixed):
        fit = fit_linear(padded_gemms(ops, tile), hw)
        lines.append(f"- {hardware}, every model, tile {tile}: compute share {fit.compute_efficiency:.3f}, "
                     f"bandwidth share {fit.bandwidth_efficiency:.3f}, ridge efficiency {fit.ridge_efficiency:.3f}, "
                     f"matmul latency {fit.gemm_latency_s * 1e6:.1f} us")
    return lines


def table_lines(gpu: str, frame: pd.DataFrame) -> list[str]:
    lines = [f"| {gpu} | model | rows | held-out mean | worst | roofline mean | target <= {TARGET:.0%} |",
             "|---|---|---|---|---|---|---|"]
    for model, r in frame.iterrows():
        verdict = "met" if r["mean"] <= TARGET else "MISSED"
        lines.append(f"| {gpu} | {model} | {int(r['rows'])} | {r['mean']:.1%} | {r['max']:.1%} | "
                     f"{r['roofline']:.1%} | {verdict} |")
    return lines


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else ROOT.parent / "shared" / "reference" / "gpu-measurements"
    found = False
    for sub, hardware in GPUS:
        paths = sorted((folder / sub).glob("*.mlp.csv"))
        if len(paths) < 2:
            print(f"({sub}: fewer than two tables under {folder / sub}: skipped)")
            continue
        found = True
        print("\n".join(table_lines(hardware, per_model(paths, hardware))))
        print()
        print("\n".join(tiled_lines(hardware, tiled_per_model(paths, hardware))))
        print()
        print("\n".join(shares_lines(paths, hardware)))
        print()
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
