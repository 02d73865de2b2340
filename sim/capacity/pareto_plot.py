"""plan_pareto.png: each fleet that meets the SLO, its dollars an hour against a p90 latency at the rate its replicas
were found to hold; the fleets no other beats on both (the Pareto front) joined and named.

The latency is the plan's first p90 target (ttft_p90_s, tpot_p90_s, normalized_latency_p90), else its first target,
read from the probe the answer rests on: the fleet runs each replica at or under that rate.
"""
from __future__ import annotations

from pathlib import Path

from sim.capacity.targets import Target


def pareto_metric(targets: tuple[Target, ...]) -> str:
    return next((t.metric for t in targets if "p90" in t.metric), targets[0].metric)


def pareto_front(rows: list[dict], metric: str) -> list[dict]:
    """The rows no cheaper (or as cheap) row beats on `metric`, cheapest first."""
    front: list[dict] = []
    for row in sorted(rows, key=lambda r: (r["usd_per_hour"], r[metric])):
        if not front or row[metric] < front[-1][metric]:
            front.append(row)
    return front


def pareto_plot(rows: list[dict], metric: str, limit: float, path: Path, title: str = "") -> Path:
    """The figure, written to `path` (sim/experiment/png.py: drawn once, the same bytes for the same rows)."""
    from sim.experiment.png import new_figure, write_png

    fig, ax = new_figure((5.1, 2.8))
    ax.scatter([r["usd_per_hour"] for r in rows], [r[metric] for r in rows], s=14, color="0.6", label="meets the SLO")
    front = pareto_front(rows, metric)
    ax.plot([r["usd_per_hour"] for r in front], [r[metric] for r in front], marker="o", markersize=5, linewidth=1.4,
            label="Pareto front")
    for row in front:
        ax.annotate(f"{row['replicas']}x {row['hardware']} x{row['tensor_parallel']} {row['precision']}",
                    (row["usd_per_hour"], row[metric]), textcoords="offset points", xytext=(4, 4), fontsize=6)
    ax.axhline(limit, color="0.4", linestyle="--", linewidth=0.9)
    ax.annotate(f"target {limit:g}", (0.99, limit), xycoords=("axes fraction", "data"), ha="right", va="bottom",
                fontsize=7, color="0.3")
    ax.set_xlabel("Fleet cost (US$ per hour)")
    ax.set_ylabel(f"{metric} at the rate a replica holds")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title, fontsize=9)
    return write_png(fig, Path(path))
