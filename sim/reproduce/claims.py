"""Every quantitative claim the paper makes about Figs. 2 and 12-19, and how each is read off the
reproduced figures. A reader returns a Reading or raises NotRun when its figure has no results.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sim.reproduce.figures import FIG2_RATE, FIG12, FIG13_RATES, FIG14, FIG16, FIG17
from sim.reproduce.panels import kv_points, saving_points
from sim.reproduce.readings import (
    COMPARABLE,
    NEAR_BEST,
    POINT_TOLERANCE,
    THRESHOLD_S_PER_TOKEN,
    Interval,
    all_land,
    lands,
    max_over_min,
    near_best,
    point_range,
    sizes_text,
)
from sim.reproduce.results import NotRun, Results

SUSTAINABLE = (f"sustainable rate = the rate where the mean normalized latency first reaches "
               f"{THRESHOLD_S_PER_TOKEN:g} s/token, linear between the simulated rates around it "
               "(>= the highest rate if it never does)")

ORCAS = ("Orca (Max)", "Orca (Pow2)", "Orca (Oracle)")
# the paper timed Figs. 18a and 19a on an A100; here a paper config's cost model predicts them
PREDICTION = "the paper measured it on an A100; this is the cost model's prediction, not a measurement"


@dataclass(frozen=True)
class Reading:
    simulated: str
    lands: str  # yes | no | n/a
    how: str
    note: str = ""


@dataclass(frozen=True)
class Claim:
    id: str
    figure: str  # the paper's figure (and panel), e.g. "12a-c"
    statement: str  # the paper's words, or the arithmetic on them
    paper: str  # the value as the paper prints it
    basis: str  # text | figure axes | arithmetic
    read: Callable[[Results], Reading]

    @property
    def data(self) -> str:
        """The reproduced figure it reads."""
        return re.match(r"fig\d+", self.id).group()

    @property
    def predicted(self) -> bool:
        """Whether it reads a cost model's prediction (Figs. 18a and 19a) rather than simulated runs."""
        return self.id.startswith(("fig18a.", "fig19a."))


# --- Fig. 2 -------------------------------------------------------------------------------------------
def _kv(results: Results):
    return kv_points(results.rows("fig2")).set_index("system")


def read_token_share(results: Results) -> Reading:
    kv = _kv(results)
    orcas = ["Orca (Max)", "Orca (Pow2)", "Orca (Oracle)"]
    values = {s: float(kv.loc[s, "token_states"]) for s in orcas}
    return Reading("; ".join(f"{s} {v:.1f}%" for s, v in values.items()),
                   all_land([lands(Interval.exact(v), 20.4, 38.2) for v in values.values()]),
                   f"time-weighted token-state share of the KV pool after the warm-up, each Orca at "
                   f"{FIG2_RATE:g} req/s (fig2/summary.csv kv_token_share); lands if each is in the range")


def read_vllm_waste(results: Results) -> Reading:
    kv = _kv(results)
    waste = float(kv.loc["vLLM", ["reservation", "internal_frag", "external_frag"]].sum())
    idle = float(kv.loc["vLLM", "idle"])
    return Reading(f"{waste:.1f}% (and {idle:.1f}% idle)", lands(Interval.exact(waste), 0, 4),
                   f"vLLM at {FIG2_RATE:g} req/s: reservation + internal + external fragmentation, as shares of the "
                   "pool; free space while no request waits (idle) is not waste")


def read_orca_max_external(results: Results) -> Reading:
    value = float(_kv(results).loc["Orca (Max)", "external_frag_and_others"])
    return Reading(f"{value:.1f}%", lands(Interval.exact(value), *point_range(8.9)),
                   f"Orca (Max) at {FIG2_RATE:g} req/s: external fragmentation + idle share of the pool")


# --- Figs. 12 and 14: sustainable rates -----------------------------------------------------------
def _ratios(results: Results, figure: str, panels: str, num: str, den: str) -> tuple[list[Interval], str]:
    """num's sustainable rate over den's in each panel, and 'a 1.76x (4 / 2.27 req/s), b ...'."""
    ratios, texts = [], []
    for panel in panels:
        rates = results.sustainable(figure, panel)
        ratios.append(rates[num] / rates[den])
        texts.append(f"{panel} {ratios[-1].text(unit='x')} ({rates[num].text('{:.3g}')} / "
                     f"{rates[den].text('{:.3g}')} req/s)")
    return ratios, ", ".join(texts)


