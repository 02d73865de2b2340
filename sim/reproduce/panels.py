"""One panel of a paper figure: the numbers it plots (a tidy table, written beside the figure) and how
it draws them in the paper's style. A panel kind is a pair of functions (and, for a panel a cost model
draws without simulating, a third that predicts its rows); Figure entries name it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from sim.experiment.config import Experiment
from sim.reproduce.figures import SYSTEM_ORDER, Panel
from sim.reproduce.predictions import kernel_rows, preemption_cost_rows

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


def saving_points(rows: pd.DataFrame) -> pd.DataFrame:
    """Fig. 15: vLLM's memory saving (%) per workload and parallel size or beam width, the mean over the
    simulated rates and seeds, with the lowest and highest."""
    rows = rows.assign(sequences=rows[["n", "beam_width"]].max(axis=1),
                       sharing=rows["beam_width"].map(lambda width: "Beam width" if width > 1 else "Parallel size"),
                       saving=100 * rows["memory_saving"])
    points = rows.groupby(["series", "sharing", "sequences"], sort=False).agg(
        memory_saving_pct=("saving", "mean"), lowest_pct=("saving", "min"), highest_pct=("saving", "max"),
        rates=("rate", lambda rates: ", ".join(f"{r:g}" for r in sorted(set(rates))))).reset_index()
    return points.sort_values(["series", "sequences"], kind="stable").reset_index(drop=True)


def kernel_points(rows: pd.DataFrame) -> pd.DataFrame:
    return _integers(rows[["batch", "context", "block_size", "dense_us", "paged_us", "overhead", "cost_model"]],
                     ["batch", "context", "block_size"])


def preemption_cost_points(rows: pd.DataFrame) -> pd.DataFrame:
    return _integers(rows[["block_size", "tokens", "recompute_ms", "swap_in_ms", "swap_out_ms", "swap_in_out_ms",
                           "cost_model"]], ["block_size", "tokens"])


def _integers(rows: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """A cost-model panel's rows, beside the simulated panels' in one summary.csv, come back as floats."""
    return rows.astype({column: int for column in columns}).reset_index(drop=True)


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
        saturated = rows[rows["saturated"]]  # hollow: it fell behind, its latency grows with the trace
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


def draw_saving(ax, points: pd.DataFrame, panel: Panel) -> None:
    """Grouped bars per parallel size or beam width, one per workload; whiskers span the rates."""
    series = list(dict.fromkeys(points["series"]))
    widths = sorted(set(points["sequences"]))
    width = 0.8 / max(len(series), 1)
    for j, name in enumerate(series):
        rows = points[points["series"] == name].set_index("sequences")
        xs = [i + (j - (len(series) - 1) / 2) * width for i, w in enumerate(widths) if w in rows.index]
        mean = rows["memory_saving_pct"]
        spread = [mean - rows["lowest_pct"], rows["highest_pct"] - mean]
        ax.bar(xs, mean, width=width, label=name, yerr=spread, capsize=2, error_kw={"linewidth": 0.8})
        for x, value, highest in zip(xs, mean, rows["highest_pct"]):
            ax.text(x, highest, f"{value:.1f}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(widths)), [f"{w:g}" for w in widths])
    ax.set_xlabel(f"{points['sharing'].iloc[0] if len(points) else ''}\n\n{panel.caption}")
    ax.set_ylabel("Memory saving (%)")


def draw_kernel(ax, points: pd.DataFrame, panel: Panel) -> None:
    """Fig. 18a: per context, vLLM's paged kernel and FasterTransformer's dense one at each batch size."""
    contexts = sorted(set(points["context"]))
    bars = [(f"{name} (bs {batch})", batch, column) for batch in sorted(set(points["batch"]))
            for name, column in (("vLLM", "paged_us"), ("FT", "dense_us"))]
    width = 0.8 / len(bars)
    for j, (label, batch, column) in enumerate(bars):
        rows = points[points["batch"] == batch].set_index("context")
        xs = [i + (j - (len(bars) - 1) / 2) * width for i in range(len(contexts))]
        ax.bar(xs, [float(rows.loc[c, column]) for c in contexts], width=width, label=label)
    ax.set_xticks(range(len(contexts)), [str(c) for c in contexts])
    ax.set_xlabel(f"Context length\n\n{panel.caption}")
    ax.set_ylabel("Kernel latency (us)")


PREEMPTION_CURVES = (("recompute_ms", "Recompute"), ("swap_in_ms", "Swap in"), ("swap_out_ms", "Swap out"),
                     ("swap_in_out_ms", "Swap in + out"))


def draw_preemption_cost(ax, points: pd.DataFrame, panel: Panel) -> None:
    """Fig. 19a: each way back for a preempted sequence against block size; a value above the paper's axis
    is printed at its top."""
    sizes = points["block_size"].to_list()
    top = panel.ylim[1] if panel.ylim else None
    for (column, label), marker in zip(PREEMPTION_CURVES, ("o", "s", "^", "D")):
        values = points[column].to_list()
        ax.plot(range(len(sizes)), values, marker=marker, label=label, linewidth=1.5, markersize=4)
        for x, value in enumerate(values):
            if top and value > top:
                ax.text(x, top, f"{value:.0f}", ha="center", va="top", fontsize=5, rotation=90)
    ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
    ax.set_xlabel(f"Block size\n\n{panel.caption}")
    ax.set_ylabel("Time (ms)")


@dataclass(frozen=True)
class PanelKind:
    points: Callable[[pd.DataFrame], pd.DataFrame]
    draw: Callable
    legend: str  # "systems": one legend of the paper's systems atop the figure; "own": in the panel
    # a panel drawn from a cost model: its rows, from the experiment whose cost model it is
    predict: Callable[[Experiment], pd.DataFrame] | None = None


PANEL_KINDS = {
    "latency": PanelKind(latency_points, draw_latency, "systems"),
    "kv": PanelKind(kv_points, draw_kv, "none"),
    "batched": PanelKind(batched_points, draw_batched, "none"),
    "block_size": PanelKind(block_size_points, draw_by_block_size, "own"),
    "preemption": PanelKind(preemption_points, draw_by_block_size, "own"),
    "saving": PanelKind(saving_points, draw_saving, "own"),
    "kernel": PanelKind(kernel_points, draw_kernel, "own", kernel_rows),
    "preemption_cost": PanelKind(preemption_cost_points, draw_preemption_cost, "own", preemption_cost_rows),
}
