"""sim/core/alarm.py: events at an absolute time to the bit, and calls late in their instant, on SimPy's public API
alone (no pin to the SimPy release whose private queue it once wrote)."""
import ast
import inspect

import pytest
import simpy

from sim.core import alarm
from sim.core.alarm import Alarm, LateCalls, exact_delay, sleep_until

# (now, at): the last two have no delay d with now + d == at (both neighbours of at - now round away from at)
TIMES = [(0.1, 0.1 + 0.2), (0.1, 1e9 + 0.3), (0.1, 7.0), (3.0, 3.0), (1.0000000000000002, 3.0000000000000004),
         (0.5, 2.0 ** 52 + 1)]


def test_alarm_reads_no_private_simpy_attribute():
    for node in ast.walk(ast.parse(inspect.getsource(alarm))):
        if isinstance(node, ast.Attribute):
            assert not node.attr.startswith("_") or node.attr.endswith("__"), f"sim/core/alarm.py reads {node.attr}"


def test_exact_delay_is_none_only_where_no_float_lands():
    assert exact_delay(0.5, 2.0 ** 52 + 1) is None
    assert exact_delay(0.1, 0.1 + 0.2) is not None and 0.1 + exact_delay(0.1, 0.1 + 0.2) == 0.1 + 0.2


@pytest.mark.parametrize("now, at_s", TIMES)
def test_the_alarm_fires_at_its_absolute_time_to_the_bit(now, at_s):
    env = simpy.Environment(initial_time=now)
    fired = []
    ringing = Alarm(env, at_s, lambda event: fired.append((env.now, event)))
    env.run()
    assert fired == [(at_s, ringing)]


@pytest.mark.parametrize("now, at_s", TIMES)
def test_a_process_sleeps_until_its_absolute_time_to_the_bit(now, at_s):
    env = simpy.Environment(initial_time=now)
    woke = []

    def sleeper():
        yield from sleep_until(env, at_s)
        woke.append(env.now)

    env.process(sleeper())
    env.run()
    assert woke == [at_s]


def test_an_alarm_orders_with_other_events_at_its_time_by_creation():
    env = simpy.Environment()
    order = []
    env.timeout(2.0).callbacks.append(lambda _: order.append("first"))
    Alarm(env, 2.0, lambda _: order.append("alarm"))
    env.timeout(2.0).callbacks.append(lambda _: order.append("timeout"))
    env.run()
    assert order == ["first", "alarm", "timeout"]


def test_late_calls_run_after_every_event_of_their_instant_in_the_order_added():
    env = simpy.Environment()
    late = LateCalls(env)
    order = []

    def at_one(_):
        order.append(("event", env.now))
        late.add(lambda: order.append(("late a", env.now)))
        late.add(lambda: (order.append(("late b", env.now)),
                          env.timeout(0).callbacks.append(lambda _: order.append(("after b", env.now)))))
        env.timeout(0).callbacks.append(lambda _: order.append(("scheduled later", env.now)))

    env.timeout(1.0).callbacks.append(at_one)
    env.timeout(1.0).callbacks.append(lambda _: order.append(("second", env.now)))
    env.timeout(2.0).callbacks.append(lambda _: order.append(("next instant", env.now)))
    late.run()
    # an event late b schedules in its instant runs before the clock moves on
    assert order == [("event", 1.0), ("second", 1.0), ("scheduled later", 1.0), ("late a", 1.0), ("late b", 1.0),
                     ("after b", 1.0), ("next instant", 2.0)]


def test_late_calls_left_when_nothing_else_is_run_too():
    env = simpy.Environment()
    late = LateCalls(env)
    ran = []
    env.timeout(1.0).callbacks.append(lambda _: late.add(lambda: ran.append(env.now)))
    late.run()
    assert ran == [1.0]
