"""A replica's arrivals known ahead, handed over by its own loop in the order the router's process would hand them.

Where the router's choice is known ahead (one replica, or a round-robin fleet without beam searches, served
apart), a replica alone on its clock needs no router process: its requests and the times the router would hand
them over (sim.core.router_wakes.arrival_event_times, to the bit) are arrays, and Replica.serve_known takes them
from there between its iterations, with no SimPy event per iteration or per arrival.

One order needs care: a request handed over at the very instant an iteration ends. SimPy runs two events of one
time in the order they were scheduled, so the router's wake comes first when its timeout was scheduled before
the iteration's, which it is when the router last woke before the iteration started, or at the same instant but
before it: the router wakes at every request's arrival, the fleet's too, so the fleet's wakes decide it. Where the
router is still to wake at the instant an iteration starts (it comes second then: `behind`), it schedules its next
timeout after that iteration's, and wakes after its end. tests/sim/core/test_known_arrivals.py holds this loop to
the router's process on traces full of such ties.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

from mypy_extensions import mypyc_attr

from engine.core.serving import Request, ServingCore
from sim.core.router_wakes import RouterWakes


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it stays a base (tests watch the ties it orders)
class KnownArrivals:
    """One replica's requests, in order, with when the router hands each over (`wakes`, ascending), and where
    its loop stands with the router: what it has handed over, and whether it is still to wake at `now`."""

    def __init__(self, requests: Iterator[Request], wakes: list[float], router: RouterWakes):
        self.requests = requests
        self.wakes = wakes
        self.router = router
        self.handed = 0  # requests handed over
        self.next_wake = wakes[0] if wakes else math.inf  # the next request's handover time
        # the router wakes at the replica's clock's time, but after the replica's event of that instant (the ties
        # in the module's doc); at first it starts after the replica's process, at 0
        self.behind = 0.0 in router.distinct

    def hand_over_next(self, core: ServingCore) -> None:
        """The next request reaches the replica."""
        core.admit(next(self.requests))
        self.handed += 1
        self.next_wake = self.wakes[self.handed] if self.handed < len(self.wakes) else math.inf

    def iteration_ends(self, core: ServingCore, start_s: float, end_s: float) -> None:
        """An iteration ran from start_s to end_s: the requests the router hands over before its end reach the
        replica, those of its very instant too where the router wakes first then."""
        self.behind = end_s in self.router.distinct and end_s != start_s and (
            self.behind or self.router.first_after(start_s) != end_s)
        while self.next_wake < end_s or (self.next_wake == end_s and not self.behind):
            self.hand_over_next(core)

    def stretch_ended(self) -> None:
        """A stretch ended: never when the router wakes (FastForward.plan), so it woke before."""
        self.behind = False

    def idle(self, core: ServingCore, now_s: float) -> float:
        """The replica has nothing to run at now_s: it sleeps until the router hands it a request, which then
        reaches it, with any other handed over at that instant. When it wakes; inf once none is left."""
        self.behind = False
        wake = self.next_wake
        while self.next_wake == wake < math.inf:
            self.hand_over_next(core)
        return wake

    def hand_over_rest(self, core: ServingCore) -> None:
        """The replica's loop stopped at the horizon: the router still hands it the rest, unserved."""
        while self.handed < len(self.wakes):
            self.hand_over_next(core)
