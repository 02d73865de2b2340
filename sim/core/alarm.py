"""Events at an absolute time, and calls late in their instant, on SimPy's public API.

SimPy's timeouts take a delay from now, and now + (t - now) need not be t; a stretch's end must be exactly where
the step-by-step clock would have put it. A delay that lands on t to the bit almost always exists next to t - now
(exact_delay); where none does (now carries bits finer than t's spacing, and both neighbours round away), the
event hops through an instant just before t, from which t - instant is exact.

Kept out of the modules setup.py compiles: SimPy writes its events' attributes freely (it sets a processed
event's `callbacks` to None), which a mypyc-compiled subclass of its Event refuses, checking their types on
every write.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator

import simpy
from simpy.events import Event, Timeout

__all__ = ["Alarm", "LateCalls", "exact_delay", "sleep_until"]

NEIGHBOURS_TRIED = 4  # delays tried on each side of t - now; the first or second lands whenever any does


def exact_delay(now_s: float, at_s: float) -> float | None:
    """A delay d >= 0 with now_s + d == at_s in floats (as SimPy adds them), or None where no float does."""
    delay = at_s - now_s
    for _ in range(NEIGHBOURS_TRIED):
        if delay < 0.0:
            return None
        landed = now_s + delay
        if landed == at_s:
            return delay
        delay = math.nextafter(delay, math.inf if landed < at_s else -math.inf)
    return None


def hop_delay(now_s: float, at_s: float) -> float:
    """A delay landing strictly before at_s and past at_s / 2, from where at_s - landing is exact (Sterbenz)."""
    delay = at_s - now_s
    while now_s + delay >= at_s:
        delay = math.nextafter(delay, -math.inf)
    return delay


class Alarm(Timeout):
    """Calls `callback(alarm)` at exactly at_s, as a timeout created now would (SimPy's order among the events of
    that instant: the order they were scheduled in)."""

    def __init__(self, env: simpy.Environment, at_s: float, callback: Callable[[Event], None]):
        delay = exact_delay(env.now, at_s)
        if delay is not None:
            super().__init__(env, delay)
            self.callbacks.append(callback)
            return
        super().__init__(env, hop_delay(env.now, at_s))
        self.callbacks.append(lambda _: env.timeout(at_s - env.now).callbacks.append(lambda _: callback(self)))


def sleep_until(env: simpy.Environment, at_s: float) -> Generator[Event, None, None]:
    """A process's sleep until exactly at_s (at_s >= now), woken as by one timeout created now."""
    delay = exact_delay(env.now, at_s)
    if delay is None:
        yield env.timeout(hop_delay(env.now, at_s))
        delay = at_s - env.now
    yield env.timeout(delay)


class LateCalls:
    """Calls that run after every event of their instant, whenever that was scheduled (before the clock moves on),
    in the order they were added: run() steps SimPy's clock itself, and makes each such call when SimPy's next
    event lies later (Environment.peek)."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.calls: deque[Callable[[], object]] = deque()

    def add(self, call: Callable[[], object]) -> None:
        """`call` runs once every event of this instant has."""
        self.calls.append(call)

    def run(self) -> None:
        """env.run(), with the late calls made where they fall."""
        env, calls = self.env, self.calls
        while True:
            at = env.peek()
            if calls and at > env.now:
                calls.popleft()()
            elif at == math.inf:
                return
            else:
                env.step()
