"""The command-line options that choose where a command's runs go (`servesim run`'s and `servesim capacity`'s)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from engine.errors import SpecError
from engine.specs.arguments import jobs as jobs_argument
from engine.specs.arguments import per_core

if TYPE_CHECKING:
    from sim.executors.spec import ExecutorSpec


def add_executor_options(parser: argparse.ArgumentParser, what: str) -> None:
    """--jobs, --executor and --scheduler: where a command's runs go."""
    parser.add_argument("--jobs", type=int, default=0,
                        help=f"{what} in parallel: processes, or a local Dask cluster's workers; default one per core")
    parser.add_argument("--executor", choices=("process", "dask"), default=None,
                        help="process (default): a local process pool; dask: a local Dask cluster "
                        "(needs servesim[dask])")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help=f"send the {what} to the existing Dask cluster whose scheduler is there")


def executor_spec(args, runs: int) -> ExecutorSpec:
    """The executor the options ask for; --jobs 0 is one worker per core; never more workers than runs
    (more would only sit idle, each a process forked for nothing)."""
    from sim.executors.spec import ExecutorSpec  # with the pools' modules, loaded once a command runs, not for --help

    kind = args.executor or ("dask" if args.scheduler else "process")
    asked = jobs_argument(args.jobs, "--jobs")  # the check servesim.run's jobs= goes through
    if args.scheduler and asked:
        raise SpecError("--jobs", str(asked), "the cluster at --scheduler has its own workers; drop --jobs")
    return ExecutorSpec(kind, per_core(asked, runs), args.scheduler)