def ratio_in_range(figure: str, panels: str, den: str, low: float, high: float, num: str = "vLLM"):
    def read(results: Results) -> Reading:
        ratios, text = _ratios(results, figure, panels, num, den)
        return Reading(text, all_land([lands(r, low, high) for r in ratios]),
                       f"{num} / {den} sustainable rate, per panel ({panels}); {SUSTAINABLE}; "
                       f"lands if each panel's ratio is in the range")
    return read


def read_vs_ft_max(results: Results) -> Reading:
    ratios, per_panel = _ratios(results, "fig12", "abc", "vLLM", "FasterTransformer")
    most = Interval(max(r.low for r in ratios), max(r.high for r in ratios))
    return Reading(f"largest {most.text(unit='x')} ({per_panel})",
                   lands(most, *point_range(22)),
                   f"the largest vLLM / FasterTransformer sustainable-rate ratio over panels a-c; {SUSTAINABLE}")


def read_alpaca_trend(results: Results) -> Reading:
    verdicts, texts = [], []
    for p in "def":
        others = results.sustainable("fig12", p)
        vllm = others.pop("vLLM")
        best, rate = max(others.items(), key=lambda item: item[1].low)
        above_all = vllm.low > max(r.high for r in others.values())
        verdicts.append("yes" if above_all else "no" if vllm.high < rate.low else "n/a")
        texts.append(f"{p} vLLM {vllm.text()}, next {best} {rate.text()}")
    return Reading("; ".join(texts) + " req/s", all_land(verdicts),
                   f"as on ShareGPT, vLLM sustains the highest rate of the five in each of panels d-f; {SUSTAINABLE}")


def read_175b_less_pronounced(results: Results) -> Reading:
    verdicts, texts = [], []
    for den in ("Orca (Oracle)", "Orca (Pow2)"):
        (d, e, f), text = _ratios(results, "fig12", "def", "vLLM", den)
        verdicts.append("yes" if f.high < min(d.low, e.low) else "no" if f.low >= max(d.high, e.high) else "n/a")
        texts.append(f"vs {den}: {text}")
    return Reading("; ".join(texts), all_land(verdicts),
                   f"vLLM's sustainable-rate ratio over Orca (Oracle) and over Orca (Pow2) is lower in f than in "
                   f"d and e; {SUSTAINABLE}")


def vllm_within_axes(figure: str, panels) -> Callable[[Results], Reading]:
    def read(results: Results) -> Reading:
        rates = {p.id: results.sustainable(figure, p.id)["vLLM"] for p in panels}
        return Reading(", ".join(_labelled(p.id, rates[p.id].text(unit=" req/s")) for p in panels),
                       all_land([lands(rates[p.id], 0, p.xlim[1]) for p in panels]),
                       f"vLLM's sustainable rate per panel against the paper's x axis "
                       f"({', '.join(_labelled(p.id, f'0-{p.xlim[1]:g}') for p in panels)}): where its curve "
                       f"explodes; {SUSTAINABLE}; simulated rates: "
                       + "; ".join(_labelled(p.id, results.rates(figure, p.id)) for p in panels))
    return read


def _labelled(panel: str, text: str) -> str:
    """'a 0-15', or the text alone for a one-panel figure."""
    return f"{panel} {text}" if panel else text


def gain_rises(panels: str, what: str):
    """vLLM's sustainable-rate ratio over each Orca rises from panel to panel (n or width 2, 4, 6)."""
    def read(results: Results) -> Reading:
        verdicts, texts = [], []
        for den in ORCAS:
            ratios, text = _ratios(results, "fig14", panels, "vLLM", den)
            for a, b in zip(ratios, ratios[1:]):
                verdicts.append(_above(b, a))
            texts.append(f"vs {den}: {text}")
        return Reading("; ".join(texts), all_land(verdicts),
                       f"vLLM's sustainable-rate ratio over each Orca rises from {what} = 2 to 4 to 6 (panels "
                       f"{panels[0]}-{panels[-1]}); {SUSTAINABLE}")
    return read


