"""How requests reach a replica, and what its one loop (Replica.serve) waits on between its steps.

Two ways, one loop. Behind the router's SimPy process (RouterHandover) the router submits each request and the
loop waits on SimPy events: a timeout per iteration, an alarm per decode stretch, a wake when idle. A replica
alone on its clock whose requests are known ahead takes them itself (sim.core.known_arrivals.KnownArrivals): its
waits are answered at once, from arrays, and the loop runs without a SimPy event at all. Either way the loop
schedules, prices, plans a stretch, completes and records with the same code; the two differ only in how a wait
passes and which requests reach the replica meanwhile, in an order sim/core/router_wakes.py states once.
"""
from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Protocol

import simpy
from mypy_extensions import mypyc_attr
from simpy.events import Event

if TYPE_CHECKING:
    from engine.core.serving import ServingCore


class StretchRunner(Protocol):
    """What runs a replica's decode stretches (sim.core.fast_forward.FastForward, which knows the handovers: named
    here by what they call, so that no import goes round). `stretch` is its Stretch."""

    def run(self, env: simpy.Environment, core: ServingCore, stretch: Any) -> Generator[Event, None, list[float]]: ...

    def run_alone(self, core: ServingCore, stretch: Any, arrivals: Any) -> list[float]: ...


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it stays a base (tests watch what its subclasses order)
class Handover:
    """What the replica's loop asks whoever brings it its requests. Each wait returns the SimPy event to wait on,
    or None where it passed already (the requests due meanwhile have reached the replica)."""

    def exhausted(self) -> bool:
        """No request will reach the replica any more."""
        raise NotImplementedError

    def idle(self, core: ServingCore, now_s: float) -> Event | None:
        """The replica has nothing to run at now_s: wait until a request reaches it (or something else it reads
        changes); woke_at() says when."""
        raise NotImplementedError

    def woke_at(self) -> float:
        raise NotImplementedError

    def iteration(self, core: ServingCore, start_s: float, seconds: float) -> Event | None:
        """An iteration runs from start_s for `seconds` (it ends at start_s + seconds, as SimPy adds them)."""
        raise NotImplementedError

    def stretch(self, fast_forward: StretchRunner, core: ServingCore,
                stretch: Any) -> Generator[Event, None, list[float]]:
        """A decode stretch runs (a request reaching the replica may cut it); when each iteration it ran ended."""
        raise NotImplementedError

    def stopped(self, core: ServingCore) -> None:
        """The loop stopped at its horizon."""

    def notify(self) -> None:
        """Something the loop reads changed (a request came, a KV copy ended): an idle loop steps again now."""

    def close(self) -> None:
        """No more requests will be submitted."""


class RouterHandover(Handover):
    """The router's SimPy process submits the requests (Replica.submit); the loop waits on SimPy's clock."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.closed = False
        self.wake: Event = env.event()

    def exhausted(self) -> bool:
        return self.closed

    def idle(self, core: ServingCore, now_s: float) -> Event | None:
        self.wake = self.env.event()
        return self.wake

    def woke_at(self) -> float:
        return self.env.now

    def iteration(self, core: ServingCore, start_s: float, seconds: float) -> Event | None:
        return self.env.timeout(seconds)

    def stretch(self, fast_forward: StretchRunner, core: ServingCore,
                stretch: Any) -> Generator[Event, None, list[float]]:
        ends = yield from fast_forward.run(self.env, core, stretch)
        return ends

    def notify(self) -> None:
        if not self.wake.triggered:
            self.wake.succeed()

    def close(self) -> None:
        self.closed = True
        self.notify()
