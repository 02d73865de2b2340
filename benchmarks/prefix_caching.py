"""Automatic prefix caching on the quickstart's setup (OPT-13B, one A100-40GB, 12 GB of KV cache, the
roofline with its linear part measured on A100s): vLLM without and with the cache, over a few rates, on
the two workloads of configs/examples/prefix_caching*.yaml (4 system prompts of 512 tokens before
ShareGPT turns; the chatbot's multi-turn conversations). Prints a table and draws one figure: TTFT (mean),
TPOT p99 and the prefix hit rate against the request rate, a row per workload.

"Sustainable" below is the highest swept rate where every request finished and the mean normalized
latency stayed under --slo s/token (the paper's y-axis): a coarse reading on the swept grid, not a search.

    python benchmarks/prefix_caching.py                      # docs/img/prefix_caching.png
    python benchmarks/prefix_caching.py --duration 120 --out /tmp/p.png
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = {  # config, rates (req/s)
    "system prompt (4 x 512 tokens)": ("configs/examples/prefix_caching.yaml",
                                       (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0)),
    "chatbot (multi-turn)": ("configs/examples/prefix_caching_chatbot.yaml", (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75)),
}


def sweep(duration_s: float, seed: int) -> list[dict]:
    from sim.experiment.config import load_experiment
    from sim.experiment.run import run_one

    jobs = [(label, path, rate) for label, (path, rates) in WORKLOADS.items() for rate in rates]
    rows, started = [], time.perf_counter()
    total = 2 * len(jobs)
    for label, path, rate in jobs:
        exp = load_experiment(ROOT / path, [f"workload.duration_s={duration_s}"])
        for system in exp.systems:
            summary = run_one(exp, system, rate, seed).summary
            rows.append({**summary, "case": label, "caching": system.prefix_caching})
            done = len(rows)
            eta = (time.perf_counter() - started) / done * (total - done)
            print(f"[{done}/{total}] {label}, {system.name}, {rate:g} req/s (eta {eta:.0f} s)", flush=True)
    return rows


def sustainable(rows: list[dict], slo: float) -> dict[tuple[str, bool], float]:
    best: dict[tuple[str, bool], float] = {}
    for row in rows:
        key = (row["case"], row["caching"])
        if row["num_unfinished"] == 0 and row["normalized_latency"] < slo:
            best[key] = max(best.get(key, 0.0), row["rate"])
        else:
            best.setdefault(key, 0.0)
    return best


def table(rows: list[dict], slo: float) -> str:
    lines = ["| workload | prefix caching | rate (req/s) | TTFT mean (s) | TTFT p99 (s) | TPOT p99 (s) | "
             "norm. latency (s/token) | hit rate | unfinished |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        hit = "" if r["prefix_hit_rate"] != r["prefix_hit_rate"] else f"{r['prefix_hit_rate']:.1%}"
        lines.append(f"| {r['case']} | {'on' if r['caching'] else 'off'} | {r['rate']:g} | {r['ttft_mean_s']:.3f} | "
                     f"{r['ttft_p99_s']:.3f} | {r['tpot_p99_s']:.4f} | {r['normalized_latency']:.4f} | {hit} | "
                     f"{r['num_unfinished']} |")
    lines += ["", f"| workload | sustainable rate without / with the cache (all finished, normalized latency < "
                  f"{slo:g} s/token) |", "|---|---|"]
    best = sustainable(rows, slo)
    for label in WORKLOADS:
        lines.append(f"| {label} | {best[(label, False)]:g} / {best[(label, True)]:g} req/s |")
    return "\n".join(lines)


def draw(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("ttft_mean_s", "TTFT, mean (s)", True), ("tpot_p99_s", "TPOT p99 (s)", False),
              ("prefix_hit_rate", "prefix hit rate", False))
    fig, axes = plt.subplots(len(WORKLOADS), 3, figsize=(12, 3.2 * len(WORKLOADS)), squeeze=False)
    for i, label in enumerate(WORKLOADS):
        for j, (column, title, log) in enumerate(panels):
            ax = axes[i][j]
            for caching, style, color in ((False, "o--", "tab:blue"), (True, "s-", "tab:orange")):
                points = [(r["rate"], r[column]) for r in rows if r["case"] == label and r["caching"] == caching]
                if column == "prefix_hit_rate" and not caching:
                    continue  # no cache: no hit rate
                ax.plot(*zip(*points), style, color=color, label="vLLM + prefix caching" if caching else "vLLM")
            ax.set_xlabel("request rate (req/s)")
            ax.set_title(f"{label}: {title}", fontsize=9)
            if log:
                ax.set_yscale("log")
            if column == "prefix_hit_rate":
                ax.set_ylim(0, 1)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle("Automatic prefix caching: OPT-13B, A100-40GB, 12 GB KV cache (simulated)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of arrivals per run (default 600)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slo", type=float, default=0.1, help="normalized latency bound, s/token (default 0.1)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "prefix_caching.png")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # the checkout this script is in, whichever servesim is installed
    started = time.perf_counter()
    rows = sweep(args.duration, args.seed)
    print(table(rows, args.slo))
    draw(rows, args.out)
    print(f"{len(rows)} runs in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
