"""Automatic prefix caching on the quickstart's setup (OPT-13B, one A100-40GB, 12 GB of KV cache, the
roofline with its linear part measured on A100s), simulated over a few rates. Two studies:

- `cache` (default): vLLM without and with the cache on the two workloads of configs/examples/prefix_caching*.yaml
  (4 system prompts of 512 tokens before ShareGPT turns; the chatbot's multi-turn conversations).
- `chunked`: vLLM mixed and chunked prefill (budget 512, vLLM >= 0.4's default pairing with the cache), each
  without and with the cache, on the system-prompt workload.

Prints a table (markdown) and draws one figure: TTFT (mean), TPOT p99 and the prefix hit rate against the
request rate, a row per workload. "Sustainable" is the highest swept rate where every request finished and the
mean normalized latency stayed under --slo s/token (the paper's y-axis): a coarse reading on the swept grid, not
a search.

    python benchmarks/serving/prefix_caching.py                      # docs/img/prefix_caching.png
    python benchmarks/serving/prefix_caching.py --study chunked      # docs/img/chunked_prefix_caching.png
    python benchmarks/serving/prefix_caching.py --duration 120 --out /tmp/p.png
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PROMPT = "configs/examples/prefix_caching.yaml"
CHUNKED_SYSTEMS = ("[{preset: vllm, name: mixed}, {preset: vllm, name: mixed + cache, prefix_caching: true}, "
                   "{preset: vllm, name: chunked, prefill_policy: chunked}, "
                   "{preset: vllm, name: chunked + cache, prefill_policy: chunked, prefix_caching: true}]")


@dataclass(frozen=True)
class Workload:
    label: str
    config: str
    rates: tuple[float, ...]
    systems: str | None = None  # a `systems=` override of the config's, as YAML


@dataclass(frozen=True)
class Study:
    workloads: tuple[Workload, ...]
    title: str
    figure: str  # under docs/img


STUDIES = {
    "cache": Study((
        Workload("system prompt (4 x 512 tokens)", SYSTEM_PROMPT, (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0)),
        Workload("chatbot (multi-turn)", "configs/examples/prefix_caching_chatbot.yaml",
                 (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75))),
        "Automatic prefix caching: OPT-13B, A100-40GB, 12 GB KV cache (simulated)", "prefix_caching.png"),
    "chunked": Study((
        Workload("system prompt (4 x 512 tokens)", SYSTEM_PROMPT, (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0),
                 CHUNKED_SYSTEMS),),
        "Chunked prefill x prefix caching, 4 system prompts of 512 tokens: OPT-13B, A100-40GB, 12 GB KV cache "
        "(simulated)", "chunked_prefix_caching.png"),
}


def sweep(study: Study, duration_s: float, seed: int) -> list[dict]:
    """One summary row per (workload, system, rate), with the workload's label as `case`."""
    from sim.experiment.config import load_experiment
    from sim.experiment.run import run_one

    experiments = []
    for workload in study.workloads:
        overrides = [f"workload.duration_s={duration_s}"] + ([f"systems={workload.systems}"] if workload.systems
                                                              else [])
        experiments.append((workload, load_experiment(ROOT / workload.config, overrides)))
    total = sum(len(w.rates) * len(exp.systems) for w, exp in experiments)
    rows: list[dict] = []
    started = time.perf_counter()
    for workload, exp in experiments:
        for rate in workload.rates:
            for system in exp.systems:
                rows.append({**run_one(exp, system, rate, seed).summary, "case": workload.label,
                             "caching": system.prefix_caching})
                done = len(rows)
                eta = (time.perf_counter() - started) / done * (total - done)
                print(f"[{done}/{total}] {workload.label}, {system.name}, {rate:g} req/s (eta {eta:.0f} s)",
                      flush=True)
    return rows


def sustainable(rows: list[dict], slo: float) -> dict[tuple[str, str], float]:
    """Per (workload, system): the highest rate where every request finished under the SLO (0 if none)."""
    best: dict[tuple[str, str], float] = {}
    for row in rows:
        key = (row["case"], row["system"])
        ok = row["num_unfinished"] == 0 and row["normalized_latency"] < slo
        best[key] = max(best.get(key, 0.0), row["rate"] if ok else 0.0)
    return best


def table(rows: list[dict], slo: float) -> str:
    lines = ["| workload | system | rate (req/s) | TTFT mean (s) | TTFT p99 (s) | TPOT p99 (s) | "
             "norm. latency (s/token) | hit rate | unfinished |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        hit = "" if r["prefix_hit_rate"] != r["prefix_hit_rate"] else f"{r['prefix_hit_rate']:.1%}"
        lines.append(f"| {r['case']} | {r['system']} | {r['rate']:g} | {r['ttft_mean_s']:.3f} | "
                     f"{r['ttft_p99_s']:.3f} | {r['tpot_p99_s']:.4f} | {r['normalized_latency']:.4f} | {hit} | "
                     f"{r['num_unfinished']} |")
    lines += ["", f"| workload | system | sustainable rate (all finished, normalized latency < {slo:g} s/token) |",
              "|---|---|---|"]
    lines += [f"| {case} | {system} | {rate:g} req/s |" for (case, system), rate in sustainable(rows, slo).items()]
    return "\n".join(lines)


def draw(rows: list[dict], study: Study, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("ttft_mean_s", "TTFT, mean (s)", True), ("tpot_p99_s", "TPOT p99 (s)", False),
              ("prefix_hit_rate", "prefix hit rate", False))
    systems = list(dict.fromkeys(r["system"] for r in rows))
    # a study of more than two systems lists them in pairs without / with the cache: a color per pair, the
    # cache drawn solid; two systems (the cache study) are the pair itself and get a color each
    colors = {name: f"C{i // 2 if len(systems) > 2 else i}" for i, name in enumerate(systems)}
    fig, axes = plt.subplots(len(study.workloads), 3, figsize=(12, 3.2 * len(study.workloads)), squeeze=False)
    for i, workload in enumerate(study.workloads):
        for j, (column, title, log) in enumerate(panels):
            ax = axes[i][j]
            for name in systems:
                mine = [r for r in rows if r["case"] == workload.label and r["system"] == name]
                if not mine or (column == "prefix_hit_rate" and not mine[0]["caching"]):
                    continue  # no cache: no hit rate
                ax.plot(*zip(*sorted((r["rate"], r[column]) for r in mine)), "s-" if mine[0]["caching"] else "o--",
                        color=colors[name], label=name)
            ax.set_xlabel("request rate (req/s)")
            ax.set_title(f"{workload.label}: {title}", fontsize=9)
            if log:
                ax.set_yscale("log")
            if column == "prefix_hit_rate":
                ax.set_ylim(0, 1)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(study.title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", choices=sorted(STUDIES), default="cache",
                        help="cache: without/with the cache on two workloads (default); chunked: mixed/chunked "
                             "prefill x the cache on the system-prompt workload")
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of arrivals per run (default 600)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slo", type=float, default=0.1, help="normalized latency bound, s/token (default 0.1)")
    parser.add_argument("--out", type=Path, help="the figure (default docs/img/<the study's figure>)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # the checkout this script is in, whichever servesim is installed
    study = STUDIES[args.study]
    started = time.perf_counter()
    rows = sweep(study, args.duration, args.seed)
    print(table(rows, args.slo))
    draw(rows, study, args.out or ROOT / "docs" / "img" / study.figure)
    print(f"{len(rows)} runs in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
