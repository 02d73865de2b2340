"""`servesim run`'s figures in the paper's style, drawn from the summary's rows: normalized latency, the TTFT and TPOT
percentiles against request rate, and where the KV pool goes.

The rows are read as they are, without pandas, and the figures are drawn on matplotlib's Figure without pyplot:
their process (sim/experiment/run_plots.py) then imports neither pandas nor pyplot's backend machinery, 0.4 s of
CPU on the one core a pinned run has. Each figure is drawn once and cropped to what it drew (sim/experiment/png.py)
rather than laid out by a layout engine and drawn twice, and log axes are labelled in plain numbers (0.02, 1, 100)
rather than mathtext's powers of ten, whose parser a drawing process would otherwise build for one figure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from matplotlib.lines import Line2D
from matplotlib.ticker import LogFormatter

from sim.experiment.closed_loop import CONCURRENCY_COLUMN
from sim.experiment.metrics import KNEE_S_PER_TOKEN
from sim.experiment.png import new_figure, write_png
from sim.experiment.table import group_means, rows_to_columns

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
OFF_AXIS = r"$\uparrow$"  # a point above the y axis, drawn on its top edge
SATURATED = "hollow: saturated\n(fell behind its arrivals;\nthe value is a lower bound)"
PAPER_YLIM = 1.0  # s/token: the paper's Fig. 12 axis (`servesim reproduce` draws its own, sim/reproduce)
HEADROOM = 1.1  # a fitted axis's top over the highest point it fits
NEAR = 3.0  # a saturated point up to this many times the highest unsaturated one is fitted too, not an arrow
KNEE_ROOM = 2.0  # a fitted axis's top over the knee, where a point reaches it (the paper's 1 over 0.5 s/token)
NICE_STEPS = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)
# the title's gap over the axes: clear of the markers drawn on the top edge (an arrow reaches 6 pt above it, and the
# title's descenders reach below its baseline)
TITLE_PAD_PT = 10
KV_PARTS = (("kv_token_share", "Token states"), ("kv_reserved_share", "Reservation"),
            ("kv_internal_frag_share", "Internal frag."), ("kv_external_frag_share", "External frag. & others"),
            ("kv_idle_share", "Idle"))


def normalized_latency_plot(rows: list[dict], path: Path, title: str = "", ylim: float | None = None) -> Path:
    """The paper's figure: one line per system, mean over seeds, hollow markers where the run saturated, points past
    the axis drawn on its top edge as arrows (so that a system past its knee at every rate still shows), and the
    line the knees are read at. Without `ylim` the axis fits the runs (fitted_top), not the paper's 1 s/token."""
    return metric_plot(rows, path, "normalized_latency", "Normalized latency (s/token)", title, ylim,
                       knee=KNEE_S_PER_TOKEN)


def metric_plot(rows: list[dict], path: Path, metric: str, ylabel: str, title: str = "",
                ylim: float | None = None, knee: float | None = None, log: bool = False) -> Path:
    """`metric` against request rate, a line per system (mean over seeds); hollow markers where a run saturated,
    keyed in the legend. A linear axis goes up to `ylim`, or without it to fitted_top; a point above the top is
    drawn on it as an arrow. With `knee` (where it is on the axis), a dashed line there, named in the legend: a
    label on the axes would sit on whichever curve crosses it."""
    fig, ax = new_figure((5.1, 2.8))
    x, xlabel = x_axis(rows)
    series = seed_means(rows, metric, x)
    top = None if log else (ylim if ylim is not None else fitted_top(series, knee))
    above = hollow = False
    for i, (system, points) in enumerate(series.items()):
        drawn = draw_series(ax, system, points, MARKERS[i % len(MARKERS)], top)
        above, hollow = above or drawn.above, hollow or drawn.hollow
    if knee is not None and (top is None or knee <= top):
        ax.axhline(knee, color="0.4", linestyle="--", linewidth=0.9, label=f"{knee:g}: capacity is read here")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel + ("; ↑ above the axis" if above else ""))
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(PlainLogFormatter())
        ax.yaxis.set_minor_formatter(PlainLogFormatter())
    elif top is not None:
        ax.set_ylim(0, top)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if hollow:
        handles.append(saturated_key())
        labels.append(SATURATED)
    # beside the axes, not on them: past the knees the curves fill every corner
    ax.legend(handles, labels, fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, ax, path, title)


