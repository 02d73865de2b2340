"""A digest of every record the simulator writes, per scenario and per way of running it.

A refactor of the serving path must leave the records byte-identical: run this before the change and
after, and compare the lines. Each scenario is small (seconds on one core) and covers one corner of
the control plane: real ShareGPT lengths, Alpaca, a fleet behind the round-robin router, parallel
sampling (n = 6), beam search (width 4), a shared 5-shot prefix, Orca (Max) reservations, forced
swapping, the chatbot's conversations, a recorded trace replayed, and vLLM's separate and chunked prefill
policies. Every scenario runs step by step (`step`) and fast-forwarded (`fast`); the fleet also with its
replicas simulated apart in two processes (`jobs2`, sim/core/independent_replicas.py). The three must agree too.

    python benchmarks/record_digests.py            # every scenario
    python benchmarks/record_digests.py beam swap  # some
    python benchmarks/record_digests.py --scale 0.1  # every scenario, a tenth as long

Prints `<scenario> <way> <iterations> <requests> <sha256 of the iteration columns and request rows>`, for
the code of the checkout this file is in (not an installed servesim elsewhere).
"""
from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# name: (config, system name, rate, duration_s (None: the config's), further overrides)
SCENARIOS = {
    "sharegpt": ("configs/quickstart.yaml", "vLLM", 2.0, 600.0, []),
    "alpaca": ("configs/paper/fig12d_alpaca_opt13b.yaml", "vLLM", 30.0, 120.0, []),
    "fleet": ("configs/quickstart.yaml", "vLLM", 64.0, 30.0, ["replicas=64", "router=round_robin"]),
    "fleet_lo": ("configs/quickstart.yaml", "vLLM", 8.0, 120.0, ["replicas=4", "router=least_outstanding"]),
    "n6": ("configs/paper/fig14_parallel_n6.yaml", "vLLM", 4.0, 120.0, []),
    "beam": ("configs/paper/fig14_beam_w4.yaml", "vLLM", 3.0, 120.0, []),
    "prefix": ("configs/paper/fig16b_prefix_5shot.yaml", "vLLM", 20.0, 120.0, []),
    "orca_max": ("configs/quickstart.yaml", "Orca (Max)", 1.5, 300.0, []),
    "ft": ("configs/quickstart.yaml", "FasterTransformer", 1.0, 300.0, []),
    "swap": ("configs/paper/fig19b_recompute_vs_swap.yaml", "swap bs=16", 3.5, 300.0, []),
    "recompute": ("configs/paper/fig19b_recompute_vs_swap.yaml", "recompute bs=64", 3.5, 300.0, []),
    "chatbot": ("configs/paper/fig17_chatbot.yaml", "vLLM", 0.8, 600.0, []),
    "replay": ("configs/examples/replay.yaml", "vLLM", 2.0, None, []),  # the recorded trace, all of it
    # automatic prefix caching: system prompts, hits, evictions and preemptions (docs/prefix-caching.md)
    "apc": ("configs/examples/prefix_caching.yaml", "vLLM + prefix caching", 2.0, 300.0, []),
    "apc_chat": ("configs/examples/prefix_caching_chatbot.yaml", "vLLM + prefix caching", 1.25, 300.0, []),
    # vLLM's later prefill policies (docs/vllm-policies.md): prompt-only iterations, and chunks; with four
    # samples a request (swapped out, recomputed apart), and chunks over the prefix cache
    "separate": ("configs/examples/vllm_policies.yaml", "vLLM separate (v0.2-3)", 2.5, 300.0, []),
    "chunked": ("configs/examples/vllm_policies.yaml", "vLLM chunked (v0.4+)", 2.5, 300.0, []),
    "separate_n4": ("configs/examples/vllm_policies.yaml", "vLLM separate (v0.2-3)", 1.0, 300.0, ["workload.n=4"]),
    "chunked_n4": ("configs/examples/vllm_policies.yaml", "vLLM chunked (v0.4+)", 1.0, 300.0, ["workload.n=4"]),
    "apc_chunked": ("configs/examples/prefix_caching.yaml", "chunked", 2.0, 300.0,
                    ["systems=[{preset: vllm, name: chunked, prefix_caching: true, prefill_policy: chunked}]"]),
}


def digests(name: str, scale: float = 1.0) -> list[tuple[str, int, int, str]]:
    from sim.experiment.config import load_experiment
    from sim.experiment.run import make_cost_model, simulate_trace, trace_for

    path, system_name, rate, duration_s, overrides = SCENARIOS[name]
    duration = [] if duration_s is None else [f"workload.duration_s={duration_s * scale:g}"]
    exp = load_experiment(ROOT / path, [*overrides, *duration, f"rates=[{rate}]", "warmup_s=0"])
    system = next(s for s in exp.systems if s.name == system_name)
    ways: dict[str, dict] = {"step": {"fast_forward": False}, "fast": {"fast_forward": True}}
    if exp.replicas > 1 and exp.router.kind == "round_robin":
        ways["jobs2"] = {"jobs": 2}
    lines = []
    for way, kwargs in ways.items():
        rng = np.random.default_rng(0)
        trace = trace_for(exp, rate, 0, rng)
        records, _ = simulate_trace(exp, system, trace, make_cost_model(exp, system), rng, **kwargs)
        columns = tuple(bytes(column) for column in records.iteration_columns)
        digest = hashlib.sha256(pickle.dumps((columns, records.request_values))).hexdigest()[:16]
        lines.append((way, records.num_iterations, len(records.request_values), digest))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--scale", type=float, default=1.0, help="each scenario's duration times this (the "
                        "records then differ from the default's; tests/sim/core/test_compiled_differential.py)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # the checkout this script is in, whichever servesim is installed
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}: choose from {', '.join(SCENARIOS)}")
    for name in args.scenarios or SCENARIOS:
        for way, iterations, requests, digest in digests(name, args.scale):
            print(f"{name:9s} {way:5s} {iterations:8d} {requests:6d} {digest}", flush=True)


if __name__ == "__main__":
    main()
