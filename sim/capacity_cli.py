"""`servesim capacity`: what rate holds my latency target, and how many replicas I need."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from engine.specs.errors import SpecError


def _parse_target(text: str):
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
    from sim.capacity import max_rate
    from sim.config import load_experiment
    from sim.output import prepare_out_dir, write_csv

    _positive_option("--tolerance", args.tolerance)
    _positive_option("--rate", args.rate)
    exp = load_experiment(args.config, args.set)
    target = _parse_target(args.target)
    out_dir = prepare_out_dir(Path(args.out or Path("results") / exp.name))
    rows, probes = [], []
    for system in exp.systems:
        def note(p, system=system):
            probes.append({"system": system.name, "rate": p.rate, "replicas": p.replicas,
                           target.metric: p.value, "holds": p.holds})
            unmeasured = "  (no request arrived after the warm-up)" if p.value != p.value else ""
            print(f"  {system.name:<18} {p.replicas} replica(s) at {p.rate:8.3f} req/s: "
                  f"{target.metric} {p.value:.4f} {'ok' if p.holds else 'over'}{unmeasured}")
        rate, tried = max_rate(exp, system, target, seed=args.seed, start=min(exp.rates), replicas=1,
                               rel_tol=args.tolerance, on_probe=note)
        row = {"system": system.name, "metric": target.metric, "limit": target.limit,
               "max_rate_per_replica_rps": rate}
        if rate == 0.0:
            # no replica count can be derived from a rate that never held; searching would only fail
            print(f"  {system.name:<18} no rate meets the target (the lowest probed was "
                  f"{min(p.rate for p in tried):.4g} req/s)")
        if args.rate is not None:
            row["target_rate_rps"] = args.rate
            row["replicas_needed"] = _replicas(exp, system, target, args.rate, rate, args.seed, note) if rate else None
        rows.append(row)
    table = pd.DataFrame(rows)
    write_csv(table, out_dir / "capacity.csv")
    write_csv(pd.DataFrame(probes), out_dir / "capacity_probes.csv")
    print(table.to_string(index=False))
    print(f"wrote {out_dir}/capacity.csv and capacity_probes.csv")
    return 0


def _replicas(exp, system, target, rate: float, per_replica_rate: float, seed: int, note) -> int | None:
    from sim.capacity import replicas_for

    needed, tried = replicas_for(exp, system, target, rate, per_replica_rate, seed=seed, on_probe=note)
    if needed is None:
        print(f"  {system.name:<18} even {max(p.replicas for p in tried)} replicas do not meet the target "
              f"at {rate:g} req/s")
    return needed


def register(sub) -> None:
    cap = sub.add_parser("capacity", help="highest rate meeting a latency target; replicas for a rate")
    cap.add_argument("config")
    cap.add_argument("--target", required=True, help="METRIC=LIMIT, e.g. normalized_latency=0.1")
    cap.add_argument("--rate", type=float, help="also find replicas needed for this total rate (req/s)")
    cap.add_argument("--seed", type=int, default=0)
    cap.add_argument("--tolerance", type=float, default=0.05, help="relative precision of the rate search")
    cap.add_argument("--out")
    cap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    cap.set_defaults(func=_cmd_capacity)
