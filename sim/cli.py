"""The `servesim` command."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from engine.core.errors import Unservable
from engine.specs.checks import option, positive
from engine.specs.errors import SpecError

# Errors a user can fix: a bad config or argument, a request the deployment can never serve, a file
# system that refuses (no permission, disk full). They are reported in one line with this status.
USER_ERRORS = (SpecError, Unservable, OSError)
EXIT_USER_ERROR = 2
EXIT_BUG = 1
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT: 128 + 2


def workload_label(workload) -> str:
    if workload.is_replay:
        return f"replay of {Path(workload.trace).name}"
    dataset = Path(workload.dataset).name if "/" in str(workload.dataset) else workload.dataset
    return f"{dataset}, {workload.arrival} arrivals"


def _cmd_run(args) -> int:
    from sim.config import load_experiment
    from sim.output import check_iterations_format, prepare_out_dir, write_csv, write_text
    from sim.report import summary_table, unmeasured_warnings
    from sim.sweep import sweep

    # the plot is drawn last, after every run: its arguments are checked first, or a bad one would
    # leave the runs done and summary.csv written, and then fail
    option(positive, args.ylim, "--ylim")
    exp = load_experiment(args.config, args.set)
    runs = len(exp.systems) * len(exp.rates) * len(exp.seeds)
    executor = executor_spec(args, runs)
    check_iterations_format(args.iterations)
    out_dir = prepare_out_dir(Path(args.out or Path("results") / exp.name))
    print(f"servesim: {exp.name}: {exp.model.name} on {exp.replicas} x {exp.tensor_parallel} x {exp.hardware.name}, "
          f"{runs} runs ({len(exp.systems)} systems x {len(exp.rates)} rates x {len(exp.seeds)} seeds) -> {out_dir}")
    started = time.perf_counter()
    summary = sweep(exp, out_dir, executor, iterations=args.iterations)
    for line in unmeasured_warnings(summary, exp.warmup_s):
        print(f"servesim: warning: {line}", file=sys.stderr)
    write_csv(summary, out_dir / "summary.csv")
    from sim.plots import kv_usage_plot, normalized_latency_plot  # matplotlib: only once there is something to plot

    title = f"{exp.model.name}, {exp.tensor_parallel}x {exp.hardware.name}, {workload_label(exp.workload)}"
    normalized_latency_plot(summary, out_dir / "normalized_latency.png", title=title, ylim=args.ylim)
    kv_usage_plot(summary, out_dir / "kv_usage.png", rate=max(exp.rates))
    table = summary_table(summary)
    write_text(table + "\n", out_dir / "summary.txt")
    print(table)
    for source, systems in summary.groupby("cost_model", sort=False)["system"].unique().items():
        print(f"cost model: {source}" + (f" ({', '.join(systems)})" if summary["cost_model"].nunique() > 1 else ""))
    print(f"wrote {out_dir}/summary.csv, normalized_latency.png, kv_usage.png, runs/ "
          f"in {time.perf_counter() - started:.1f} s")
    return 0


def add_executor_options(parser: argparse.ArgumentParser, what: str) -> None:
    """--jobs, --executor and --scheduler: where a command's runs go (sim/pool.py)."""
    parser.add_argument("--jobs", type=int, default=0,
                        help=f"{what} in parallel: processes, or a local Dask cluster's workers; default one per core")
    parser.add_argument("--executor", choices=("process", "dask"), default=None,
                        help="process (default): a local process pool; dask: a local Dask cluster "
                        "(needs servesim[dask])")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help=f"send the {what} to the existing Dask cluster whose scheduler is there")


def executor_spec(args, runs: int):
    """The executor the options ask for; --jobs 0 is one worker per core, at most one per run."""
    from sim.pool import ExecutorSpec

    kind = args.executor or ("dask" if args.scheduler else "process")
    if args.jobs < 0:
        raise SpecError("--jobs", str(args.jobs), "must be at least 1, or 0 for one per core")
    if args.scheduler and args.jobs:
        raise SpecError("--jobs", str(args.jobs), "the cluster at --scheduler has its own workers; drop --jobs")
    jobs = args.jobs or max(1, min(os.cpu_count() or 1, runs))
    return ExecutorSpec(kind, jobs, args.scheduler)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servesim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate every system x rate x seed of an experiment")
    run.add_argument("config", help="experiment YAML, e.g. configs/quickstart.yaml")
    run.add_argument("--out", help="output directory (default results/<name>)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, e.g. --set rates=[1,2] --set workload.duration_s=600")
    add_executor_options(run, "runs")
    run.add_argument("--iterations", choices=("parquet", "csv", "none"), default="parquet",
                     help="each run's per-iteration records: iterations.parquet (default), iterations.csv.gz, "
                     "or not kept")
    run.add_argument("--ylim", type=float, default=1.0, help="y-axis top of the plot, s/token (paper: 1.0)")
    run.set_defaults(func=_cmd_run)

    # each room adds its own commands; imports stay light (no simpy or torch until a command runs)
    from calibrate.cli import register as register_calibrate
    from fidelity.cli import register as register_validate
    from sim.capacity_cli import register as register_capacity
    from sim.reproduce.cli import register as register_reproduce
    from sim.workload.cli import register as register_trace

    for register in (register_capacity, register_reproduce, register_trace, register_calibrate, register_validate):
        register(sub)
    _add_debug_flag(parser)
    return parser


def _add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """--debug anywhere on the command line: every command's and subcommand's parser knows it."""
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="on an error, print the traceback too (for bug reports)")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):  # an alias maps to its command's parser
                _add_debug_flag(command)


def one_line(err: BaseException) -> str:
    """An error's message on one line: a YAML parser's, for one, spans several."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return "; ".join(lines) or type(err).__name__


def _fail(args, message: str, status: int) -> int:
    if getattr(args, "debug", False):
        traceback.print_exc()
    print(f"servesim: {message}", file=sys.stderr)
    return status


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt


def _sigterm_as_interrupt():
    """SIGTERM (kill, a job scheduler's stop) ends a command as Ctrl-C does: the same cleanup, the same
    one line, the same exit status. The previous handler, to restore; None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _interrupted)


def main(argv: list[str] | None = None) -> int:
    """Run a command; the user sees one line for any error, a traceback only with --debug."""
    args = None
    previous = _sigterm_as_interrupt()
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", EXIT_INTERRUPTED)
    except USER_ERRORS as err:
        return _fail(args, f"error: {one_line(err)}", EXIT_USER_ERROR)
    except Exception as err:  # a bug: say so, and how to report it
        return _fail(args, f"internal error: {type(err).__name__}: {one_line(err)} "
                     "(rerun with --debug for the traceback, and report it)", EXIT_BUG)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
