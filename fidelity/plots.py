"""Validation figures: real (solid) vs simulated (dashed) normalized latency against rate, and per request."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from sim.experiment.plots import MARKERS, save_figure
from sim.experiment.png import new_figure


def _colors(systems) -> dict:
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    return {s: cycle[i % len(cycle)] for i, s in enumerate(systems)}


def fidelity_plot(summary: pd.DataFrame, path: Path, title: str = "", threshold: float | None = None) -> Path:
    """One colour per system: solid line real (with the repeats' spread as error bars), dashed simulated at
    the machine speed the real replays ran at, dotted (faint) simulated as calibrated where that differs."""
    fig, ax = new_figure((4.3, 2.9))
    systems = list(dict.fromkeys(summary["system"]))
    colors = _colors(systems)
    handles = []  # real then sim, system by system
    for i, system in enumerate(systems):
        rows = summary[summary["system"] == system].sort_values("rate")
        real, color, marker = rows["real_normalized_latency"], colors[system], MARKERS[i % len(MARKERS)]
        half = real * rows["real_repeat_spread"].fillna(0) / 2
        handles.append(ax.errorbar(rows["rate"], real, yerr=half, color=color, marker=marker, linestyle="-",
                                   linewidth=1.6, markersize=5, capsize=2, label=f"{system} real"))
        handles.extend(ax.plot(rows["rate"], rows["sim_normalized_latency"], color=color, marker=marker,
                               linestyle="--", linewidth=1.2, markersize=5, markerfacecolor="white",
                               label=f"{system} sim"))
        if "sim_uncorrected_normalized_latency" in rows and not np.allclose(
                rows["sim_uncorrected_normalized_latency"], rows["sim_normalized_latency"]):
            ax.plot(rows["rate"], rows["sim_uncorrected_normalized_latency"], color=color, linestyle=":",
                    linewidth=1.0, alpha=0.6)
    if threshold is not None:
        ax.axhline(threshold, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("Request rate (req/s)")
    ax.set_ylabel("Normalized latency (s/token)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, labels=[h.get_label() for h in handles], fontsize=6.5, frameon=False, ncol=2)
    return save_figure(fig, ax, path, title)


def request_scatter(requests: pd.DataFrame, path: Path, title: str = "") -> Path:
    """Every measured request: simulated against real end-to-end latency, one colour per system."""
    fig, ax = new_figure((3.4, 3.2))
    measured = requests[requests["measured"]]
    colors = _colors(list(dict.fromkeys(requests["system"])))
    for system, rows in measured.groupby("system", sort=False):
        ax.scatter(rows["real_latency_s"], rows["sim_latency_s"], s=9, alpha=0.7, color=colors[system],
                   label=system, edgecolors="none")
    values = measured[["real_latency_s", "sim_latency_s"]].to_numpy(float)
    top = float(np.nanmax(values)) * 1.05 if values.size else 1.0
    line = np.array([0.0, top])
    ax.plot(line, line, color="black", linewidth=0.8)
    ax.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.15, linewidth=0, label="±10%")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("Real latency (s)")
    ax.set_ylabel("Simulated latency (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False)
    return save_figure(fig, ax, path, title)
