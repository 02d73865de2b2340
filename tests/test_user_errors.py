"""User-facing errors are plain picklable values: one raised in a worker process (a process pool's
today, a Dask worker's later) reaches the user as the same error, type, fields and message."""
from __future__ import annotations

import pickle

import pytest

from engine.core.scheduler.common import RequestTooLarge, RequestTooLong
from engine.errors import SpecError, SwapSpaceExhausted, Unschedulable, Unservable
from servesim.cli import USER_ERRORS

EXAMPLES = [
    SpecError("traces/bad.csv", "row 3", "0.3 is earlier than the row before it"),
    SpecError("--tolerance", "", "must be a positive number, got 0.0"),
    Unservable("request 7 can never be served"),
    Unschedulable("2 requests wait that no batch can hold"),
    RequestTooLong("request 3: prompt 2000 + output 100 > 2048"),
    RequestTooLarge("request 4 needs 300 blocks, the pool has 200"),
    SwapSpaceExhausted("request 26: its 6 sequences must be swapped out; raise swap_space_gib"),
]


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: f"{type(e).__name__}-{e.args[0][:12]}")
def test_round_trips_through_pickle(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error) and copy.args == error.args
    assert vars(copy) == vars(error)  # SpecError's source, key and message too


def test_every_user_error_class_has_an_example():
    """A new user-facing error class must be added above, so that its pickling is checked."""
    ours = {cls for base in USER_ERRORS if base is not OSError for cls in (base, *_subclasses(base))
            if cls.__module__.split(".")[0] in ("engine", "sim", "calibrate", "fidelity")}
    assert ours <= {type(e) for e in EXAMPLES}, ours - {type(e) for e in EXAMPLES}


def test_a_note_added_to_an_error_travels_too():
    error = SpecError("exp.yaml", "rates", "must be positive")
    error.add_note("while running vLLM at rate 2")
    assert pickle.loads(pickle.dumps(error)).__notes__ == ["while running vLLM at rate 2"]
