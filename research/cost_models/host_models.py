"""The shipped host models: each Vidur fit refitted from the public tables, its held-out error beside its target,
and a check that the shipped file is what a fresh fit writes; the cited and the project's own beside them.

    python research/cost_models/host_models.py [GPU_MEASUREMENTS]

GPU_MEASUREMENTS is the folder of Vidur's public measurements (its README names the files and commits;
default ../shared/reference/gpu-measurements beside the repository's root). Target (the host-model task): held-out
mean |error| <= 10% per vintage on the per-iteration total host time, leaving one model out and holding the
largest batches out. Prints numbers; fails on none (it says where a shipped file differs from a fresh fit).
"""
from __future__ import annotations

import sys
from pathlib import Path

from calibrate.fitting.host_model_fit import TARGET, fit_host_model
from calibrate.parts.host import host_time
from calibrate.parts.host_model import HostModel, available_host_models, load_host_model
from calibrate.tables.host_table import read_host_table
from engine.specs.loader import load_model_spec

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT.parent / "shared" / "reference" / "gpu-measurements"
VINTAGES = {"vllm-a100-2024-01": "host/a100.cpu_overheads.2024-01.csv",
            "vllm-a100-2024-05": "host/a100.cpu_overheads.2024-05.csv"}
EXAMPLES = (("llama-7b", 1, 8), ("llama-7b", 1, 64), ("llama-13b", 2, 64), ("opt-66b", 4, 128))


def refit(shipped: HostModel, table_path: Path) -> HostModel:
    return fit_host_model(read_host_table(table_path), shipped.name, shipped.measured, shipped.source,
                          shipped.licence)


def mark(error: float | None) -> str:
    if error is None:
        return "n/a"
    return f"{error:.1%} ({'meets' if error <= TARGET else 'misses'} <= {TARGET:.0%})"


def vintage_rows(folder: Path) -> None:
    print("| host model | held out | rows | mean abs error (target <= 10%) | shipped file = fresh fit |")
    print("|---|---|---|---|---|")
    for name, relative in VINTAGES.items():
        shipped = load_host_model(name)
        path = folder / relative
        if not path.is_file():
            print(f"| {name} | {path} not found: nothing refitted | | | |")
            continue
        fresh = refit(shipped, path)
        same = "yes" if fresh.to_dict() == shipped.to_dict() else "NO: refit with servesim calibrate host"
        h = fresh.heldout
        lomo, largest = h["leave_one_model_out"], h["largest_batches"]
        print(f"| {name} | one model out | {lomo['rows']} | {mark(lomo['mean_abs_error'])} | {same} |")
        for model, error in lomo["by_model"].items():
            print(f"| | - {model} | | {error:.1%} | |")
        print(f"| {name} | batch >= {largest['batch_size_at_least']} | {largest['rows']} | "
              f"{mark(largest['mean_abs_error'])} | |")


def example_rows() -> None:
    names = available_host_models()
    print("\n| model, tp, batch | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    models = {name: load_host_model(name) for name in names}
    for spec_name, tp, batch in EXAMPLES:
        spec = load_model_spec(spec_name)
        cells = [f"{host_time(m.resolve(spec, tp), batch, 0) * 1e3:.2f} ms" for m in models.values()]
        print(f"| {spec_name}, tp {tp}, {batch} decodes | " + " | ".join(cells) + " |")


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    print(f"Vidur's host tables from {folder}\n")
    vintage_rows(folder)
    print("\nHost time per iteration each shipped host model charges (decode-only batches, no prompt tokens):")
    example_rows()


if __name__ == "__main__":
    main()
