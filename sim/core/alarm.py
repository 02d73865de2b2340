"""An event at an absolute time, which SimPy's timeouts cannot give.

Kept out of the modules setup.py compiles: SimPy writes its events' attributes freely (it sets a processed
event's `callbacks` to None), which a mypyc-compiled subclass of its Event refuses, checking their types on
every write.
"""
from __future__ import annotations

from heapq import heappush

import simpy
from simpy.events import NORMAL, Event

__all__ = ["Alarm"]


class Alarm(Event):
    """An event at an absolute time. SimPy's timeouts take a delay from now, and now + (t - now) need not
    be t; the stretch's end must be exactly where the step-by-step clock would have put it. `priority`: SimPy's
    order among the events of one instant (NORMAL, as a timeout's; a larger one comes after every NORMAL one)."""

    def __init__(self, env: simpy.Environment, at_s: float, callback, priority: int = NORMAL):
        self.env = env
        self.callbacks = [callback]
        self._value = None
        self._ok = True
        heappush(env._queue, (at_s, priority, next(env._eid), self))  # Environment.schedule, at at_s not now + delay
