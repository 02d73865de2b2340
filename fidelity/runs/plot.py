"""The per-second series, real (solid) against simulated (dashed), in four panels: tokens per second, requests
running and waiting, KV cache use, requests finished per second. Drawn on matplotlib's Figure without pyplot and
written as sim/experiment/png.py writes every figure (atomically, the same bytes for the same figure)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from sim.experiment.png import DPI, write_png

PANELS = (  # (quantities with their labels, the axis's label)
    ((("prompt_tokens_per_s", "prompt"), ("generation_tokens_per_s", "generation")), "tokens / s"),
    ((("running", "running"), ("waiting", "waiting")), "requests"),
    ((("kv_usage_pct", "KV cache used"),), "KV cache (%)"),
    ((("finished_per_s", "finished"),), "requests / s"),
)


def series_plot(series: pd.DataFrame, path: Path, title: str) -> Path:
    fig = Figure(figsize=(7.5, 9.0), dpi=DPI)
    axes = fig.subplots(len(PANELS), 1, sharex=True)
    for ax, (quantities, ylabel) in zip(axes, PANELS):
        for i, (quantity, label) in enumerate(quantities):
            color = f"C{i}"
            for side, style in (("real", "-"), ("sim", "--")):
                column = series[f"{side}_{quantity}"]
                if column.notna().any():
                    ax.plot(series["t"], column, linestyle=style, color=color, linewidth=1.3,
                            label=f"{label}, {'real' if side == 'real' else 'simulated'}")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("seconds after the first arrival (real series: its logger's clock)")
    fig.suptitle(title, fontsize=10)
    fig.subplots_adjust(left=0.11, right=0.97, top=0.95, bottom=0.06, hspace=0.12)
    return write_png(fig, path)
