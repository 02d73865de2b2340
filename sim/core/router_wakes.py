"""When the router's process wakes to hand each request over, and the one rule that orders simultaneous events.

The rule. Events of one instant run in the order they were scheduled (SimPy's: time, then priority, then
scheduling order; a client's gate makes its calls after all of them, sim.core.alarm.LateCalls). The replica's
loop (Replica.serve) meets one tie that changes what it does: a request handed over at the very instant one of
its iterations ends. The router's wake comes first when its timeout was scheduled before the iteration's, which
it is when the router last woke before the iteration started, or at that instant but before it: the router wakes
at every request's arrival, the fleet's too, so the fleet's wakes decide it. Where the router is still to wake at
the instant an iteration starts (it comes second then: `behind`), it schedules its next timeout after that
iteration's, and wakes after its end (RouterWakes.after_iteration). Behind the router's process SimPy keeps the
rule itself; a replica alone on its clock applies it to its arrays (sim/core/known_arrivals.py); a decode stretch
never ends at a wake (sim/core/fast_forward.py), so that no tie falls inside one.
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

    def after_iteration(self, start_s: float, end_s: float, behind: bool) -> bool:
        """Whether the router, waking at end_s, wakes after the iteration that ran from start_s to end_s ends (the
        module's rule), given whether it woke after that iteration started (behind: it was still to wake at
        start_s, after the replica's event of that instant). An iteration that took no time ends after the router's
        wake of its instant, whose timeout was scheduled before the iteration's."""
        return end_s in self.distinct and end_s != start_s and (behind or self.first_after(start_s) != end_s)

    def first_after(self, now_s: float) -> float:
        """The router's first wake after now_s (inf: none)."""
        at = bisect.bisect_right(self.times, now_s)
        return self.times[at] if at < len(self.times) else math.inf
