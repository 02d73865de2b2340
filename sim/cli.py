"""The simulator's commands (`servesim run`, `capacity`, `reproduce`, `trace`); the front door is servesim/cli.py."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from engine.specs.arguments import Spelling
from engine.specs.checks import option, positive
from sim.executors.options import add_executor_options, executor_spec

# `servesim run`'s flags for the arguments servesim.run takes (sim/experiment/checked.py checks both)
RUN_FLAGS = Spelling(overrides="--set", out_dir="--out", jobs="--jobs", iterations="--iterations")


def _cmd_run(args) -> int:
    from engine.core.compiled import control_plane_build
    from sim.experiment.checked import run_arguments
    from sim.experiment.config import pool_label
    from sim.experiment.request_tracks import MAX_REQUEST_TRACKS
    from sim.experiment.run_plots import PlotProcess
    from sim.experiment.trace_events import TRACE_FILE

    # the figures are drawn once every run is summarized: their arguments are checked first, or a bad one would
    # leave the runs done and summary.csv written, and then fail
    if args.ylim is not None:  # none given: the axis fits the runs (sim/experiment/plots.py fitted_top)
        option(positive, args.ylim, "--ylim")
    overrides = [*args.set, *(["breakdown=true"] if args.breakdown else []),
                 *(["trace_events=true"] if args.trace_events else []),
                 *(["vllm_bench=true"] if args.vllm_bench else []), *_goodput_override(args.goodput)]
    checked = run_arguments(args.config, overrides, args.out, args.jobs, args.iterations, RUN_FLAGS,
                            executor=lambda runs: executor_spec(args, runs))
    exp, out_dir, executor = checked.exp, checked.out_dir, checked.executor
    runs = len(exp.systems) * len(exp.rates) * len(exp.concurrencies) * len(exp.seeds)
    fleet = f"{exp.replicas} x {exp.tensor_parallel} x {exp.hardware.name}"
    if exp.split is not None:
        fleet = f"{pool_label(exp, exp.split.prefill)} prefill + {pool_label(exp, exp.split.decode)} decode"
    gates = f" x {len(exp.concurrencies)} concurrencies" if len(exp.concurrencies) > 1 else ""
    print(f"servesim: {exp.name}: {exp.model.name} on {fleet}, {runs} runs ({len(exp.systems)} systems x "
          f"{len(exp.rates)} rates{gates} x {len(exp.seeds)} seeds) -> {out_dir}")
    print(f"servesim: control plane: {control_plane_build()}")  # compiled or pure Python: docs/compiled.md
    if exp.trace_events:
        print(f"servesim: trace events: each run's {TRACE_FILE} has a track per request, at most "
              f"{MAX_REQUEST_TRACKS} (beyond, every k-th request by id: its requests process names k)")
    started = time.perf_counter()
    if args.no_plots:
        return _run_and_report(args, exp, out_dir, executor, started, None)
    with PlotProcess() as plots:  # matplotlib imported while the runs simulate (sim/experiment/run_plots.py)
        return _run_and_report(args, exp, out_dir, executor, started, plots)


def _goodput_override(pairs: list[str] | None) -> list[str]:
    """--goodput's METRIC:MS pairs as the config's `goodput` mapping (JSON is YAML), checked as the flag's."""
    import json

    from sim.experiment.goodput import slos_from_pairs

    return [f"goodput={json.dumps(slos_from_pairs(pairs))}"] if pairs else []


