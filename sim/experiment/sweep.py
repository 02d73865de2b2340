"""Many runs: every system x rate x seed of an experiment, over any Workers (sim/executors/workers.py), resumable.

Each finished run leaves DIR/runs/<key>/ (summary.json, requests.csv.gz, dropped.csv.gz where it dropped
requests unserved (vLLM's ignored, or aborted), vllm_bench.json where the experiment asks for it (vllm_bench),
and its per-iteration records in the chosen format: iterations.parquet, iterations.csv.gz or none), written
atomically; a rerun skips the keys already there for the same configuration and inputs
(sim/experiment/fingerprint.py) whose iterations file is the one asked for (and vllm_bench.json where asked
for), so an interrupted sweep resumes where it stopped, and a changed config, spec or data file is simulated
again.

A worker that sees this machine's files (this process, a process pool, a local Dask cluster) writes
its run's folder itself; a worker of an existing Dask cluster, which may be on another machine,
sends the run's files back and this process writes them, so only this machine needs the folder.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from engine.core.records import DROPPED_COLUMNS
from engine.core.system import CHUNKED_POLICIES, SystemSpec
from sim.executors.spec import ExecutorSpec
from sim.executors.workers import Workers
from sim.experiment.closed_loop import CONCURRENCY_COLUMN
from sim.experiment.config import Experiment
from sim.experiment.fingerprint import config_digest, input_digest
from sim.experiment.output import (
    DEFAULT_ITERATIONS,
    ITERATION_FILES,
    check_iterations_format,
    columns_csv_gz_bytes,
    iterations_bytes,
    prepare_out_dir,
    write_bytes,
    write_json,
)
from sim.experiment.progress import Eta
from sim.experiment.request_tracks import RunRequests
from sim.experiment.run import COST_MODEL_SOURCE, SUMMARY_COLUMNS, run_label, run_one
from sim.experiment.split_run import SPLIT_COLUMNS
from sim.experiment.table import rows_to_columns, tuples_to_columns
from sim.experiment.trace_events import TRACE_FILE, trace_events_bytes
from sim.experiment.vllm_bench import VLLM_BENCH_FILE, result_bytes

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class RunKey:
    system: SystemSpec
    rate: float
    seed: int
    concurrency: int | None = None  # the client's gate (sim/experiment/closed_loop.py); None: none

    @property
    def slug(self) -> str:
        name = "".join(c if c.isalnum() else "-" for c in self.system.name.lower()).strip("-")
        while "--" in name:
            name = name.replace("--", "-")
        gate = "" if self.concurrency is None else f"_conc{self.concurrency}"
        return f"{name}_rate{self.rate:g}{gate}_seed{self.seed}"


def run_keys(exp: Experiment) -> list[RunKey]:
    return [RunKey(s, r, seed, c) for s in exp.systems for r in exp.rates for c in exp.concurrencies
            for seed in exp.seeds]


@dataclass(frozen=True)
class RunFiles:
    """One finished run as its folder will hold it: the summary row, and each file's bytes."""
    summary: dict
    files: dict[str, bytes]


def _done(run_dir: Path, digest: str, files: tuple[str | None, ...]) -> dict | None:
    """The run's summary where it is done: written for the same config, with every file asked for (None: none)."""
    path = run_dir / "summary.json"
    if not path.exists() or any(name is not None and not (run_dir / name).exists() for name in files):
        return None
    summary = json.loads(path.read_text())
    if summary.get("config_digest") != digest or not {*SUMMARY_COLUMNS, COST_MODEL_SOURCE} <= set(summary):
        return None  # another configuration, or written before a column was added: simulate it again
    return summary


def execute(exp: Experiment, key: RunKey, digest: str, iterations: str = DEFAULT_ITERATIONS,
            replica_jobs: int = 1, summarized: Callable[[dict], object] | None = None) -> RunFiles:
    """One run, simulated and encoded; it writes nothing, so it can run on any machine. replica_jobs:
    processes for a fleet's replicas (sim.experiment.run.run_one). summarized: called with the run's summary
    row as soon as it is known, before the files are encoded (a callback: where the run simulates in the
    caller's process)."""
    result = run_one(exp.at_concurrency(key.concurrency), key.system, key.rate, key.seed, replica_jobs)
    summary = {**result.summary, "config_digest": digest}
    if summarized is not None:
        summarized(summary)
    files = {"requests.csv.gz": columns_csv_gz_bytes(result.request_arrays)}
    if result.dropped_values:  # only a run that dropped requests unserved has the file
        files["dropped.csv.gz"] = columns_csv_gz_bytes(tuples_to_columns(result.dropped_values, DROPPED_COLUMNS))
    if ITERATION_FILES[iterations] is not None:
        files[ITERATION_FILES[iterations]] = iterations_bytes(result.iteration_arrays, iterations)
    if exp.trace_events:
        requests = RunRequests(result.request_arrays, result.dropped_values,
                               chunked=key.system.prefill_policy in CHUNKED_POLICIES)
        files[TRACE_FILE] = trace_events_bytes(result.iteration_arrays, result.iteration_arrays,
                                               f"{exp.name}: {run_label(key.system, key.rate, key.seed)}", requests)
    if result.vllm_bench is not None:
        files[VLLM_BENCH_FILE] = result_bytes(result.vllm_bench)
    return RunFiles(summary, files)


