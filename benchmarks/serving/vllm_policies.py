"""vLLM's three prefill policies on the quickstart's setup: what each costs and saves, in one figure.

Runs configs/examples/vllm_policies.yaml (OPT-13B, one A100-40GB, 12 GB of KV cache, ShareGPT lengths,
Poisson arrivals, the quickstart's cost model) for each policy over its rates, and a capacity search per
policy and latency target (sim/capacity/search.py: the highest rate that holds the target, to 1%). Prints a
markdown table of TTFT p50/p99, TPOT p99, normalized latency, the 99.9th percentile of the gap between two decode
iterations (how long a running sequence can stall behind prefills) and the sustainable rates, and draws
docs/img/vllm_policies.png: TTFT p50/p99, TPOT p99 and the gap between tokens against rate, and the
sustainable rate per target.

    python benchmarks/serving/vllm_policies.py                      # the record: 600 s of traffic a run
    python benchmarks/serving/vllm_policies.py --duration 120 --out /tmp/policies.png   # a quick look
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs/examples/vllm_policies.yaml"
FIGURE = ROOT / "docs/img/vllm_policies.png"
# the latency targets a capacity search holds: a chat user's first token, and a smooth stream after it
TARGETS = (("ttft_p99_s", 1.0), ("tpot_p99_s", 0.05))


def sweep(exp, progress) -> list[dict]:
    from sim.experiment.run import run_one

    rows = []
    for system in exp.systems:
        for rate in exp.rates:
            result = run_one(exp, system, rate, exp.seeds[0])
            summary = dict(result.summary)
            summary["decode_gap_p999_s"] = decode_gap_quantile(result.iterations, 0.999)
            rows.append(summary)
            progress(f"{system.name} at {rate:g} req/s: TTFT p99 {summary['ttft_p99_s']:.3f} s, "
                     f"TPOT p99 {summary['tpot_p99_s'] * 1e3:.1f} ms")
    return rows


def decode_gap_quantile(iterations, q: float) -> float:
    """How long the running sequences wait between two tokens, at its q-quantile: the time from the end of one
    iteration that decodes to the end of the next, within a busy period (iterations back to back). A prompt
    run between two decode steps (separate) or a prefill inside one (mixed, chunked) lengthens it."""
    import numpy as np

    starts, durations = iterations["start_s"].to_numpy(), iterations["duration_s"].to_numpy()
    ends = starts + durations
    period = np.cumsum(np.r_[True, starts[1:] != ends[:-1]])  # a new busy period after an idle gap
    decodes = iterations["num_decodes"].to_numpy() > 0
    ends, period = ends[decodes], period[decodes]
    gaps = np.diff(ends)[period[1:] == period[:-1]]
    return float(np.quantile(gaps, q)) if len(gaps) else float("nan")


def capacities(exp, progress) -> dict[tuple[str, str], float]:
    from sim.capacity.search import Target, max_rate

    found = {}
    for system in exp.systems:
        for metric, limit in TARGETS:
            rate, probes = max_rate(exp, system, Target(metric, limit), seed=exp.seeds[0], start=1.0, rel_tol=0.01)
            found[system.name, metric] = rate
            progress(f"{system.name}: {metric} <= {limit:g} holds up to {rate:.2f} req/s ({len(probes)} probes)")
    return found


def table(rows: list[dict], found: dict[tuple[str, str], float]) -> str:
    lines = ["| policy | rate (req/s) | TTFT p50 (s) | TTFT p99 (s) | TPOT p99 (ms) | normalized latency (s/token) "
             "| gap between tokens p99.9 (ms) | iterations |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['system']} | {r['rate']:g} | {r['ttft_p50_s']:.3f} | {r['ttft_p99_s']:.3f} | "
                     f"{r['tpot_p99_s'] * 1e3:.1f} | {r['normalized_latency']:.4f} | "
                     f"{r['decode_gap_p999_s'] * 1e3:.1f} | {r['num_iterations']} |")
    lines += ["", "| policy | " + " | ".join(f"max rate with {m} <= {v:g}" for m, v in TARGETS) + " |",
              "|---|" + "---|" * len(TARGETS)]
    for name in dict.fromkeys(r["system"] for r in rows):
        lines.append(f"| {name} | " + " | ".join(f"{found[name, m]:.2f}" for m, _ in TARGETS) + " |")
    return "\n".join(lines)


def draw(rows: list[dict], found: dict[tuple[str, str], float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["system"] for r in rows))
    fig, ((ttft, tpot), (gap, cap)) = plt.subplots(2, 2, figsize=(12, 8.4))
    for i, name in enumerate(names):
        mine = [r for r in rows if r["system"] == name]
        rates = [r["rate"] for r in mine]
        color = f"C{i}"
        ttft.plot(rates, [r["ttft_p50_s"] for r in mine], "o-", color=color, label=f"{name} p50")
        ttft.plot(rates, [r["ttft_p99_s"] for r in mine], "s--", color=color, label=f"{name} p99")
        tpot.plot(rates, [r["tpot_p99_s"] * 1e3 for r in mine], "o-", color=color, label=name)
        gap.plot(rates, [r["decode_gap_p999_s"] * 1e3 for r in mine], "o-", color=color, label=name)
    ttft.set(xlabel="request rate (req/s)", ylabel="TTFT (s)", yscale="log", title="time to first token")
    tpot.set(xlabel="request rate (req/s)", ylabel="TPOT p99 (ms)", title="time per output token, p99")
    gap.set(xlabel="request rate (req/s)", ylabel="gap between tokens, p99.9 (ms)",
            title="longest stalls of a running sequence")
    ttft.legend(fontsize=7)
    tpot.legend(fontsize=8)
    gap.legend(fontsize=8)
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [found[name, metric] for metric, _ in TARGETS]
        bars = cap.bar([j + i * width for j in range(len(TARGETS))], values, width, color=f"C{i}", label=name)
        cap.bar_label(bars, fmt="%.2f", fontsize=7)
    cap.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(TARGETS))],
                   [f"{metric.replace('_s', '')} <= {limit:g} s" for metric, limit in TARGETS])
    cap.set(ylabel="sustainable rate (req/s)", title="capacity under a latency target (to 1%)")
    cap.legend(fontsize=7, loc="lower center")
    fig.suptitle("vLLM prefill policies: OPT-13B, A100-40GB, 12 GB KV cache, ShareGPT (simulated)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of traffic a run (default 600)")
    parser.add_argument("--out", type=Path, default=FIGURE, help=f"the figure (default {FIGURE.relative_to(ROOT)})")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # the checkout this file is in
    from sim.experiment.config import load_experiment
    from sim.experiment.progress import duration_text

    exp = load_experiment(CONFIG, [f"workload.duration_s={args.duration}"])
    started, done = time.perf_counter(), [0]
    expected = len(exp.systems) * (len(exp.rates) + 9 * len(TARGETS))  # a capacity search: about 9 probes

    def progress(line: str, probes: int = 1) -> None:
        done[0] += probes
        elapsed = time.perf_counter() - started
        left = elapsed * max(expected - done[0], 0) / done[0]
        print(f"  [{duration_text(elapsed)}, ~{duration_text(left)} left] {line}", flush=True)

    rows = sweep(exp, progress)
    found = capacities(exp, lambda line: progress(line, 9))
    draw(rows, found, args.out)
    print(table(rows, found))
    print(f"\nfigure: {args.out}  ({duration_text(time.perf_counter() - started)})")


if __name__ == "__main__":
    main()
