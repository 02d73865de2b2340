"""Runs on a Dask cluster: a distributed.LocalCluster on this machine, or an existing cluster.

An existing cluster's workers compute and this process writes (they return each run's files as
bytes), so only the machine running `servesim` needs the output folder; a LocalCluster's workers
write their runs' folders themselves, as a process pool's do. The workers of an existing cluster
need servesim installed, and the config's data files (a profile, a lengths CSV, a trace) at the same
paths. Trouble with the cluster itself (no scheduler at the address, dask not installed, a worker
lost) reaches the user as one line naming --scheduler or --executor; a run's own error (a bad
config, a request that can never be served) arrives as the run raised it, as from a process pool.
"""
from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError
from contextlib import contextmanager
from functools import partial

from engine.errors import SpecError, one_line
from sim.executors.workers import Workers, call_detached, first_error_in_order

DASK_MISSING = "needs dask's distributed scheduler: pip install 'servesim[dask]' (dask and distributed)"
# distributed's logs are not the user's news: a run's error comes back through its future, a lost worker
# as KilledWorker, and a worker logs errors of its own when its scheduler closes under it (Ctrl-C)
QUIET = logging.CRITICAL


def _distributed():
    try:
        import distributed
    except ImportError:
        raise SpecError("--executor", "dask", DASK_MISSING) from None
    return distributed


@contextmanager
def _sigint_ignored():
    """SIGINT ignored while worker processes start: a process inherits an ignored signal, and Python then
    installs no KeyboardInterrupt handler. Ctrl-C reaches the whole process group; a worker that took it
    would print its traceback. (A Ctrl-C while the cluster starts, a few seconds, is lost.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class DaskWorkers(Workers):
    def __init__(self, client, cluster, label: str, option: tuple[str, str], width: int) -> None:
        self.client, self.cluster = client, cluster
        self.same_machine = cluster is not None  # a LocalCluster's; an existing cluster's may be anywhere
        self.in_this_process = False
        self.label = label
        self.option = option  # the command-line option that chose this cluster, for errors
        self.width = width
        self.pending: dict = {}  # key -> future of every call handed over and not yet taken

    @classmethod
    def local(cls, jobs: int) -> DaskWorkers:
        distributed = _distributed()
        logging.getLogger("distributed").setLevel(QUIET)
        with _sigint_ignored():  # the workers start with it ignored, and keep that: Ctrl-C is this process's to handle
            # on this machine only; no dashboard, and the scheduler's HTTP endpoint (health, metrics) on any
            # free port: its default, 8787, may be another cluster's, and taking another would say so
            cluster = distributed.LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                                               host="127.0.0.1", silence_logs=QUIET,
                                               scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"})
        try:
            client = distributed.Client(cluster)
        except BaseException:
            cluster.close()
            raise
        return cls(client, cluster, f"a local Dask cluster of {jobs} workers", ("--executor", "dask"), jobs)

    @classmethod
    def connect(cls, address: str) -> DaskWorkers:
        distributed = _distributed()
        logging.getLogger("distributed").setLevel(QUIET)
        try:
            # how long to try: dask's config, distributed.comm.timeouts.connect (30 s unless set)
            client = distributed.Client(address)
        except (OSError, ValueError, TypeError) as err:
            raise SpecError("--scheduler", address, f"no Dask scheduler answers there ({one_line(err)}); "
                            "give its address as tcp://HOST:PORT") from None
        threads = sum(client.nthreads().values())
        workers = cls(client, None, f"the Dask cluster at {address}", ("--scheduler", address), threads)
        if not threads:
            workers.close()
            raise SpecError("--scheduler", address, "the Dask scheduler there has no workers")
        return workers

    def run_all(self, fn: Callable, calls: Sequence[tuple]) -> Iterator[tuple[int, object]]:
        distributed = _distributed()
        # pure=False: two calls with equal arguments are two runs, never one result shared by key
        futures = [self.client.submit(call_detached, fn, *args, pure=False) for args in calls]
        index = {future.key: i for i, future in enumerate(futures)}
        self.pending.update((future.key, future) for future in futures)
        finished = distributed.as_completed(futures)
        del futures  # a result is held on its worker while a future refers to it: only until it is taken
        return first_error_in_order(((index[f.key], partial(self._result, self.pending.pop(f.key))) for f in finished),
                                    len(index))

    def _result(self, future):
        try:
            return future.result()
        except CancelledError as err:  # the scheduler dropped it: lost, or shut down under us
            raise self._cluster_error(err) from None
        except _distributed().KilledWorker as err:  # a worker died running it, as often as dask retries
            raise self._cluster_error(err) from None

    def _cluster_error(self, err: BaseException) -> SpecError:
        source, key = self.option
        return SpecError(source, key, f"{self.label} failed a run ({type(err).__name__}: {one_line(err)}); "
                         "finished runs are kept, run again to resume")

    def abort(self) -> None:
        try:
            self.client.cancel(list(self.pending.values()))
        finally:
            self.close()

    def close(self) -> None:
        self.pending = {}
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()

