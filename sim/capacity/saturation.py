"""Whether a run kept up with its arrivals: what a capacity answer asks of every probe, whatever its targets.

A rate is a capacity only if every request is eventually served at a steady TTFT. A server that falls a few
percent behind its arrivals keeps a low TPOT while its queue, and with it the TTFT, grows for as long as the run
lasts: a TPOT-only target alone would count it as holding. The summary's `saturated` (sim/experiment/metrics.py)
marks a run whose backlog grows by more than 5% of its arrivals, a sweep's coarse mark; over a 15-minute run a
server serving 98% of its arrivals stays under it while its median TTFT climbs from 0.15 s to 7.7 s
(docs/plan-capacity.md, how saturation is judged).

So every probe (sim/capacity/search.py's `probe`: the colocated search's, the splits' and the API's) keeps up only
if neither of these shows, each over the arrivals the backlog is fitted over (after the warm-up and after an empty
start has filled: metrics.backlog):

- the backlog grew beyond noise: its fitted line rose by more than Z standard deviations of N Poisson arrivals
  (Z sqrt(N)), more than the backlog's own wandering about its line (TREND_OVER_SPREAD spreads) and more than
  MIN_GROWTH_REQUESTS. Served throughput is the arrival rate less the backlog's slope, so this is the served
  rate short of the offered one by more than a Poisson process's noise over the run's length;
- the TTFT climbed: a line fitted to the TTFT of those arrivals against their arrival time rises over their span
  by more than TREND_OVER_SPREAD times the TTFT's spread about it (a trend, not a burst: a stable server's TTFT
  wanders by seconds for minutes on end) and by more than their median TTFT (it at least doubled). A request
  given no first token by the run's last event counts with the TTFT it had waited by then.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from sim.experiment.metrics import MIN_GROWTH_REQUESTS, TREND_OVER_SPREAD, backlog, sent_times
from sim.experiment.table import Columns

# the standard deviations of the arrivals' count a backlog's growth must pass (a normal deviate passes 3 about once
# in 740 draws)
Z = 3.0

PACE_KEYS = ("behind_by", "behind_noise", "ttft_rise_s", "ttft_spread_s", "ttft_median_s")


@dataclass(frozen=True)
class Pace:
    """How a run kept pace with its arrivals: the requests its backlog's line grew by and the most a server keeping
    up could grow it by (noise); what the TTFT's line rose by over the arrivals, the TTFT's spread about that line
    and its median (NaN: too few arrivals to fit)."""
    behind_by: float
    behind_noise: float
    ttft_rise_s: float
    ttft_spread_s: float
    ttft_median_s: float

    @property
    def falls_behind(self) -> bool:
        return self.behind_by > self.behind_noise

    @property
    def ttft_climbs(self) -> bool:
        return self.ttft_rise_s > max(TREND_OVER_SPREAD * self.ttft_spread_s, self.ttft_median_s)

    @property
    def keeps_up(self) -> bool:
        return not (self.falls_behind or self.ttft_climbs)

    def why(self) -> str:
        """What shows the run fell behind, '' if nothing does."""
        signs = []
        if self.falls_behind:
            signs.append(f"the backlog grew by {self.behind_by:.0f} requests, past the {self.behind_noise:.0f} "
                         "a server keeping up could")
        if self.ttft_climbs:
            signs.append(f"the TTFT climbed by {self.ttft_rise_s:.3g} s over the run, from a median of "
                         f"{self.ttft_median_s:.3g} s")
        return f"falls behind ({'; '.join(signs)})" if signs else ""

    def as_summary(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def of_summary(cls, summary: dict) -> Pace:
        return cls(*(float(summary[key]) for key in PACE_KEYS))


def pace(requests: Columns, warmup_s: float) -> Pace:
    """How the run whose request records these are kept pace, over its arrivals after warmup_s (and the filling)."""
    arrival = np.asarray(sent_times(requests), dtype=np.float64)
    first_token = np.asarray(requests["first_token_s"], dtype=np.float64)
    finish = np.asarray(requests["finish_s"], dtype=np.float64)
    line = backlog(arrival, finish, warmup_s, first_token)
    noise = max(Z * math.sqrt(line.arrivals), TREND_OVER_SPREAD * line.spread, float(MIN_GROWTH_REQUESTS))
    fitted = arrival >= line.start_s
    waited_until = np.where(np.isnan(first_token), _last_event(first_token, finish, arrival), first_token)
    rise, spread, median = _ttft_line(arrival[fitted], (waited_until - arrival)[fitted])
    return Pace(line.grown_by, noise, rise, spread, median)


def _last_event(*times: np.ndarray) -> float:
    known = np.concatenate(times)
    known = known[~np.isnan(known)]
    return float(known.max()) if len(known) else math.nan


def _ttft_line(arrival: np.ndarray, ttft: np.ndarray) -> tuple[float, float, float]:
    """What a line fitted to TTFT against arrival time rises by over the arrivals' span, the TTFT's spread about
    it, and its median; NaN with fewer than three arrivals, or all at one instant."""
    if len(arrival) < 3 or arrival.max() <= arrival.min():
        return math.nan, math.nan, math.nan
    centred = arrival - arrival.mean()
    deviation = ttft - ttft.mean()
    slope = float((centred * deviation).sum() / (centred * centred).sum())
    spread = float((deviation - slope * centred).std())
    return slope * float(arrival.max() - arrival.min()), spread, float(np.median(ttft))
