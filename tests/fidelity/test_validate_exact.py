"""Same decisions, proven: fed the engine's measured iteration times, the simulator takes the engine's
schedule one for one (same batches in the same order, same preemptions, same timestamps), for all five
systems and vLLM's three prefill policies, on pools tight enough that the policies queue, reserve, preempt
and swap."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")  # these run the real engine

from engine.core.batch import BatchShape  # noqa: E402
from engine.core.system import PAPER_SYSTEMS  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.specs.loader import load_model_spec  # noqa: E402
from fidelity.replay import (  # noqa: E402
    MeasuredClock,
    ReplayedTimes,
    ScheduleDiverged,
    compare_schedules,
)
from sim.core.simulate import simulate  # noqa: E402
from sim.workload.trace import Trace  # noqa: E402

# (device blocks, host blocks) of 4 tokens: vLLM preempts (and swaps its 2-sample groups); the
# reservation systems queue behind Max / Pow2 / Oracle reservations (Max: 64 blocks a sequence)
POOLS = {"vllm": (24, 64), "orca-oracle": (40, 0), "orca-pow2": (48, 0), "orca-max": (160, 0),
         "fastertransformer": (160, 0), "vllm-separate": (24, 64), "vllm-chunked": (24, 64),
         "vllm-separate-delay": (24, 64)}
# vLLM's later prefill policies; chunked with a budget of 16 tokens, so that prompts of up to 30 come in chunks.
# Each trace of theirs holds a request too long for the model, which both planes ignore when it is scheduled.
SYSTEMS = {**PAPER_SYSTEMS,
           "vllm-separate": dataclasses.replace(PAPER_SYSTEMS["vllm"], prefill_policy="separate"),
           "vllm-chunked": dataclasses.replace(PAPER_SYSTEMS["vllm"], prefill_policy="chunked",
                                               max_num_batched_tokens=16, max_num_seqs=16),
           # v0.3's delay_factor reads the step's clock: the engine's measured one, replayed in the simulator
           "vllm-separate-delay": dataclasses.replace(PAPER_SYSTEMS["vllm"], prefill_policy="separate",
                                                      delay_factor=0.5)}


def a_trace(num_requests=12, seed=3, mean_gap_s=0.005, too_long=False):
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(mean_gap_s, num_requests))
    output = rng.integers(2, 20, num_requests)
    if too_long:
        output[5] = 256  # opt-tiny's max_seq_len, with the prompt on top
    return Trace(arrival, rng.integers(3, 30, num_requests), output, rng.integers(1, 3, num_requests))


def real_replay(spec, system, trace, blocks):
    engine = Engine(spec, system, "cpu", num_gpu_blocks=blocks[0], num_cpu_blocks=blocks[1],
                    attention_backend="torch")
    clock = MeasuredClock(engine.runner)
    result = engine.replay(trace, time_fn=clock)
    return result, clock


@pytest.mark.parametrize("preset", sorted(POOLS))
def test_simulator_fed_the_engines_times_reproduces_its_schedule(preset):
    # vLLM: arrivals 50 us apart, all within the first iterations whatever this machine's speed, so the
    # pool runs short and swaps on every run (5 ms apart, a fast run could finish requests first)
    later_policy = preset.startswith("vllm-")
    trace = a_trace(mean_gap_s=5e-5 if preset.startswith("vllm") else 0.005, too_long=later_policy)
    spec, blocks = load_model_spec("opt-tiny"), POOLS[preset]
    system = dataclasses.replace(SYSTEMS[preset], block_size=4)
    result, clock = real_replay(spec, system, trace, blocks)
    iterations = result.iteration_columns()
    # the clock changed nothing: each iteration lasted what the runner measured
    assert clock.times == pytest.approx(iterations["duration_s"], rel=1e-12, abs=1e-15)

    replayed = ReplayedTimes(clock.times, clock.shapes)  # also checks every batch as it goes
    records = simulate(trace, spec, system, replayed, *blocks)
    assert replayed.exhausted
    sim_iterations, sim_requests = records.iterations_frame(), records.requests_frame()
    for column in ("num_prefill_tokens", "num_prefills", "num_decodes", "sum_decode_context",
                   "num_running_groups", "num_waiting", "num_swap_blocks", "num_copy_blocks"):
        assert sim_iterations[column].tolist() == iterations[column], column
    real_requests = result.request_columns()
    assert sim_requests["num_preemptions"].tolist() == real_requests["num_preemptions"]
    for column in ("arrival_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(sim_requests[column], real_requests[column], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sim_iterations["start_s"], iterations["start_s"], rtol=1e-12, atol=1e-12)

    assert records.dropped_rows() == result.dropped
    assert [(r.request_id, r.status) for r in result.dropped] == ([(5, "ignored")] if later_policy else [])
    if preset == "vllm-chunked":
        assert max(np.add(iterations["num_prefill_tokens"], iterations["num_decodes"])) <= 16

    comparison = compare_schedules(pd.DataFrame(real_requests), pd.DataFrame(iterations), sim_requests,
                                   sim_iterations)
    assert comparison.identical, comparison.first_mismatch
    # and the schedule was not a trivial one
    if system.kind == "vllm":
        assert sum(real_requests["num_preemptions"]) > 0
        assert sum(iterations["num_swap_blocks"]) > 0
    else:
        assert max(iterations["num_waiting"]) > 0  # requests queued behind reservations


def test_a_different_control_plane_is_caught():
    """The check has teeth: one block less on the simulator's side and the schedules part."""
    spec, trace, blocks = load_model_spec("opt-tiny"), a_trace(), POOLS["vllm"]
    system = dataclasses.replace(PAPER_SYSTEMS["vllm"], block_size=4)
    _, clock = real_replay(spec, system, trace, blocks)
    with pytest.raises(ScheduleDiverged, match="iteration"):
        simulate(trace, spec, system, ReplayedTimes(clock.times, clock.shapes), blocks[0] - 1, blocks[1])


