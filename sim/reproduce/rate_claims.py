"""The claim readers over sustainable rates (Figs. 12, 14, 16 and 17): each kind of claims.yaml's `read:`
that compares where systems' latency curves explode. A reader returns a Reading or raises NotRun."""
from __future__ import annotations

from sim.reproduce.figures import FIGURES
from sim.reproduce.readings import (
    COMPARABLE,
    POINT_TOLERANCE,
    THRESHOLD_S_PER_TOKEN,
    Interval,
    Reading,
    all_land,
    lands,
    max_over_min,
    paper_range,
)
from sim.reproduce.results import Results

SUSTAINABLE = (f"sustainable rate = the rate where the mean normalized latency first reaches "
               f"{THRESHOLD_S_PER_TOKEN:g} s/token, linear between the simulated rates around it "
               "(>= the highest rate if it never does)")


def _ratios(results: Results, figure: str, panels: str, num: str, den: str) -> tuple[list[Interval], str]:
    """num's sustainable rate over den's in each panel, and 'a 1.76x (4 / 2.27 req/s), b ...'."""
    ratios, texts = [], []
    for panel in panels:
        rates = results.sustainable(figure, panel)
        ratios.append(rates[num] / rates[den])
        texts.append(f"{panel} {ratios[-1].text(unit='x')} ({rates[num].text('{:.3g}')} / "
                     f"{rates[den].text('{:.3g}')} req/s)")
    return ratios, ", ".join(texts)


def _above(higher: Interval, lower: Interval) -> str:
    """yes where `higher` is above `lower` whatever the bounds hide, no where it is not, else n/a."""
    return "yes" if lower.high < higher.low else "no" if higher.high <= lower.low else "n/a"


def rate_ratio(results: Results, figure: str, panels: str, over: str, within: list[float] | None = None,
               around: float | None = None, system: str = "vLLM") -> Reading:
    """system's sustainable rate over `over`'s lands in the paper's range in every panel."""
    low, high = paper_range(within, around)
    ratios, text = _ratios(results, figure, panels, system, over)
    return Reading(text, all_land([lands(r, low, high) for r in ratios]),
                   f"{system} / {over} sustainable rate, per panel ({panels}); {SUSTAINABLE}; "
                   f"lands if each panel's ratio is in the range")


def largest_rate_ratio(results: Results, figure: str, panels: str, over: str, around: float) -> Reading:
    """"Up to": the largest of vLLM's sustainable-rate ratios over `over` across the panels."""
    ratios, per_panel = _ratios(results, figure, panels, "vLLM", over)
    most = Interval(max(r.low for r in ratios), max(r.high for r in ratios))
    return Reading(f"largest {most.text(unit='x')} ({per_panel})", lands(most, *paper_range(around=around)),
                   f"the largest vLLM / {over} sustainable-rate ratio over panels {panels[0]}-{panels[-1]}; "
                   f"{SUSTAINABLE}")


def highest_rate(results: Results, figure: str, panels: str) -> Reading:
    """vLLM sustains a higher rate than every other system in each panel."""
    verdicts, texts = [], []
    for p in panels:
        others = results.sustainable(figure, p)
        vllm = others.pop("vLLM")
        best, rate = max(others.items(), key=lambda item: item[1].low)
        above_all = vllm.low > max(r.high for r in others.values())
        verdicts.append("yes" if above_all else "no" if vllm.high < rate.low else "n/a")
        texts.append(f"{p} vLLM {vllm.text()}, next {best} {rate.text()}")
    return Reading("; ".join(texts) + " req/s", all_land(verdicts),
                   f"as on ShareGPT, vLLM sustains the highest rate of the five in each of panels "
                   f"{panels[0]}-{panels[-1]}; {SUSTAINABLE}")


def last_panel_ratio_lower(results: Results, figure: str, panels: str, over: list[str]) -> Reading:
    """vLLM's sustainable-rate ratio over each of `over` is lower in the last panel than in the others."""
    verdicts, texts = [], []
    for den in over:
        ratios, text = _ratios(results, figure, panels, "vLLM", den)
        *earlier, last = ratios
        verdicts.append("yes" if last.high < min(r.low for r in earlier) else
                        "no" if last.low >= max(r.high for r in earlier) else "n/a")
        texts.append(f"vs {den}: {text}")
    return Reading("; ".join(texts), all_land(verdicts),
                   f"vLLM's sustainable-rate ratio over {' and over '.join(over)} is lower in {panels[-1]} than in "
                   f"{' and '.join(panels[:-1])}; {SUSTAINABLE}")