def read_beam_more_than_parallel(results: Results) -> Reading:
    verdicts, texts = [], []
    for den in ORCAS:
        parallel, _ = _ratios(results, "fig14", "abc", "vLLM", den)
        beam, _ = _ratios(results, "fig14", "def", "vLLM", den)
        verdicts += [_above(b, a) for a, b in zip(parallel, beam)]
        texts.append(f"vs {den}: " + ", ".join(f"{w}: {a.text(unit='x')} -> {b.text(unit='x')}"
                                               for w, a, b in zip((2, 4, 6), parallel, beam)))
    return Reading("; ".join(texts), all_land(verdicts),
                   "vLLM's sustainable-rate ratio over each Orca, parallel sampling -> beam search at the same "
                   f"number of sequences (panels a-c against d-f); lands if beam search's is higher at each; "
                   f"{SUSTAINABLE}")


def _above(higher: Interval, lower: Interval) -> str:
    """yes where `higher` is above `lower` whatever the bounds hide, no where it is not, else n/a."""
    return "yes" if lower.high < higher.low else "no" if higher.high <= lower.low else "n/a"


# --- Fig. 15: memory saving ------------------------------------------------------------------------
def _savings(results: Results, panel: str, series: str) -> dict[int, float]:
    """vLLM's memory saving (%) per parallel size or beam width, the mean over the simulated rates."""
    rows = results.rows("fig15", panel)
    rows = rows[rows["series"] == series]
    if rows.empty:
        raise NotRun("fig15")
    points = saving_points(rows)
    return {int(w): float(v) for w, v in zip(points["sequences"], points["memory_saving_pct"])}


def _saving_how(results: Results, panel: str, series: str) -> str:
    rows = results.rows("fig15", panel)
    rates = ", ".join(f"{r:g}" for r in sorted(set(rows.loc[rows["series"] == series, "rate"])))
    return (f"vLLM's memory_saving (blocks saved by sharing / blocks without sharing, time-weighted after the "
            f"warm-up; fig15/summary.csv), {series}, the mean over {rates} req/s per "
            f"{'parallel size' if panel == 'a' else 'beam width'}")


def saving_in_range(panel: str, series: str, low: float, high: float):
    def read(results: Results) -> Reading:
        savings = _savings(results, panel, series)
        return Reading(", ".join(f"{w}: {v:.1f}%" for w, v in savings.items()),
                       all_land([lands(Interval.exact(v), low, high) for v in savings.values()]),
                       _saving_how(results, panel, series) + "; lands if each is in the range")
    return read


def prompt_share(saving: float, n: int) -> float:
    """The prompt's share of the blocks n samples hold with sharing, from their memory saving s: with p
    prompt blocks and o output blocks in all, s = (n - 1) p / (n p + o) and the share p / (p + o) is
    s / ((n - 1) (1 - s)). Exact when the shared blocks are the prompt's, held by all n samples."""
    return saving / ((n - 1) * (1 - saving))


def read_prompt_share(results: Results) -> Reading:
    shares = {n: 100 * prompt_share(v / 100, n) for n, v in _savings(results, "a", "Alpaca").items()}
    span = Interval(min(shares.values()), max(shares.values()))
    return Reading(", ".join(f"n = {n}: {v:.1f}%" for n, v in shares.items()),
                   lands(Interval.exact(12), span.low, span.high),
                   "the prompt's share of the KV blocks held, derived from each parallel size's memory saving s "
                   "as s / ((n - 1)(1 - s)) (" + _saving_how(results, "a", "Alpaca") + "); the paper names no n: "
                   "lands if its 12% lies between the parallel sizes' shares")


def read_beam_up_to(results: Results) -> Reading:
    savings = _savings(results, "b", "Alpaca")
    width = max(savings, key=savings.get)
    return Reading(f"{savings[width]:.1f}% (beam width {width})",
                   lands(Interval.exact(savings[width]), *point_range(55)),
                   "the largest over beam widths of " + _saving_how(results, "b", "Alpaca"))


