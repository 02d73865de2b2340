"""Numbers read off simulated curves the way a reader reads the paper's figures.

A reading is an Interval: exact where the curve shows it, a bound where it does not (a curve that
never crosses the latency threshold within its rates sustains at least the highest one). Ratios of
bounds are bounds, and a bound decides a claim only when it is tight enough: `lands` says yes or no
where the whole interval is inside or outside the paper's range, n/a otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from sim.experiment.metrics import KNEE_S_PER_TOKEN

# The rate a system sustains: the highest rate whose normalized latency stays under KNEE_S_PER_TOKEN (why 0.5:
# sim/experiment/metrics.py), read where its curve first crosses it (linear between the two rates around it)
THRESHOLD_S_PER_TOKEN = KNEE_S_PER_TOKEN
POINT_TOLERANCE = 0.05  # a single printed value (2.2x, 7.00) lands within +-5% of it
NEAR_BEST = 0.10  # Fig. 18b: block sizes within 10% of the best latency count as "best"
COMPARABLE = 0.10  # Fig. 19b: recompute and swap within 10% of each other are "comparable"


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    @classmethod
    def exact(cls, value: float) -> Interval:
        return cls(value, value)

    @property
    def is_exact(self) -> bool:
        return self.low == self.high

    def __truediv__(self, other: Interval) -> Interval:
        return Interval(_div(self.low, other.high), _div(self.high, other.low))

    def text(self, fmt: str = "{:.2f}", unit: str = "") -> str:
        if self.is_exact or fmt.format(self.low) == fmt.format(self.high):
            return fmt.format(self.low) + unit
        if self.low <= 0 and math.isinf(self.high):
            return "unknown"
        if math.isinf(self.high):
            return ">= " + fmt.format(self.low) + unit
        if self.low <= 0:
            return "<= " + fmt.format(self.high) + unit
        return fmt.format(self.low) + "-" + fmt.format(self.high) + unit


def _div(a: float, b: float) -> float:
    if b == 0:
        return math.inf if a > 0 else 0.0
    return a / b


@dataclass(frozen=True)
class Reading:
    """A claim read off the reproduced figures: the simulated value, whether it lands in the paper's range
    (yes | no | n/a), how it was read, and a note."""
    simulated: str
    lands: str
    how: str
    note: str = ""


def point_range(value: float) -> tuple[float, float]:
    """The range a single printed value stands for here."""
    return value * (1 - POINT_TOLERANCE), value * (1 + POINT_TOLERANCE)


def paper_range(within: list[float] | None = None, around: float | None = None) -> tuple[float, float]:
    """A claim's range as claims.yaml gives it: `within` a printed range, or `around` a single printed value."""
    return (within[0], within[1]) if within is not None else point_range(around)


def lands(reading: Interval, low: float, high: float) -> str:
    if low <= reading.low and reading.high <= high:
        return "yes"
    if reading.high < low or reading.low > high:
        return "no"
    return "n/a"


def max_over_min(readings: list[Interval]) -> Interval:
    """The highest reading over the lowest, as far as bounds tell: at least 1 and the highest low over the
    lowest high, at most the highest high over the lowest low."""
    lowest_low = min(r.low for r in readings)
    return Interval(max(1.0, max(r.low for r in readings) / min(r.high for r in readings)),
                    _div(max(r.high for r in readings), lowest_low))


def all_land(verdicts: list[str]) -> str:
    """Several readings of one claim (one per panel): it lands if every one does."""
    if "no" in verdicts:
        return "no"
    return "yes" if verdicts and all(v == "yes" for v in verdicts) else "n/a"


def sustainable_rate(curve: pd.DataFrame, threshold: float = THRESHOLD_S_PER_TOKEN) -> Interval:
    """From a curve's `rate` and `normalized_latency` columns: where it first reaches `threshold`.

    A rate with nothing measured (NaN) is skipped. Under the threshold at every rate: at least the
    highest; at or over it already at the lowest: at most the lowest.
    """
    points = curve.dropna(subset=["normalized_latency"]).sort_values("rate")
    rates, latency = points["rate"].to_list(), points["normalized_latency"].to_list()
    if not rates:
        return Interval(0.0, math.inf)
    if latency[0] >= threshold:
        return Interval(0.0, rates[0])
    for i in range(1, len(rates)):
        if latency[i] >= threshold:
            share = (threshold - latency[i - 1]) / (latency[i] - latency[i - 1])
            return Interval.exact(rates[i - 1] + share * (rates[i] - rates[i - 1]))
    return Interval(rates[-1], math.inf)


def near_best(latency_by_size: dict[int, float], within: float = NEAR_BEST) -> list[int]:
    """Block sizes whose latency is within `within` of the lowest."""
    best = min(latency_by_size.values())
    return sorted(size for size, value in latency_by_size.items() if value <= best * (1 + within))


def sizes_text(sizes: list[int]) -> str:
    return ", ".join(str(size) for size in sizes) or "none"