def test_replayed_times_refuse_to_run_out():
    shape = BatchShape((5,), (), num_running_groups=1)
    times = ReplayedTimes([0.01], [shape])
    assert times.step_time(shape) == 0.01
    with pytest.raises(ScheduleDiverged, match="ran only 1"):
        times.step_time(shape)
    with pytest.raises(ScheduleDiverged, match="iteration 0"):
        ReplayedTimes([0.01], [shape]).step_time(BatchShape((6,), (), num_running_groups=1))


# vLLM's three prefill policies on a decoder of each other layout: grouped KV heads (llama-tiny, qwen2-tiny with
# its q/k/v biases), phi-2's parallel block, a mixture of experts, and Qwen3's QK-norm and wide heads, dense and
# a mixture. The schedule is the control plane's, so it must come out the same whatever the layers compute; each
# run is the engine's, timed on this machine.
FAMILY_SPECS = ["llama-tiny", "qwen2-tiny", "phi-tiny", "mixtral-tiny", "qwen3-tiny", "qwen3-moe-tiny"]
VLLM_POLICIES = ["vllm", "vllm-separate", "vllm-chunked"]


@pytest.mark.parametrize("preset", VLLM_POLICIES)
@pytest.mark.parametrize("name", FAMILY_SPECS)
def test_each_family_replays_exactly_under_each_prefill_policy(name, preset):
    trace = a_trace(num_requests=8, mean_gap_s=5e-5, too_long=preset != "vllm")
    spec, blocks = load_model_spec(name), POOLS[preset]
    system = dataclasses.replace(SYSTEMS[preset], block_size=4)
    result, clock = real_replay(spec, system, trace, blocks)
    replayed = ReplayedTimes(clock.times, clock.shapes)
    records = simulate(trace, spec, system, replayed, *blocks)
    assert replayed.exhausted
    comparison = compare_schedules(pd.DataFrame(result.request_columns()), pd.DataFrame(result.iteration_columns()),
                                   records.requests_frame(), records.iterations_frame())
    assert comparison.identical, comparison.first_mismatch
    assert sum(result.request_columns()["num_preemptions"]) > 0, "the pool should force preemption"
