"""A whole paper figure: its panels on the paper's grid and axes, one legend in the paper's order, a
footer that says what differs (a --quick cut, a stand-in workload, a cost model's prediction); PNG and SVG, byte-stable.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from engine.atomic import write_atomic  # noqa: E402
from sim.reproduce.figures import Figure  # noqa: E402
from sim.reproduce.panels import PANEL_KINDS, SYSTEM_COLORS, SYSTEM_MARKERS, ordered_systems  # noqa: E402

# SVG ids are random unless salted, and both formats stamp a date or a version unless told not to
plt.rcParams["svg.hashsalt"] = "servesim"
METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}


def draw_figure(figure: Figure, points: dict[str, pd.DataFrame], footer: list[str]) -> plt.Figure:
    """points: each panel's plotted numbers, by panel id."""
    rows = 1 + max(p.position[0] for p in figure.panels)
    cols = 1 + max(p.position[1] for p in figure.panels)
    width, height = 3.4 * cols + (1.2 if cols == 1 else 0), 3.0 * rows
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False)
    used = set()
    systems: list[str] = []
    for panel in figure.panels:
        ax = axes[panel.position]
        used.add(panel.position)
        kind = PANEL_KINDS[panel.kind]
        kind.draw(ax, points[panel.id], panel)
        if panel.xlim:
            ax.set_xlim(*panel.xlim)
        if panel.ylim:
            ax.set_ylim(*panel.ylim)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.xaxis.label.set_size(7)
        ax.yaxis.label.set_size(7)
        if kind.legend == "systems":
            systems += list(points[panel.id]["system"])
        elif kind.legend == "own":
            ax.legend(fontsize=6, frameon=False)
    for position in [(r, c) for r in range(rows) for c in range(cols)]:
        if position not in used:
            axes[position].axis("off")
    # the title, then the systems' legend, in a band of fixed inches above the panels
    top_in = 0.65 if systems else 0.4
    fig.tight_layout(h_pad=1.5, rect=(0, 0, 1, 1 - top_in / height))
    fig.suptitle(figure.title, fontsize=9, y=1 - 0.05 / height, va="top")
    if systems:
        _systems_legend(fig, ordered_systems(systems), y=1 - 0.3 / height)
    if footer:
        fig.text(0.01, 0, "\n".join(footer), fontsize=6, color="0.35", va="top", wrap=True)
    return fig


def _systems_legend(fig, systems: list[str], y: float) -> None:
    handles = [plt.Line2D([], [], color=SYSTEM_COLORS.get(s), marker=SYSTEM_MARKERS.get(s, "o"), markersize=4,
                          label=s) for s in systems]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, y), ncol=len(handles), fontsize=7,
               frameon=False)


def save_figure(fig: plt.Figure, stem: Path) -> list[Path]:
    """STEM.png and STEM.svg, each atomically."""
    paths = []
    for fmt in ("png", "svg"):
        path = stem.with_suffix(f".{fmt}")
        write_atomic(path, lambda f, fmt=fmt: fig.savefig(f, format=fmt, dpi=120, bbox_inches="tight",
                                                          metadata=METADATA[fmt]))
        paths.append(path)
    plt.close(fig)
    return paths
