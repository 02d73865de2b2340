"""Which carry prices each regime on a GPU nobody measured, from every measured GPU held out in turn.

A carry is a linear part fitted on some GPUs' measurements and carried to another GPU's spec sheet at the same
shares and latencies (calibrate/parts/transfer.py). The rule, per regime:

- a carry is eligible only where, on every GPU held out from it that measured the regime (every measured GPU it
  was not fitted on; at least MIN_HELD_OUT of them), its mean |error| is below the spec-sheet roofline's and its
  worst is no higher, on the same rows;
- of the eligible carries, the one with the lowest mean error over those GPUs (each GPU alike, however many rows
  it measured) prices the regime; with none eligible, the roofline does.

Why per GPU and not pooled: a carry that wins on average can still price one GPU worse than its spec sheet, and a
GPU nobody measured may be that one. Requiring the carry to win on each GPU that could check it, mean and worst, is
what lets a GPU nobody measured be priced no worse than its spec sheet in any regime, on the evidence. Why at least
two: one pair of GPUs agreeing both ways round did not carry to a third.
"""
from __future__ import annotations

from dataclasses import dataclass

from calibrate.parts.transfer import FINE_REGIMES

ROOFLINE = "roofline"  # the spec-sheet roofline's defaults (RooflineParams()), what prices a regime no carry won
MIN_HELD_OUT = 2
# what a judgement of one profile's fit says of the default it no longer sets
SHIPPED_NOTE = ("on a GPU no table measured, the linear part is priced by regime as every measured GPU held out in "
                "turn chose (calibrate/profiles/carry/held-out-gpus.yaml)")


@dataclass(frozen=True)
class HeldOutScore:
    """One carry's (or the roofline's) |relative error| on one held-out GPU's iterations in one regime."""
    held_out: str  # the GPU whose rows judged it
    carry: str  # the carry's name, or ROOFLINE
    regime: str
    rows: int
    mean: float
    p95: float
    worst: float


@dataclass(frozen=True)
class RegimeVerdict:
    """What prices a regime on a GPU nobody measured (a carry's name, or ROOFLINE), and why, in one line."""
    regime: str
    carry: str
    reason: str


def beats(carry: HeldOutScore, roofline: HeldOutScore) -> bool:
    return carry.mean < roofline.mean and carry.worst <= roofline.worst


def _eligible(scores: list[HeldOutScore], roofline: dict[str, HeldOutScore]) -> bool:
    return len(scores) >= MIN_HELD_OUT and all(beats(s, roofline[s.held_out]) for s in scores)


def _mean_over_gpus(scores: list[HeldOutScore]) -> float:
    return sum(s.mean for s in scores) / len(scores)


def verdict(scores: list[HeldOutScore], regime: str) -> RegimeVerdict:
    """The rule (this module's docstring) on one regime's scores, every carry's and the roofline's."""
    here = [s for s in scores if s.regime == regime and s.rows > 0]
    roofline = {s.held_out: s for s in here if s.carry == ROOFLINE}
    by_carry: dict[str, list[HeldOutScore]] = {}
    for s in here:
        if s.carry != ROOFLINE and s.held_out in roofline:
            by_carry.setdefault(s.carry, []).append(s)
    eligible = {name: judged for name, judged in by_carry.items() if _eligible(judged, roofline)}
    if not eligible:
        return RegimeVerdict(regime, ROOFLINE, "no carry beat it, mean and worst, on every GPU held out from the "
                             f"carry, at least {MIN_HELD_OUT}")
    name = min(eligible, key=lambda n: (_mean_over_gpus(eligible[n]), max(s.worst for s in eligible[n]), n))
    judged = sorted(eligible[name], key=lambda s: s.held_out)
    roof = _mean_over_gpus([roofline[s.held_out] for s in judged])
    return RegimeVerdict(regime, name, f"beat the roofline, mean and worst, on each GPU held out from it: "
                         f"{', '.join(s.held_out for s in judged)}; mean {_mean_over_gpus(judged):.1%} against "
                         f"{roof:.1%}")


def choose(scores: list[HeldOutScore], regimes: tuple[str, ...] = FINE_REGIMES) -> dict[str, RegimeVerdict]:
    return {regime: verdict(scores, regime) for regime in regimes}
