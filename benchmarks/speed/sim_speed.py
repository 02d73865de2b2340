"""Simulator speed, step by step against fast-forward (sim/core/fast_forward.py), measured in the same run.

Three simulator-speed targets, each simulated both ways on one core (vLLM, seed 0):
  sharegpt  one hour of OPT-13B / A100-40GB / real ShareGPT lengths at 2 req/s (configs/quickstart.yaml, with
            the roofline its earlier record was made with)                          target <= 1 s
  alpaca    one hour of configs/paper/fig12d_alpaca_opt13b.yaml at 30 req/s          target <= 3 s
  fleet     64 replicas behind the round-robin router at 128 req/s, the quickstart setup, a slice of an
            hour (--fleet-duration-s, default 600 s) scaled to the hour              target <= 60 s an hour
The fleet is also timed with its replicas served in --jobs processes (sim/core/independent_replicas.py; default 2).
Prints, per scenario, both wall times (the simulation alone: trace built before, outputs not written), their
ratio, the share of iterations run inside fast-forwarded stretches, and checks that both ways recorded the
same iterations and requests. Ends with one line per scenario: name=<s> step_s=<f> fast_s=<f> ratio=<f>.

Where the control plane runs compiled (mypyc; docs/compiled.md), each scenario is timed again under pure Python,
in a subprocess with SERVESIM_PURE_PYTHON=1, --repeats times, alternating with this process's build, and
a table compares the two (medians, the spread, whether both recorded the same): one line per scenario,
build=<s> compiled_fast_s=<f> pure_fast_s=<f> build_ratio=<f> (--no-pure: this build alone).

Then the same scenarios on another commit's code, --baseline (default: where this checkout left main, their merge
base, so that only this checkout's changes are compared), exported with `git archive` and
timed in subprocesses --repeats times, alternating with this checkout's code timed the same way: pure Python
(--baseline-build pure, the default), or compiled, the export built in place as this checkout is
(--baseline-build compiled; this checkout's build must be current): medians, spreads, whether both recorded the
same, and one line per scenario, baseline=<s> ref=<ref> build=<b> fast_s=<f> base_fast_s=<f> step_s=<f>
base_step_s=<f> speedup=<f> (--no-baseline: not).

Two scenarios without a target time the runs `servesim reproduce all` spends most on: beam search of width 4 (Fig.
14, 6 req/s) and parallel sampling with n = 6 (Fig. 14, 10 req/s), half an hour each.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# the code timed: this checkout's, whichever servesim is installed, or a baseline's export (--baseline)
CODE_ENV = "SERVESIM_SPEED_CODE"
CODE = Path(os.environ.get(CODE_ENV) or Path(__file__).resolve().parents[2])
sys.path.insert(0, str(CODE))
import sim.core.simulate
from engine.core.compiled import PURE_ENV, control_plane_build, is_compiled
from sim.core.fast_forward import FastForward
from sim.experiment.config import load_experiment
from sim.experiment.run import make_cost_model, simulate_trace, trace_for

ROOT = Path(__file__).resolve().parents[2]  # this checkout


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
    "beam": ("configs/paper/fig14_beam_w4.yaml", 6.0, [], 1800.0, None),
    "n6": ("configs/paper/fig14_parallel_n6.yaml", 10.0, [], 1800.0, None),
}
DEFAULT_SCENARIOS = ("sharegpt", "alpaca", "fleet")


def measure(name: str, fleet_duration_s: float, jobs: int = 1) -> dict:
    path, rate, overrides, duration_s, target_s = SCENARIOS[name]
    duration_s = duration_s or fleet_duration_s
    exp = load_experiment(CODE / path, [*overrides, f"workload.duration_s={duration_s}", "systems=[vllm]",
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
            "digest": digests[True].hex(),
            "label": f"{exp.replicas} x {exp.model.name}, {trace.source}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: "
                        f"{', '.join(DEFAULT_SCENARIOS)})")
    parser.add_argument("--fleet-duration-s", type=float, default=600.0)
    parser.add_argument("--jobs", type=int, default=2, help="processes for the fleet's replicas, timed as well "
                        "(fast-forwarded; 1: not)")
    parser.add_argument("--repeats", type=int, default=3, help="times each build is timed, alternating (the "
                        "comparison with pure Python)")
    parser.add_argument("--no-pure", action="store_true", help="time this build alone, once")
    parser.add_argument("--baseline", metavar="REF", help="the git commit to compare this checkout's code with, "
                        "both pure Python, alternating (default: the merge base of HEAD and main)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the comparison with --baseline")
    parser.add_argument("--baseline-build", choices=("pure", "compiled"), default="pure",
                        help="how both codes run in the comparison with --baseline (compiled: the export is built "
                        "in place first, about a minute)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # the pure subprocess's answer
    args = parser.parse_args()
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}: choose from {', '.join(SCENARIOS)}")
    if args.baseline_build == "compiled" and not args.no_baseline and not args.json and not is_compiled():
        parser.error(f"--baseline-build compiled: this checkout's control plane is {control_plane_build()}; build "
                     "it first (pip install -e . --no-deps)")
    # to count what it ran, where the fleet's replicas are built (sim/core/fleet.py; before, sim/core/simulate.py,
    # in a --baseline commit)
    sys.modules[sim.core.simulate.FleetSetup.__module__].FastForward = Counted  # type: ignore[attr-defined]
    names = args.scenarios or list(DEFAULT_SCENARIOS)
    if args.json:
        print(json.dumps([measure(name, args.fleet_duration_s, args.jobs) for name in names]))
        return
    compare = is_compiled() and not args.no_pure
    print(f"control plane: {control_plane_build()}", flush=True)
    rounds: dict[str, list[list[dict]]] = {"compiled": [], "pure": []}
    for repeat in range(args.repeats if compare else 1):
        rounds["compiled"].append([measure(name, args.fleet_duration_s, args.jobs) for name in names])
        if compare:
            rounds["pure"].append(pure_python(names, args))
        print(f"round {repeat + 1}: " + ", ".join(
            f"{build} {r['name']} {r['fast_s']:.2f} s" for build, runs in rounds.items() if runs for r in runs[-1]),
            flush=True)
    results = rounds["compiled"][0]
    print(f"{'scenario':9s} {'requests':>9s} {'iterations':>11s} {'step_s':>8s} {'fast_s':>8s} {'ratio':>6s} "
          f"{'forwarded':>9s} {'fast_s/h':>8s} {'target':>7s}  same records")
    for r in results:
        print(f"{r['name']:9s} {r['requests']:9d} {r['iterations']:11d} {r['step_s']:8.2f} {r['fast_s']:8.2f} "
              f"{r['ratio']:5.2f}x {r['forwarded']:9.1%} {r['hour_s']:8.2f} {target(r['target_s']):>7s}  {r['same']}")
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
    if rounds["pure"]:
        compare_builds(names, rounds)
    if not args.no_baseline:
        against_baseline(names, args)


def target(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.0f}s"


def pure_python(names: list[str], args, code: Path = ROOT, pure: bool = True) -> list[dict]:
    """The same scenarios, measured by this script in a subprocess whose control plane runs as pure Python (pure
    False: as built), on the code at `code` (this checkout's, or a baseline's export)."""
    command = [sys.executable, __file__, *names, "--json", "--fleet-duration-s", str(args.fleet_duration_s),
               "--jobs", str(args.jobs)]
    env = {**os.environ, "PYTHONPATH": str(code), CODE_ENV: str(code)}
    if pure:
        env[PURE_ENV] = "1"
    else:
        env.pop(PURE_ENV, None)
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def against_baseline(names: list[str], args) -> None:
    """This checkout's code against --baseline's, both in subprocesses (pure Python, or each compiled:
    --baseline-build), alternating (baseline first)."""
    # here, not at the top: the timed subprocesses put the code timed first on sys.path, and a baseline's export
    # may hold a benchmarks package without this module
    from benchmarks.speed.baseline_code import exported

    pure = args.baseline_build == "pure"
    with exported(args.baseline, build=not pure) as baseline:
        if baseline is None:
            return
        folder, ref = baseline
        rounds: dict[str, list[list[dict]]] = {"this": [], "baseline": []}
        for repeat in range(args.repeats):
            rounds["baseline"].append(pure_python(names, args, folder, pure))
            rounds["this"].append(pure_python(names, args, ROOT, pure))
            print(f"baseline round {repeat + 1}: " + ", ".join(
                f"{code} {r['name']} {r['fast_s']:.2f} s" for code, runs in rounds.items() for r in runs[-1]),
                flush=True)
    compare_with_baseline(names, rounds, ref, args.baseline_build)


def compare_with_baseline(names: list[str], rounds: dict[str, list[list[dict]]], ref: str, build: str) -> None:
    """Medians over the rounds, this checkout's code against the baseline's, each way of running."""
    both = f"both pure Python ({PURE_ENV}=1" if build == "pure" else "both compiled (mypyc, the baseline built in place"
    print(f"\nthis checkout against {ref}, {both}, in subprocesses): median of "
          f"{len(rounds['this'])}, alternating; spread = (max - min) / median; speedup = baseline / this")
    print(f"{'scenario':9s} {'way':5s} {'this_s':>8s} {'spread':>7s} {'base_s':>8s} {'spread':>7s} {'speedup':>8s}"
          "  same records")
    lines = []
    for i, name in enumerate(names):
        same = len({runs[i]["digest"] for code in rounds.values() for runs in code}) == 1
        medians = {}
        for way in ("fast_s", "step_s", "jobs_s"):
            times = {code: [runs[i][way] for runs in rounds[code]] for code in rounds}
            if any(t is None for code_times in times.values() for t in code_times):
                continue  # the fleet's jobs way only
            med = {code: statistics.median(t) for code, t in times.items()}
            spread = {code: (max(t) - min(t)) / med[code] for code, t in times.items()}
            medians[way] = med
            print(f"{name:9s} {way[:-2]:5s} {med['this']:8.2f} {spread['this']:6.0%} {med['baseline']:8.2f} "
                  f"{spread['baseline']:6.0%} {med['baseline'] / med['this']:7.2f}x  {same}")
        fast, step = medians["fast_s"], medians["step_s"]
        lines.append(f"baseline name={name} ref={ref.split()[-1][1:-1]} build={build} fast_s={fast['this']:.3f} "
                     f"base_fast_s={fast['baseline']:.3f} step_s={step['this']:.3f} base_step_s={step['baseline']:.3f} "
                     f"speedup={fast['baseline'] / fast['this']:.3f} same={same}")
    print("\n".join(lines))


def compare_builds(names: list[str], rounds: dict[str, list[list[dict]]]) -> None:
    """Medians over the rounds, compiled against pure Python, fast-forwarded and step by step."""
    repeats = len(rounds["pure"])
    print(f"\ncompiled (mypyc) against pure Python ({PURE_ENV}=1, in a subprocess): median of {repeats}, "
          "alternating; spread = (max - min) / median")
    print(f"{'scenario':9s} {'way':5s} {'compiled_s':>10s} {'spread':>7s} {'pure_s':>8s} {'spread':>7s} "
          f"{'ratio':>6s}  same records")
    lines = []
    for i, name in enumerate(names):
        same = len({runs[i]["digest"] for build in rounds.values() for runs in build}) == 1
        medians = {}
        for way in ("fast_s", "step_s"):
            times = {build: [runs[i][way] for runs in rounds[build]] for build in rounds}
            med = {build: statistics.median(t) for build, t in times.items()}
            spread = {build: (max(t) - min(t)) / med[build] for build, t in times.items()}
            medians[way] = med
            print(f"{name:9s} {way[:-2]:5s} {med['compiled']:10.2f} {spread['compiled']:6.0%} {med['pure']:8.2f} "
                  f"{spread['pure']:6.0%} {med['pure'] / med['compiled']:5.2f}x  {same}")
        fast = medians["fast_s"]
        lines.append(f"build name={name} compiled_fast_s={fast['compiled']:.3f} pure_fast_s={fast['pure']:.3f} "
                     f"build_ratio={fast['pure'] / fast['compiled']:.3f} same={same}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
