"""Probing past a figure's rates until every curve crosses the sustainable-rate threshold.

A sustainable rate is read where a curve first reaches THRESHOLD_S_PER_TOKEN (readings.py). A curve
that stays under it at every configured rate gives only a lower bound, one over it already at the
lowest rate only an upper bound, and a ratio of bounds decides nothing. So, as `servesim capacity`
does, `reproduce` probes further rates for such a curve, one system at a time: each probe a step of
CROSSING_STEP past the highest rate probed (or below the lowest), until the crossing lies between two
probes. Then the reading interpolates between those two, as for any curve. A curve that has not crossed
after MAX_EXTRA_PROBES probes keeps its bound, and the figure's footer says so.

The paper's axes stay as they are; a curve whose crossing lies past them is named in the footer.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from sim.reproduce.readings import THRESHOLD_S_PER_TOKEN, sustainable_rate

CROSSING_STEP = 1.25  # each probe 25% past the last: the crossing is then read between rates 25% apart
MAX_EXTRA_PROBES = 8  # 1.25 ** 8 = 6x past the grid's ends; past that the bound is reported as one


@dataclass(frozen=True)
class Probe:
    system: str
    rate: float


def next_rate(points: Mapping[float, float], configured: Sequence[float], threshold: float = THRESHOLD_S_PER_TOKEN,
              step: float = CROSSING_STEP, max_extra: int = MAX_EXTRA_PROBES) -> float | None:
    """The rate one curve should be probed at next, or None: crossed, out of probes, or nothing measured.

    `points` maps every rate run so far (configured and extra) to its normalized latency (NaN: a run
    with no measured request, which tells nothing either way)."""
    extra = [rate for rate in points if rate not in set(configured)]
    measured = sorted((rate, latency) for rate, latency in points.items() if not math.isnan(latency))
    if len(extra) >= max_extra or not measured:
        return None
    if measured[0][1] >= threshold:  # over already at its lowest rate: the crossing lies below
        return _nice(min(points) / step)
    if all(latency < threshold for _, latency in measured):
        return _nice(max(points) * step)
    return None


def _nice(rate: float) -> float:
    """Three significant digits, as run folders and tables show it (a 0.05% change; a step is 25%)."""
    return float(f"{rate:.3g}")


def probes_for(curves: Mapping[str, Mapping[float, float]], configured: Sequence[float],
               max_extra: int = MAX_EXTRA_PROBES) -> list[Probe]:
    """One probe for each system whose curve has not crossed yet (and may still be probed)."""
    probes = []
    for system, points in curves.items():
        rate = next_rate(points, configured, max_extra=max_extra)
        if rate is not None:
            probes.append(Probe(system, rate))
    return probes


def crossing_notes(curves: Mapping[str, Mapping[float, float]], configured: Sequence[float],
                   xlim: tuple[float, float] | None, threshold: float = THRESHOLD_S_PER_TOKEN) -> list[str]:
    """What a reader of the figure must know: curves read past the paper's axis, and bounds left as bounds."""
    notes = []
    for system, points in curves.items():
        frame = pd.DataFrame({"rate": list(points), "normalized_latency": list(points.values())})
        reading = sustainable_rate(frame, threshold)
        extra = sorted(rate for rate in points if rate not in set(configured))
        if not extra:
            continue
        probed = ", ".join(f"{rate:g}" for rate in extra)
        if not reading.is_exact:
            notes.append(f"{system}: no crossing of {threshold:g} s/token after {len(extra)} extra rates "
                         f"({probed} req/s): its sustainable rate is a bound, {reading.text('{:.3g}', ' req/s')}")
        elif xlim is not None and not xlim[0] <= reading.low <= xlim[1]:
            notes.append(f"{system}: crosses {threshold:g} s/token at {reading.low:.3g} req/s, past the paper's axis "
                         f"(probed {probed} req/s)")
    return notes