@dataclass(frozen=True)
class DrawnSeries:
    above: bool  # a point was drawn on the top edge as an arrow
    hollow: bool  # a saturated point was drawn


def draw_series(ax, system: str, points: list[tuple[float, float, bool]], marker: str,
                top: float | None) -> DrawnSeries:
    """One system's line, its saturated points hollow over it, and its points above `top` as arrows on it."""
    rates = [rate for rate, _, _ in points]
    values = [value for _, value, _ in points]
    shown = [min(value, top) for value in values] if top is not None else values
    line, = ax.plot(rates, shown, marker=marker, label=system, linewidth=1.6, markersize=5)
    saturated = [(rate, value) for (rate, _, sat), value in zip(points, shown) if sat]
    if saturated:
        ax.plot([r for r, _ in saturated], [v for _, v in saturated], linestyle="none", marker=marker,
                markersize=7, markerfacecolor="white", color=line.get_color(), label="_saturated")
    off = [rate for rate, value in zip(rates, values) if top is not None and value > top]
    if off:  # only then: the arrow is a mathtext marker, whose parser is built the first time one is made
        ax.plot(off, [top] * len(off), linestyle="none", marker=OFF_AXIS, markersize=11,
                color=line.get_color(), clip_on=False, label="_off axis")
    return DrawnSeries(above=bool(off), hollow=bool(saturated))


def saturated_key() -> Line2D:
    """The legend's sample of a hollow marker: what SATURATED says it means, in no system's colour."""
    return Line2D([], [], linestyle="none", marker="o", markersize=7, markerfacecolor="white", color="0.35")


def fitted_top(series: dict[str, list[tuple[float, float, bool]]], knee: float | None = None) -> float:
    """The top of a linear axis fitted to the points, rounded up to a round number (nice_ceiling): HEADROOM over the
    highest unsaturated point, or over a saturated one up to NEAR times as high (where a curve bends). A saturated
    point is a lower bound that may be far above: past that it is drawn on the top as an arrow, not allowed to
    flatten the curves. Where a point reaches the knee, at least twice the knee, as the paper draws it: the line
    capacity is read at halfway up, and room above it to see how fast each curve climbs past it. Where every point
    saturated, the highest of them; where none has a value, the paper's 1."""
    points = [(value, saturated) for by_rate in series.values() for _, value, saturated in by_rate
              if math.isfinite(value)]
    served = max((value for value, saturated in points if not saturated), default=None)
    near = [value for value, _ in points if served is None or value <= NEAR * served]
    highest = max(near, default=0.0)
    top = nice_ceiling(highest * HEADROOM) if highest > 0 else PAPER_YLIM
    if knee is not None and any(value >= knee for value, _ in points):
        top = max(top, nice_ceiling(KNEE_ROOM * knee))
    return top


def nice_ceiling(value: float) -> float:
    """The least of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten that is at least `value` (> 0): an
    axis top the tick labels reach."""
    scale = 10.0 ** math.floor(math.log10(value))
    for step in NICE_STEPS:
        if step * scale >= value * (1 - 1e-9):
            return float(f"{step * scale:.12g}")  # 0.6, not 0.6000000000000001
    return 10 * scale


class PlainLogFormatter(LogFormatter):
    """The log ticks matplotlib labels (the decades, and the ticks between them where an axis spans few), labelled
    as plain numbers (0.02, 0.1, 100) rather than in mathtext."""

    def __call__(self, x, pos=None) -> str:
        return f"{x:g}" if super().__call__(x, pos) else ""


