"""Workers: one interface over where a command's runs go (this process, a process pool, a Dask cluster).

`run_all` hands over a list of calls and yields each result as it finishes (so a sweep saves every
finished run at once, and the first error stops everything), and, used as a context manager, a
clean stop: on an error or Ctrl-C the calls still queued are dropped at once (a resumed sweep
redoes them), otherwise the workers are shut down in order. `Workers` itself runs the calls in this
process; sim/executors/pool.py and sim/executors/cluster.py give the others.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence


class Workers:
    """Runs in this process, one after another: the default, and what every other kind replaces."""
    width = 1  # runs at once
    label = "in this process"
    # whether the workers see this machine's files: then a run's worker writes its folder itself,
    # else it sends the files back (a pool's pipe would carry megabytes, and a worker terminated
    # halfway through sending would leave the pool's reader waiting for the rest forever)
    same_machine = True
    # processes a run may start of its own (a fleet's replicas: sim/executors/replica_pool.py), sharing the
    # machine's width
    nests_processes = False
    # whether the calls run in this process (then a call may be handed what cannot be pickled: a callback)
    in_this_process = True

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
