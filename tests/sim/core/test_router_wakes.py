"""sim/core/router_wakes.py's rule for simultaneous events: a request handed over at the very instant an iteration
ends comes after that end exactly when the router's timeout was scheduled after the iteration's."""
import pytest

from sim.core.router_wakes import RouterWakes, arrival_event_times


@pytest.mark.parametrize("start_s, end_s, behind, router_after", [
    (0.5, 2.0, False, True),  # the router woke at 1.0, during the iteration: its timeout to 2.0 came after
    (1.5, 2.0, False, False),  # its timeout to 2.0 was scheduled at 1.0, before the iteration started
    (1.0, 2.0, False, False),  # it woke at 1.0 before the iteration started then
    (1.0, 2.0, True, True),  # it woke at 1.0 after the iteration started then
    (1.5, 1.7, False, False),  # no wake at the end: nothing to order
    (2.0, 2.0, True, False),  # an iteration that took no time: the router's timeout to its instant came first
])
def test_the_router_wakes_after_an_iteration_ending_then_only_if_scheduled_after_it(start_s, end_s, behind,
                                                                                    router_after):
    wakes = RouterWakes(arrival_event_times([1.0, 2.0, 2.0]))
    assert wakes.after_iteration(start_s, end_s, behind) is router_after
