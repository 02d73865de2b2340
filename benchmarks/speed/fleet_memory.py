"""A fleet's simulation in worker processes: wall time and peak memory of the parent and of its workers.

The fleet of the speed targets (benchmarks/speed/sim_speed.py's `fleet`): configs/quickstart.yaml with 64 replicas
behind the round-robin router at 128 req/s, vLLM, seed 0, its replicas served apart in --jobs processes
(sim/core/independent_replicas.py). Each repeat runs in a fresh interpreter, so that its peaks are its own:

  simulate  `simulate_trace(..., jobs=N)` alone (the trace built before the timing), as sim_speed times it
  run       one whole run as a sweep's worker does it (sim.experiment.sweep.execute_into: the simulation with its
            replicas in N processes, the summary, requests.csv.gz and iterations.parquet written), the
            fresh interpreter being the run's process

Peak RSS from getrusage: the parent's own (RUSAGE_SELF) and the largest worker's (RUSAGE_CHILDREN, which is
the largest of the waited-for children, not their sum); before_mb is the parent's peak before the timed part
(imports, config, trace). Ends with one line per repeat:
mode=<m> duration_s=<f> wall_s=<f> parent_peak_mb=<f> worker_peak_mb=<f> iterations=<n> before_mb=<f>

    python benchmarks/speed/fleet_memory.py --duration-s 300 [--mode simulate|run] [--jobs 2] [--repeats 1]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "quickstart.yaml"
RATE = 128.0


def overrides(duration_s: float) -> list[str]:
    return ["replicas=64", "router=round_robin", f"workload.duration_s={duration_s:g}", "systems=[vllm]",
            f"rates=[{RATE:g}]", "warmup_s=0"]


# runs in a fresh interpreter: the simulation alone, then the peaks
SIMULATE = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
import numpy as np
from sim.experiment.config import load_experiment
from sim.experiment.run import make_cost_model, simulate_trace, trace_for
exp = load_experiment({config!r}, {overrides!r})
system = exp.systems[0]
trace = trace_for(exp, {rate!r}, 0)
cost_model = make_cost_model(exp, system)
before_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
started = time.perf_counter()
records, _ = simulate_trace(exp, system, trace, cost_model, np.random.default_rng(0), jobs={jobs})
wall_s = time.perf_counter() - started
print(json.dumps({{"wall_s": wall_s, "iterations": records.num_iterations, "before_mb": before_mb,
                  "parent_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}}))
"""

# one run of a sweep, as a sweep's worker does it (sim.experiment.sweep.execute_into: simulate, summarize, write
# requests.csv.gz, iterations.parquet and summary.json), in this interpreter: its peak is the run's process's
RUN = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from sim.experiment.config import load_experiment
from sim.experiment.fingerprint import config_digest, input_digest
from sim.experiment.sweep import RunKey, execute_into
exp = load_experiment({config!r}, {overrides!r})
key = RunKey(exp.systems[0], {rate!r}, 0)
digest = config_digest(exp, key.system, key.rate, key.seed, input_digest(exp))
before_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
started = time.perf_counter()
summary = execute_into(exp, key, digest, "parquet", Path({out!r}) / "run", replica_jobs={jobs})
wall_s = time.perf_counter() - started
print(json.dumps({{"wall_s": wall_s, "iterations": summary["num_iterations"], "before_mb": before_mb,
                  "parent_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}}))
"""


def measure(mode: str, duration_s: float, jobs: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        code = (SIMULATE if mode == "simulate" else RUN).format(
            root=str(ROOT), config=str(CONFIG), overrides=overrides(duration_s), rate=RATE, jobs=jobs, out=out)
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        if done.returncode:
            raise SystemExit(f"{mode} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, default=300.0, help="seconds of traffic (the target: 3600)")
    parser.add_argument("--mode", choices=("simulate", "run"), default="simulate")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print(f"fleet: 64 replicas, round robin, {RATE:g} req/s for {args.duration_s:g} s, {args.mode}, "
          f"{args.jobs} processes; {args.repeats} fresh interpreter(s)", flush=True)
    for _ in range(args.repeats):
        result = measure(args.mode, args.duration_s, args.jobs)
        print(f"mode={args.mode} duration_s={args.duration_s:g} wall_s={result['wall_s']:.2f} "
              f"parent_peak_mb={result['parent_peak_mb']:.0f} worker_peak_mb={result['worker_peak_mb']:.0f} "
              f"iterations={result['iterations']} before_mb={result['before_mb']:.0f}",
              flush=True)


if __name__ == "__main__":
    main()
