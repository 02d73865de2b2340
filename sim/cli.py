"""The `servesim` command."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from engine.core.errors import Unservable
from engine.specs.errors import SpecError


def workload_label(workload) -> str:
    if workload.is_replay:
        return f"replay of {Path(workload.trace).name}"
    dataset = Path(workload.dataset).name if "/" in str(workload.dataset) else workload.dataset
    return f"{dataset}, {workload.arrival} arrivals"


def _cmd_run(args) -> int:
    from sim.config import load_experiment
    from sim.output import prepare_out_dir, write_csv, write_text
    from sim.plots import kv_usage_plot, normalized_latency_plot
    from sim.report import summary_table, unmeasured_warnings
    from sim.sweep import sweep

    exp = load_experiment(args.config, args.set)
    out_dir = prepare_out_dir(Path(args.out or Path("results") / exp.name))
    runs = len(exp.systems) * len(exp.rates) * len(exp.seeds)
    print(f"servesim: {exp.name}: {exp.model.name} on {exp.replicas} x {exp.tensor_parallel} x {exp.hardware.name}, "
          f"{runs} runs ({len(exp.systems)} systems x {len(exp.rates)} rates x {len(exp.seeds)} seeds) -> {out_dir}")
    started = time.perf_counter()
    jobs = args.jobs or min(os.cpu_count() or 1, runs)
    summary = sweep(exp, out_dir, jobs=jobs)
    for line in unmeasured_warnings(summary, exp.warmup_s):
        print(f"servesim: warning: {line}", file=sys.stderr)
    write_csv(summary, out_dir / "summary.csv")
    title = f"{exp.model.name}, {exp.tensor_parallel}x {exp.hardware.name}, {workload_label(exp.workload)}"
    normalized_latency_plot(summary, out_dir / "normalized_latency.png", title=title, ylim=args.ylim)
    kv_usage_plot(summary, out_dir / "kv_usage.png", rate=max(exp.rates))
    table = summary_table(summary)
    write_text(table + "\n", out_dir / "summary.txt")
    print(table)
    print(f"cost model: {summary['cost_model'].iloc[0]}")
    print(f"wrote {out_dir}/summary.csv, normalized_latency.png, kv_usage.png, runs/ "
          f"in {time.perf_counter() - started:.1f} s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servesim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate every system x rate x seed of an experiment")
    run.add_argument("config", help="experiment YAML, e.g. configs/quickstart.yaml")
    run.add_argument("--out", help="output directory (default results/<name>)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, e.g. --set rates=[1,2] --set workload.duration_s=600")
    run.add_argument("--jobs", type=int, default=0, help="runs in parallel (processes); default: one per core")
    run.add_argument("--ylim", type=float, default=1.0, help="y-axis top of the plot, s/token (paper: 1.0)")
    run.set_defaults(func=_cmd_run)

    # each room adds its own commands; imports stay light (no simpy or torch until a command runs)
    from calibrate.cli import register as register_calibrate
    from fidelity.cli import register as register_validate
    from sim.capacity_cli import register as register_capacity
    from sim.workload.cli import register as register_trace

    for register in (register_capacity, register_trace, register_calibrate, register_validate):
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (SpecError, Unservable) as err:
        print(f"servesim: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
