"""Where a command's runs go, as the user chose: this process, a local process pool, or a Dask cluster.

`ExecutorSpec` is the choice (the command line's --executor, --jobs and --scheduler: sim/executors/options.py);
`open()` gives the `Workers` (sim/executors/workers.py) that run there.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from engine.errors import SpecError
from sim.executors.cluster import DASK_MISSING, DaskWorkers
from sim.executors.pool import PoolWorkers
from sim.executors.workers import Workers

EXECUTORS = ("process", "dask")


@dataclass(frozen=True)
class ExecutorSpec:
    """`process`: `jobs` local processes (1: in this process, one run after another). `dask`: a
    distributed.LocalCluster of `jobs` single-threaded worker processes, or, with `scheduler`
    (tcp://HOST:PORT), the existing cluster there, which decides its own parallelism."""
    kind: str = "process"
    jobs: int = 1
    scheduler: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise SpecError("--executor", self.kind, f"unknown executor; valid: {list(EXECUTORS)}")
        if self.jobs < 1:
            raise SpecError("--jobs", str(self.jobs), "must be at least 1 (or 0 on the command line: one per core)")
        if self.scheduler is not None and self.kind != "dask":
            raise SpecError("--scheduler", self.scheduler, "names a Dask scheduler; it goes with --executor dask")
        if self.kind == "dask" and importlib.util.find_spec("distributed") is None:
            raise SpecError("--executor", "dask", DASK_MISSING)

    def open(self) -> Workers:
        if self.kind == "dask":
            return DaskWorkers.connect(self.scheduler) if self.scheduler else DaskWorkers.local(self.jobs)
        return PoolWorkers(self.jobs) if self.jobs > 1 else Workers()