# --- Fig. 17: chatbot -----------------------------------------------------------------------------------
def read_chatbot_vs_orcas(results: Results) -> Reading:
    rates = results.sustainable("fig17", "")
    ratios = {den: rates["vLLM"] / rates[den] for den in ORCAS}
    return Reading(", ".join(f"vs {den} {r.text(unit='x')} ({rates['vLLM'].text('{:.3g}')} / "
                             f"{rates[den].text('{:.3g}')} req/s)" for den, r in ratios.items()),
                   all_land([lands(r, *point_range(2)) for r in ratios.values()]),
                   f"vLLM's sustainable rate over each Orca's, at {results.rates('fig17', '')} req/s; {SUSTAINABLE}; "
                   "lands if each ratio is within +-5% of 2")


def read_orcas_alike(results: Results) -> Reading:
    rates = results.sustainable("fig17", "")
    spread = max_over_min([rates[den] for den in ORCAS])
    return Reading(", ".join(f"{den} {rates[den].text('{:.3g}', ' req/s')}" for den in ORCAS)
                   + f" (highest / lowest {spread.text(unit='x')})", lands(spread, 1, 1 + COMPARABLE),
                   f"the three Orcas' sustainable rates; {SUSTAINABLE}; alike = the highest within "
                   f"{COMPARABLE:.0%} of the lowest")


# --- Fig. 13 --------------------------------------------------------------------------------------------
def _batched(results: Results, panel: str) -> dict[str, float]:
    rows = results.rows("fig13", panel)
    return rows.groupby("system")["mean_batched_requests"].mean().to_dict()


def batched_ratio(den: str, paper: float):
    def read(results: Results) -> Reading:
        batched = _batched(results, "a")
        ratio = batched["vLLM"] / batched[den]
        return Reading(f"{ratio:.2f}x ({batched['vLLM']:.2f} / {batched[den]:.2f})",
                       lands(Interval.exact(ratio), *point_range(paper)),
                       f"mean batched requests per iteration after the warm-up (summary.csv mean_batched_requests), "
                       f"vLLM / {den}, ShareGPT at {FIG13_RATES['sharegpt']:g} req/s")
    return read


def read_orca_max_seven(results: Results) -> Reading:
    values = {p: _batched(results, p)["Orca (Max)"] for p in "ab"}
    return Reading(f"ShareGPT {values['a']:.2f}, Alpaca {values['b']:.2f}",
                   all_land([lands(Interval.exact(v), *point_range(7.0)) for v in values.values()]),
                   f"Orca (Max)'s mean batched requests, ShareGPT at {FIG13_RATES['sharegpt']:g} and Alpaca at "
                   f"{FIG13_RATES['alpaca']:g} req/s")


# --- Figs. 18 and 19 ----------------------------------------------------------------------------------
def read_kernel_overhead(results: Results) -> Reading:
    kernel = results.rows("fig18", "a")
    overheads = {(int(r.batch), int(r.context)): 100 * r.overhead for r in kernel.itertuples()}
    span = Interval(min(overheads.values()), max(overheads.values()))
    per_batch = "; ".join(f"batch {b}: " + ", ".join(f"{v:.1f}" for (bb, _), v in overheads.items() if bb == b) + "%"
                          for b in sorted({b for b, _ in overheads}))
    return Reading(f"{span.text('{:.1f}', '%')} (cost-model prediction; {per_batch})",
                   all_land([lands(Interval.exact(v), 20, 26) for v in overheads.values()]),
                   "one layer of OPT-13B decode attention at batch 8 and 32, context 64, 128, 256 (fig18/plotted.csv "
                   "panel a): the cost model's attention time through 16-token blocks over FasterTransformer's "
                   f"dense one, from {kernel['cost_model'].iloc[0]}; lands if every shape's is in the range",
                   "needs a GPU to measure (benchmarks/gpu/fig18a_kernel.py); " + PREDICTION)


