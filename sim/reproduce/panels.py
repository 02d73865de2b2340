"""One panel of a paper figure: the numbers it plots (a tidy table, written beside the figure) and how
it draws them in the paper's style. A panel kind is a pair of functions; Figure entries name it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from sim.reproduce.figures import SYSTEM_ORDER, Panel

SYSTEM_COLORS = dict(zip(SYSTEM_ORDER, ("#7f7f7f", "#d62728", "#ff7f0e", "#2ca02c", "#1f77b4")))
SYSTEM_MARKERS = dict(zip(SYSTEM_ORDER, ("x", "s", "^", "D", "o")))
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # the paper's x axis in Figs. 18b and 19
# Fig. 2's categories, with the paper's "& Others" split: free space while requests wait (external
# fragmentation) and free space while none waits (idle). external_frag_and_others is their sum.
KV_PARTS = (("token_states", "Token states"), ("reservation", "Reservation"), ("internal_frag", "Internal frag."),
            ("external_frag", "External frag. & Others"), ("idle", "Idle (free, nothing waiting)"))
LATENCY_LABEL = "Normalized latency\n(s/token)"


def wrapped(names: list[str]) -> list[str]:
    """'Orca (Max)' over two lines, so that bar labels do not run into each other."""
    return [name.replace(" (", "\n(") for name in names]


def ordered_systems(systems) -> list[str]:
    """The paper's legend order; systems it does not name follow, as they came."""
    names = list(dict.fromkeys(systems))
    return [s for s in SYSTEM_ORDER if s in names] + [s for s in names if s not in SYSTEM_ORDER]


# --- the numbers each kind plots --------------------------------------------------------------------
def latency_points(rows: pd.DataFrame) -> pd.DataFrame:
    return _mean_over_seeds(rows, ["system", "rate"], {"normalized_latency": "mean", "saturated": "any"})


def kv_points(rows: pd.DataFrame) -> pd.DataFrame:
    means = _mean_over_seeds(rows, ["system", "rate"], {c: "mean" for c in (
        "kv_token_share", "kv_reserved_share", "kv_internal_frag_share", "kv_external_frag_share", "kv_idle_share")})
    return pd.DataFrame({
        "system": means["system"], "rate": means["rate"],
        "token_states": 100 * means["kv_token_share"], "reservation": 100 * means["kv_reserved_share"],
        "internal_frag": 100 * means["kv_internal_frag_share"], "external_frag": 100 * means["kv_external_frag_share"],
        "idle": 100 * means["kv_idle_share"],
        "external_frag_and_others": 100 * (means["kv_external_frag_share"] + means["kv_idle_share"]),
    })


def batched_points(rows: pd.DataFrame) -> pd.DataFrame:
    return _mean_over_seeds(rows, ["system", "rate"], {"mean_batched_requests": "mean"})


def block_size_points(rows: pd.DataFrame) -> pd.DataFrame:
    """Fig. 18b: one series per workload (the source's label)."""
    return _mean_over_seeds(rows, ["series", "block_size", "rate"], {"normalized_latency": "mean", "saturated": "any"})


def preemption_points(rows: pd.DataFrame) -> pd.DataFrame:
    """Fig. 19b: one series per preemption mode."""
    rows = rows.assign(series=rows["preemption"].str.capitalize())
    return block_size_points(rows)


def _mean_over_seeds(rows: pd.DataFrame, keys: list[str], columns: dict[str, str]) -> pd.DataFrame:
    points = rows.groupby(keys, sort=False).agg(columns).reset_index()
    if "system" in keys:
        order = {name: i for i, name in enumerate(ordered_systems(points["system"]))}
        points = points.sort_values(["system", *keys[1:]], key=lambda c: c.map(order) if c.name == "system" else c)
    return points.reset_index(drop=True)


