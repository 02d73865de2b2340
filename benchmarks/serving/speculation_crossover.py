"""Where speculation stops paying, read off a `servesim run` sweep: for each speculating system, the request rate at
which its mean time per output token (or --metric) climbs back to the plain system's, and the figures of TPOT and
TTFT against request rate in the paper's style (a line per system, hollow markers where a run saturated).

The crossover is interpolated linearly between the two swept rates where speculation's TPOT goes from below the
plain system's to at or above it (the first such pair); "none up to R" where it stays below at every swept rate,
"below R" where it is no better at the lowest; marked "saturated" where either system saturated at the pair's
higher rate (its queue grew through the run, so the TPOTs compared there are an overload's, not a load's). Means over
seeds, as the run's own figures take them.

    python -m servesim run configs/examples/speculative_llama3_70b_h100.yaml
    python benchmarks/serving/speculation_crossover.py results/speculative_llama3_70b_h100   # --plain "vLLM V1"

Prints the table and writes speculation_tpot.png and speculation_ttft.png beside the summary (--no-plots: not).
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METRIC = "tpot_mean_s"


@dataclass(frozen=True)
class Crossover:
    """One speculating system against the plain one: the rate it stops paying at (None: not within the sweep), how it
    was read, and its TPOT over the plain system's at the lowest and the highest swept rate."""
    system: str
    rate: float | None
    reading: str
    ratio_lowest: float
    ratio_highest: float


def crossover(rates: list[float], plain: list[float], speculating: list[float],
              saturated: list[bool] | None = None) -> tuple[float | None, str]:
    """The rate where `speculating` first reaches `plain` (both by `rates`, ascending), and how it was read
    (`saturated`: by rate, whether either system saturated there)."""
    gaps = [s - p for s, p in zip(speculating, plain)]
    if gaps[0] >= 0:
        return None, f"below {rates[0]:g}"
    for i in range(1, len(rates)):
        if gaps[i - 1] < 0 <= gaps[i]:
            rate = rates[i - 1] + (rates[i] - rates[i - 1]) * -gaps[i - 1] / (gaps[i] - gaps[i - 1])
            return rate, f"{rate:.1f}" + (" (saturated)" if saturated and saturated[i] else "")
    return None, f"none up to {rates[-1]:g}"


def crossovers(rows: list[dict], plain: str, metric: str = METRIC) -> list[Crossover]:
    """Every system but `plain` against it, over the rates both ran (means over seeds)."""
    means, saturated = seed_means(rows, metric), saturated_rates(rows)
    if plain not in means:
        raise SystemExit(f"speculation_crossover: no system {plain!r} in the summary (its systems: "
                         f"{', '.join(means)}); name the plain one with --plain")
    base = means[plain]
    found = []
    for system, by_rate in means.items():
        if system == plain:
            continue
        rates = sorted(set(by_rate) & set(base))
        ours, theirs = [by_rate[r] for r in rates], [base[r] for r in rates]
        either = [saturated[(system, r)] or saturated[(plain, r)] for r in rates]
        rate, reading = crossover(rates, theirs, ours, either)
        found.append(Crossover(system, rate, reading, ours[0] / theirs[0], ours[-1] / theirs[-1]))
    return found


def seed_means(rows: list[dict], metric: str) -> dict[str, dict[float, float]]:
    """Each system's mean of `metric` over its seeds, by rate, in the order the systems first appear."""
    sums: dict[str, dict[float, list[float]]] = {}
    for row in rows:
        sums.setdefault(row["system"], {}).setdefault(float(row["rate"]), []).append(float(row[metric]))
    return {system: {rate: sum(v) / len(v) for rate, v in by_rate.items()} for system, by_rate in sums.items()}


def saturated_rates(rows: list[dict]) -> dict[tuple[str, float], bool]:
    """Whether any seed of a system saturated at a rate."""
    found: dict[tuple[str, float], bool] = {}
    for row in rows:
        key = (row["system"], float(row["rate"]))
        found[key] = found.get(key, False) or row["saturated"] in ("True", True)
    return found


def table(found: list[Crossover], plain: str, rates: list[float], metric: str = METRIC) -> str:
    lines = [f"{'system':<14} {'stops paying at (req/s)':>24} {f'{metric} / plain at {rates[0]:g}':>26} "
             f"{f'at {rates[-1]:g}':>8}"]
    lines += [f"{c.system:<14} {c.reading:>24} {c.ratio_lowest:>26.2f} {c.ratio_highest:>8.2f}" for c in found]
    return "\n".join(lines) + f"\n(compared: {metric}; plain: {plain})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="a `servesim run` output folder (its summary.csv)")
    parser.add_argument("--plain", default=None, help="the system without speculation (default: the first)")
    parser.add_argument("--metric", default=METRIC, help=f"the summary's column compared (default {METRIC}; "
                        "ttft_mean_s, tpot_p90_s, ...)")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    summary = args.results / "summary.csv"
    if not summary.is_file():
        raise SystemExit(f"speculation_crossover: {summary} not found; give a `servesim run` output folder")
    with summary.open(newline="") as f:
        rows = list(csv.DictReader(f))
    plain = args.plain or rows[0]["system"]
    rates = sorted({float(row["rate"]) for row in rows})
    if args.metric not in rows[0]:
        raise SystemExit(f"speculation_crossover: no column {args.metric!r} in {summary}")
    print(table(crossovers(rows, plain, args.metric), plain, rates, args.metric))
    if not args.no_plots:
        sys.path.insert(0, str(ROOT))
        from sim.experiment.plots import metric_plot

        typed = [{**row, "rate": float(row["rate"]), "saturated": row["saturated"] == "True",
                  "tpot_mean_s": float(row["tpot_mean_s"]), "ttft_mean_s": float(row["ttft_mean_s"])} for row in rows]
        for metric, label, name in (("tpot_mean_s", "TPOT, mean (s/token)", "speculation_tpot.png"),
                                    ("ttft_mean_s", "TTFT, mean (s)", "speculation_ttft.png")):
            # log axes, as the run's own: they span milliseconds at light load to seconds past saturation
            print(f"wrote {metric_plot(typed, args.results / name, metric, label, rows[0]['experiment'], log=True)}")


if __name__ == "__main__":
    main()