def block_size_best(label: str, paper_sizes: list[int]):
    def read(results: Results) -> Reading:
        rows = results.rows("fig18", "b")
        rows = rows[rows["series"] == label]
        if rows.empty:
            raise NotRun("fig18")
        by_size = rows.groupby("block_size")["normalized_latency"].mean().to_dict()
        best = near_best(by_size)
        rates = ", ".join(f"{r:g}" for r in sorted(set(rows["rate"])))
        return Reading(f"near-best {sizes_text(best)} (lowest at {min(by_size, key=by_size.get)})",
                       "yes" if best == paper_sizes else "no",
                       f"vLLM's normalized latency by block size, {label} at {rates} req/s; "
                       f"near-best = within {NEAR_BEST:.0%} of the lowest; lands if that set is the paper's")
    return read


def read_comparable(results: Results) -> Reading:
    rows = results.rows("fig19", "b")
    latency = rows.groupby(["preemption", "block_size"])["normalized_latency"].mean()
    verdicts, texts = [], []
    for size in (16, 32, 64):
        if ("recompute", size) not in latency or ("swap", size) not in latency:
            continue
        recompute, swap = latency["recompute", size], latency["swap", size]
        gap = abs(recompute - swap) / min(recompute, swap)
        verdicts.append("yes" if gap <= COMPARABLE else "no")
        texts.append(f"bs {size}: recompute {recompute:.3f}, swap {swap:.3f} s/token ({gap:.0%} apart)")
    return Reading("; ".join(texts) or "no block size in 16-64 simulated", all_land(verdicts),
                   f"normalized latency, ShareGPT at {results.rates('fig19', 'b')} req/s, preemption by recompute or "
                   f"by swap, each block size of 16-64 simulated; comparable = within {COMPARABLE:.0%}")


def _preemption_cost(results: Results):
    rows = results.rows("fig19", "a").sort_values("block_size")
    return rows.set_index(rows["block_size"].astype(int)), int(rows["tokens"].iloc[0]), rows["cost_model"].iloc[0]


def _fig19a_how(tokens: int, source: str) -> str:
    return (f"bringing back a preempted {tokens}-token OPT-13B sequence, by block size (fig19/plotted.csv panel a), "
            f"from {source}")


def read_swap_small_blocks(results: Results) -> Reading:
    cost, tokens, source = _preemption_cost(results)
    small, default = cost.index[0], 16
    swap, recompute = cost.loc[small, "swap_in_out_ms"], cost.loc[small, "recompute_ms"]
    verdict = "yes" if swap > recompute and swap > cost.loc[default, "swap_in_out_ms"] else "no"
    return Reading(f"block size {small}: swap in+out {swap:.0f} ms, {swap / recompute:.1f}x recompute's "
                   f"{recompute:.0f} ms and {swap / cost.loc[default, 'swap_in_out_ms']:.1f}x its own at block size "
                   f"{default}", verdict,
                   _fig19a_how(tokens, source) + f"; lands if at the smallest block size swapping out and in costs "
                   f"more than recomputing and more than at block size {default}", PREDICTION)


def read_recompute_flat(results: Results) -> Reading:
    cost, tokens, source = _preemption_cost(results)
    recompute = cost["recompute_ms"]
    spread = recompute.max() / recompute.min() - 1
    return Reading(f"{Interval(recompute.min(), recompute.max()).text('{:.1f}', ' ms')} ({spread:.1%} apart)",
                   "yes" if spread <= POINT_TOLERANCE else "no",
                   _fig19a_how(tokens, source) + f"; flat = within {POINT_TOLERANCE:.0%} at every block size",
                   PREDICTION)


def read_crossover(results: Results) -> Reading:
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


def read_recompute_20pct(results: Results) -> Reading:
    cost, tokens, source = _preemption_cost(results)
    over = cost["recompute_ms"] / cost["swap_in_out_ms"]
    worst = int(over.idxmax())
    return Reading(f"at most {over.max():.2f}x swap in+out's latency (block size {worst})",
                   "yes" if over.max() <= 1.2 else "no",
                   _fig19a_how(tokens, source) + "; read, as a third party found the paper's figure allows, as "
                   "recompute at most 20% slower than swap in+out at every block size (literally, at most 20% of "
                   "it, would be stricter)", PREDICTION)