# --- drawing ------------------------------------------------------------------------------------------
def draw_latency(ax, points: pd.DataFrame, panel: Panel) -> None:
    for system in ordered_systems(points["system"]):
        rows = points[points["system"] == system].sort_values("rate")
        color, marker = SYSTEM_COLORS.get(system), SYSTEM_MARKERS.get(system, "o")
        ax.plot(rows["rate"], rows["normalized_latency"], marker=marker, color=color, label=system,
                linewidth=1.5, markersize=4)
        saturated = rows[rows["saturated"]]  # hollow: not every request finished, the value is a lower bound
        ax.plot(saturated["rate"], saturated["normalized_latency"], linestyle="none", marker=marker,
                markersize=6, markerfacecolor="white", color=color)
    ax.set_xlabel(f"Request rate (req/s)\n\n{panel.caption}")
    ax.set_ylabel(LATENCY_LABEL)
    if panel.xlim and len(points) and points["rate"].max() > panel.xlim[1]:
        ax.text(0.98, 0.97, f"simulated to {points['rate'].max():g} req/s (CSV)", transform=ax.transAxes,
                ha="right", va="top", fontsize=6, color="0.4")


def draw_kv(ax, points: pd.DataFrame, panel: Panel) -> None:
    systems = ordered_systems(points["system"])
    bottom = [0.0] * len(systems)
    table = points.set_index("system").loc[systems]
    for (column, label), color in zip(KV_PARTS, ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#e0e0e0")):
        values = table[column].to_list()
        ax.bar(wrapped(systems), values, bottom=bottom, label=label, width=0.6, edgecolor="white", color=color)
        for i, value in enumerate(values):
            if value >= 4:
                ax.text(i, bottom[i] + value / 2, f"{value:.1f}%", ha="center", va="center", fontsize=6)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("KV cache usage (%)")
    ax.set_xlabel(panel.caption)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=6, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))


def draw_batched(ax, points: pd.DataFrame, panel: Panel) -> None:
    systems = ordered_systems(points["system"])
    values = points.set_index("system").loc[systems, "mean_batched_requests"].to_list()
    ax.bar(wrapped(systems), values, color=[SYSTEM_COLORS.get(s) for s in systems], width=0.6)
    for i, value in enumerate(values):
        ax.text(i, value, f"{value:.2f}", ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("# Batched requests")
    ax.set_xlabel(panel.caption)
    ax.set_ylim(0, max(values, default=1) * 1.2)
    ax.tick_params(axis="x", labelsize=7)


def draw_by_block_size(ax, points: pd.DataFrame, panel: Panel) -> None:
    """Grouped bars over the paper's block sizes; a size not simulated is an empty slot."""
    series = list(dict.fromkeys(points["series"]))
    width = 0.8 / max(len(series), 1)
    top = panel.ylim[1] if panel.ylim else None
    for j, name in enumerate(series):
        rows = points[points["series"] == name].set_index("block_size")
        xs = [i + (j - (len(series) - 1) / 2) * width for i, size in enumerate(BLOCK_SIZES) if size in rows.index]
        values = [float(rows.loc[size, "normalized_latency"]) for size in BLOCK_SIZES if size in rows.index]
        ax.bar(xs, values, width=width, label=name)
        for x, value in zip(xs, values):  # the paper's axis can dwarf them, or cut them off: print each
            ax.text(x, min(value, top) if top else value, f"{value:.3g}", ha="center",
                    va="top" if top and value > top else "bottom", fontsize=5, rotation=90)
    ax.set_xticks(range(len(BLOCK_SIZES)), [str(s) for s in BLOCK_SIZES])
    ax.set_xlabel(f"Block size\n\n{panel.caption}")
    ax.set_ylabel(LATENCY_LABEL)


@dataclass(frozen=True)
class PanelKind:
    points: Callable[[pd.DataFrame], pd.DataFrame]
    draw: Callable
    legend: str  # "systems": one legend of the paper's systems atop the figure; "own": in the panel


PANEL_KINDS = {
    "latency": PanelKind(latency_points, draw_latency, "systems"),
    "kv": PanelKind(kv_points, draw_kv, "none"),
    "batched": PanelKind(batched_points, draw_batched, "none"),
    "block_size": PanelKind(block_size_points, draw_by_block_size, "own"),
    "preemption": PanelKind(preemption_points, draw_by_block_size, "own"),
}
