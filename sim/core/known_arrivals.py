"""A replica's arrivals known ahead, handed over by its own loop in the order the router's process would hand them.

Where the router's choice is known ahead (one replica, or a round-robin fleet without beam searches, served
apart), a replica alone on its clock needs no router process: its requests and the times the router would hand
them over (sim.core.router_wakes.arrival_event_times, to the bit) are arrays, and the replica's loop
(Replica.serve) takes them from there between its iterations, with no SimPy event per iteration or per arrival:
every wait it asks (sim.core.handover.Handover) has passed when it returns. A request handed over at the very
instant an iteration ends comes before or after that end by sim/core/router_wakes.py's rule.
tests/sim/core/test_known_arrivals.py holds this to the router's process on traces full of such ties.
"""
from __future__ import annotations

import math
from collections.abc import Generator, Iterator
from typing import Any

from mypy_extensions import mypyc_attr
from simpy.events import Event

from engine.core.serving import Request, ServingCore
from sim.core.handover import Handover, StretchRunner
from sim.core.router_wakes import RouterWakes


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it stays a base (tests watch the ties it orders)
class KnownArrivals(Handover):
    """One replica's requests, in order, with when the router hands each over (`wakes`, ascending), and where
    its loop stands with the router: what it has handed over, and whether it is still to wake at `now`."""

    def __init__(self, requests: Iterator[Request], wakes: list[float], router: RouterWakes):
        self.requests = requests
        self.wakes = wakes
        self.router = router
        self.router_wakes_at = router.distinct  # the instants a tie may fall on
        self.handed = 0  # requests handed over
        self.next_wake = wakes[0] if wakes else math.inf  # the next request's handover time
        self.woke_s = 0.0  # when the replica last woke from idling
        # the router wakes at the replica's clock's time, but after the replica's event of that instant (the ties
        # of router_wakes.py's rule); at first it starts after the replica's process, at 0
        self.behind = 0.0 in router.distinct

    def hand_over_next(self, core: ServingCore) -> None:
        """The next request reaches the replica."""
        core.admit(next(self.requests))
        self.handed += 1
        self.next_wake = self.wakes[self.handed] if self.handed < len(self.wakes) else math.inf

    def exhausted(self) -> bool:
        return self.next_wake == math.inf

    def iteration(self, core: ServingCore, start_s: float, seconds: float) -> Event | None:
        """An iteration ran from start_s for `seconds`: the requests the router hands over before its end reach the
        replica, those of its very instant too where the router wakes first then."""
        end_s = start_s + seconds
        # most iterations end when the router does not wake: nothing to order then
        self.behind = end_s in self.router_wakes_at and self.router.after_iteration(start_s, end_s, self.behind)
        while self.next_wake < end_s or (self.next_wake == end_s and not self.behind):
            self.hand_over_next(core)
        return None

    def stretch(self, fast_forward: StretchRunner, core: ServingCore,
                stretch: Any) -> Generator[Event, None, list[float]]:
        """The stretch ended at once (FastForward.run_alone): never when the router wakes (FastForward.plan), so
        the router woke before its end."""
        ends = fast_forward.run_alone(core, stretch, self)
        self.behind = False
        yield from ()  # waits on nothing
        return ends

    def idle(self, core: ServingCore, now_s: float) -> Event | None:
        """The replica has nothing to run at now_s: it sleeps until the router hands it a request, which then
        reaches it, with any other handed over at that instant."""
        self.behind = False
        wake = self.woke_s = self.next_wake
        while self.next_wake == wake < math.inf:
            self.hand_over_next(core)
        return None

    def woke_at(self) -> float:
        return self.woke_s

    def stopped(self, core: ServingCore) -> None:
        """The replica's loop stopped at the horizon: the router still hands it the rest, unserved."""
        while self.handed < len(self.wakes):
            self.hand_over_next(core)
