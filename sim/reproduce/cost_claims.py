"""The claim readers over block sizes and preemption (Figs. 18 and 19): each kind of claims.yaml's `read:`
that reads the kernel's overhead, latency by block size, or what bringing back a preempted sequence costs.
Figs. 18a and 19a are a cost model's prediction, not a measurement. A reader returns a Reading or raises
NotRun."""
from __future__ import annotations

from sim.reproduce.readings import (
    COMPARABLE,
    NEAR_BEST,
    POINT_TOLERANCE,
    Interval,
    Reading,
    all_land,
    lands,
    near_best,
    sizes_text,
)
from sim.reproduce.results import NotRun, Results

# the paper timed Figs. 18a and 19a on an A100; here a paper config's cost model predicts them
PREDICTION = "the paper measured it on an A100; this is the cost model's prediction, not a measurement"


def kernel_overhead(results: Results, within: list[float]) -> Reading:
    """The paged attention kernel's time over the dense one, at every shape of Fig. 18a."""
    kernel = results.rows("fig18", "a")
    overheads = {(int(r.batch), int(r.context)): 100 * r.overhead for r in kernel.itertuples()}
    span = Interval(min(overheads.values()), max(overheads.values()))
    per_batch = "; ".join(f"batch {b}: " + ", ".join(f"{v:.1f}" for (bb, _), v in overheads.items() if bb == b) + "%"
                          for b in sorted({b for b, _ in overheads}))
    return Reading(f"{span.text('{:.1f}', '%')} (cost-model prediction; {per_batch})",
                   all_land([lands(Interval.exact(v), *within) for v in overheads.values()]),
                   "one layer of OPT-13B decode attention at batch 8 and 32, context 64, 128, 256 (fig18/plotted.csv "
                   "panel a): the cost model's attention time through 16-token blocks over FasterTransformer's "
                   f"dense one, from {kernel['cost_model'].iloc[0]}; lands if every shape's is in the range",
                   "needs a GPU to measure (benchmarks/gpu/fig18a_kernel.py); " + PREDICTION)


def best_block_sizes(results: Results, series: str, sizes: list[int]) -> Reading:
    """The block sizes within NEAR_BEST of the lowest latency are the paper's."""
    rows = results.rows("fig18", "b")
    rows = rows[rows["series"] == series]
    if rows.empty:
        raise NotRun("fig18")
    by_size = rows.groupby("block_size")["normalized_latency"].mean().to_dict()
    best = near_best(by_size)
    rates = ", ".join(f"{r:g}" for r in sorted(set(rows["rate"])))
    return Reading(f"near-best {sizes_text(best)} (lowest at {min(by_size, key=by_size.get)})",
                   "yes" if best == sizes else "no",
                   f"vLLM's normalized latency by block size, {series} at {rates} req/s; "
                   f"near-best = within {NEAR_BEST:.0%} of the lowest; lands if that set is the paper's")


def comparable(results: Results, block_sizes: list[int]) -> Reading:
    """Preemption by recompute and by swap give latencies within COMPARABLE at each of the block sizes."""
    rows = results.rows("fig19", "b")
    latency = rows.groupby(["preemption", "block_size"])["normalized_latency"].mean()
    verdicts, texts = [], []
    for size in block_sizes:
        if ("recompute", size) not in latency or ("swap", size) not in latency:
            continue
        recompute, swap = latency["recompute", size], latency["swap", size]
        gap = abs(recompute - swap) / min(recompute, swap)
        verdicts.append("yes" if gap <= COMPARABLE else "no")
        texts.append(f"bs {size}: recompute {recompute:.3f}, swap {swap:.3f} s/token ({gap:.0%} apart)")
    span = f"{block_sizes[0]}-{block_sizes[-1]}"
    return Reading("; ".join(texts) or f"no block size in {span} simulated", all_land(verdicts),
                   f"normalized latency, ShareGPT at {results.rates('fig19', 'b')} req/s, preemption by recompute or "
                   f"by swap, each block size of {span} simulated; comparable = within {COMPARABLE:.0%}")


