"""`servesim run`'s figures in the paper's style, drawn from the summary's rows: normalized latency, the TTFT and TPOT
percentiles against request rate, and where the KV pool goes.

The rows are read as they are, without pandas, and the figures are drawn on matplotlib's Figure without pyplot:
their process (sim/experiment/run_plots.py) then imports neither pandas nor pyplot's backend machinery, 0.4 s of
CPU on the one core a pinned run has. Each figure is drawn once and cropped to what it drew (sim/experiment/png.py)
rather than laid out by a layout engine and drawn twice, and log axes are labelled in plain numbers (0.02, 1, 100)
rather than mathtext's powers of ten, whose parser a drawing process would otherwise build for one figure.
"""
from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import LogFormatter

from sim.experiment.metrics import KNEE_S_PER_TOKEN
from sim.experiment.png import new_figure, write_png
from sim.experiment.table import group_means, rows_to_columns

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
OFF_AXIS = r"$\uparrow$"  # a point above the y axis, drawn on its top edge
KV_PARTS = (("kv_token_share", "Token states"), ("kv_reserved_share", "Reservation"),
            ("kv_internal_frag_share", "Internal frag."), ("kv_external_frag_share", "External frag. & others"),
            ("kv_idle_share", "Idle"))


def normalized_latency_plot(rows: list[dict], path: Path, title: str = "", ylim: float = 1.0) -> Path:
    """The paper's figure: one line per system, mean over seeds, hollow markers where the run saturated, points past
    the axis drawn on its top edge as arrows (so that a system past its knee at every rate still shows), and the
    line the knees are read at."""
    return metric_plot(rows, path, "normalized_latency", "Normalized latency (s/token)", title, ylim,
                       knee=KNEE_S_PER_TOKEN)


def metric_plot(rows: list[dict], path: Path, metric: str, ylabel: str, title: str = "",
                ylim: float | None = None, knee: float | None = None, log: bool = False) -> Path:
    """`metric` against request rate, a line per system (mean over seeds); hollow markers where a run saturated.
    With `ylim`, a point above it is drawn on the top edge as an arrow; with `knee`, a dashed line there."""
    fig, ax = new_figure((5.1, 2.8))
    above = False
    for i, (system, points) in enumerate(seed_means(rows, metric).items()):
        rates = [rate for rate, _, _ in points]
        values = [value for _, value, _ in points]
        shown = [min(value, ylim) for value in values] if ylim is not None else values
        marker = MARKERS[i % len(MARKERS)]
        line, = ax.plot(rates, shown, marker=marker, label=system, linewidth=1.6, markersize=5)
        saturated = [(rate, value) for (rate, _, sat), value in zip(points, shown) if sat]
        ax.plot([r for r, _ in saturated], [v for _, v in saturated], linestyle="none", marker=marker, markersize=7,
                markerfacecolor="white", color=line.get_color())
        off = [rate for rate, value in zip(rates, values) if ylim is not None and value > ylim]
        if off:  # only then: the arrow is a mathtext marker, whose parser is built the first time one is made
            above = True
            ax.plot(off, [ylim] * len(off), linestyle="none", marker=OFF_AXIS, markersize=11,
                    color=line.get_color(), clip_on=False, label="_off axis")
    if knee is not None:
        ax.axhline(knee, color="0.4", linestyle="--", linewidth=0.9)
        ax.annotate(f"{knee:g}: capacity is read here", (0.99, knee), xycoords=("axes fraction", "data"),
                    ha="right", va="bottom", fontsize=7, color="0.3")
    ax.set_xlabel("Request rate (req/s)")
    ax.set_ylabel(ylabel + ("; ↑ above the axis" if above else ""))
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(PlainLogFormatter())
        ax.yaxis.set_minor_formatter(PlainLogFormatter())
    elif ylim is not None:
        ax.set_ylim(0, ylim)
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    # beside the axes, not on them: past the knees the curves fill every corner
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, ax, path, title)


class PlainLogFormatter(LogFormatter):
    """The log ticks matplotlib labels (the decades, and the ticks between them where an axis spans few), labelled
    as plain numbers (0.02, 0.1, 100) rather than in mathtext."""

    def __call__(self, x, pos=None) -> str:
        return f"{x:g}" if super().__call__(x, pos) else ""


def seed_means(rows: list[dict], metric: str) -> dict[str, list[tuple[float, float, bool]]]:
    """Each system's points in the order the systems first appear, by rate: (rate, the mean of `metric` over the
    seeds that have it (nan where none has), whether any seed saturated); the means are pandas' (group_means)."""
    means = group_means(rows_to_columns(rows, ["system", "rate", metric, "saturated"]), ["system", "rate"],
                        [metric, "saturated"])
    points: dict[str, list[tuple[float, float, bool]]] = {}
    for row in means:
        points.setdefault(row["system"], []).append((row["rate"], row[metric], row["saturated"] > 0))
    return {system: sorted(by_rate) for system, by_rate in points.items()}


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
    means = group_means(rows_to_columns(at_rate, ["system", *parts]), ["system"], parts)
    systems = [row["system"] for row in means]
    fig, ax = new_figure((4.0, 2.3))
    left = [0.0] * len(systems)
    for column, label in KV_PARTS:
        shares = [row[column] for row in means]
        ax.barh(systems, [share * 100 for share in shares], left=[share * 100 for share in left], label=label)
        left = [before + share for before, share in zip(left, shares)]
    ax.set_xlabel(f"KV cache usage (%) at {rate:g} req/s")
    ax.set_xlim(0, 100)
    ax.invert_yaxis()
    ax.legend(fontsize=7, frameon=False, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return write_png(fig, Path(path))


def save_figure(fig, ax, path: Path, title: str = "") -> Path:
    """Title it and write it (png.write_png)."""
    if title:
        ax.set_title(title, fontsize=9)
    return write_png(fig, Path(path))