def _run_and_report(args, exp, out_dir: Path, executor, started: float, plots) -> int:
    from sim.experiment.output import write_columns_csv, write_text
    from sim.experiment.report import summary_table, unmeasured_warnings
    from sim.experiment.setup import workload_label
    from sim.experiment.sweep import cost_models_text, summary_columns, sweep_rows

    # the figures are drawn in processes of their own from the summary's rows, as soon as every run's is known
    # (sim/experiment/run_plots.py): with --jobs 1, while the last run's files are written
    title = f"{exp.model.name}, {exp.tensor_parallel}x {exp.hardware.name}, {workload_label(exp.workload, exp.rates)}"
    draw = None if plots is None else lambda rows: plots.start(title, rows, out_dir, args.ylim, max(exp.rates))
    # the summary's rows, written from columns: the command's process never imports pandas, nor the pyarrow
    # pandas 3 imports with it
    rows = sweep_rows(exp, out_dir, executor, iterations=args.iterations, summarized=draw)
    for line in unmeasured_warnings(rows, exp.warmup_s):
        print(f"servesim: warning: {line}", file=sys.stderr)
    write_columns_csv(summary_columns(rows), out_dir / "summary.csv")
    write_text(cost_models_text(rows), out_dir / "cost_models.txt")
    table = summary_table(rows)
    write_text(table + "\n", out_dir / "summary.txt")
    print(table)
    systems_by_model: dict[str, list[str]] = {}
    for row in rows:
        names = systems_by_model.setdefault(row["cost_model"], [])
        if row["system"] not in names:
            names.append(row["system"])
    for label, systems in systems_by_model.items():
        print(f"cost model: {label}" + (f" ({', '.join(systems)})" if len(systems_by_model) > 1 else ""))
    # the figures are waited for last: the summary is on disk whatever drawing costs, and --no-plots never starts
    # the process that draws them
    written = [] if plots is None else plots.names()
    print(f"wrote {out_dir}/" + ", ".join(["summary.csv", "summary.txt", "cost_models.txt", *written, "runs/"])
          + f" in {time.perf_counter() - started:.1f} s")
    return 0


def register(sub) -> None:
    """The simulator's commands: run, capacity, reproduce and trace (the front door, servesim/cli.py, calls this)."""
    run = sub.add_parser("run", help="simulate every system x rate x seed of an experiment")
    run.add_argument("config", help="experiment YAML, e.g. configs/quickstart.yaml")
    run.add_argument("--out", help="output directory (default results/<name>)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, e.g. --set rates=[1,2] --set workload.duration_s=600")
    add_executor_options(run, "runs")
    run.add_argument("--iterations", choices=("parquet", "csv", "none"), default="parquet",
                     help="each run's per-iteration records: iterations.parquet (default), iterations.csv.gz, "
                     "or not kept")
    run.add_argument("--breakdown", action="store_true",
                     help="each iteration's device time by kernel kind and host time by term, as columns of the "
                     "iterations file and shares in summary.csv (the config's `breakdown: true`)")
    run.add_argument("--trace-events", action="store_true",
                     help="also each run's trace.json.gz, a Chrome/Perfetto trace: a track per replica, a slice per "
                     "iteration with its parts, and a track per request with its phases, a long run's every k-th "
                     "(the config's `trace_events: true`; implies --breakdown)")
    run.add_argument("--vllm-bench", action="store_true",
                     help="also each run's vllm_bench.json, the result `vllm bench serve --save-result "
                     "--save-detailed` writes: TTFT, TPOT, ITL and E2E latency figures, throughputs and the "
                     "per-request lists, in vLLM's field names and units (the config's `vllm_bench: true`)")
    run.add_argument("--goodput", nargs="+", metavar="METRIC:MS",
                     help="service level objectives for vllm_bench.json's request_goodput, as vLLM's --goodput: "
                     "e.g. --goodput ttft:500 tpot:50 (metrics ttft, tpot, e2el; implies --vllm-bench; the config's "
                     "`goodput: {ttft: 500, tpot: 50}`)")
    run.add_argument("--ylim", type=float, default=None,
                     help="y-axis top of normalized_latency.png, s/token (default: fitted to the runs; at least "
                     "1.0, the paper's, where a curve reaches the 0.5 s/token line)")
    run.add_argument("--no-plots", action="store_true",
                     help="skip normalized_latency.png, ttft.png, tpot.png and kv_usage.png (and matplotlib's import); "
                     "summary.csv and summary.txt are written as always")
    run.set_defaults(func=_cmd_run)

    # imports stay light (no simpy or torch until a command runs)
    from sim.capacity.cli import register as register_capacity
    from sim.reproduce.cli import register as register_reproduce
    from sim.workload.cli import register as register_trace

    for register_room in (register_capacity, register_reproduce, register_trace):
        register_room(sub)


if __name__ == "__main__":
    # The command is the front door's (servesim/cli.py), which knows every room's commands; this module
    # only registers the simulator's, and imports nothing above it.
    print("servesim: run `servesim ...` or `python -m servesim ...`; sim.cli holds only the simulator's "
          "commands", file=sys.stderr)
    sys.exit(2)