def _preemption_cost(results: Results):
    rows = results.rows("fig19", "a").sort_values("block_size")
    return rows.set_index(rows["block_size"].astype(int)), int(rows["tokens"].iloc[0]), rows["cost_model"].iloc[0]


def _fig19a_how(tokens: int, source: str) -> str:
    return (f"bringing back a preempted {tokens}-token OPT-13B sequence, by block size (fig19/plotted.csv panel a), "
            f"from {source}")


def swap_small_blocks(results: Results, default: int) -> Reading:
    """At the smallest block size swapping out and in costs more than recomputing and more than at `default`."""
    cost, tokens, source = _preemption_cost(results)
    small = cost.index[0]
    swap, recompute = cost.loc[small, "swap_in_out_ms"], cost.loc[small, "recompute_ms"]
    verdict = "yes" if swap > recompute and swap > cost.loc[default, "swap_in_out_ms"] else "no"
    return Reading(f"block size {small}: swap in+out {swap:.0f} ms, {swap / recompute:.1f}x recompute's "
                   f"{recompute:.0f} ms and {swap / cost.loc[default, 'swap_in_out_ms']:.1f}x its own at block size "
                   f"{default}", verdict,
                   _fig19a_how(tokens, source) + f"; lands if at the smallest block size swapping out and in costs "
                   f"more than recomputing and more than at block size {default}", PREDICTION)


def recompute_flat(results: Results) -> Reading:
    """Recomputing costs the same, within POINT_TOLERANCE, at every block size."""
    cost, tokens, source = _preemption_cost(results)
    recompute = cost["recompute_ms"]
    spread = recompute.max() / recompute.min() - 1
    return Reading(f"{Interval(recompute.min(), recompute.max()).text('{:.1f}', ' ms')} ({spread:.1%} apart)",
                   "yes" if spread <= POINT_TOLERANCE else "no",
                   _fig19a_how(tokens, source) + f"; flat = within {POINT_TOLERANCE:.0%} at every block size",
                   PREDICTION)


def crossover(results: Results) -> Reading:
    """Recomputing is cheaper at the smallest block size, swapping out and in at the largest."""
    cost, tokens, source = _preemption_cost(results)
    cheaper = cost["swap_in_out_ms"] < cost["recompute_ms"]
    first = next((size for size, swap_wins in cheaper.items() if swap_wins), None)
    text = (f"swap in+out cheaper than recompute from block size {first}" if first is not None else
            "swap in+out never cheaper than recompute")
    verdict = "yes" if not cheaper.iloc[0] and cheaper.iloc[-1] else "no"
    return Reading(f"{text} ({', '.join(f'{s}: {v:.0f}' for s, v in cost['swap_in_out_ms'].items())} ms against "
                   f"{cost['recompute_ms'].iloc[0]:.0f} ms)", verdict,
                   _fig19a_how(tokens, source) + "; lands if recomputing is cheaper at the smallest block size and "
                   "swapping out and in at the largest", PREDICTION)


def recompute_at_most(results: Results, times: float) -> Reading:
    """Recomputing takes at most `times` swap in+out's latency at every block size."""
    cost, tokens, source = _preemption_cost(results)
    over = cost["recompute_ms"] / cost["swap_in_out_ms"]
    worst = int(over.idxmax())
    return Reading(f"at most {over.max():.2f}x swap in+out's latency (block size {worst})",
                   "yes" if over.max() <= times else "no",
                   _fig19a_how(tokens, source) + f"; read, as a third party found the paper's figure allows, as "
                   f"recompute at most {times - 1:.0%} slower than swap in+out at every block size (literally, at "
                   f"most {times - 1:.0%} of it, would be stricter)", PREDICTION)


READERS = {reader.__name__: reader for reader in (
    kernel_overhead, best_block_sizes, comparable, swap_small_blocks, recompute_flat, crossover, recompute_at_most)}
