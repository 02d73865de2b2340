"""Can the carried device time follow the measured kernels' steps? Two candidates beside the smooth fit, each GPU
held out from a fit on the other (A100 <-> H100 SXM, Vidur's per-operation tables), judged as
research/cost_models/transfer_two_gpus.py judges the fit: the same rows, regimes and targets.

    python research/cost_models/transfer_shape.py [TABLES]   # default ../shared/reference/gpu-measurements

Candidates (research/judging/transfer_shape.py): the ratio carry (the source's measured time x the fit's price on the
target's sheet / on the source's), and the tile-aware GEMM roofline (FLOPs on the tokens padded to a tile, the
tile chosen on the source GPU's own held-out models). A tile of 64 for both directions is printed too, as a
sensitivity: it was picked knowing these figures, so it is not a candidate. A candidate wins a regime where it
beats the smooth fit's mean and worst in both directions. Prints numbers; fails on none.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from calibrate.judging.transfer_two_gpus import REFERENCE_MODEL, hold_out  # noqa: E402
from calibrate.parts.transfer import FINE_REGIMES  # noqa: E402
from calibrate.tables.table_models import layers_of  # noqa: E402
from calibrate.work.layer_ops import ITERATION_ELEMENTWISE  # noqa: E402
from research.cost_models.transfer_two_gpus import DEFAULT_TABLES, GPUS, read, verdict  # noqa: E402
from research.judging.transfer_shape import choose_tile, ratio_hold_out, residual_correlation, tile_hold_out  # noqa: E402

SENSITIVITY_TILE = 64


def regime_cells(h) -> dict[str, tuple[float, float, float, float]]:
    return {e.regime: (e.mean, e.worst, e.roofline_mean, e.roofline_worst) for e in h.regime_errors()}


def wins(candidate, current) -> bool:
    return candidate[0] < current[0] and candidate[1] < current[1]


def regime_table(rows: dict[str, list]) -> dict[str, set[str]]:
    """Per direction and regime, each way of carrying beside the fit and the roofline; returns, per candidate,
    the regimes it won in both directions."""
    names = [n for n in rows if n != "smooth fit (today)"]
    print("| held out | regime | smooth fit (today) | " + " | ".join(names) + " | roofline |")
    print("|---" * (len(names) + 4) + "|")
    won: dict[str, dict[str, int]] = {n: {} for n in names}
    for i, current in enumerate(rows["smooth fit (today)"]):
        cur = regime_cells(current)
        for regime in FINE_REGIMES:
            cells = []
            for n in names:
                cand = regime_cells(rows[n][i])[regime]
                better = wins(cand, cur[regime])
                won[n][regime] = won[n].get(regime, 0) + better
                cells.append(f"{cand[0]:.1%} ({cand[1]:.1%}){' *' if better else ''}")
            c = cur[regime]
            print(f"| {current.direction} | {regime} | {c[0]:.1%} ({c[1]:.1%}) | " + " | ".join(cells)
                  + f" | {c[2]:.1%} ({c[3]:.1%}) |")
    return {n: {r for r, count in w.items() if count == len(rows["smooth fit (today)"])} for n, w in won.items()}


def target_table(rows: dict[str, list]) -> None:
    print("| held out | way of carrying | LLaMA-2-7B decode 1-1,024 (tp 1) | models' means | models' worsts | "
          "models meeting both targets | LLaMA-2-7B against the targets (mean <= 5%, worst <= 10%) |")
    print("|---|---|---|---|---|---|---|")
    for i in range(len(rows["smooth fit (today)"])):
        for name, holdouts in rows.items():
            h = holdouts[i]
            mean, worst, _, _ = h.reference()
            by = h.by_model()
            meets = int(((by["mean"] <= 0.05) & (by["worst"] <= 0.10)).sum())
            print(f"| {h.direction} | {name} | {mean:.1%} ({worst:.1%}) | {by['mean'].min():.1%}-"
                  f"{by['mean'].max():.1%} | {by['worst'].min():.1%}-{by['worst'].max():.1%} | {meets} of "
                  f"{len(by)} | {verdict(mean, worst)} |")
        roof = rows["smooth fit (today)"][i].reference()
        print(f"| {holdouts[i].direction} | roofline | {roof[2]:.1%} ({roof[3]:.1%}) | | | | |")


def model_table(rows: dict[str, list], pairs) -> None:
    names = list(rows)
    print("| held out | model | " + " | ".join(names) + " | source measured it |")
    print("|---" * (len(names) + 3) + "|")
    for i, current in enumerate(rows["smooth fit (today)"]):
        source_models = set(pairs[i][0].ops["model"])
        tables = [rows[n][i].by_model() for n in names]
        for model in tables[0].index:
            cells = [f"{t.loc[model, 'mean']:.1%} ({t.loc[model, 'worst']:.1%})" for t in tables]
            print(f"| {current.direction} | {model} | " + " | ".join(cells)
                  + f" | {'yes' if model in source_models else 'no: the ratio carry falls back to the fit'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="?", default=str(DEFAULT_TABLES), help="the folder of Vidur's tables")
    folder = Path(parser.parse_args().tables)
    a, b = (read(folder, sub, hw) for sub, hw in GPUS)
    print("Tile chosen on each source GPU alone (its own models, each priced by a fit on the others; "
          "per iteration, mean (worst)):")
    tiles = {}
    for gpu in (a, b):
        tile, errors = choose_tile(gpu)
        tiles[gpu.hw.name] = tile
        print(f"- {gpu.hw.name}: " + ", ".join(f"tile {t}: {m:.2%} ({w:.1%})" for t, (m, w) in errors.items())
              + f" -> {tile}")
    pairs = ((a, b), (b, a))
    rows = {
        "smooth fit (today)": [hold_out(s, t) for s, t in pairs],
        "ratio carry": [ratio_hold_out(s, t) for s, t in pairs],
        "tile (source's choice)": [tile_hold_out(s, t, tiles[s.hw.name]) for s, t in pairs],
        f"tile {SENSITIVITY_TILE} (sensitivity)": [tile_hold_out(s, t, SENSITIVITY_TILE) for s, t in pairs],
    }
    print(f"\nTiles used: a100-80gb -> h100-sxm {tiles[a.hw.name]}, h100-sxm -> a100-80gb {tiles[b.hw.name]}; "
          "the GEMM parameters each source's fit lands on (a bandwidth share above 1 reads weights faster than the "
          "sheet's peak):")
    for name, holdouts in rows.items():
        print(f"- {name}: " + "; ".join(
            f"{h.direction.split(' ')[0]} compute {h.fit.compute_efficiency:.3f}, bandwidth "
            f"{h.fit.bandwidth_efficiency:.3f}, ridge {h.fit.ridge_efficiency:.3f}" for h in holdouts))
    print("\nPer regime of the target's ridge, per iteration, mean (worst) |error|; * beats the smooth fit's mean "
          "and worst:")
    won = regime_table(rows)
    print("\nAgainst the targets, per iteration:")
    target_table(rows)
    print("\nPer held-out model, per iteration, mean (worst):")
    model_table(rows, pairs)
    print("\nWhy the steps do not carry: per operation, correlation of log(measured / own fit) on the A100 and on "
          "the H100 at the same (model, tp, tokens):")
    print("| operation | correlation |")
    print("|---|---|")
    for op, r in residual_correlation(a, b).items():
        print(f"| {op} | {r:.2f} |")
    print("\nLLaMA-2-7B (tp 1) per iteration: " + "; ".join(
        f"{g.hw.name} " + ", ".join(f"{n}: {t * 1e3:.2f} ms" for n, t in steps(g)) for g in (a, b)))
    for name in won:
        if "sensitivity" in name:
            continue
        print(f"\n{name}: wins in both directions in " + (", ".join(sorted(won[name])) if won[name] else "no regime"))


def steps(gpu) -> list[tuple[int, float]]:
    ops = gpu.ops[(gpu.ops["model"] == REFERENCE_MODEL) & (gpu.ops["tp"] == 1)]
    once = ops["op"].isin(ITERATION_ELEMENTWISE)
    total = (ops[~once].groupby("tokens")["time_s"].sum() * layers_of(REFERENCE_MODEL, "steps")
             + ops[once].groupby("tokens")["time_s"].sum())
    return [(n, float(total[n])) for n in (64, 72, 96, 104, 128, 136) if n in total.index]


if __name__ == "__main__":
    main()
