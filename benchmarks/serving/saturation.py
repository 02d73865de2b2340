"""How saturation is told apart from a stable run: the backlog's growth, beside the horizon rule it replaced.

Runs the quickstart (OPT-13B, one A100-40GB, real ShareGPT lengths) for every system at rates around each
knee and several seeds, on traces of two lengths, and prints for each run: the backlog's growth
(`backlog_growth`: 1 - served rate / arrival rate, fitted; `trend`: what it grew by over its spread about
the line), the share of the requests served by the
trace's end (a cruder measure of the same, read from the end alone), whether
the old rule (a request unfinished at twice the trace) and the new one (sim/experiment/metrics.py
is_saturated) call it saturated, and the TPOT p99 a TPOT-only capacity target would have read. Then the ranges
among the runs called stable and those called saturated.

    python benchmarks/serving/saturation.py                 # 15-minute traces, 2 seeds (about a minute on 2 cores)
    python benchmarks/serving/saturation.py --duration-s 120 --seeds 4
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RATES = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, default=900.0)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import numpy as np

    import servesim
    from sim.experiment.metrics import backlog

    seeds = list(range(args.seeds))
    exp = servesim.load_experiment(ROOT / "configs/quickstart.yaml", [
        f"workload.duration_s={args.duration_s:g}", f"rates={RATES}", f"seeds={seeds}"])
    print(f"{'system':<18} {'rate':>5} {'seed':>4} {'growth':>7} {'trend':>6} {'served':>7} {'old':>6} {'new':>6} "
          f"{'tpot_p99':>8}")
    kept_up, behind = [], []
    for system in exp.systems:
        for rate in exp.rates:
            for seed in seeds:
                one = servesim.simulate(exp, system=system.name, rate=rate, seed=seed)
                s, requests = one.summary, one.requests
                # requests finished by the trace's end over those arrived by then: the backlog at the end, crudely
                served = float((requests["finish_s"] <= args.duration_s).sum()) / len(requests)
                line = backlog(requests["arrival_s"].to_numpy(), requests["finish_s"].to_numpy(np.float64),
                               exp.warmup_s, requests["first_token_s"].to_numpy(np.float64))
                trend = line.grown_by / line.spread if line.spread else np.inf
                print(f"{system.name:<18} {rate:5g} {seed:4d} {s['backlog_growth']:7.3f} {trend:6.1f} {served:7.3f} "
                      f"{str(s['num_unfinished'] > 0):>6} {str(s['saturated']):>6} {s['tpot_p99_s']:8.3f}")
                (behind if s["saturated"] else kept_up).append((s["backlog_growth"], trend, served))
    for name, runs in (("called stable", kept_up), ("called saturated", behind)):
        if runs:
            growth, trend, served = (np.array(column) for column in zip(*runs))
            print(f"{name}: {len(runs)} runs, growth {growth.min():.3f} to {growth.max():.3f}, trend "
                  f"{trend.min():.1f} to {trend.max():.1f}, served by the trace's end {served.min():.3f} to "
                  f"{served.max():.3f}")


if __name__ == "__main__":
    main()
