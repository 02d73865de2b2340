"""The four shipped real vLLM runs replayed in the simulator: each metric's error beside its target.

Runs `servesim validate --run` on every run under fidelity/runs/data/ (LLMServingSim's vLLM 0.19 runs: Llama-3.1-8B
on an RTX 4090 and on an RTX PRO 6000, Qwen3-32B on two RTX PRO 6000 at TP2, Qwen3-30B-A3B on two at DP2) and
prints, per run, the mean and p90 of TTFT, TPOT and E2E latency, real and simulated, the simulation's signed error
and whether it is within the target (5%). A run servesim cannot replay yet (a GPU without a sheet, a model without
a spec) prints its one-line reason. It prints numbers; it never fails on them (exit 0). Each replay's files go to
<out>/<run> (default results/validation/real-runs/).

    python benchmarks/real_runs.py                                   # the four runs, on their own settings
    python benchmarks/real_runs.py --set hardware=h100-sxm           # any experiment key, for every run
    python benchmarks/real_runs.py --only RTX4090/Llama-3.1-8B       # some runs (a name's end)

Ends with: within_target=<k>/<n> replayed=<runs>/<all> wall_s=<float>
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.errors import SpecError, one_line  # noqa: E402
from fidelity.runs.command import validate_run  # noqa: E402
from fidelity.runs.comparison import METRIC_LABELS  # noqa: E402
from fidelity.runs.shipped import shipped_runs  # noqa: E402
from sim.experiment.progress import Eta  # noqa: E402

TARGET_PCT = 5.0
JUDGED = (("ttft", "mean"), ("ttft", "p90"), ("tpot", "mean"), ("tpot", "p90"), ("e2e", "mean"), ("e2e", "p90"))
DEFAULT_OUT = ROOT / "results" / "validation" / "real-runs"


def judged_lines(result) -> tuple[list[str], int]:
    """The judged rows of one replay, and how many are within the target."""
    rows = {(row.metric, row.statistic): row for row in result.summary}
    lines, within = [], 0
    for key in JUDGED:
        row = rows[key]
        ok = math.isfinite(row.error_pct) and abs(row.error_pct) <= TARGET_PCT
        within += ok
        lines.append(f"  {METRIC_LABELS[row.metric]:<5} {row.statistic:<5} {row.real_s * 1e3:>11.1f} "
                     f"{row.sim_s * 1e3:>11.1f} {row.error_pct:>+8.1f}%  {'yes' if ok else 'no':>6}")
    return lines, within


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an experiment key for every run's replay (servesim validate --run --set)")
    parser.add_argument("--only", action="append", default=[], metavar="RUN",
                        help="the runs whose names end with this (repeatable)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where each replay's files go")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    runs = {name: path for name, path in shipped_runs().items()
            if not args.only or any(name.endswith(end) for end in args.only)}
    eta = Eta()
    eta.expect(len(runs), 1.0)
    within = judged = replayed = 0
    print(f"target: |error| <= {TARGET_PCT:g}% for the mean and p90 of TTFT, TPOT and E2E"
          + (f"; --set {' '.join(args.set)}" if args.set else ""))
    for name, path in runs.items():
        header = f"{name}:"
        try:
            result = validate_run(path, overrides=list(args.set), out_dir=args.out / name.replace("/", "-"))
        except SpecError as err:
            print(f"{header} not replayed: {one_line(err)} {eta.finished(1.0)}", flush=True)
            continue
        replayed += 1
        lines, ok = judged_lines(result)
        within, judged = within + ok, judged + len(lines)
        system, exp = result.setup.system, result.setup.experiment
        print(f"{header} {system.name} ({system.prefill_policy}) on {exp.model.name}, {exp.replicas} x "
              f"{exp.tensor_parallel} x {exp.hardware.name}: {ok}/{len(lines)} within {eta.finished(1.0)}")
        print(f"  {'metric':<5} {'stat':<5} {'real ms':>11} {'sim ms':>11} {'error':>9}  {'within':>6}")
        print("\n".join(lines), flush=True)
    print(f"within_target={within}/{judged} replayed={replayed}/{len(runs)} wall_s={time.perf_counter() - started:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
