"""Which part of the clock or the workload moves the paper's headline figures, and by how much.

Fig. 12a (OPT-13B, one A100-40GB, ShareGPT) and Fig. 12d (Alpaca) from their paper configs, all five systems, under
each variant of research/paper/ablation_variants.py: the new default (the whole A100 clock, the vllm-a100-2024-01
host, ShareGPT lengths scaled to Fig. 11), one change from it each, and the old default. Each curve climbs a grid of
rates to where it first reaches 0.5 s/token (research/paper/ablation_sweep.py); the readings are reproduce's
(sim/reproduce/readings.py), printed beside the paper's (research/paper/ablation_table.py). It compares and never
fits: nothing here is chosen for its effect on the paper's numbers. Prints markdown on stdout (the record,
benchmarks/measurements/paper_ablation.md), a line per run on stderr.

    python research/paper/paper_ablation.py                                     # the record: 20-minute traces
    python research/paper/paper_ablation.py --duration 300 --variants host-off  # a quick look (default always runs)
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the checkout this file is in

from engine.errors import SpecError
from research.paper.ablation_sweep import DOWN_STEPS, Ladder, SweepStats, climb
from research.paper.ablation_table import (
    BATCHED,
    PAPER,
    VariantReading,
    crossings_table,
    markdown,
    moves_table,
    read_variant,
    readings_table,
)
from research.paper.ablation_variants import REMOVED, Variant, apply_sets, paper_raw, variants, write_variant_files
from sim.experiment.config import experiment_from_dict
from sim.experiment.progress import duration_text
from sim.reproduce.figures import FIG13_RATES, paper_config
from sim.reproduce.readings import THRESHOLD_S_PER_TOKEN

MAX_RUNS = 5000  # the most runs a grid may plan (every curve to its grid's end); the ladders stop far earlier


@dataclass(frozen=True)
class AblatedFigure:
    id: str
    config: str  # in configs/paper/
    caption: str
    step: float  # the grid's spacing and its lowest rate
    top: float  # its highest rate
    fig13_rate: float  # where Fig. 13 reads the batched requests

    @property
    def grid(self) -> tuple[float, ...]:
        return tuple(round(self.step * k, 9) for k in range(1, round(self.top / self.step) + 1))


# Fig. 12d's rates are about 10x Fig. 12a's (the configs' grids: 0.25-4 and 2-40 req/s); each top lies past the
# highest vLLM knee of the variants (host off)
FIGURES = (
    AblatedFigure("12a", "fig12a_sharegpt_opt13b.yaml", "Fig. 12a: OPT-13B, one A100-40GB, ShareGPT", 0.125, 6.0,
                  FIG13_RATES["sharegpt"]),
    AblatedFigure("12d", "fig12d_alpaca_opt13b.yaml", "Fig. 12d: OPT-13B, one A100-40GB, Alpaca", 1.25, 75.0,
                  FIG13_RATES["alpaca"]),
)


@dataclass
class FigureAblation:
    figure: AblatedFigure
    readings: list[VariantReading]
    ladders: dict[tuple[str, str], Ladder]  # (variant, system) -> its curve


def ladders_for(figure: AblatedFigure, chosen: list[Variant], duration_s: float, warmup_s: float
                ) -> dict[tuple[str, str], Ladder]:
    """A ladder per system of each variant that runs: its config the paper's with the variant's keys set, cut to
    the scale."""
    path = paper_config(figure.config)
    scale = {"workload.duration_s": duration_s, "warmup_s": warmup_s, "rates": list(figure.grid)}
    out = {}
    for variant in chosen:
        if variant.skip:
            continue
        raw = apply_sets(apply_sets(paper_raw(figure.config), variant.sets), scale)
        exp = experiment_from_dict(raw, f"{path} ({variant.name})", path.parent)
        for system in exp.systems:
            must = (figure.fig13_rate,) if system.name in BATCHED else ()
            out[variant.name, system.name] = Ladder((figure.id, variant.name, system.name), exp, system,
                                                    figure.grid, must)
    return out


def choose(all_variants: list[Variant], names: list[str] | None) -> list[Variant]:
    """The variants named (the default always: every change is read against it), in the list's order."""
    known = [v.name for v in all_variants]
    for name in names or []:
        if name not in known:
            raise SpecError("--variants", name, f"unknown variant; valid: {', '.join(known)}")
    return [v for v in all_variants if names is None or v.name == "default" or v.name in names]


def ablate(figures: tuple[AblatedFigure, ...], names: list[str] | None, duration_s: float, warmup_s: float,
           folder: Path, jobs: int = 2, max_runs: int = MAX_RUNS, progress=print
           ) -> tuple[list[FigureAblation], SweepStats]:
    """Every figure's variants run and read; `folder` holds the variants' files while they run."""
    files = write_variant_files(folder)
    chosen = {f.id: choose(variants(paper_raw(f.config), files), names) for f in figures}
    ladders = {f.id: ladders_for(f, chosen[f.id], duration_s, warmup_s) for f in figures}
    stats = climb([ladder for f in figures for ladder in ladders[f.id].values()], jobs, progress, max_runs)
    out = []
    for f in figures:
        readings = [read_variant(v, [ladder for (name, _), ladder in ladders[f.id].items() if name == v.name],
                                 f.fig13_rate) for v in chosen[f.id]]
        out.append(FigureAblation(f, readings, ladders[f.id]))
    return out, stats


