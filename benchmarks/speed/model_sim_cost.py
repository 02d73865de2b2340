"""What a simulated request costs in wall time, by deployment: Llama-3-70B (grouped-query attention) at tensor
parallelism 4 on H100 SXMs against OPT-13B on one A100-40GB (the quickstart's setting), in the same sitting.

Both run configs/quickstart.yaml's trace and clock (ShareGPT-like lengths at Fig. 11's means, Poisson arrivals,
the whole A100 clock with vllm-a100-2024-01's host time) for one hour at 2 req/s under vLLM; the 70B run changes
only the model, the GPUs, their number and the KV rule (and lifts the paper's 2,560-token cap, which Llama-3's
8,192 positions exceed). Each run is timed in process around `sim.experiment.run.run_one` (the simulation and
its records, no files written); the settings alternate, `--repeats` times each, and the median, the spread
((max - min) / median) and the 70B / OPT ratio of the medians per simulated request are printed, then written to
`--record`. Target: the 70B deployment costs no more per simulated request than OPT-13B.
`--scale` shortens the trace (0.01: 36 s of arrivals) for a quick look or a test.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from engine.core.compiled import control_plane_build
from sim.experiment.config import load_experiment
from sim.experiment.run import run_one

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
RECORD = ROOT / "benchmarks" / "measurements" / "model_sim_cost.md"
HOUR_S, WARMUP_S, RATE = 3600, 60, 2.0
SETTINGS = {  # name: --set overrides of the quickstart
    "OPT-13B, 1 A100-40GB (the quickstart)": ["systems=[vllm]"],
    "Llama-3-70B, 4 H100 SXM": ["model=llama-3-70b", "hardware=h100-sxm", "tensor_parallel=4", "kv_cache_gib=null",
                                "systems=[{preset: vllm, name: vllm, max_num_batched_tokens: null}]"],
}
BASELINE, CANDIDATE = SETTINGS


@dataclass(frozen=True)
class Timing:
    """One run: its wall seconds, the requests it simulated and the iterations it priced."""
    wall_s: float
    requests: int
    iterations: int

    @property
    def per_request_s(self) -> float:
        return self.wall_s / self.requests


def overrides(setting: str, scale: float) -> list[str]:
    return [f"workload.duration_s={HOUR_S * scale:g}", f"warmup_s={WARMUP_S * scale:g}", f"rates=[{RATE:g}]",
            "seeds=[0]", *SETTINGS[setting]]


def time_run(setting: str, scale: float) -> Timing:
    exp = load_experiment(QUICKSTART, overrides(setting, scale))
    started = time.perf_counter()
    result = run_one(exp, exp.systems[0], exp.rates[0], exp.seeds[0])
    wall_s = time.perf_counter() - started
    iterations = len(next(iter(result.iteration_arrays.values())))
    return Timing(wall_s, int(result.summary["num_requests"]), iterations)


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def measure(scale: float, repeats: int) -> dict[str, list[Timing]]:
    """Each setting `repeats` times, alternating, so both see the same load on a shared machine."""
    timings: dict[str, list[Timing]] = {name: [] for name in SETTINGS}
    for repeat in range(repeats):
        for name in SETTINGS:
            timing = time_run(name, scale)
            timings[name].append(timing)
            print(f"{name}: run {repeat + 1}: {timing.wall_s:.2f} s, {timing.requests} requests, "
                  f"{timing.iterations} iterations, {timing.per_request_s * 1e3:.3f} ms a request", flush=True)
    return timings


def report(timings: dict[str, list[Timing]], scale: float, machine: str) -> str:
    """The record: per setting the median and spread of wall time and of ms per request, then the ratio."""
    repeats = len(next(iter(timings.values())))
    lines = ["# Wall time per simulated request, by deployment — `python benchmarks/speed/model_sim_cost.py`", "",
             f"{HOUR_S * scale:g} s of the quickstart's arrivals at {RATE:g} req/s under vLLM, each setting "
             f"{repeats} times alternating, control plane {control_plane_build()}; {machine}.", "",
             "| deployment | requests | iterations | wall s (median, spread) | ms a request (median, spread) "
             "| us an iteration (median) |", "|---|---|---|---|---|---|"]
    medians, per_iteration = {}, {}
    for name, runs in timings.items():
        walls, per_request = [t.wall_s for t in runs], [t.per_request_s * 1e3 for t in runs]
        medians[name] = statistics.median(per_request)
        per_iteration[name] = statistics.median(t.wall_s / t.iterations * 1e6 for t in runs)
        lines.append(f"| {name} | {runs[0].requests} | {runs[0].iterations} | {statistics.median(walls):.2f} "
                     f"({spread(walls):.0%}) | {medians[name]:.3f} ({spread(per_request):.0%}) "
                     f"| {per_iteration[name]:.1f} |")
    ratio = medians[CANDIDATE] / medians[BASELINE]
    verdict = "met" if ratio <= 1.0 else "NOT met"
    lines += ["", f"{CANDIDATE} / {BASELINE}: {ratio:.2f}x per simulated request (target <= 1.00x: {verdict}); "
              f"{per_iteration[CANDIDATE] / per_iteration[BASELINE]:.2f}x per iteration priced."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="share of the hour to simulate (default 1)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--record", type=Path, default=RECORD, help=f"where the record goes (default {RECORD})")
    parser.add_argument("--machine", default="machine not described",
                        help="what it ran on, for the record (e.g. '2-core AMD EPYC, shared')")
    args = parser.parse_args(argv)
    if not 0 < args.scale <= 1 or args.repeats < 1:
        parser.error("--scale is in (0, 1] and --repeats at least 1")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    timings = measure(args.scale, args.repeats)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())  # a shared machine's other work shows in the spreads
    text = report(timings, args.scale, f"{stamp}, {args.machine}, load average at the end {load}")
    print(text)
    args.record.write_text(text)
    print(f"wrote {args.record}")


if __name__ == "__main__":
    main()
