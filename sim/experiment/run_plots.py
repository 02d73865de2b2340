"""`servesim run`'s figures, drawn in processes of their own that start before the runs (two, where two cores are
usable).

matplotlib's import is 0.4 s of CPU and the four figures about as much again: drawn after the runs in the command's own
process, they were a third of a one-run `servesim run`. The first drawing process imports them while
the runs simulate (on another core, where there is one), then forks the second from itself, which so has them
imported too without a second import's CPU taken from the runs; once every run's summary is known the two draw half
the figures each (SHARES), and the first returns every name. Where the runs simulate in the command's process
(`--jobs 1`) that is before the last run's files are encoded and written (sim.experiment.sweep.sweep_rows'
`summarized`): the figures are drawn meanwhile, not after. The command waits for both once its summary is written,
so the figures are on disk when it ends, and an error drawing any of them is the command's error, raised once both
have finished. Both processes are of the sweep pool's kind (sim/executors/pool.py): they ignore Ctrl-C, the command
stops the first, and each leaves when its parent dies (the second when the first does). Where the command may run
on one core only (`taskset`), the first draws all four and starts no second: the two would take turns on that core.
"""
from __future__ import annotations

import os
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from sim.executors.pool import stop_pool, worker_pool

# the figures, in the order their names are returned (and printed)
FIGURES = ("normalized_latency.png", "ttft.png", "tpot.png", "kv_usage.png")
# what the first process draws, and the second: about half the drawing time each (a log-axis latency figure or
# normalized latency ~0.11 s of CPU, the KV bars ~0.07 s)
SHARES = (("ttft.png", "kv_usage.png"), ("normalized_latency.png", "tpot.png"))

# in the first drawing process only: the pool of the second, forked from it once the plots are imported
_second: ProcessPoolExecutor | None = None


class PlotProcess:
    """Use: `with PlotProcess() as plots: ...; plots.start(title, rows, out_dir, ylim, rate); ...; names =
    plots.names()`."""

    def __init__(self) -> None:
        self.pool = worker_pool(1)
        self.warm: Future = self.pool.submit(_import_plots)  # while the runs simulate
        self.drawn: Future | None = None

    def start(self, title: str, rows: list[dict], out_dir: Path, ylim: float | None, rate: float) -> None:
        """Start drawing the four figures from the summary's rows (in the drawing processes, once the plots are
        imported), and return at once. ylim: normalized latency's axis top, None to fit it to the rows."""
        self.drawn = self.pool.submit(draw_plots, title, rows, out_dir, ylim, rate)

    def names(self) -> list[str]:
        """Once both processes have drawn (start), the names of the files written, in FIGURES' order; an error
        drawing any of them is raised here."""
        assert self.drawn is not None, "start drawing first"
        self.warm.result()
        return self.drawn.result()

    def __enter__(self) -> PlotProcess:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is None:
            self.pool.shutdown()
        else:  # an error or Ctrl-C: nothing will be drawn
            stop_pool(self.pool)


def _import_plots() -> None:
    """In the first drawing process: the plots' imports, then the second process, started from this one."""
    global _second
    import multiprocessing.util

    import sim.experiment.plots  # noqa: F401  matplotlib, once
    if usable_cores() < 2:  # the two would take turns on one core: a second process is only its own cost
        return
    second = worker_pool(1)
    second.submit(_import_plots_alone).result()  # forked now, not when the figures are due
    # draw_plots ends the second; if it is never called, the second is ended as this process exits, or this process
    # would wait for it forever (a process joins its children as it exits). The priority puts this before the
    # finalizers that close the pool's queues (priority 10), through which the second is told to end.
    multiprocessing.util.Finalize(None, _end_second, exitpriority=100)
    _second = second


def usable_cores() -> int:
    """The cores this process may run on (a `taskset` narrows them), where the platform says; else every core."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _end_second() -> None:
    global _second
    if _second is not None:
        _second.shutdown()
        _second = None


def _import_plots_alone() -> None:
    import sim.experiment.plots  # noqa: F401  inherited where the process was forked; imported where spawned


def draw_plots(title: str, rows: list[dict], out_dir: Path, ylim: float | None, rate: float) -> list[str]:
    """The normalized latency, the TTFT and TPOT percentiles and the KV usage at `rate`; the names written. In the
    first drawing process the second draws its share meanwhile; elsewhere all four are drawn here."""
    args = (title, rows, out_dir, ylim, rate)
    theirs = None if _second is None else _second.submit(draw_figures, SHARES[1], *args)
    try:
        written = draw_figures(FIGURES if theirs is None else SHARES[0], *args)
    finally:
        if theirs is not None:
            theirs.exception()  # the second's figures finished, or failed, before this returns or raises
            _end_second()  # it has drawn its share: a second draw here draws all four
    if theirs is not None:
        written.update(theirs.result())
    return [written[name] for name in FIGURES]


def draw_figures(names: tuple[str, ...], title: str, rows: list[dict], out_dir: Path, ylim: float | None,
                 rate: float) -> dict[str, str]:
    """The named figures of FIGURES drawn from the summary's rows: each name, the name of the file written."""
    from sim.experiment import plots

    draw = {"normalized_latency.png": lambda path: plots.normalized_latency_plot(rows, path, title=title, ylim=ylim),
            "ttft.png": lambda path: plots.ttft_plot(rows, path, title),
            "tpot.png": lambda path: plots.tpot_plot(rows, path, title),
            "kv_usage.png": lambda path: plots.kv_usage_plot(rows, path, rate=rate)}
    return {name: draw[name](out_dir / name).name for name in names}
