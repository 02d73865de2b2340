"""`servesim capacity`: what rate holds my latency target, and how many replicas I need."""
from __future__ import annotations

import math
from pathlib import Path

from engine.specs.errors import SpecError


def parse_target(text: str):
    from sim.capacity import TARGET_METRICS, Target

    if "=" not in text:
        raise SpecError("--target", text,
                        f"write METRIC=LIMIT, e.g. normalized_latency=0.1; metrics: {list(TARGET_METRICS)}")
    metric, limit = text.split("=", 1)
    if metric not in TARGET_METRICS:
        raise SpecError("--target", metric, f"unknown metric; valid: {list(TARGET_METRICS)}")
    try:
        value = float(limit)
    except ValueError:
        raise SpecError("--target", metric, f"limit {limit!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise SpecError("--target", metric, f"limit must be a positive number, got {value}")
    return Target(metric, value)


def _positive_option(option: str, value: float | None) -> None:
    # 0 or a negative tolerance would bisect forever; NaN compares false with everything
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise SpecError(option, "", f"must be a positive number, got {value}")


def _cmd_capacity(args) -> int:
    import pandas as pd

    from sim.capacity import capacity_search, job, run_jobs
    from sim.cli import executor_spec
    from sim.config import load_experiment
    from sim.output import prepare_out_dir, write_csv

    _positive_option("--tolerance", args.tolerance)
    _positive_option("--rate", args.rate)
    exp = load_experiment(args.config, args.set)
    target = parse_target(args.target)
    executor = executor_spec(args, runs=len(exp.systems) * 8)  # a search probes ahead: room for more workers
    out_dir = prepare_out_dir(Path(args.out or Path("results") / exp.name))
    start = min(exp.rates)
    jobs = [job(exp, system, target, args.seed, lambda: capacity_search(start, args.tolerance, args.rate))
            for system in exp.systems]
    probes: list[list[dict]] = [[] for _ in exp.systems]

    def note(i: int, p) -> None:
        system = exp.systems[i]
        probes[i].append({"system": system.name, "rate": p.rate, "replicas": p.replicas,
                          target.metric: p.value, "holds": p.holds})
        unmeasured = "  (no request arrived after the warm-up)" if p.value != p.value else ""
        print(f"  {system.name:<18} {p.replicas} replica(s) at {p.rate:8.3f} req/s: "
              f"{target.metric} {p.value:.4f} {'ok' if p.holds else 'over'}{unmeasured}")

    with executor.open() as workers:
        results = run_jobs(jobs, workers, note)
    rows = [_row(system, target, args.rate, result, tried)
            for system, result, tried in zip(exp.systems, results, probes)]
    table = pd.DataFrame(rows)
    write_csv(table, out_dir / "capacity.csv")
    write_csv(pd.DataFrame([p for tried in probes for p in tried]), out_dir / "capacity_probes.csv")
    print(table.to_string(index=False))
    print(f"wrote {out_dir}/capacity.csv and capacity_probes.csv")
    return 0


def _row(system, target, total_rate: float | None, result: tuple, tried: list[dict]) -> dict:
    rate, needed = result
    row = {"system": system.name, "metric": target.metric, "limit": target.limit,
           "max_rate_per_replica_rps": rate}
    if rate == 0.0:
        # no replica count can be derived from a rate that never held; searching would only fail
        print(f"  {system.name:<18} no rate meets the target (the lowest probed was "
              f"{min(p['rate'] for p in tried):.4g} req/s)")
    if total_rate is not None:
        row["target_rate_rps"] = total_rate
        row["replicas_needed"] = needed
        if rate and needed is None:
            print(f"  {system.name:<18} even {max(p['replicas'] for p in tried)} replicas do not meet the target "
                  f"at {total_rate:g} req/s")
    return row


def register(sub) -> None:
    cap = sub.add_parser("capacity", help="highest rate meeting a latency target; replicas for a rate")
    cap.add_argument("config")
    cap.add_argument("--target", required=True, help="METRIC=LIMIT, e.g. normalized_latency=0.1")
    cap.add_argument("--rate", type=float, help="also find replicas needed for this total rate (req/s)")
    cap.add_argument("--seed", type=int, default=0)
    cap.add_argument("--tolerance", type=float, default=0.05, help="relative precision of the rate search")
    cap.add_argument("--out")
    cap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    from sim.cli import add_executor_options

    add_executor_options(cap, "probes")
    cap.set_defaults(func=_cmd_capacity)
