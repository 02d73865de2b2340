"""Many runs: every system x rate x seed of an experiment, over an Executor, resumable.

Each finished run leaves DIR/runs/<key>/ (summary.json, requests.csv.gz,
iterations.csv.gz), written atomically; a rerun skips the keys already there for the
same configuration and inputs (sim/fingerprint.py), so an interrupted sweep resumes where
it stopped, and a changed config, spec or data file is simulated again.
"""
from __future__ import annotations

import json
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from engine.core.system import SystemSpec
from sim.config import Experiment
from sim.fingerprint import config_digest, input_digest
from sim.output import prepare_out_dir, write_csv, write_json
from sim.pool import stop_pool, worker_pool
from sim.progress import Eta
from sim.run import SUMMARY_COLUMNS, run_one


@dataclass(frozen=True)
class RunKey:
    system: SystemSpec
    rate: float
    seed: int

    @property
    def slug(self) -> str:
        name = "".join(c if c.isalnum() else "-" for c in self.system.name.lower()).strip("-")
        while "--" in name:
            name = name.replace("--", "-")
        return f"{name}_rate{self.rate:g}_seed{self.seed}"


def run_keys(exp: Experiment) -> list[RunKey]:
    return [RunKey(s, r, seed) for s in exp.systems for r in exp.rates for seed in exp.seeds]


def _done(run_dir: Path, digest: str) -> dict | None:
    path = run_dir / "summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    if summary.get("config_digest") != digest or not set(SUMMARY_COLUMNS) <= set(summary):
        return None  # another configuration, or written before a column was added: simulate it again
    return summary


def execute(exp: Experiment, key: RunKey, run_dir: Path, digest: str) -> dict:
    """One run, written atomically; summary.json last, so it marks the run complete."""
    result = run_one(exp, key.system, key.rate, key.seed)
    write_csv(result.requests, run_dir / "requests.csv.gz")
    write_csv(result.iterations, run_dir / "iterations.csv.gz")
    summary = {**result.summary, "config_digest": digest}
    write_json(summary, run_dir / "summary.json")
    return summary


def _progress_line(key: RunKey, summary: dict, eta: str) -> str:
    return (f"  {eta:<19} {key.system.name:<18} rate {key.rate:<6g} seed {key.seed}: "
            f"normalized latency {summary['normalized_latency']:.3f} s/token"
            f"{'  (saturated)' if summary['saturated'] else ''}")


def run_work(exp: Experiment) -> float:
    """How much one run of the experiment simulates, for the progress line's time left."""
    return exp.workload.duration_s


def sweep(exp: Experiment, out_dir: Path, executor: Executor | None = None, jobs: int = 1,
          progress=print, eta: Eta | None = None) -> pd.DataFrame:
    """Every run of the experiment, resumed from out_dir/runs; an error in any run (in any process)
    stops the sweep with that error, the runs finished before it kept. Each finished run prints a line
    with the time left: of this sweep, or of all the work `eta` was told to expect."""
    out_dir = prepare_out_dir(Path(out_dir))
    keys = run_keys(exp)
    work = run_work(exp)
    if eta is None:
        eta = Eta()
        eta.expect(len(keys), work)
    inputs = input_digest(exp)
    summaries: dict[RunKey, dict] = {}
    pending = []
    for key in keys:
        digest = config_digest(exp, key.system, key.rate, key.seed, inputs)
        done = _done(out_dir / "runs" / key.slug, digest)
        if done is not None:
            summaries[key] = done
        else:
            pending.append((key, digest))
    eta.skip(len(summaries), work)
    if len(summaries):
        progress(f"resuming: {len(summaries)} of {len(keys)} runs already done in {out_dir / 'runs'}")
    if pending:
        own = executor is None and jobs > 1
        pool = worker_pool(jobs) if own else executor
        try:
            if pool is None:
                results = (execute(exp, k, out_dir / "runs" / k.slug, d) for k, d in pending)
            else:
                results = pool.map(execute, *zip(*[(exp, k, out_dir / "runs" / k.slug, d) for k, d in pending]))
            for (key, _), summary in zip(pending, results):
                summaries[key] = summary
                progress(_progress_line(key, summary, eta.finished(work)))
        except BaseException:
            if own:
                stop_pool(pool)
            raise
        if own:
            pool.shutdown()
    rows = [summaries[key] for key in keys]
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))  # drops config_digest; fixes the column order
