"""A replay's simulated TTFT, TPOT and E2E are the summary's per-request formulas (request_latencies) without a
horizon: NaN where a request was never served or is unfinished, TPOT NaN for one output token."""
import math

import numpy as np

from fidelity.runs.per_request import simulated_latencies

NAN = math.nan


def test_a_replays_latencies_leave_what_it_cannot_time_nan():
    requests = {  # finished; first token only (unfinished); never served; one output token
        "arrival_s": np.array([1.0, 2.0, 3.0, 4.0]),
        "first_token_s": np.array([1.5, 2.25, NAN, 4.5]),
        "finish_s": np.array([3.5, NAN, NAN, 4.5]),
        "output_len": np.array([5, 8, 3, 1]),
    }
    got = simulated_latencies(requests)
    np.testing.assert_array_equal(got["ttft"], [0.5, 0.25, NAN, 0.5])
    np.testing.assert_array_equal(got["tpot"], [0.5, NAN, NAN, NAN])
    np.testing.assert_array_equal(got["e2e"], [2.5, NAN, NAN, 0.5])
