"""Figures in the paper's style: normalized latency against request rate."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from sim.experiment.metrics import KNEE_S_PER_TOKEN  # noqa: E402
from sim.experiment.output import write_figure  # noqa: E402

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
OFF_AXIS = r"$\uparrow$"  # a point above the y axis, drawn on its top edge


def normalized_latency_plot(summary: pd.DataFrame, path: Path, title: str = "", ylim: float = 1.0) -> Path:
    """The paper's figure: one line per system, mean over seeds, hollow markers where the run saturated, points past
    the axis drawn on its top edge as arrows (so that a system past its knee at every rate still shows), and the
    line the knees are read at."""
    return metric_plot(summary, path, "normalized_latency", "Normalized latency (s/token)", title, ylim,
                       knee=KNEE_S_PER_TOKEN)


def metric_plot(summary: pd.DataFrame, path: Path, metric: str, ylabel: str, title: str = "",
                ylim: float | None = None, knee: float | None = None, log: bool = False) -> Path:
    """`metric` against request rate, a line per system (mean over seeds); hollow markers where a run saturated.
    With `ylim`, a point above it is drawn on the top edge as an arrow; with `knee`, a dashed line there."""
    fig, ax = plt.subplots(figsize=(6.6, 3.6), layout="constrained")
    grouped = summary.groupby(["system", "rate"], sort=False).agg(
        value=(metric, "mean"), saturated=("saturated", "any")).reset_index()
    for i, (system, rows) in enumerate(grouped.groupby("system", sort=False)):
        rows = rows.sort_values("rate")
        marker = MARKERS[i % len(MARKERS)]
        shown = rows["value"].clip(upper=ylim) if ylim is not None else rows["value"]
        line, = ax.plot(rows["rate"], shown, marker=marker, label=system, linewidth=1.6, markersize=5)
        sat = rows[rows["saturated"]]
        ax.plot(sat["rate"], shown[rows["saturated"]], linestyle="none", marker=marker, markersize=7,
                markerfacecolor="white", color=line.get_color())
        if ylim is not None:
            off = rows[rows["value"] > ylim]
            ax.plot(off["rate"], [ylim] * len(off), linestyle="none", marker=OFF_AXIS, markersize=11,
                    color=line.get_color(), clip_on=False, label="_off axis")
    if knee is not None:
        ax.axhline(knee, color="0.4", linestyle="--", linewidth=0.9)
        ax.annotate(f"{knee:g}: capacity is read here", (0.99, knee), xycoords=("axes fraction", "data"),
                    ha="right", va="bottom", fontsize=7, color="0.3")
    ax.set_xlabel("Request rate (req/s)")
    ax.set_ylabel(ylabel + ("; ↑ above the axis" if ylim is not None and (grouped["value"] > ylim).any() else ""))
    if log:
        ax.set_yscale("log")
    elif ylim is not None:
        ax.set_ylim(0, ylim)
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    # beside the axes, not on them: past the knees the curves fill every corner
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, ax, path, title)


def latency_plots(summary: pd.DataFrame, folder: Path, title: str = "") -> list[Path]:
    """Time to first token and time per output token (their 90th percentiles, as capacity targets state them)
    against request rate, on log axes: they span milliseconds to minutes between light load and overload."""
    return [ttft_plot(summary, Path(folder) / "ttft.png", title), tpot_plot(summary, Path(folder) / "tpot.png", title)]


def ttft_plot(summary: pd.DataFrame, path: Path, title: str = "") -> Path:
    """latency_plots' first figure alone (`servesim run` draws its figures in two processes)."""
    return metric_plot(summary, path, "ttft_p90_s", "TTFT p90 (s)", title, log=True)


def tpot_plot(summary: pd.DataFrame, path: Path, title: str = "") -> Path:
    """latency_plots' second figure alone."""
    return metric_plot(summary, path, "tpot_p90_s", "TPOT p90 (s/token)", title, log=True)


def save_figure(fig, ax, path: Path, title: str = "") -> Path:
    """Title it, write it atomically with fixed metadata, free it."""
    if title:
        ax.set_title(title, fontsize=9)
    path = write_figure(fig, Path(path))
    plt.close(fig)
    return path


def kv_usage_plot(summary: pd.DataFrame, path: Path, rate: float) -> Path:
    """Paper Fig. 2: where each system's KV pool goes, at one rate."""
    parts = [("kv_token_share", "Token states"), ("kv_reserved_share", "Reservation"),
             ("kv_internal_frag_share", "Internal frag."), ("kv_external_frag_share", "External frag. & others"),
             ("kv_idle_share", "Idle")]
    rows = summary[summary["rate"] == rate].groupby("system", sort=False)[[p for p, _ in parts]].mean()
    fig, ax = plt.subplots(figsize=(5.2, 3.0))
    left = pd.Series(0.0, index=rows.index)
    for column, label in parts:
        ax.barh(rows.index, rows[column] * 100, left=left * 100, label=label)
        left += rows[column]
    ax.set_xlabel(f"KV cache usage (%) at {rate:g} req/s")
    ax.set_xlim(0, 100)
    ax.invert_yaxis()
    ax.legend(fontsize=7, frameon=False, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    path = write_figure(fig, Path(path))
    plt.close(fig)
    return path
