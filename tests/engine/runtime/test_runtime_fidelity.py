"""Same trace, same iteration times: the engine's loop and the simulator's replica agree row by row.

This is what makes a real-vs-simulated difference the cost model's error and nothing else.
"""
import dataclasses

import pytest

pytest.importorskip("torch")
pytest.importorskip("simpy")

import numpy as np  # noqa: E402
from runtime_reference import replay_as_simulated  # noqa: E402

from engine.core.system import PAPER_SYSTEMS  # noqa: E402
from sim.workload.trace import Trace  # noqa: E402


def a_trace(num_requests=12, seed=3):
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(0.005, num_requests))
    return Trace(arrival, rng.integers(3, 30, num_requests), rng.integers(2, 20, num_requests),
                 rng.integers(1, 3, num_requests))


# (device blocks, host blocks) of 4 tokens: tight enough that vLLM preempts and swaps, and
# that the others queue behind their reservations (Max: 64 blocks a sequence)
POOLS = {"vllm": (24, 64), "orca-pow2": (48, 0), "fastertransformer": (160, 0)}


@pytest.mark.parametrize("system", sorted(POOLS))
@pytest.mark.parametrize("run_model", [False, True])
def test_engine_replay_equals_the_simulator(opt_tiny, system, run_model):
    trace, blocks = a_trace(), POOLS[system]
    system = dataclasses.replace(PAPER_SYSTEMS[system], block_size=4)
    requests = replay_as_simulated(opt_tiny, system, trace, *blocks, run_model=run_model)
    if system.kind == "vllm":
        assert sum(requests["num_preemptions"]) > 0