def execute_into(exp: Experiment, key: RunKey, digest: str, iterations: str, run_dir: Path,
                 replica_jobs: int = 1, summarized: Callable[[dict], object] | None = None) -> dict:
    """One run, written into its folder by the worker that simulated it (one that sees this machine's
    files); only its summary goes back (and to `summarized` before the files are written, as execute's)."""
    return save(execute(exp, key, digest, iterations, replica_jobs, summarized), run_dir)


def save(run: RunFiles, run_dir: Path) -> dict:
    """A run's files, each atomically; summary.json last, so that it marks the run complete. An
    iterations file in another format, or a file of dropped requests, a trace or a vLLM result, from an earlier run
    of another config, is removed."""
    for name, data in run.files.items():
        write_bytes(data, run_dir / name)
    for name in (*ITERATION_FILES.values(), "dropped.csv.gz", TRACE_FILE, VLLM_BENCH_FILE):
        if name is not None and name not in run.files:
            (run_dir / name).unlink(missing_ok=True)
    write_json(run.summary, run_dir / "summary.json")
    return run.summary


def _progress_line(key: RunKey, summary: dict, eta: str, experiment: str = "") -> str:
    where = f"{experiment}: " if experiment else ""
    gate = "" if key.concurrency is None else f"concurrency {key.concurrency:<4} "
    return (f"  {eta:<19} {where}{key.system.name:<18} rate {key.rate:<6g} {gate}seed {key.seed}: "
            f"normalized latency {summary['normalized_latency']:.3f} s/token"
            f"{'  (saturated)' if summary['saturated'] else ''}")


def run_work(exp: Experiment) -> float:
    """How much one run of the experiment simulates, for the progress line's time left."""
    return exp.workload.duration_s


def sweep(exp: Experiment, out_dir: Path, executor: ExecutorSpec | None = None, jobs: int = 1,
          progress=print, iterations: str = DEFAULT_ITERATIONS, eta: Eta | None = None) -> pd.DataFrame:
    """sweep_rows as a frame (SUMMARY_COLUMNS)."""
    return summary_frame(sweep_rows(exp, out_dir, executor, jobs, progress, iterations, eta))


def sweep_rows(exp: Experiment, out_dir: Path, executor: ExecutorSpec | None = None, jobs: int = 1,
               progress=print, iterations: str = DEFAULT_ITERATIONS, eta: Eta | None = None,
               summarized: Callable[[list[dict]], object] | None = None) -> list[dict]:
    """Every run of the experiment, resumed from out_dir/runs, on `executor` (default: `jobs` local
    processes); an error in any run (on any worker) stops the sweep with that error, the runs
    finished before it kept. The workers start only if some run is left to do. Each finished run
    prints a line with the time left: of this sweep, or of all the work `eta` was told to expect. Returns each
    run's summary row (with its config_digest), in run_keys' order; `summarized` is called once with those very
    rows as soon as every one is known: where the runs simulate in this process, before the last run's files are
    encoded and written, so that the caller can start on them meanwhile (`servesim run` draws its figures)."""
    executor = executor or ExecutorSpec("process", jobs)
    check_iterations_format(iterations)
    out_dir = prepare_out_dir(Path(out_dir))
    keys = run_keys(exp)
    if eta is None:
        eta = Eta()
        eta.expect(len(keys), run_work(exp))
    summaries, pending = plan(exp, out_dir, iterations)
    eta.skip(len(summaries), run_work(exp))
    if len(summaries):
        progress(f"resuming: {len(summaries)} of {len(keys)} runs already done in {out_dir / 'runs'}")
    known, unknown = dict(summaries), {run.key for run in pending}

    def on_summary(run: PendingRun, summary: dict) -> None:
        known[run.key] = summary
        unknown.discard(run.key)
        if summarized is not None and not unknown:
            summarized([known[key] for key in keys])

    if summarized is not None and not pending:
        summarized([known[key] for key in keys])
    if pending:
        with executor.open() as workers:
            for run, summary in run_pending(pending, workers, iterations, progress, eta, on_summary):
                summaries[run.key] = summary
    return [summaries[key] for key in keys]


