"""What research/paper/paper_ablation.py prints: each variant's readings beside the paper's, and how far each moves
them.

Readings are reproduce's (sim/reproduce/readings.py): a sustainable rate is where a curve first reaches 0.5
s/token, linear between the rates around it, or a bound where the grid does not show it; a ratio of bounds is a
bound. Fig. 13's reading is the mean number of batched requests at the paper's rate (sim/reproduce/memory_claims.py).
The paper's values are those of /work/shared/reference/paper-facts.md, by its section letter.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from research.paper.ablation_sweep import Ladder
from research.paper.ablation_variants import Variant
from sim.reproduce.figures import SYSTEM_ORDER
from sim.reproduce.readings import THRESHOLD_S_PER_TOKEN, Interval, lands, point_range, sustainable_rate

FT, MAX, ORACLE, VLLM = "FasterTransformer", "Orca (Max)", "Orca (Oracle)", "vLLM"
RATIO_DENS = (ORACLE, MAX, FT)  # vLLM's sustainable rate over each (the paper's Fig. 12 ratios)
BATCHED = (VLLM, ORACLE, MAX)  # Fig. 13's bars read here
BATCHED_DENS = (ORACLE, MAX)


@dataclass(frozen=True)
class Target:
    """A paper value: its words, and the range a reading lands in (None: nothing to land in)."""
    text: str
    range: tuple[float, float] | None = None

    def mark(self, reading: Interval) -> str:
        if self.range is None:
            return ""
        verdict = lands(reading, *self.range)
        return {"yes": " (in)", "no": " (out)"}.get(verdict, " (undecided)")


NOT_PRINTED = Target("not printed")


@dataclass(frozen=True)
class PaperFigure:
    """The paper's values for one figure (paper-facts.md §B-C)."""
    knee: Target  # vLLM's sustainable rate
    ratios: dict[str, Target]  # vLLM's sustainable rate over each of RATIO_DENS
    batched: dict[str, Target]  # mean batched requests at Fig. 13's rate, each of BATCHED
    batched_ratios: dict[str, Target]  # vLLM's over each of BATCHED_DENS


@dataclass(frozen=True)
class VariantReading:
    variant: Variant
    rates: dict[str, Interval]  # system -> sustainable rate
    batched: dict[str, float | None]  # system -> mean batched requests at Fig. 13's rate (None: not run)

    @property
    def ran(self) -> bool:
        return not self.variant.skip

    def ratio(self, den: str) -> Interval:
        return self.rates[VLLM] / self.rates[den]

    def batched_ratio(self, den: str) -> float | None:
        num, value = self.batched.get(VLLM), self.batched.get(den)
        return None if num is None or not value else num / value


def read_variant(variant: Variant, ladders: list[Ladder], fig13_rate: float) -> VariantReading:
    rates, batched = {}, {}
    for ladder in ladders:
        system = ladder.system.name
        rates[system] = sustainable_rate(curve_frame(ladder))
        point = ladder.points.get(fig13_rate)
        batched[system] = None if point is None else float(point["mean_batched_requests"])
    return VariantReading(variant, rates, batched)


def curve_frame(ladder: Ladder) -> pd.DataFrame:
    return pd.DataFrame({"rate": list(ladder.points), "normalized_latency": [ladder.latency(r) for r in ladder.points]})


def rate_text(reading: Interval) -> str:
    return reading.text("{:.3g}")


def ratio_text(reading: Interval) -> str:
    return reading.text(unit="x")


def _systems(readings: list[VariantReading]) -> list[str]:
    present = {s for r in readings for s in r.rates}
    return [s for s in SYSTEM_ORDER if s in present]


def readings_table(readings: list[VariantReading], paper: PaperFigure, fig13_rate: float) -> list[str]:
    """One row per variant (the paper's first): sustainable rates, vLLM's ratios, Fig. 13's batched requests."""
    systems = _systems(readings)
    head = (["variant"] + [f"{s} (req/s)" for s in systems] + [f"vLLM / {d}" for d in RATIO_DENS]
            + [f"batched at {fig13_rate:g} req/s: {s}" for s in BATCHED]
            + [f"batched vLLM / {d}" for d in BATCHED_DENS])
    rows = [["paper (Kwon et al.)"] + [paper.knee.text if s == VLLM else NOT_PRINTED.text for s in systems]
            + [paper.ratios[d].text for d in RATIO_DENS] + [paper.batched[s].text for s in BATCHED]
            + [paper.batched_ratios[d].text for d in BATCHED_DENS]]
    for r in readings:
        if not r.ran:
            rows.append([f"{r.variant.name}: not run, {r.variant.skip}"] + ["not run"] * (len(head) - 1))
            continue
        cells = [r.variant.name]
        cells += [rate_text(r.rates[s]) + (paper.knee.mark(r.rates[s]) if s == VLLM else "") for s in systems]
        cells += [ratio_text(r.ratio(d)) + paper.ratios[d].mark(r.ratio(d)) for d in RATIO_DENS]
        cells += [_batched_text(r.batched.get(s), fig13_rate, paper.batched[s]) for s in BATCHED]
        cells += [_batched_ratio_text(r, d, paper.batched_ratios[d]) for d in BATCHED_DENS]
        rows.append(cells)
    return markdown(head, rows)


