"""A split fleet's hour on one core, beside a colocated fleet of as many replicas timed in the same run.

The scenario: configs/examples/split_llama3_70b_h100.yaml's model, GPUs and system (Llama-3-70B on H100 SXM at
tensor parallelism 4, vLLM with chunked prefill, real ShareGPT lengths), Poisson arrivals for an hour at --rate,
on --prefill prefill and --decode decode replicas (default 8 and 8: 16 replicas), KV over NVLink. The baseline:
the same trace on prefill + decode colocated replicas behind least_outstanding, which runs on one SimPy clock
behind the router's process as the split fleet does (round robin would be served apart, a different loop).
Both are timed as simulate alone (the trace built before, no files written), --repeats times alternating; the
split fleet's target is under a minute. Prints one line per fleet, the medians and spreads, then
split_s=<f> colocated_s=<f> ratio=<f>.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import time
from pathlib import Path

import numpy as np

from sim.core.merge import merged_records
from sim.core.simulate import simulate
from sim.experiment.config import load_experiment
from sim.experiment.run import horizon_of, make_cost_model, trace_for
from sim.experiment.split_run import serve_split_trace, split_setup

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "examples" / "split_llama3_70b_h100.yaml"
TARGET_S = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=32.0, help="req/s for the whole fleet (default 32)")
    parser.add_argument("--prefill", type=int, default=8)
    parser.add_argument("--decode", type=int, default=8)
    parser.add_argument("--duration-s", type=float, default=3600.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    exp = load_experiment(CONFIG, [f"workload.duration_s={args.duration_s}", f"rates=[{args.rate}]",
                                   f"split.prefill.replicas={args.prefill}", f"split.decode.replicas={args.decode}"])
    system = exp.systems[0]
    trace = trace_for(exp, args.rate, 0)
    horizon_s = horizon_of(exp, trace)
    colocated = dataclasses.replace(exp, split=None, replicas=args.prefill + args.decode)
    cost_model = make_cost_model(colocated, system)
    pool = colocated.kv_pool(system)
    print(f"{len(trace)} requests over {args.duration_s:g} s at {args.rate:g} req/s; split {args.prefill}P:"
          f"{args.decode}D against {colocated.replicas} colocated replicas (least_outstanding)", flush=True)

    def split_once() -> tuple[float, int, int]:
        started = time.perf_counter()
        runs = serve_split_trace(exp, split_setup(exp, system, horizon_s), trace, np.random.default_rng(0))
        wall = time.perf_counter() - started
        records = merged_records(runs.runs)
        finished = sum(values[4] is not None for values in records.request_values)
        return wall, records.num_iterations, finished

    def colocated_once() -> tuple[float, int, int]:
        started = time.perf_counter()
        records = simulate(trace, exp.model, system, cost_model, pool.num_gpu_blocks, pool.num_cpu_blocks,
                           replicas=colocated.replicas, router="least_outstanding", horizon_s=horizon_s)
        wall = time.perf_counter() - started
        return wall, records.num_iterations, sum(values[4] is not None for values in records.request_values)

    walls: dict[str, list[float]] = {"split": [], "colocated": []}
    for repeat in range(args.repeats):
        for name, once in (("split", split_once), ("colocated", colocated_once)):
            gc.collect()
            wall, iterations, finished = once()
            walls[name].append(wall)
            print(f"  round {repeat + 1} {name:<9} {wall:6.2f} s  {iterations} iterations, {finished} finished",
                  flush=True)
    medians = {name: statistics.median(values) for name, values in walls.items()}
    for name, values in walls.items():
        spread = (max(values) - min(values)) / medians[name]
        print(f"{name:<9} median {medians[name]:6.2f} s (spread {spread:.0%})"
              + (f", target < {TARGET_S:g} s: {'met' if medians[name] < TARGET_S else 'missed'}"
                 if name == "split" else ""))
    print(f"split_s={medians['split']:.3f} colocated_s={medians['colocated']:.3f} "
          f"ratio={medians['split'] / medians['colocated']:.3f}")


if __name__ == "__main__":
    main()
