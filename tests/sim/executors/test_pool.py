"""Workers hand back results as they finish, and the error a sweep stops on is the same at any width."""
from __future__ import annotations

import pytest

from sim.executors.workers import first_error_in_order


def _getter(value):
    def result():
        if isinstance(value, Exception):
            raise value
        return value
    return result


def test_results_come_as_they_finish():
    finished = [(2, _getter("c")), (0, _getter("a")), (1, _getter("b"))]
    assert list(first_error_in_order(iter(finished), 3)) == [(2, "c"), (0, "a"), (1, "b")]


def test_the_error_is_the_first_in_order_once_all_before_it_are_done():
    taken = []
    finished = [(3, _getter(ValueError("late"))), (2, _getter("c")), (1, _getter(ValueError("early"))),
                (0, _getter("a")), (4, _getter("never taken"))]
    with pytest.raises(ValueError, match="early"):
        for i, _ in first_error_in_order(iter(finished), 5):
            taken.append(i)
    assert taken == [2, 0]  # every success before the error is handed back (and saved by a sweep); 4 is not awaited
