"""Simulator speed, step by step against fast-forward (sim/core/fast_forward.py), measured in the same run.

Three of issue 14's targets, each simulated both ways on one core (vLLM, seed 0):
  sharegpt  one hour of OPT-13B / A100-40GB / real ShareGPT lengths at 2 req/s (configs/quickstart.yaml, with
            the roofline its earlier record was made with)                          target <= 1 s
  alpaca    one hour of configs/paper/fig12d_alpaca_opt13b.yaml at 30 req/s          target <= 3 s
  fleet     64 replicas behind the round-robin router at 128 req/s, the quickstart setup, a slice of an
            hour (--fleet-duration-s, default 600 s) scaled to the hour              target <= 60 s an hour
The fleet is also timed with its replicas served in --jobs processes (sim/core/independent_replicas.py; default 2).
Prints, per scenario, both wall times (the simulation alone: trace built before, outputs not written), their
ratio, the share of iterations run inside fast-forwarded stretches, and checks that both ways recorded the
same iterations and requests. Ends with one line per scenario: name=<s> step_s=<f> fast_s=<f> ratio=<f>.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import pickle
import resource
import time
from pathlib import Path

import numpy as np

import sim.core.simulate
from sim.core.fast_forward import FastForward
from sim.experiment.config import load_experiment
from sim.experiment.run import make_cost_model, simulate_trace, trace_for

ROOT = Path(__file__).resolve().parents[1]


class Counted(FastForward):
    """FastForward that keeps its last instance, for the share of iterations it ran."""

    last: FastForward | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        Counted.last = self


SCENARIOS = {
    "sharegpt": ("configs/quickstart.yaml", 2.0, ["cost_model=roofline"], 3600.0, 1.0),
    "alpaca": ("configs/paper/fig12d_alpaca_opt13b.yaml", 30.0, [], 3600.0, 3.0),
    "fleet": ("configs/quickstart.yaml", 128.0, ["replicas=64", "router=round_robin"], None, 60.0),
}


def measure(name: str, fleet_duration_s: float, jobs: int = 1) -> dict:
    path, rate, overrides, duration_s, target_s = SCENARIOS[name]
    duration_s = duration_s or fleet_duration_s
    exp = load_experiment(ROOT / path, [*overrides, f"workload.duration_s={duration_s}", "systems=[vllm]",
                                        f"rates=[{rate}]", "warmup_s=0"])  # lets a short slice load; nothing else
    system = exp.systems[0]
    trace = trace_for(exp, rate, 0)
    cost_model = make_cost_model(exp, system)
    walls, digests, counts = {}, {}, {}
    ways = {False: {"fast_forward": False}, True: {"fast_forward": True}}
    if exp.replicas > 1 and jobs > 1:  # the fleet's replicas in `jobs` processes too (sim/core/independent_replicas.py)
        ways["jobs"] = {"jobs": jobs}
    for way, kwargs in ways.items():
        gc.collect()  # neither run pays for the other's garbage
        started = time.perf_counter()
        records, _ = simulate_trace(exp, system, trace, cost_model, np.random.default_rng(0), **kwargs)
        walls[way] = time.perf_counter() - started
        columns = tuple(bytes(column) for column in records.iteration_columns)
        digests[way] = hashlib.sha256(pickle.dumps((columns, records.request_values))).digest()
        counts[way] = records.num_iterations
        del records
    iterations = counts[True]
    forwarded = Counted.last.num_forwarded / iterations if Counted.last is not None and iterations else 0.0
    same = digests[True] == digests[False] == digests.get("jobs", digests[True])
    per_hour = 3600.0 / duration_s
    return {"name": name, "requests": len(trace), "iterations": iterations, "duration_s": duration_s,
            "step_s": walls[False], "fast_s": walls[True], "ratio": walls[False] / walls[True],
            "jobs": jobs if "jobs" in walls else 1, "jobs_s": walls.get("jobs"),
            "forwarded": forwarded, "same": same, "hour_s": walls[True] * per_hour, "target_s": target_s,
            "label": f"{exp.replicas} x {exp.model.name}, {trace.source}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--fleet-duration-s", type=float, default=600.0)
    parser.add_argument("--jobs", type=int, default=2, help="processes for the fleet's replicas, timed as well "
                        "(fast-forwarded; 1: not)")
    args = parser.parse_args()
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}: choose from {', '.join(SCENARIOS)}")
    sim.core.simulate.FastForward = Counted  # type: ignore[misc]  # to count what it ran
    results = [measure(name, args.fleet_duration_s, args.jobs) for name in args.scenarios or SCENARIOS]
    print(f"{'scenario':9s} {'requests':>9s} {'iterations':>11s} {'step_s':>8s} {'fast_s':>8s} {'ratio':>6s} "
          f"{'forwarded':>9s} {'fast_s/h':>8s} {'target':>7s}  same records")
    for r in results:
        print(f"{r['name']:9s} {r['requests']:9d} {r['iterations']:11d} {r['step_s']:8.2f} {r['fast_s']:8.2f} "
              f"{r['ratio']:5.2f}x {r['forwarded']:9.1%} {r['hour_s']:8.2f} {r['target_s']:6.0f}s  {r['same']}")
    for r in results:
        print(f"  {r['name']}: {r['duration_s']:g} s of {r['label']}")
        if r["jobs_s"] is not None:
            hour_s, ratio = r["jobs_s"] * 3600.0 / r["duration_s"], r["step_s"] / r["jobs_s"]
            print(f"  {r['name']} with its replicas in {r['jobs']} processes: {r['jobs_s']:.2f} s "
                  f"({hour_s:.1f} s an hour; {ratio:.2f}x step by step)")
    print(f"peak_rss_mb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")
    for r in results:
        jobs = f" jobs={r['jobs']} jobs_s={r['jobs_s']:.3f}" if r["jobs_s"] is not None else ""
        print(f"name={r['name']} step_s={r['step_s']:.3f} fast_s={r['fast_s']:.3f} ratio={r['ratio']:.3f}{jobs}")


if __name__ == "__main__":
    main()
