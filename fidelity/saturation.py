"""Which points are past saturation, read from the real engine's own replays, and how they are judged.

Past saturation the engine completes fewer requests per second than arrive, its waiting line grows
through the trace, and a trace's normalized latency grows with the trace's length: a 1% error in the
service rate then becomes a latency error many times larger (on the project's 2-core VM,
FasterTransformer at 2 req/s missed the 10% target by itself in two of three repeats). Such a point is
still reported by its latency error, and is additionally judged on the time the engine took to serve the
whole trace (the makespan), which past saturation is the sum of the work and stays proportional to the
service rate's error.

The rule reads only the real replays' records, never the simulator's, so the simulator cannot move a
point into the rule by being wrong about it. A request's time to first token (TTFT) is how long it waited
to be served. In a line that the engine keeps up with it does not trend with the request's arrival
time; in a line that grows, a request arriving at t waits for the work that piled up before it, and
for first-come-first-served service its wait grows like (arrival rate / completion rate - 1) * t. So:

- each replay's **queue growth** is the least-squares slope of its measured requests' TTFT against their
  arrival time (seconds of waiting gained per second of the trace), with its standard error;
- a replay's line **grows** when that slope is at least MIN_GROWTH (0.1: the engine completes at least
  about 9% fewer requests per second than arrive) and more than SIGNIFICANCE standard errors above zero;
- a point is **past saturation** only when its line grew in *every* real replay.

A point whose line does not grow (in any replay) stays judged by its latency error alone: the rule can
add a criterion only where the engine itself was measurably overloaded. An engine that admits every
request at once (vLLM with a pool large enough) queues inside its batch rather than in its waiting line,
so its TTFT does not grow and the rule leaves it to the latency criterion: conservative, never hiding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_GROWTH = 0.1     # s of waiting per s of trace: completion rate >= ~9% below the arrival rate
SIGNIFICANCE = 2.0   # standard errors above zero
MIN_REQUESTS = 3     # a slope and its standard error need at least three points
TARGET = 0.10        # the per-point target: within 10% (or inside the real engine's own spread)

SATURATION_WHY = (
    f"past saturation: in every real replay the measured requests' time to first token grew with their "
    f"arrival time by at least {MIN_GROWTH:g} s per s (the engine completed at least ~9% fewer requests per "
    f"second than arrived; slope > {SIGNIFICANCE:g} standard errors), read from the real replays' records only; "
    f"there latency grows with the trace's length, so such a point is judged by its makespan error "
    f"(the time to serve the whole trace), its latency error still reported")


@dataclass(frozen=True)
class QueueGrowth:
    """One real replay's waiting line: the slope of TTFT against arrival time, and its standard error."""
    slope: float
    stderr: float
    requests: int

    @property
    def grows(self) -> bool:
        if not (math.isfinite(self.slope) and math.isfinite(self.stderr)):
            return False
        return self.slope >= MIN_GROWTH and self.slope > SIGNIFICANCE * self.stderr


def queue_growth(requests: pd.DataFrame, warmup_s: float = 0.0) -> QueueGrowth:
    """The slope of time-to-first-token against arrival time over one replay's measured requests (arrival
    at or after warmup_s, first token served). requests: the engine's records (arrival_s, first_token_s)."""
    measured = requests[(requests["arrival_s"] >= warmup_s) & requests["first_token_s"].notna()]
    arrival = measured["arrival_s"].to_numpy(float)
    wait = measured["first_token_s"].to_numpy(float) - arrival
    n = len(arrival)
    centred = arrival - arrival.mean() if n else arrival
    spread = float(np.sum(centred ** 2))
    if n < MIN_REQUESTS or spread <= 0.0:
        return QueueGrowth(math.nan, math.nan, n)
    slope = float(np.sum(centred * (wait - wait.mean())) / spread)
    residual = wait - wait.mean() - slope * centred
    stderr = float(math.sqrt(np.sum(residual ** 2) / (n - 2) / spread))
    return QueueGrowth(slope, stderr, n)


def past_saturation(growths: list[QueueGrowth]) -> bool:
    """Past saturation only when the waiting line grew in every real replay."""
    return bool(growths) and all(g.grows for g in growths)


def within_target(error, low, high) -> np.ndarray:
    """Within the per-point target: |error| <= 10%, or inside the real replays' own range."""
    error, low, high = (np.asarray(v, dtype=float) for v in (error, low, high))
    with np.errstate(invalid="ignore"):
        return (np.abs(error) <= TARGET) | ((error >= low - 1e-12) & (error <= high + 1e-12))


def judged(summary: pd.DataFrame, latency: str, makespan: str | None) -> pd.DataFrame:
    """Per point: which criterion judges it ('latency', or 'makespan' past saturation where the figure has a
    makespan error), that error, and whether it is within the target. Every point keeps its latency error."""
    past = summary["past_saturation"].astype(bool).to_numpy() if "past_saturation" in summary else \
        np.zeros(len(summary), dtype=bool)
    lat = summary[latency].to_numpy(float)
    lat_ok = within_target(lat, summary["real_low_error"], summary["real_high_error"])
    if makespan is None or makespan not in summary:
        by_makespan = np.zeros(len(summary), dtype=bool)
        span = span_ok = np.full(len(summary), math.nan)
    else:
        span = summary[makespan].to_numpy(float)
        span_ok = within_target(span, summary["real_makespan_low_error"], summary["real_makespan_high_error"])
        by_makespan = past & np.isfinite(span)
    return pd.DataFrame({
        "system": summary["system"].to_numpy() if "system" in summary else np.full(len(summary), ""),
        "rate": summary["rate"].to_numpy(float) if "rate" in summary else np.full(len(summary), math.nan),
        "past_saturation": past, "latency_error": lat, "latency_within_target": lat_ok,
        "judged_by": np.where(by_makespan, "makespan", "latency"),
        "judged_error": np.where(by_makespan, span, lat),
        "judged_within_target": np.where(by_makespan, span_ok, lat_ok).astype(bool),
    })
