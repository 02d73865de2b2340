"""`servesim capacity`: what rate holds my latency target, and how many replicas I need."""
from __future__ import annotations

import math
from pathlib import Path

from engine.specs.checks import number, option, positive
from engine.specs.errors import SpecError


def parse_target(text: str):
    from sim.capacity.search import TARGET_METRICS, Target

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


def _check_options(args) -> None:
    """The search's own numbers, with the checkers a config's keys use: a tolerance finer than a float
    resolves would bisect one rate forever; NaN compares false with everything."""
    from sim.capacity.search import MIN_REL_TOL

    option(positive, args.tolerance, "--tolerance")
    if args.tolerance < MIN_REL_TOL:
        raise SpecError("--tolerance", "", (
            f"{args.tolerance:g} is finer than a float resolves between two rates (about {MIN_REL_TOL:.2g} "
            f"relative); give at least {MIN_REL_TOL:.2g}"))
    if args.tolerance >= 1:  # (high - low) / high is below 1 from the start: the search would not bisect at all
        raise SpecError("--tolerance", "", f"must be below 1 (a relative precision, e.g. 0.05), got {args.tolerance:g}")
    if args.rate is not None:
        option(positive, args.rate, "--rate")
    option(number, args.seed, "--seed", low=0, whole=True)


def _check_rate(exp, rate: float | None) -> None:
    """--rate is simulated as one run's total rate: run's request limit applies to it too."""
    from sim.capacity.search import rate_ceiling
    from sim.experiment.config import MAX_REQUESTS

    if rate is not None and rate > rate_ceiling(exp):
        raise SpecError("--rate", "", (
            f"{rate:g} req/s for {exp.workload.duration_s:g} s (workload.duration_s) is about "
            f"{rate * exp.workload.duration_s:.3g} requests, more than one run simulates ({MAX_REQUESTS:,}); "
            f"give at most {rate_ceiling(exp):.4g}, or a shorter workload.duration_s"))


def _cmd_capacity(args) -> int:
    import pandas as pd

    from sim.capacity.search import capacity_search, check_searchable, job, rate_ceiling, run_jobs
    from sim.cli import executor_spec
    from sim.experiment.config import load_experiment
    from sim.experiment.output import prepare_out_dir, write_csv

    _check_options(args)
    target = parse_target(args.target)
    exp = load_experiment(args.config, args.set)
    check_searchable(exp)
    _check_rate(exp, args.rate)
    executor = executor_spec(args, runs=len(exp.systems) * 8)  # a search probes ahead: room for more workers
    out_dir = prepare_out_dir(Path(args.out or Path("results") / exp.name))
    ceiling = rate_ceiling(exp)
    start = min(min(exp.rates), ceiling)
    jobs = [job(exp, system, target, args.seed,
                lambda: capacity_search(start, args.tolerance, args.rate, ceiling=ceiling))
            for system in exp.systems]
    probes: list[list[dict]] = [[] for _ in exp.systems]

    def note(i: int, p) -> None:
        system = exp.systems[i]
        probes[i].append({"system": system.name, "rate": p.rate, "replicas": p.replicas,
                          target.metric: p.value, "holds": p.holds})
        verdict = {True: "ok", False: "over", None: "no information (no request arrived after the warm-up)"}
        print(f"  {system.name:<18} {p.replicas} replica(s) at {p.rate:8.3f} req/s: "
              f"{target.metric} {p.value:.4f} {verdict[p.holds]}")

    with executor.open() as workers:
        results = run_jobs(jobs, workers, note)
    rows = [_row(system, target, args.rate, result, tried, ceiling)
            for system, result, tried in zip(exp.systems, results, probes)]
    table = pd.DataFrame(rows)
    write_csv(table, out_dir / "capacity.csv")
    write_csv(pd.DataFrame([p for tried in probes for p in tried]), out_dir / "capacity_probes.csv")
    print(table.to_string(index=False))
    print(f"wrote {out_dir}/capacity.csv and capacity_probes.csv")
    return 0


def _row(system, target, total_rate: float | None, result: tuple, tried: list[dict], ceiling: float) -> dict:
    rate, needed = result
    row = {"system": system.name, "metric": target.metric, "limit": target.limit,
           "max_rate_per_replica_rps": rate}
    measured = [p for p in tried if p["holds"] is not None]
    if not measured:
        print(f"  {system.name:<18} no probe measured a request after the warm-up (up to "
              f"{max(p['rate'] for p in tried):.4g} req/s): lower warmup_s or raise workload.duration_s")
    elif rate == 0.0:
        # no replica count can be derived from a rate that never held; searching would only fail
        print(f"  {system.name:<18} no rate meets the target (the lowest measured was "
              f"{min(p['rate'] for p in measured):.4g} req/s)")
    elif rate >= ceiling:
        print(f"  {system.name:<18} holds even at {rate:.4g} req/s, the most one run simulates over "
              "workload.duration_s: the capacity is at least that")
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
