"""The process pool a sweep runs on, whose workers never outlive the process that made it.

Ctrl-C reaches the whole process group: the workers ignore it and the parent decides (stop_pool
ends them at once, since their results would not be awaited). A parent that dies without a word
(SIGKILL, the OOM killer) cannot stop anyone, and a worker would wait on its task queue forever:
so each worker watches its parent's pid and exits when it changes (the worker was re-parented).
Polling works on every platform and needs no handshake; it costs a wake-up per POLL_S.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

POLL_S = 0.5


def _exit_when_orphaned(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(POLL_S)
    os._exit(1)  # no cleanup to wait for: a run's files are written atomically, its leftovers swept later


def _start_worker(parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
        process.terminate()
    pool.shutdown(wait=True)
