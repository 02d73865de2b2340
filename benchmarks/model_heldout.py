"""Each model of the public per-operation tables held out in turn: the device clock's error on its own table.

For every model of Vidur's A100 (8 models) and H100 (6) tables, the linear part is fitted on the other models'
tables of the same GPU (calibrate/op_import.heldout) and priced on the held-out model's rows: each (tensor-parallel
degree, token count) a layer's non-attention operations, as `calibrate import` judges it. Beside it, the spec-sheet
roofline (nothing fitted, so every row is held out). Prints a markdown table, each model's mean |error| beside the
5% target; deterministic (least squares), the machine changes only the time.

    python benchmarks/model_heldout.py [../shared/reference/gpu-measurements]
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibrate.hardware import load_hardware  # noqa: E402
from calibrate.op_fit import today_roofline  # noqa: E402
from calibrate.op_import import heldout, in_sample, load_tables  # noqa: E402

TARGET = 0.05
GPUS = (("a100", "a100-80gb"), ("h100", "h100-sxm"))
MAX_TOKENS = 4096


def per_model(paths: list[Path], hardware: str) -> pd.DataFrame:
    """Each model's mean and worst |error| held out, and the roofline's on the same rows."""
    hw = load_hardware(hardware)
    ops = pd.concat([t.ops for t in load_tables(paths, MAX_TOKENS)], ignore_index=True)
    held = heldout(ops, hw, "model").layers.groupby("model")["ape"].agg(["mean", "max", "size"])
    roof = in_sample(today_roofline(), ops, hw).layers.groupby("model")["ape"].mean()
    return held.assign(roofline=roof).rename(columns={"size": "rows"})


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
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
