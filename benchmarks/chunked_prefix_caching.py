"""Chunked prefill with automatic prefix caching (vLLM >= 0.4's default pairing) on the system-prompt workload
of configs/examples/prefix_caching.yaml (the quickstart's setup: OPT-13B, one A100-40GB, 12 GB of KV cache;
4 system prompts of 512 tokens before ShareGPT turns): vLLM mixed and chunked (budget 512), each without and
with the cache, over a few rates. Prints a table (markdown) and the sustainable rate of each: the highest
swept rate where every request finished and the mean normalized latency stayed under --slo s/token. Draws
TTFT (mean) and TPOT p99 against the rate.

    python benchmarks/chunked_prefix_caching.py                 # docs/img/chunked_prefix_caching.png
    python benchmarks/chunked_prefix_caching.py --duration 120 --out /tmp/c.png
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/examples/prefix_caching.yaml"
RATES = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0)
SYSTEMS = ("[{preset: vllm, name: mixed}, {preset: vllm, name: mixed + cache, prefix_caching: true}, "
           "{preset: vllm, name: chunked, prefill_policy: chunked}, "
           "{preset: vllm, name: chunked + cache, prefill_policy: chunked, prefix_caching: true}]")


def sweep(duration_s: float, seed: int) -> list[dict]:
    from sim.experiment.config import load_experiment
    from sim.experiment.run import run_one

    exp = load_experiment(ROOT / CONFIG, [f"workload.duration_s={duration_s}", f"systems={SYSTEMS}"])
    rows, started = [], time.perf_counter()
    total = len(RATES) * len(exp.systems)
    for rate in RATES:
        for system in exp.systems:
            rows.append(run_one(exp, system, rate, seed).summary)
            done = len(rows)
            eta = (time.perf_counter() - started) / done * (total - done)
            print(f"[{done}/{total}] {system.name}, {rate:g} req/s (eta {eta:.0f} s)", flush=True)
    return rows


def table(rows: list[dict], slo: float) -> str:
    lines = ["| system | rate (req/s) | TTFT mean (s) | TTFT p99 (s) | TPOT p99 (s) | norm. latency (s/token) | "
             "hit rate | unfinished |", "|---|---|---|---|---|---|---|---|"]
    best: dict[str, float] = {}
    for r in sorted(rows, key=lambda r: (r["system"], r["rate"])):
        hit = "" if r["prefix_hit_rate"] != r["prefix_hit_rate"] else f"{r['prefix_hit_rate']:.1%}"
        lines.append(f"| {r['system']} | {r['rate']:g} | {r['ttft_mean_s']:.3f} | {r['ttft_p99_s']:.3f} | "
                     f"{r['tpot_p99_s']:.4f} | {r['normalized_latency']:.4f} | {hit} | {r['num_unfinished']} |")
        ok = r["num_unfinished"] == 0 and r["normalized_latency"] < slo
        best[r["system"]] = max(best.get(r["system"], 0.0), r["rate"] if ok else 0.0)
    lines += ["", f"| system | sustainable rate (all finished, normalized latency < {slo:g} s/token) |", "|---|---|"]
    lines += [f"| {name} | {rate:g} req/s |" for name, rate in best.items()]
    return "\n".join(lines)


def draw(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"mixed": ("o--", "tab:blue"), "mixed + cache": ("s-", "tab:blue"),
              "chunked": ("o--", "tab:green"), "chunked + cache": ("s-", "tab:green")}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (column, title, log) in zip(axes, (("ttft_mean_s", "TTFT, mean (s)", True),
                                               ("tpot_p99_s", "TPOT p99 (s)", False))):
        for name, (style, color) in styles.items():
            points = sorted((r["rate"], r[column]) for r in rows if r["system"] == name)
            ax.plot(*zip(*points), style, color=color, label=f"vLLM {name}")
        ax.set_xlabel("request rate (req/s)")
        ax.set_title(title, fontsize=9)
        if log:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Chunked prefill x prefix caching, 4 system prompts of 512 tokens: OPT-13B, A100-40GB, "
                 "12 GB KV cache (simulated)", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of arrivals per run (default 600)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slo", type=float, default=0.1, help="normalized latency bound, s/token (default 0.1)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "chunked_prefix_caching.png")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # the checkout this script is in, whichever servesim is installed
    started = time.perf_counter()
    rows = sweep(args.duration, args.seed)
    print(table(rows, args.slo))
    draw(rows, args.out)
    print(f"{len(rows)} runs in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
