"""sim/core/alarm.py's Alarm writes SimPy's private attributes (an event at an absolute time, which SimPy's
public API cannot schedule). pyproject pins simpy to the major version it was written against (>=4.1,<5);
these tests fail loudly, naming what moved, if a SimPy release changes what the Alarm relies on."""
import inspect
from heapq import heappush

import pytest
import simpy
from simpy.core import Environment
from simpy.events import NORMAL, PENDING, Event

from sim.core.alarm import Alarm

WHAT_ALARM_NEEDS = "sim/core/alarm.py's Alarm relies on it; update the Alarm, then this test and the simpy pin"


def test_simpy_is_the_major_version_the_alarm_was_written_for():
    assert simpy.__version__.split(".")[0] == "4", f"simpy {simpy.__version__}: {WHAT_ALARM_NEEDS}"


def test_schedule_still_pushes_time_priority_id_event_onto_the_queue():
    source = inspect.getsource(Environment.schedule)
    assert "heappush(self._queue, (self._now + delay, priority, next(self._eid), event))" in source, \
        f"Environment.schedule changed: {WHAT_ALARM_NEEDS}\n{source}"
    env = simpy.Environment()
    assert isinstance(env._queue, list) and next(env._eid) == 0, WHAT_ALARM_NEEDS
    event = env.event()
    env.schedule(event, NORMAL, 1.5)
    assert len(env._queue) == 1 and env._queue[0][0] == 1.5 and env._queue[0][1] == NORMAL, WHAT_ALARM_NEEDS
    assert env._queue[0][3] is event, WHAT_ALARM_NEEDS


def test_an_event_is_triggered_by_its_value_and_ok_fields():
    event = Event(simpy.Environment())
    assert event._value is PENDING and not event.triggered, WHAT_ALARM_NEEDS
    event._value, event._ok = None, True  # what the Alarm writes
    assert event.triggered and event.ok and event.value is None, WHAT_ALARM_NEEDS
    # the queue's entries are what Environment.step pops: a 4-tuple, time first, the event last
    assert "self._now, _, _, event = heappop(self._queue)" in inspect.getsource(Environment.step), WHAT_ALARM_NEEDS


@pytest.mark.parametrize("at_s", [0.1 + 0.2, 1e9 + 0.3, 7.0])
def test_the_alarm_fires_at_its_absolute_time_to_the_bit(at_s):
    env = simpy.Environment(initial_time=0.1)
    fired = []
    alarm = Alarm(env, at_s, lambda event: fired.append((env.now, event)))
    assert alarm.triggered and alarm.ok
    env.run()
    assert fired == [(at_s, alarm)]  # exactly at_s: a timeout of at_s - now could land a bit off


def test_an_alarm_orders_with_other_events_at_its_time_by_creation():
    env = simpy.Environment()
    order = []
    first = env.event()
    first.callbacks.append(lambda _: order.append("first"))
    first._ok, first._value = True, None
    heappush(env._queue, (2.0, NORMAL, next(env._eid), first))
    Alarm(env, 2.0, lambda _: order.append("alarm"))
    env.timeout(2.0).callbacks.append(lambda _: order.append("timeout"))
    env.run()
    assert order == ["first", "alarm", "timeout"], WHAT_ALARM_NEEDS
