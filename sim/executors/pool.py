"""A local process pool of workers (`--executor process`, the default).

The pool's workers never outlive the process that made it. Ctrl-C reaches the whole process
group: the workers ignore it and the parent decides (stop_pool ends them at once, since their results
would not be awaited). A parent that dies without a word (SIGKILL, the OOM killer) cannot stop anyone,
and a worker would wait on its task queue forever: so each worker watches its parent's pid and exits
when it changes (the worker was re-parented). Polling works on every platform and needs no handshake;
it costs a wake-up per POLL_S.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from sim.executors.workers import Workers, call_detached, first_error_in_order

POLL_S = 0.5


class PoolWorkers(Workers):
    def __init__(self, jobs: int) -> None:
        self.pool = worker_pool(jobs)
        self.width = jobs
        self.nests_processes = True  # a ProcessPoolExecutor's workers are not daemons: they may start processes
        self.in_this_process = False
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
