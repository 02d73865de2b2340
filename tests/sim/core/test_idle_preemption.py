"""A schedule() that runs nothing but preempts someone (a group alone in the pool that cannot take its next
slots recomputes itself) is followed at once by the one that runs what it preempted: the replica does not
idle until the next arrival, nor report a stall when none will come."""
from __future__ import annotations

import numpy as np
import pytest

from sim.core.simulate import simulate
from sim.workload.trace import Trace
from tests.helpers.simulation import MODEL, ROOFLINE, SYSTEMS


@pytest.mark.parametrize("fast_forward", [False, True])
def test_a_group_that_preempts_itself_is_recomputed_at_once(fast_forward):
    # 8 + 40 tokens in 6 blocks of 8: from 41 tokens on it holds all 6 and can_append asks one more free, so at
    # each of its last 6 decodes it preempts itself, and the next schedule() re-prefills it, sampling a token
    trace = Trace(np.array([0.0, 100.0]), np.array([8, 8]), np.array([40, 2]))
    records = simulate(trace, MODEL, SYSTEMS["vllm-block8"], ROOFLINE, 6, 0, fast_forward=fast_forward)
    first, second = sorted(records.request_rows(), key=lambda row: row.request_id)
    assert first.num_preemptions == 6 and first.finish_s < 100.0  # before: not until request 1 arrived
    assert second.finish_s is not None
    alone = simulate(Trace(np.array([0.0]), np.array([8]), np.array([40])), MODEL, SYSTEMS["vllm-block8"],
                     ROOFLINE, 6, 0, fast_forward=fast_forward)  # before: "1 waiting requests can never be scheduled"
    assert alone.request_rows()[0].finish_s == first.finish_s