def _batched_text(value: float | None, rate: float, target: Target) -> str:
    if value is None:
        return f"no run at {rate:g} req/s"
    return f"{value:.2f}" + target.mark(Interval.exact(value))


def _batched_ratio_text(r: VariantReading, den: str, target: Target) -> str:
    value = r.batched_ratio(den)
    if value is None:
        return "no runs to divide"
    return f"{value:.2f}x" + target.mark(Interval.exact(value))


def moves_table(readings: list[VariantReading]) -> list[str]:
    """How far each variant moves vLLM's knee and each ratio from the new default's."""
    base = next(r for r in readings if r.variant.name == "default")
    head = (["variant", "vLLM knee (req/s; x default)"] + [f"vLLM / {d} (change)" for d in RATIO_DENS]
            + [f"batched vLLM / {d} (change)" for d in BATCHED_DENS])
    rows = []
    for r in readings:
        if not r.ran:
            rows.append([f"{r.variant.name}: not run"] + ["not run"] * (len(head) - 1))
            continue
        cells = [r.variant.name, f"{rate_text(r.rates[VLLM])} ({_factor(r.rates[VLLM], base.rates[VLLM])})"]
        cells += [f"{ratio_text(r.ratio(d))} ({_change(r.ratio(d), base.ratio(d))})" for d in RATIO_DENS]
        cells += [_batched_change(r, base, d) for d in BATCHED_DENS]
        rows.append(cells)
    return markdown(head, rows)


def _factor(value: Interval, base: Interval) -> str:
    if not (value.is_exact and base.is_exact):
        return "a bound: no factor"
    return f"x{value.low / base.low:.2f}"


def _change(value: Interval, base: Interval) -> str:
    if not (value.is_exact and base.is_exact):
        return "a bound: no change"
    return f"{value.low - base.low:+.2f}"


def _batched_change(r: VariantReading, base: VariantReading, den: str) -> str:
    value, before = r.batched_ratio(den), base.batched_ratio(den)
    if value is None or before is None:
        return "no runs to divide"
    return f"{value:.2f}x ({value - before:+.2f})"


def crossings_table(readings: list[VariantReading], ladders: dict[tuple[str, str], Ladder]) -> list[str]:
    """Each curve's runs and the two rates around its crossing: what each reading was interpolated from."""
    head = ["variant", "system", "runs", f"last rate under {THRESHOLD_S_PER_TOKEN:g} s/token",
            "first rate over it"]
    rows = []
    for r in readings:
        if not r.ran:
            continue
        for system in _systems([r]):
            ladder = ladders[r.variant.name, system]
            under, over = _around(ladder)
            rows.append([r.variant.name, system, str(len(ladder.points)), under, over])
    return markdown(head, rows)


def _around(ladder: Ladder) -> tuple[str, str]:
    over_at = ladder.first_over
    under = [rate for rate in ladder.points if rate < over_at]
    under_text = f"{max(under):g}: {ladder.latency(max(under)):.3f}" if under else "none run"
    over_text = f"{over_at:g}: {ladder.latency(over_at):.3f}" if over_at in ladder.points else "none: a lower bound"
    return under_text, over_text


def markdown(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


# paper-facts.md: §C (Fig. 12: 1.7-2.7x vs Orca (Oracle), 2.7-8x vs Orca (Max), up to 22x vs FasterTransformer over
# the ShareGPT panels; x axes 0-2 and 0-30 req/s; §6.3's 1.3x on OPT-13B / Alpaca; Fig. 13: 2.2x and 4.3x on
# ShareGPT at 2 req/s), §B (Orca (Max) holds 7 reservations of 983 blocks: Fig. 13's 7.00 on both traces)
SEVEN = Target("7.00 (§B, §C Fig. 13)", point_range(7.0))
PAPER = {
    "12a": PaperFigure(
        Target("< 2 (x axis 0-2, §C)", (0.0, 2.0)),
        {ORACLE: Target("1.7-2.7x (§C)", (1.7, 2.7)), MAX: Target("2.7-8x (§C)", (2.7, 8.0)),
         FT: Target("up to 22x over panels a-c (§C)")},
        {VLLM: NOT_PRINTED, ORACLE: NOT_PRINTED, MAX: SEVEN},
        {ORACLE: Target("2.2x (§C Fig. 13)", point_range(2.2)), MAX: Target("4.3x (§C Fig. 13)", point_range(4.3))}),
    "12d": PaperFigure(
        Target("< 30 (x axis 0-30, §C)", (0.0, 30.0)),
        {ORACLE: Target("1.3x (§C, §6.3)", point_range(1.3)), MAX: Target("not printed ('a similar trend', §C)"),
         FT: NOT_PRINTED},
        {VLLM: NOT_PRINTED, ORACLE: NOT_PRINTED, MAX: SEVEN},
        {ORACLE: NOT_PRINTED, MAX: NOT_PRINTED}),
}
