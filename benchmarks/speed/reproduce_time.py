"""How long `servesim reproduce all` takes at the paper's trace lengths, estimated without running it all.

Lists every run `reproduce all` makes at the paper's lengths (runs that figures share counted once),
times each, as the sweep runs it (simulate, then write its files), on traces cut to --cut-s, then
times the --full runs that cost most when cut at their full length. Each run's full-length cost is
its cut cost times the full/cut ratio measured on the full runs of its kind (saturated: not every
request finished within the horizon; or not), the median where a kind has several. Times are the
process's CPU seconds (steadier than wall time on a shared machine); an idle machine with 2 cores
runs the sweep on 2 processes, about half of the total in wall time.
Ends with: estimated_cpu_s=<float> estimated_wall_2cores_s=<float> runs=<int>
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sim.experiment.config import Experiment, apply_overrides, experiment_from_dict
from sim.experiment.sweep import RunKey, execute, run_keys
from sim.reproduce.figures import FIGURES, paper_config
from sim.reproduce.runner import load_sweeps
from sim.reproduce.scale import PAPER


@dataclass(eq=False)  # by identity: a run is chosen at most once
class Run:
    label: str
    exp: Experiment
    key: RunKey
    cut_s: float = 0.0
    saturated: bool = False
    full_s: float | None = None

    def length_ratio(self, cut_length_s: float) -> float:
        """The paper's trace over the cut one (12 for an hour cut to 5 minutes, 3 for OPT-175B's 15)."""
        return self.exp.workload.duration_s / min(cut_length_s, self.exp.workload.duration_s)


def paper_runs() -> list[Run]:
    runs: dict[str, Run] = {}
    for figure in FIGURES.values():
        for s in load_sweeps(figure, PAPER):
            for key in run_keys(s.experiment):
                label = f"{s.source.runs_dir}/{key.slug}"
                runs.setdefault(label, Run(label, s.experiment, key))
    return list(runs.values())


def cut(exp: Experiment, duration_s: float) -> Experiment:
    raw = apply_overrides(dict(exp.raw, workload=dict(exp.raw["workload"])), [f"workload.duration_s={duration_s:g}"],
                          exp.source)
    return experiment_from_dict(raw, exp.source, paper_config(Path(exp.source).name).parent)


def cpu_seconds(exp: Experiment, key: RunKey, folder: Path) -> tuple[float, bool]:
    started = time.process_time()
    summary = execute(exp, key, folder, "benchmark")
    return time.process_time() - started, bool(summary["saturated"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cut-s", type=float, default=300, help="trace length every run is timed at")
    parser.add_argument("--full", type=int, default=4, help="runs also timed at their full length (the costliest)")
    args = parser.parse_args()
    runs = paper_runs()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, run in enumerate(runs):
            length = min(args.cut_s, run.exp.workload.duration_s)
            run.cut_s, run.saturated = cpu_seconds(cut(run.exp, length), run.key, Path(tmp) / str(i))
        by_cost = sorted(runs, key=lambda r: r.cut_s, reverse=True)
        chosen = by_cost[:args.full] + [next(r for r in by_cost if not r.saturated)]
        chosen += [next(r for r in by_cost if r.saturated and r not in chosen)]
        for run in dict.fromkeys(chosen):
            run.full_s, _ = cpu_seconds(run.exp, run.key, Path(tmp) / "full")
    # how much more a simulated second costs in a long run than in a short one (a saturated run's queue grows)
    growth = {kind: [r.full_s / r.cut_s / r.length_ratio(args.cut_s) for r in runs
                     if r.full_s is not None and r.saturated == kind] for kind in (True, False)}
    for run in runs:
        if run.full_s is None:
            run.full_s = run.cut_s * run.length_ratio(args.cut_s) * statistics.median(growth[run.saturated])
    total = sum(r.full_s for r in runs)
    print(f"{len(runs)} runs; timed at {args.cut_s:g}-s traces: {sum(r.cut_s for r in runs):.0f} CPU s "
          f"(measurement took {time.perf_counter() - started:.0f} s of wall time)")
    for kind, values in growth.items():
        print(f"cost per simulated second, full over cut, {'saturated' if kind else 'unsaturated'} runs: "
              + ", ".join(f"{v:.2f}" for v in values))
    print("runs timed at full length (CPU s):")
    for run in runs:
        if run in chosen:
            print(f"  {run.label:<55} {run.full_s:7.1f}  (cut {run.cut_s:.2f})")
    print("most costly at full length (estimated CPU s):")
    for run in sorted(runs, key=lambda r: r.full_s, reverse=True)[:10]:
        print(f"  {run.label:<55} {run.full_s:7.1f}")
    per_config: dict[str, float] = {}
    for run in runs:
        config = run.label.split("/")[0]
        per_config[config] = per_config.get(config, 0.0) + run.full_s
    print("by config (estimated CPU s): " + ", ".join(f"{c} {s:.0f}" for c, s in
                                                     sorted(per_config.items(), key=lambda kv: -kv[1])))
    print(f"estimated_cpu_s={total:.0f} estimated_wall_2cores_s={total / 2:.0f} runs={len(runs)}")


if __name__ == "__main__":
    main()
