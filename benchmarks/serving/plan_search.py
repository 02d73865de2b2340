"""How long `servesim plan` takes to find the cheapest fleet for Llama-3-70B at 50 req/s, and what it never simulated.

The search space of configs/examples/plan_llama3_70b.yaml widened to 4 GPU kinds x tensor parallelism 1-8 x 3 batch
settings x 2 precisions (192 deployments), pruned hard (keep_within 0: the cheapest fleet only), on fresh folders (no
probe kept from an earlier run). Prints the wall time beside the target (under 5 minutes on 2 cores), the CPU time of
this process and its workers, the deployments by how they were decided (the unsimulated ones and why), the probes
run, how close each answer came to its roofline bound (bound.py's SLACK is 1.5: an answer over a 1.5th of its bound
would say the margin is thin), and the cheapest fleet.

    PYTHONPATH=. python benchmarks/serving/plan_search.py            # --jobs 2 --keep-within 0
    PYTHONPATH=. python benchmarks/serving/plan_search.py --no-prune # every deployment that fits searched in full

--no-prune searches every deployment that fits, each until its fleet is decided (keep_within so large that no cost
bound prunes), as a search that prunes only what cannot run would: the time pruning saves. The 3 deployments whose
clock cannot meet the TPOT target at any rate are still not simulated.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "examples" / "plan_llama3_70b.yaml"
TARGET_S = 300.0
TOTAL_RPS = 50.0  # the example's plan.rate
SPACE = ["plan.hardware=[a100-80gb, h100-sxm, h100-pcie, l40s]", "plan.tensor_parallel=[1, 2, 3, 4, 5, 6, 7, 8]",
         "plan.batch=[{max_num_seqs: 128, max_num_batched_tokens: 2048}, {max_num_seqs: 256, max_num_batched_tokens: "
         "8192}, {max_num_seqs: 512, max_num_batched_tokens: 16384}]",
         "plan.precision=[{weights: fp16, kv_cache: fp16}, {weights: fp8, kv_cache: fp8}]"]
UNSIMULATED = ("fit", "parallelism", "batch", "clock", "config", "tpot", "bound", "replicas")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep-within", type=float, default=0.0)
    parser.add_argument("--no-prune", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more overrides")
    parser.add_argument("--out", help="keep the plan's folder here (default: a temporary one, removed); it must not "
                        "hold an earlier plan's probes, or they are read back")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import servesim

    keep = 1e9 if args.no_prune else args.keep_within
    overrides = [*SPACE, f"plan.keep_within={keep}", *args.set]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(args.out) if args.out else Path(folder) / "plan"
        started = time.perf_counter()
        result = servesim.plan(CONFIG, out, overrides=overrides, jobs=args.jobs, progress=None)
        wall = time.perf_counter() - started
        probes = sum(len(json.loads(path.read_text())["probes"]) for path in (out / "plan_probes").glob("*.json"))
    report(result, wall, probes, args)
    return 0


def report(result, wall: float, probes: int, args) -> None:
    cpu = sum(getattr(resource.getrusage(who), part) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for part in ("ru_utime", "ru_stime"))
    stages = Counter(result.rejected["stage"]) + Counter({"ranked": len(result.ranked)})
    total = sum(stages.values())
    unsimulated = sum(stages[s] for s in UNSIMULATED)
    verdict = "meets" if wall < TARGET_S else "misses"
    print(f"plan search, Llama-3-70B at 50 req/s: {total} deployments, {args.jobs} jobs"
          f"{', no pruning' if args.no_prune else f', keep_within {args.keep_within:g}'}")
    print(f"  wall {wall:.1f} s against a target of {TARGET_S:.0f} s: {verdict} it; CPU {cpu:.1f} s (this process "
          "and its workers)")
    print(f"  {unsimulated} decided without a probe, {total - unsimulated} searched, {probes} probes in all")
    for stage, count in sorted(stages.items(), key=lambda item: -item[1]):
        print(f"    {stage:<12} {count:4d}{'  (unsimulated)' if stage in UNSIMULATED else ''}")
    ranked = result.ranked
    if len(ranked):
        # a replica found to hold the whole rate ends its search there: its rate says nothing of the bound
        knees = ranked[ranked["rate_per_replica_rps"] < TOTAL_RPS]
        ratio = (knees["rate_per_replica_rps"] / knees["rate_bound_rps"]).max()
        best = ranked.iloc[0]
        print(f"  answers over their roofline bound: at most {ratio:.2f} over the {len(knees)} under {TOTAL_RPS:g} "
              f"req/s ({len(ranked) - len(knees)} held all of it); the bound's slack leaves 1 / 1.5 = 0.67")
        print(f"  cheapest: {best['replicas']} x {best['hardware']} x{best['tensor_parallel']} {best['precision']} "
              f"({best['engine']}): ${best['usd_per_hour']:,.2f}/h, {best['rate_per_replica_rps']:g} req/s a replica, "
              f"${best['usd_per_million_output_tokens']:.3f} per million output tokens")


if __name__ == "__main__":
    sys.exit(main())