CLAIMS = (
    Claim("fig2.orca_token_share", "2", "only 20.4%-38.2% of the KV cache memory is used to store the actual "
          "token states in the existing systems", "20.4-38.2%", "text", read_token_share),
    Claim("fig2.vllm_waste", "2", "vLLM's memory waste is under 4%", "< 4%", "text", read_vllm_waste),
    Claim("fig2.orca_max_external", "2", "Orca (Max): external fragmentation & others (983 blocks hold 7 "
          "128-block reservations; 87 blocks unusable)", "8.9%", "arithmetic", read_orca_max_external),
    Claim("fig12.sharegpt_vs_oracle", "12a-c", "On ShareGPT, vLLM sustains 1.7x-2.7x higher request rates than "
          "Orca (Oracle)", "1.7-2.7x", "text", ratio_in_range("fig12", "abc", "Orca (Oracle)", 1.7, 2.7)),
    Claim("fig12.sharegpt_vs_max", "12a-c", "On ShareGPT, vLLM sustains 2.7x-8x higher request rates than "
          "Orca (Max)", "2.7-8x", "text", ratio_in_range("fig12", "abc", "Orca (Max)", 2.7, 8.0)),
    Claim("fig12.vs_fastertransformer", "12a-c", "vLLM sustains up to 22x higher request rates than "
          "FasterTransformer", "22x", "text", read_vs_ft_max),
    Claim("fig12.alpaca_trend", "12d-f", "Alpaca follows a similar trend", "vLLM highest", "text", read_alpaca_trend),
    Claim("fig12.175b_less_pronounced", "12f", "On OPT-175B / Alpaca the advantage over Orca (Oracle) and (Pow2) "
          "is less pronounced", "f below d, e", "text", read_175b_less_pronounced),
    Claim("fig12.opt13b_alpaca_vs_oracle", "12d, 14", "basic sampling on OPT-13B / Alpaca: vLLM 1.3x over Orca "
          "(Oracle)", "1.3x", "text", ratio_in_range("fig12", "d", "Orca (Oracle)", *point_range(1.3))),
    Claim("fig12.capacity_in_axes", "12a-f", "vLLM's curve explodes within the panel's x axis",
          "0-2, 0-1, 0-2.5, 0-30, 0-20, 0-20 req/s", "figure axes", vllm_within_axes("fig12", FIG12.panels)),
    Claim("fig13.vs_oracle", "13a", "vLLM processes 2.2x more requests at the same time than Orca (Oracle) "
          "(ShareGPT)", "2.2x", "text", batched_ratio("Orca (Oracle)", 2.2)),
    Claim("fig13.vs_max", "13a", "vLLM processes 4.3x more requests at the same time than Orca (Max) (ShareGPT)",
          "4.3x", "text", batched_ratio("Orca (Max)", 4.3)),
    Claim("fig13.orca_max_seven", "13a-b", "Orca (Max) batches 7 requests on both traces (983 blocks / "
          "128-block reservations)", "7.00", "arithmetic", read_orca_max_seven),
    Claim("fig14.more_samples_more_gain", "14a-c", "with a larger number of sequences to sample, vLLM brings more "
          "improvement over the Orca baselines", "rises with n", "text", gain_rises("abc", "n")),
    Claim("fig14.beam6_vs_oracle", "14f", "vLLM over Orca (Oracle): 2.3x in beam search with a width of 6",
          "2.3x", "text", ratio_in_range("fig14", "f", "Orca (Oracle)", *point_range(2.3))),
    Claim("fig14.wider_beams_more_gain", "14d-f", "similarly for beam search: a wider beam brings more improvement "
          "over the Orca baselines", "rises with width", "text", gain_rises("def", "beam width")),
    Claim("fig14.beam_more_than_parallel", "14", "since beam search allows for more sharing, vLLM demonstrates even "
          "greater performance benefits (than in parallel sampling)", "beam > parallel", "text",
          read_beam_more_than_parallel),
    Claim("fig14.capacity_in_axes", "14a-f", "vLLM's curve explodes within the panel's x axis",
          "0-15, 0-10, 0-6 req/s (both rows)", "figure axes", vllm_within_axes("fig14", FIG14.panels)),
    Claim("fig15.parallel_alpaca", "15a", "memory saving from sharing, parallel sampling, Alpaca", "6.1-9.8%",
          "text", saving_in_range("a", "Alpaca", 6.1, 9.8)),
    Claim("fig15.beam_alpaca", "15b", "memory saving from sharing, beam search, Alpaca", "37.6-55.2%", "text",
          saving_in_range("b", "Alpaca", 37.6, 55.2)),
    Claim("fig15.parallel_sharegpt", "15 (text)", "memory saving from sharing, parallel sampling, ShareGPT",
          "16.2-30.5%", "text", saving_in_range("a", "ShareGPT", 16.2, 30.5)),
    Claim("fig15.beam_sharegpt", "15 (text)", "memory saving from sharing, beam search, ShareGPT", "44.3-66.3%",
          "text", saving_in_range("b", "ShareGPT", 44.3, 66.3)),
    Claim("fig15.prompt_share", "15 (sec. 3)", "the prompt's KV is 12% of the total KV cache memory in the "
          "parallel-sampling experiment", "12%", "text", read_prompt_share),
    Claim("fig15.beam_up_to_55", "15 (sec. 3)", "beam search saves up to 55% of memory", "55%", "text",
          read_beam_up_to),
    Claim("fig16.one_shot", "16a", "shared prefix, one-shot (80 tokens): vLLM 1.67x the throughput of Orca (Oracle)",
          "1.67x", "text", ratio_in_range("fig16", "a", "Orca (Oracle)", *point_range(1.67))),
    Claim("fig16.five_shot", "16b", "shared prefix, 5-shot (341 tokens): vLLM 3.58x the throughput of Orca (Oracle)",
          "3.58x", "text", ratio_in_range("fig16", "b", "Orca (Oracle)", *point_range(3.58))),
    Claim("fig16.capacity_in_axes", "16a-b", "vLLM's curve explodes within the panel's x axis", "0-40 req/s",
          "figure axes", vllm_within_axes("fig16", FIG16.panels)),
    Claim("fig17.vs_orca", "17", "chatbot: vLLM sustains 2x higher request rates than the three Orca variants",
          "2x", "text", read_chatbot_vs_orcas),
    Claim("fig17.orca_alike", "17", "chatbot: the three Orca variants behave alike (buddy rounding to 1024 output "
          "slots)", "alike", "text", read_orcas_alike),
    Claim("fig17.capacity_in_axes", "17", "vLLM's curve explodes within the panel's x axis", "0-0.8 req/s",
          "figure axes", vllm_within_axes("fig17", FIG17.panels)),
    Claim("fig18a.kernel_overhead", "18a", "PagedAttention's attention kernel latency is 20-26% higher than "
          "FasterTransformer's", "20-26%", "text", read_kernel_overhead),
    Claim("fig18b.sharegpt_best", "18b", "ShareGPT is best with block sizes 16-128", "16, 32, 64, 128", "text",
          block_size_best("ShareGPT", [16, 32, 64, 128])),
    Claim("fig18b.alpaca_best", "18b", "Alpaca is best with block sizes 16 and 32; larger blocks significantly "
          "degrade the performance", "16, 32", "text", block_size_best("Alpaca", [16, 32])),
    Claim("fig19a.swap_small_blocks", "19a", "swapping incurs excessive overhead with small block sizes",
          "swap slow at small blocks", "text", read_swap_small_blocks),
    Claim("fig19a.recompute_flat", "19a", "recomputation overhead stays constant across block sizes", "flat",
          "text", read_recompute_flat),
    Claim("fig19a.crossover", "19a", "recomputation wins at small blocks, swapping at large ones", "crossover",
          "text", read_crossover),
    Claim("fig19a.recompute_20pct", "19a", "recomputation overhead is never higher than 20% of swapping's latency",
          "<= 20%", "text", read_recompute_20pct),
    Claim("fig19b.comparable_16_64", "19b", "for block sizes 16-64 recomputation and swapping give comparable "
          "end-to-end performance", "comparable", "text", read_comparable),
)