def summary_frame(rows: list[dict]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(rows, columns=list(columns_of(rows)))  # drops config_digest; fixes the column order


def cost_models_text(rows: list[dict]) -> str:
    """cost_models.txt: each system's cost model, its label (summary.csv's cost_model column) and its whole
    description, once per distinct pair, in the order the runs have them."""
    seen = dict.fromkeys((row["system"], row["cost_model"], row.get(COST_MODEL_SOURCE, row["cost_model"]))
                         for row in rows)
    return "".join(f"{system}: {label}\n  {source}\n" for system, label, source in seen)


def summary_columns(rows: list[dict]) -> dict:
    """summary.csv's columns (columns_of), typed by their values (sim.experiment.table), as written."""
    return rows_to_columns(rows, columns_of(rows))


def columns_of(rows: list[dict]) -> tuple[str, ...]:
    """SUMMARY_COLUMNS (with max_concurrency after rate, where a client's gate held requests back), then a split
    fleet's columns, then a breakdown's shares (sim/experiment/breakdown.py) in the order the runs have them."""
    shares = dict.fromkeys(key for row in rows for key in row if key.startswith("share_"))
    split = SPLIT_COLUMNS if any("prefill_replicas" in row for row in rows) else ()
    head = SUMMARY_COLUMNS
    if any(CONCURRENCY_COLUMN in row for row in rows):  # a gated sweep's: its gate beside its rate
        at = head.index("rate") + 1
        head = head[:at] + (CONCURRENCY_COLUMN,) + head[at:]
    return head + split + tuple(shares)


@dataclass(frozen=True)
class PendingRun:
    """A run not done yet in its sweep's folder."""

    exp: Experiment
    key: RunKey
    digest: str  # of its configuration and inputs (sim/experiment/fingerprint.py)
    run_dir: Path

    @property
    def work(self) -> float:
        return run_work(self.exp)


def plan(exp: Experiment, out_dir: Path, iterations: str = DEFAULT_ITERATIONS
         ) -> tuple[dict[RunKey, dict], list[PendingRun]]:
    """The summaries of the experiment's runs already done in out_dir (same config, inputs and iterations
    format), and the runs left to do."""
    iterations_file = check_iterations_format(iterations)
    inputs = input_digest(exp)
    summaries: dict[RunKey, dict] = {}
    pending = []
    for key in run_keys(exp):
        digest = config_digest(exp, key.system, key.rate, key.seed, inputs, key.concurrency)
        run_dir = Path(out_dir) / "runs" / key.slug
        done = _done(run_dir, digest, (iterations_file, VLLM_BENCH_FILE if exp.vllm_bench else None))
        if done is not None:
            summaries[key] = done
        else:
            pending.append(PendingRun(exp, key, digest, run_dir))
    return summaries, pending


def replica_jobs(workers: Workers, num_runs: int, replicas: int) -> int:
    """Processes each run may use for its fleet's replicas: those the runs leave idle, shared out (none when
    there are as many runs as processes, or the workers cannot start processes of their own)."""
    if replicas < 2 or not workers.nests_processes:
        return 1
    return max(1, workers.width // max(1, num_runs))


def run_pending(pending: list[PendingRun], workers: Workers, iterations: str, progress, eta: Eta,
                summarized: Callable[[PendingRun, dict], object] | None = None) -> Iterator[tuple[PendingRun, dict]]:
    """Simulate and save the runs (of one experiment or several) on the workers; yields each with its summary
    as it finishes, after printing its progress line. `summarized` is called with each run and its summary as soon
    as it is known: before the run's files are encoded where the workers are this process (a callback does not
    cross to another), else as the run is saved."""
    here = summarized if workers.in_this_process else None
    if workers.same_machine:
        done = workers.run_all(execute_into, [(r.exp, r.key, r.digest, iterations, r.run_dir,
                                               replica_jobs(workers, len(pending), r.exp.replicas),
                                               None if here is None else partial(here, r)) for r in pending])
    else:  # the workers send each run's files, and this process writes them
        sent = workers.run_all(execute, [(r.exp, r.key, r.digest, iterations) for r in pending])
        done = ((i, save(run, pending[i].run_dir)) for i, run in sent)
    several = len({id(run.exp) for run in pending}) > 1
    for i, summary in done:  # each run saved as it finishes, whatever the order
        run = pending[i]
        if summarized is not None and here is None:
            summarized(run, summary)
        progress(_progress_line(run.key, summary, eta.finished(run.work), run.exp.name if several else ""))
        yield run, summary


def run_cost(run: PendingRun) -> float:
    """A run's relative cost, to start the costliest first: requests simulated, times their sequences."""
    workload = run.exp.workload
    requests = workload.num_requests or workload.duration_s * run.key.rate
    return requests * max(workload.n or 1, workload.beam_width or 1)