def report(results: list[FigureAblation], stats: SweepStats, duration_s: float, warmup_s: float, wall_s: float,
           jobs: int) -> list[str]:
    loads = stats.load_averages or [os.getloadavg()[0]]
    lines = ["# Paper ablation: what moves Figs. 12a, 12d and 13 — `python research/paper/paper_ablation.py`", "",
             f"Run {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {machine()}, {jobs} processes; load average "
             f"(1 min, sampled once per round) {min(loads):.1f}-{max(loads):.1f}; wall time {duration_text(wall_s)}. "
             "Deterministic simulations: the same command gives the same tables on any machine, apart from the wall "
             "time and the load.", "",
             f"Scale: {duration_s:g}-s traces of Poisson arrivals (the paper: 1 hour), {warmup_s:g} s warm-up, seed "
             f"0. Runs: {stats.simulated} simulated, {stats.shared} more shared with an identical run of another "
             f"curve, of at most {stats.planned} planned. Each curve climbs its figure's grid until its normalized "
             f"latency first reaches {THRESHOLD_S_PER_TOKEN:g} s/token (a curve already over it at the lowest rate "
             f"halves the rate up to {DOWN_STEPS} times); a sustainable rate is read where it crosses, linear "
             "between the rates around it (sim/reproduce/readings.py, as `servesim reproduce` reads it); `>= x` is "
             "a curve that never crossed within the grid. (in)/(out): the reading inside or outside the paper's "
             "range (a single printed value: within 5%). The paper's values are the paper's (arXiv 2309.06180) as "
             "the project's paper-facts notes gather them, by their section letter. Compared, never fitted.", ""]
    lines += variants_table(results) + [""]
    for r in results:
        f = r.figure
        grid = f"{f.grid[0]:g}-{f.grid[-1]:g} req/s in steps of {f.step:g}"
        lines += [f"## {f.caption} (`configs/paper/{f.config}`; grid {grid}; Fig. 13 read at {f.fig13_rate:g} "
                  "req/s)", "", "Sustainable rates, vLLM's ratios and Fig. 13's batched requests:", ""]
        lines += readings_table(r.readings, PAPER[f.id], f.fig13_rate)
        lines += ["", "How far each variant moves vLLM's knee and its ratios from the new default:", ""]
        lines += moves_table(r.readings)
        lines += ["", "Each curve's runs and the two rates around its crossing (rate: s/token):", ""]
        lines += crossings_table(r.readings, r.ladders) + [""]
    return lines


def variants_table(results: list[FigureAblation]) -> list[str]:
    rows: dict[str, list] = {}
    for r in results:
        for reading in r.readings:
            v = reading.variant
            keys = ", ".join(f"`{k}` dropped" if value is REMOVED else f"`{k}: {_short(value)}`"
                             for k, value in v.sets.items()) or "none"
            if v.skip:
                keys = "not run"
            rows.setdefault(v.name, [v.name, v.what, {}])[2][r.figure.id] = keys
    return markdown(["variant", "change", "keys set, per figure"],
                    [[name, what, "; ".join(f"{fid}: {k}" for fid, k in keys.items())]
                     for name, what, keys in rows.values()])


def _short(value: object) -> str:
    """A temp file by its name alone: its folder is gone once the run ends."""
    text = str(value)
    return f"<temp>/{Path(text).name}" if text.startswith(tempfile.gettempdir()) else text


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    model = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")
    return f"{model} ({os.cpu_count()} cores)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=1200.0, help="seconds of arrivals a run (default 1200)")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds left out of the metrics (default 60)")
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--variants", help="comma-separated variants (default: all; `default` always runs)")
    parser.add_argument("--figures", default="12a,12d", help="comma-separated figures (default 12a,12d)")
    parser.add_argument("--max-runs", type=int, default=MAX_RUNS,
                        help=f"refuse a grid that may take more runs (default {MAX_RUNS})")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        figures = pick_figures(args.figures.split(","))
        names = args.variants.split(",") if args.variants else None
        with tempfile.TemporaryDirectory(prefix="paper_ablation_") as folder:
            results, stats = ablate(figures, names, args.duration, args.warmup, Path(folder), args.jobs,
                                    args.max_runs, lambda line: print(line, file=sys.stderr, flush=True))
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(report(results, stats, args.duration, args.warmup, time.perf_counter() - started, args.jobs)))
    return 0


def pick_figures(ids: list[str]) -> tuple[AblatedFigure, ...]:
    known = {f.id: f for f in FIGURES}
    for fid in ids:
        if fid not in known:
            raise SpecError("--figures", fid, f"unknown figure; valid: {', '.join(known)}")
    return tuple(f for f in FIGURES if f.id in ids)


if __name__ == "__main__":
    sys.exit(main())
