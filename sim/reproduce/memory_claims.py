"""The claim readers over KV memory and batching (Figs. 2, 13 and 15): each kind of claims.yaml's `read:`
that reads how the KV pool is used, how many requests run at once, or what sharing saves. A reader returns a
Reading or raises NotRun."""
from __future__ import annotations

from sim.reproduce.figures import FIG2_RATE, FIG13_RATES
from sim.reproduce.panels import kv_points, saving_points
from sim.reproduce.readings import Interval, Reading, all_land, lands, paper_range
from sim.reproduce.results import NotRun, Results


def _kv(results: Results):
    return kv_points(results.rows("fig2")).set_index("system")


def kv_token_share(results: Results, systems: list[str], within: list[float]) -> Reading:
    """Each system's share of the KV pool holding token states lands in the paper's range."""
    kv = _kv(results)
    values = {s: float(kv.loc[s, "token_states"]) for s in systems}
    return Reading("; ".join(f"{s} {v:.1f}%" for s, v in values.items()),
                   all_land([lands(Interval.exact(v), *within) for v in values.values()]),
                   f"time-weighted token-state share of the KV pool after the warm-up, each Orca at "
                   f"{FIG2_RATE:g} req/s (fig2/summary.csv kv_token_share); lands if each is in the range")


def kv_waste(results: Results, system: str, within: list[float]) -> Reading:
    """The system's reserved and fragmented share of the KV pool; idle space is not waste."""
    kv = _kv(results)
    waste = float(kv.loc[system, ["reservation", "internal_frag", "external_frag"]].sum())
    idle = float(kv.loc[system, "idle"])
    return Reading(f"{waste:.1f}% (and {idle:.1f}% idle)", lands(Interval.exact(waste), *within),
                   f"{system} at {FIG2_RATE:g} req/s: reservation + internal + external fragmentation, as shares of "
                   "the pool; free space while no request waits (idle) is not waste")


def kv_external(results: Results, system: str, around: float) -> Reading:
    """The system's external fragmentation and idle share, as the paper lumps them."""
    value = float(_kv(results).loc[system, "external_frag_and_others"])
    return Reading(f"{value:.1f}%", lands(Interval.exact(value), *paper_range(around=around)),
                   f"{system} at {FIG2_RATE:g} req/s: external fragmentation + idle share of the pool")


def _batched(results: Results, panel: str) -> dict[str, float]:
    rows = results.rows("fig13", panel)
    return rows.groupby("system")["mean_batched_requests"].mean().to_dict()


def batched_ratio(results: Results, over: str, around: float) -> Reading:
    """vLLM's mean batched requests over `over`'s, ShareGPT (panel a)."""
    batched = _batched(results, "a")
    ratio = batched["vLLM"] / batched[over]
    return Reading(f"{ratio:.2f}x ({batched['vLLM']:.2f} / {batched[over]:.2f})",
                   lands(Interval.exact(ratio), *paper_range(around=around)),
                   f"mean batched requests per iteration after the warm-up (summary.csv mean_batched_requests), "
                   f"vLLM / {over}, ShareGPT at {FIG13_RATES['sharegpt']:g} req/s")


def batched_on_both(results: Results, system: str, around: float) -> Reading:
    """The system's mean batched requests on both traces (panels a and b) land around one printed value."""
    values = {p: _batched(results, p)[system] for p in "ab"}
    return Reading(f"ShareGPT {values['a']:.2f}, Alpaca {values['b']:.2f}",
                   all_land([lands(Interval.exact(v), *paper_range(around=around)) for v in values.values()]),
                   f"{system}'s mean batched requests, ShareGPT at {FIG13_RATES['sharegpt']:g} and Alpaca at "
                   f"{FIG13_RATES['alpaca']:g} req/s")


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


def saving(results: Results, panel: str, series: str, within: list[float]) -> Reading:
    """vLLM's memory saving from sharing, at each parallel size or beam width, lands in the paper's range."""
    savings = _savings(results, panel, series)
    return Reading(", ".join(f"{w}: {v:.1f}%" for w, v in savings.items()),
                   all_land([lands(Interval.exact(v), *within) for v in savings.values()]),
                   _saving_how(results, panel, series) + "; lands if each is in the range")


def largest_saving(results: Results, panel: str, series: str, around: float) -> Reading:
    """"Up to": the largest memory saving over the beam widths (or parallel sizes)."""
    savings = _savings(results, panel, series)
    width = max(savings, key=savings.get)
    return Reading(f"{savings[width]:.1f}% (beam width {width})",
                   lands(Interval.exact(savings[width]), *paper_range(around=around)),
                   "the largest over beam widths of " + _saving_how(results, panel, series))


def prompt_share(saving: float, n: int) -> float:
    """The prompt's share of the blocks n samples hold with sharing, from their memory saving s: with p
    prompt blocks and o output blocks in all, s = (n - 1) p / (n p + o) and the share p / (p + o) is
    s / ((n - 1) (1 - s)). Exact when the shared blocks are the prompt's, held by all n samples."""
    return saving / ((n - 1) * (1 - saving))


def prompt_share_between(results: Results, panel: str, series: str, paper: float) -> Reading:
    """The paper's prompt share (%) lies between those derived from each parallel size's memory saving."""
    shares = {n: 100 * prompt_share(v / 100, n) for n, v in _savings(results, panel, series).items()}
    span = Interval(min(shares.values()), max(shares.values()))
    return Reading(", ".join(f"n = {n}: {v:.1f}%" for n, v in shares.items()),
                   lands(Interval.exact(paper), span.low, span.high),
                   "the prompt's share of the KV blocks held, derived from each parallel size's memory saving s "
                   "as s / ((n - 1)(1 - s)) (" + _saving_how(results, panel, series) + "); the paper names no n: "
                   f"lands if its {paper:g}% lies between the parallel sizes' shares")


READERS = {reader.__name__: reader for reader in (
    kv_token_share, kv_waste, kv_external, batched_ratio, batched_on_both, saving, largest_saving,
    prompt_share_between)}