def x_axis(rows: list[dict]) -> tuple[str, str]:
    """What the curves are drawn against: the request rate; a sweep's client gate (`concurrencies`, or every rate
    inf, where the gate alone sets the load); or, where a rate is inf with no gate to sweep, the rate served (inf
    has no place on an axis)."""
    gates = {row[CONCURRENCY_COLUMN] for row in rows if CONCURRENCY_COLUMN in row}
    if gates and (len(gates) > 1 or all(row["rate"] == math.inf for row in rows)):
        return CONCURRENCY_COLUMN, "Max concurrency (requests in flight)"
    if any(row["rate"] == math.inf for row in rows):
        return "throughput_rps", "Request rate served (req/s)"
    return "rate", "Request rate (req/s)"


def seed_means(rows: list[dict], metric: str, x: str = "rate") -> dict[str, list[tuple[float, float, bool]]]:
    """Each system's points in the order the systems first appear, by `x` (the rate, or the client's gate: x_axis):
    (x, the mean of `metric` over the seeds that have it (nan where none has), whether any seed saturated); the means
    are the summary table's (group_means). Against the gate, a system swept at several rates has a line for each."""
    keys = ["system", "rate"] + ([x] if x != "rate" else [])
    means = group_means(rows_to_columns(rows, [*keys, metric, "saturated"]), keys, [metric, "saturated"])
    several = len({row["rate"] for row in rows}) > 1
    points: dict[str, list[tuple[float, float, bool]]] = {}
    for row in means:
        name = f"{row['system']} at {row['rate']:g} req/s" if x != "rate" and several else row["system"]
        points.setdefault(name, []).append((row[x], row[metric], row["saturated"] > 0))
    return {system: sorted(by_x) for system, by_x in points.items()}


def latency_plots(rows: list[dict], folder: Path, title: str = "") -> list[Path]:
    """Time to first token and time per output token (their 90th percentiles, as capacity targets state them)
    against request rate, on log axes: they span milliseconds to minutes between light load and overload."""
    return [ttft_plot(rows, Path(folder) / "ttft.png", title), tpot_plot(rows, Path(folder) / "tpot.png", title)]


def ttft_plot(rows: list[dict], path: Path, title: str = "") -> Path:
    """latency_plots' first figure alone (`servesim run` draws its figures in two processes)."""
    return metric_plot(rows, path, "ttft_p90_s", "TTFT p90 (s)", title, log=True)


def tpot_plot(rows: list[dict], path: Path, title: str = "") -> Path:
    """latency_plots' second figure alone."""
    return metric_plot(rows, path, "tpot_p90_s", "TPOT p90 (s/token)", title, log=True)


def kv_usage_plot(rows: list[dict], path: Path, rate: float) -> Path:
    """Paper Fig. 2: where each system's KV pool goes, at one rate (the mean over its seeds)."""
    parts = [column for column, _ in KV_PARTS]
    at_rate = [row for row in rows if row["rate"] == rate]
    gates = [row[CONCURRENCY_COLUMN] for row in at_rate if CONCURRENCY_COLUMN in row]
    if gates:  # a sweep of the client's gate: its widest, the most load
        at_rate = [row for row in at_rate if row[CONCURRENCY_COLUMN] == max(gates)]
    means = group_means(rows_to_columns(at_rate, ["system", *parts]), ["system"], parts)
    systems = [row["system"] for row in means]
    fig, ax = new_figure((4.0, 2.3))
    left = [0.0] * len(systems)
    for column, label in KV_PARTS:
        shares = [row[column] for row in means]
        ax.barh(systems, [share * 100 for share in shares], left=[share * 100 for share in left], label=label)
        left = [before + share for before, share in zip(left, shares)]
    gate = f", max concurrency {max(gates)}" if gates else ""
    ax.set_xlabel(f"KV cache usage (%) at {rate:g} req/s{gate}")
    ax.set_xlim(0, 100)
    ax.invert_yaxis()
    ax.legend(fontsize=7, frameon=False, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return write_png(fig, Path(path))


def save_figure(fig, ax, path: Path, title: str = "") -> Path:
    """Title it and write it (png.write_png)."""
    if title:
        ax.set_title(title, fontsize=9, pad=TITLE_PAD_PT)
    return write_png(fig, Path(path))