def capacity_in_axes(results: Results, figure: str) -> Reading:
    """vLLM's sustainable rate in each panel lies within the paper's x axis: its curve explodes there."""
    panels = FIGURES[figure].panels
    rates = {p.id: results.sustainable(figure, p.id)["vLLM"] for p in panels}
    return Reading(", ".join(_labelled(p.id, rates[p.id].text(unit=" req/s")) for p in panels),
                   all_land([lands(rates[p.id], 0, p.xlim[1]) for p in panels]),
                   f"vLLM's sustainable rate per panel against the paper's x axis "
                   f"({', '.join(_labelled(p.id, f'0-{p.xlim[1]:g}') for p in panels)}): where its curve "
                   f"explodes; {SUSTAINABLE}; simulated rates: "
                   + "; ".join(_labelled(p.id, results.rates(figure, p.id)) for p in panels))


def _labelled(panel: str, text: str) -> str:
    """'a 0-15', or the text alone for a one-panel figure."""
    return f"{panel} {text}" if panel else text


def ratio_rises(results: Results, figure: str, panels: str, over: list[str], what: str) -> Reading:
    """vLLM's sustainable-rate ratio over each of `over` rises from panel to panel (n or width 2, 4, 6)."""
    verdicts, texts = [], []
    for den in over:
        ratios, text = _ratios(results, figure, panels, "vLLM", den)
        for a, b in zip(ratios, ratios[1:]):
            verdicts.append(_above(b, a))
        texts.append(f"vs {den}: {text}")
    return Reading("; ".join(texts), all_land(verdicts),
                   f"vLLM's sustainable-rate ratio over each Orca rises from {what} = 2 to 4 to 6 (panels "
                   f"{panels[0]}-{panels[-1]}); {SUSTAINABLE}")


def beam_over_parallel(results: Results, figure: str, over: list[str]) -> Reading:
    """vLLM's sustainable-rate ratio over each of `over` is higher in beam search (panels d-f) than in
    parallel sampling at the same number of sequences (a-c)."""
    verdicts, texts = [], []
    for den in over:
        parallel, _ = _ratios(results, figure, "abc", "vLLM", den)
        beam, _ = _ratios(results, figure, "def", "vLLM", den)
        verdicts += [_above(b, a) for a, b in zip(parallel, beam)]
        texts.append(f"vs {den}: " + ", ".join(f"{w}: {a.text(unit='x')} -> {b.text(unit='x')}"
                                               for w, a, b in zip((2, 4, 6), parallel, beam)))
    return Reading("; ".join(texts), all_land(verdicts),
                   "vLLM's sustainable-rate ratio over each Orca, parallel sampling -> beam search at the same "
                   f"number of sequences (panels a-c against d-f); lands if beam search's is higher at each; "
                   f"{SUSTAINABLE}")


def ratio_over_each(results: Results, figure: str, over: list[str], around: float) -> Reading:
    """vLLM's sustainable rate over each of `over`, in a one-panel figure, lands around one printed value."""
    rates = results.sustainable(figure, "")
    ratios = {den: rates["vLLM"] / rates[den] for den in over}
    return Reading(", ".join(f"vs {den} {r.text(unit='x')} ({rates['vLLM'].text('{:.3g}')} / "
                             f"{rates[den].text('{:.3g}')} req/s)" for den, r in ratios.items()),
                   all_land([lands(r, *paper_range(around=around)) for r in ratios.values()]),
                   f"vLLM's sustainable rate over each Orca's, at {results.rates(figure, '')} req/s; {SUSTAINABLE}; "
                   f"lands if each ratio is within +-{POINT_TOLERANCE:.0%} of {around:g}")


def rates_alike(results: Results, figure: str, systems: list[str]) -> Reading:
    """The systems' sustainable rates in a one-panel figure are alike: the highest within COMPARABLE of the
    lowest."""
    rates = results.sustainable(figure, "")
    spread = max_over_min([rates[s] for s in systems])
    return Reading(", ".join(f"{s} {rates[s].text('{:.3g}', ' req/s')}" for s in systems)
                   + f" (highest / lowest {spread.text(unit='x')})", lands(spread, 1, 1 + COMPARABLE),
                   f"the three Orcas' sustainable rates; {SUSTAINABLE}; alike = the highest within "
                   f"{COMPARABLE:.0%} of the lowest")


READERS = {reader.__name__: reader for reader in (
    rate_ratio, largest_rate_ratio, highest_rate, last_panel_ratio_lower, capacity_in_axes, ratio_rises,
    beam_over_parallel, ratio_over_each, rates_alike)}
