"""When the router's process wakes to hand each request over: shared by the replicas' decode stretches
(sim/core/fast_forward.py), which never end at such a wake, and by a replica alone on its clock
(sim/core/known_arrivals.py), which orders its iterations' ends against them as SimPy would.
"""
from __future__ import annotations

import bisect
import math


def arrival_event_times(arrival_s: list[float]) -> list[float]:
    """When the router's process (sim.core.router.arrivals) hands each request over, to the bit: it sleeps
    `arrival - now` and SimPy adds that back to now, which need not give the arrival time exactly; a
    request arriving at the time it woke at comes in the same wake."""
    now, times = 0.0, []
    for arrival in arrival_s:
        delay = arrival - now
        if delay > 0:
            now = now + delay
        times.append(now)
    return times


class RouterWakes:
    """When the router's process wakes: each request's handover time in the fleet, ascending (several may share
    one), and the same as a set. Shared by the replicas of one fleet."""

    def __init__(self, wakes: list[float]):
        self.times = wakes
        self.distinct = set(wakes)

    def first_after(self, now_s: float) -> float:
        """The router's first wake after now_s (inf: none)."""
        at = bisect.bisect_right(self.times, now_s)
        return self.times[at] if at < len(self.times) else math.inf
