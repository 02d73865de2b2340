"""The exact-replay proof with automatic prefix caching on: fed the engine's measured iteration times, the
simulator takes the engine's schedule one for one (batches with their cached prefill tokens, hits,
preemptions, swaps, timestamps) on a system-prompt workload whose requests share and evict blocks, under
each of vLLM's prefill policies (chunked: prompts split into chunks whose blocks are keyed as computed)."""
import dataclasses

import numpy as np
import pytest

pytest.importorskip("torch")  # these run the real engine

from engine.core.system import PAPER_SYSTEMS  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.specs.loader import load_model_spec  # noqa: E402
from fidelity.replay import MeasuredClock, ReplayedTimes  # noqa: E402
from sim.core.simulate import simulate  # noqa: E402
from sim.workload.tokens import system_prompt_segments  # noqa: E402
from sim.workload.trace import Trace  # noqa: E402


def system_prompt_trace(num_requests=14, seed=4):
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(5e-5, num_requests))
    prompt, output = rng.integers(3, 20, num_requests) + 10, rng.integers(2, 20, num_requests)
    segments = system_prompt_segments(rng.integers(0, 3, num_requests), 10, prompt, output)
    return Trace(arrival, prompt, output, rng.integers(1, 3, num_requests), segments=segments)


POLICIES = {"mixed": {}, "separate": {"max_num_batched_tokens": 64},
            "chunked": {"max_num_batched_tokens": 16, "max_num_seqs": 8}}  # chunks of prompts up to 39 tokens


@pytest.mark.parametrize("policy", list(POLICIES))
def test_simulator_fed_the_engines_times_reproduces_its_cached_schedule(policy):
    spec, trace, blocks = load_model_spec("opt-tiny"), system_prompt_trace(), (24, 64)
    system = dataclasses.replace(PAPER_SYSTEMS["vllm"], block_size=4, prefix_caching=True, prefill_policy=policy,
                                 **POLICIES[policy])
    engine = Engine(spec, system, "cpu", num_gpu_blocks=blocks[0], num_cpu_blocks=blocks[1],
                    attention_backend="torch")
    clock = MeasuredClock(engine.runner)
    result = engine.replay(trace, time_fn=clock)
    replayed = ReplayedTimes(clock.times, clock.shapes)  # checks every batch's shape, cached lengths included
    records = simulate(trace, spec, system, replayed, *blocks)
    assert replayed.exhausted
    assert records.iterations == result.iteration_columns()
    assert records.requests_frame().to_dict("list") == result.request_columns()
    assert any(shape.prefill_cached_lens for shape in clock.shapes), "later prompts attend over cached blocks"
    assert sum(result.request_columns()["num_preemptions"]) > 0
