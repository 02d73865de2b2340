"""A speculating hour beside a plain hour, simulated in the same run, against the target: a speculating hour
costs at most 2x a plain hour's simulation time.

The scenario: configs/examples/speculative_llama3_70b_h100.yaml (Llama-3-70B at tensor parallelism 4 on H100 SXM,
vLLM V1, real ShareGPT lengths), Poisson arrivals for --duration-s at --rate on one replica. The plain system
("vLLM V1") and the speculating one (--system, default "eagle k=3"; --method ngram proposes by n-gram lookup instead,
at the same acceptance) run as `servesim run` runs them, fast-forwarded (a speculating stretch planned on the accepted
counts drawn ahead), and the plain one again stepped through. Each is timed as simulate alone (the trace and the cost
model built before, no files written), --repeats times alternating; then the speculating one runs once more, stepped
through, untimed. Prints one line per round, the medians and spreads, each run's records' digest (the speculating
one's must not move when the simulator gets faster, and is its stepped run's), then plain_s=<f> speculating_s=<f>
ratio=<f> beside the target, and the speculating run against the plain one stepped through.

    PYTHONPATH=. python benchmarks/speed/speculative_speed.py             # 2 req/s, an hour, 3 rounds
    PYTHONPATH=. python benchmarks/speed/speculative_speed.py --rate 8 --system "eagle k=5"
    PYTHONPATH=. python benchmarks/speed/speculative_speed.py --method ngram     # the proposer a lookup on the host
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import pickle
import statistics
import time
from pathlib import Path

import numpy as np

from sim.experiment.config import load_experiment
from sim.experiment.run import make_cost_model, simulate_trace, trace_for

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "examples" / "speculative_llama3_70b_h100.yaml"
PLAIN = "vLLM V1"
STEPPED = "vLLM V1 stepped"
TARGET_RATIO = 2.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--duration-s", type=float, default=3600.0)
    parser.add_argument("--system", default="eagle k=3", help="the speculating system of the config")
    parser.add_argument("--method", choices=("eagle", "ngram", "mtp"), default=None,
                        help="the speculating system's proposer instead of its own")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    exp = load_experiment(CONFIG, [f"workload.duration_s={args.duration_s}", f"rates=[{args.rate}]", "warmup_s=0"])
    plain = next(s for s in exp.systems if s.name == PLAIN)
    speculating = next(s for s in exp.systems if s.name == args.system)
    label = args.system
    if args.method is not None and speculating.speculative is not None:
        label = f"{args.system}, {args.method}"
        speculating = dataclasses.replace(speculating, speculative=dataclasses.replace(speculating.speculative,
                                                                                       method=args.method))
    systems = {PLAIN: plain, STEPPED: plain, label: speculating}
    costs = {name: make_cost_model(exp, system) for name, system in systems.items()}
    trace = trace_for(exp, args.rate, 0, np.random.default_rng(0))
    print(f"{len(trace)} requests over {args.duration_s:g} s at {args.rate:g} req/s; {PLAIN} against {label}",
          flush=True)

    def once(name: str, stepped: bool = False) -> tuple[float, int, str]:
        rng = np.random.default_rng(0)
        trace_for(exp, args.rate, 0, rng)  # the generator where a run's simulation starts drawing
        started = time.perf_counter()
        records, _ = simulate_trace(exp, systems[name], trace, costs[name], rng,
                                    fast_forward=False if stepped or name == STEPPED else None)
        wall = time.perf_counter() - started
        columns = tuple(bytes(column) for column in records.iteration_columns)
        digest = hashlib.sha256(pickle.dumps((columns, records.request_values))).hexdigest()[:16]
        return wall, records.num_iterations, digest

    walls: dict[str, list[float]] = {name: [] for name in systems}
    digests: dict[str, str] = {}
    for repeat in range(args.repeats):
        for name in walls:
            gc.collect()
            wall, iterations, digests[name] = once(name)
            walls[name].append(wall)
            print(f"  round {repeat + 1} {name:<15} {wall:6.2f} s  {iterations} iterations", flush=True)
    _, _, stepped_digest = once(label, stepped=True)
    medians = {name: statistics.median(values) for name, values in walls.items()}
    for name, values in walls.items():
        spread = (max(values) - min(values)) / medians[name]
        print(f"{name:<15} median {medians[name]:6.2f} s (spread {spread:.0%}); records {digests[name]}")
    print(f"{label} stepped through: records {stepped_digest} "
          f"({'the same' if stepped_digest == digests[label] else 'DIFFERENT'})")
    ratio = medians[label] / medians[PLAIN]
    print(f"plain_s={medians[PLAIN]:.3f} speculating_s={medians[label]:.3f} ratio={ratio:.3f} "
          f"(target <= {TARGET_RATIO:g}: {'met' if ratio <= TARGET_RATIO else 'missed'})")
    print(f"stepped_s={medians[STEPPED]:.3f} speculating_over_stepped={medians[label] / medians[STEPPED]:.3f}")


if __name__ == "__main__":
    main()
