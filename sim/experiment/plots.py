"""Figures in the paper's style: normalized latency against request rate."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from sim.experiment.output import write_figure  # noqa: E402

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def normalized_latency_plot(summary: pd.DataFrame, path: Path, title: str = "", ylim: float = 1.0) -> Path:
    """One line per system; mean over seeds; hollow markers where the run saturated."""
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    grouped = summary.groupby(["system", "rate"], sort=False).agg(
        normalized_latency=("normalized_latency", "mean"), saturated=("saturated", "any")).reset_index()
    for i, (system, rows) in enumerate(grouped.groupby("system", sort=False)):
        rows = rows.sort_values("rate")
        line, = ax.plot(rows["rate"], rows["normalized_latency"], marker=MARKERS[i % len(MARKERS)],
                        label=system, linewidth=1.6, markersize=5)
        sat = rows[rows["saturated"]]
        ax.plot(sat["rate"], sat["normalized_latency"], linestyle="none", marker=MARKERS[i % len(MARKERS)],
                markersize=7, markerfacecolor="white", color=line.get_color())
    ax.set_xlabel("Request rate (req/s)")
    ax.set_ylabel("Normalized latency (s/token)")
    ax.set_ylim(0, ylim)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    return save_figure(fig, ax, path, title)


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
