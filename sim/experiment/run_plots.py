"""`servesim run`'s figures, drawn in a process of their own that starts before the runs.

matplotlib's import is half a second and the four figures about as much again: drawn after the runs in the
command's own process, they were a third of a one-run `servesim run`. The drawing process imports them while
the runs simulate (on another core, where there is one), and draws once the summary is written; the command
waits for it, so the figures are on disk when it ends, and an error drawing them is the command's error. The
process is one of the sweep pool's kind (sim/executors/pool.py): it ignores Ctrl-C, the command stops it, and
it leaves if the command dies.
"""
from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

from sim.executors.pool import stop_pool, worker_pool


class PlotProcess:
    """Use: `with PlotProcess() as plots: ...; names = plots.draw(title, rows, out_dir, ylim, rate)`."""

    def __init__(self) -> None:
        self.pool = worker_pool(1)
        self.warm: Future = self.pool.submit(_import_plots)  # while the runs simulate

    def draw(self, title: str, rows: list[dict], out_dir: Path, ylim: float, rate: float) -> list[str]:
        """The run's four figures from the summary's rows; the names of the files written."""
        self.warm.result()
        return self.pool.submit(draw_plots, title, rows, out_dir, ylim, rate).result()

    def __enter__(self) -> PlotProcess:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is None:
            self.pool.shutdown()
        else:  # an error or Ctrl-C: nothing will be drawn
            stop_pool(self.pool)


def _import_plots() -> None:
    import sim.experiment.plots  # noqa: F401  matplotlib and pandas, once


def draw_plots(title: str, rows: list[dict], out_dir: Path, ylim: float, rate: float) -> list[str]:
    """The normalized latency, the TTFT and TPOT percentiles and the KV usage at `rate`; the names written."""
    from sim.experiment.plots import kv_usage_plot, latency_plots, normalized_latency_plot
    from sim.experiment.sweep import summary_frame

    summary = summary_frame(rows)
    written = [normalized_latency_plot(summary, out_dir / "normalized_latency.png", title=title, ylim=ylim),
               *latency_plots(summary, out_dir, title),
               kv_usage_plot(summary, out_dir / "kv_usage.png", rate=rate)]
    return [path.name for path in written]
