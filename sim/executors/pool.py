"""Where a command's runs go: this process, a local process pool, or a Dask cluster (sim/executors/cluster.py).

`ExecutorSpec` is the user's choice; `open()` gives `Workers`, one interface over all three:
`run_all` hands over a list of calls and yields each result as it finishes (so a sweep saves every
finished run at once, and the first error stops everything), and, used as a context manager, a
clean stop: on an error or Ctrl-C the calls still queued are dropped at once (a resumed sweep
redoes them), otherwise the workers are shut down in order.

The process pool's workers never outlive the process that made it. Ctrl-C reaches the whole process
group: the workers ignore it and the parent decides (stop_pool ends them at once, since their results
would not be awaited). A parent that dies without a word (SIGKILL, the OOM killer) cannot stop anyone,
and a worker would wait on its task queue forever: so each worker watches its parent's pid and exits
when it changes (the worker was re-parented). Polling works on every platform and needs no handshake;
it costs a wake-up per POLL_S.
"""
from __future__ import annotations

import importlib.util
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from engine.specs.errors import SpecError

POLL_S = 0.5
EXECUTORS = ("process", "dask")
DASK_MISSING = "needs dask's distributed scheduler: pip install 'servesim[dask]' (dask and distributed)"


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
            from sim.executors.cluster import DaskWorkers

            return DaskWorkers.connect(self.scheduler) if self.scheduler else DaskWorkers.local(self.jobs)
        return PoolWorkers(self.jobs) if self.jobs > 1 else Workers()


class Workers:
    """Runs in this process, one after another: the default, and what every other kind replaces."""
    width = 1  # runs at once
    label = "in this process"
    # whether the workers see this machine's files: then a run's worker writes its folder itself,
    # else it sends the files back (a pool's pipe would carry megabytes, and a worker terminated
    # halfway through sending would leave the pool's reader waiting for the rest forever)
    same_machine = True
    # processes a run may start of its own (a fleet's replicas: sim/core/independent_replicas.py), sharing the
    # machine's width
    nests_processes = False

    def run_all(self, fn: Callable, calls: Sequence[tuple]) -> Iterator[tuple[int, object]]:
        """(index in calls, fn(*calls[index])) for every call, in the order they finish. An error is
        raised as the call raised it, once every call before it has finished: the first call in order
        that failed, as one worker taking them in order would have stopped on, whatever the timing."""
        for i, args in enumerate(calls):
            yield i, fn(*args)

    def abort(self) -> None:
        """Stop now and drop the runs not yet done."""

    def close(self) -> None:
        """Every run handed over is done: release the workers."""

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind, err, trace) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def first_error_in_order(finished: Iterator[tuple[int, Callable[[], object]]], n: int
                         ) -> Iterator[tuple[int, object]]:
    """Workers.run_all's results from (index, result getter) pairs of n calls in the order they finish:
    each success at once, and the error of the first call in order that failed once no call before it
    is left."""
    unresolved, failed = set(range(n)), {}
    for i, result in finished:
        unresolved.discard(i)
        try:
            value = result()
        except Exception as err:
            failed[i] = err
        else:
            yield i, value
        if failed and not any(j < min(failed) for j in unresolved):
            raise failed[min(failed)]


def call_detached(fn: Callable, *args):
    """fn(*args) in a worker, whose error travels back pickled. A context the raiser suppressed (`raise
    ... from None`) is dropped from the error's chain first: it may lead back to the error itself
    (sim.core.replica.run_to_end re-raises the SpecError that a ClockFault carried), and a pickler that follows
    chains (tblib's, which importing distributed installs for every exception, in a process and the
    processes it forks) recurses without end: the process pool breaks, Dask sends a bare Exception."""
    try:
        return fn(*args)
    except BaseException as err:
        seen = set()
        link: BaseException | None = err
        while link is not None and id(link) not in seen:
            seen.add(id(link))
            if link.__suppress_context__:
                link.__context__ = None
            link = link.__cause__ or link.__context__
        raise


class PoolWorkers(Workers):
    def __init__(self, jobs: int) -> None:
        self.pool = worker_pool(jobs)
        self.width = jobs
        self.nests_processes = True  # a ProcessPoolExecutor's workers are not daemons: they may start processes
        self.label = f"{jobs} processes"

    def run_all(self, fn: Callable, calls: Sequence[tuple]) -> Iterator[tuple[int, object]]:
        futures = {self.pool.submit(call_detached, fn, *args): i for i, args in enumerate(calls)}
        return first_error_in_order(((futures[f], f.result) for f in as_completed(futures)), len(calls))

    def abort(self) -> None:
        stop_pool(self.pool)

    def close(self) -> None:
        self.pool.shutdown()


def _exit_when_orphaned(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(POLL_S)
    os._exit(1)  # no cleanup to wait for: a run's files are written atomically, its leftovers swept later


def _start_worker(parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler (sim/cli.py): terminate() ends it
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), name="exit-with-parent", daemon=True).start()


def worker_pool(jobs: int) -> ProcessPoolExecutor:
    # The pid check needs this process to be the workers' parent, which fork and spawn give and
    # forkserver (Python 3.14's default on Linux) does not.
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    return ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_start_worker,
                               initargs=(os.getpid(),))


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """End the workers now and drop queued runs: after an error or Ctrl-C nobody awaits their results,
    and a resumed sweep redoes them."""
    processes = list((pool._processes or {}).values())  # no public handle before Python 3.14's terminate_workers
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        # SIGKILL, not SIGTERM: a worker forked a moment ago may not have run _start_worker yet, and would meet
        # this process's SIGTERM handler (sim/cli.py: KeyboardInterrupt) and go on as a copy of the command
        process.kill()
    pool.shutdown(wait=True)
