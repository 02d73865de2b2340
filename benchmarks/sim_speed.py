"""Simulator speed: one hour of OPT-13B / A100-40GB / ShareGPT traffic at 2 req/s under vLLM.

Prints wall seconds, simulated requests per wall second and peak RSS, and, as a baseline
measured in the same run, the same trace with per-iteration recording and KV accounting
only (the scheduler alone, no SimPy), so the ratio shows what the simulation layer costs.
Ends with: wall_s=<float> requests=<int> peak_rss_mb=<float>
"""
from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from engine.core.factory import make_scheduler
from engine.core.sequence import SequenceCounter, make_group
from sim.config import load_experiment
from sim.run import make_cost_model, simulate_trace, trace_for

ROOT = Path(__file__).resolve().parents[1]


def scheduler_only(exp, system, trace, cost_model) -> float:
    """The control plane and cost model in a bare loop: the floor for any simulator of this policy."""
    pool = exp.kv_pool(system)
    scheduler = make_scheduler(system, exp.model, pool.num_gpu_blocks, pool.num_cpu_blocks)
    counter, now, i = SequenceCounter(), 0.0, 0
    arrivals, prompts, outputs = trace.arrival_s.tolist(), trace.prompt_len.tolist(), trace.output_len.tolist()
    started = time.perf_counter()
    while i < len(arrivals) or scheduler.has_unfinished():
        while i < len(arrivals) and arrivals[i] <= now:
            scheduler.add_request(make_group(i, arrivals[i], prompts[i], outputs[i], 1, counter))
            i += 1
        batch = scheduler.schedule()
        if batch.is_empty:
            now = arrivals[i]
            continue
        now += cost_model.step_time(batch)
        scheduler.complete(batch, now)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--duration-s", type=float, default=3600)
    args = parser.parse_args()
    exp = load_experiment(ROOT / "configs" / "quickstart.yaml",
                          [f"workload.duration_s={args.duration_s}", "systems=[vllm]", f"rates=[{args.rate}]",
                           "cost_model=roofline"])  # the cost model its record was measured with
    system = exp.systems[0]
    trace = trace_for(exp, args.rate, 0)
    cost_model = make_cost_model(exp, system)
    base_s = scheduler_only(exp, system, trace, cost_model)
    started = time.perf_counter()
    records, _ = simulate_trace(exp, system, trace, cost_model)
    wall_s = time.perf_counter() - started
    iterations = len(records.iteration_values)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"trace: {len(trace)} requests over {args.duration_s:g} s at {args.rate:g} req/s ({trace.source})")
    print(f"simulated {iterations} iterations in {wall_s:.2f} s: {len(trace) / wall_s:.0f} requests/s, "
          f"{iterations / wall_s:.0f} iterations/s")
    print(f"baseline (scheduler + cost model, no SimPy, no records): {base_s:.2f} s; "
          f"simulation / baseline = {wall_s / base_s:.2f}x")
    print(f"wall_s={wall_s:.3f} requests={len(trace)} peak_rss_mb={peak_rss_mb:.1f}")


if __name__ == "__main__":
    main()
