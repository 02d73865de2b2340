"""Same decisions, proven, for a split fleet: fed the real split engine's measured iteration times (per engine, in
order) and its measured KV copy times, the simulator's split fleet (sim/core/split_fleet.py) takes the engine's
schedule one for one: the same batches on each replica at the same times, the same copies at the same times,
the same request records, on pools tight enough that prefilled requests wait for decode blocks (hold)."""
import dataclasses
import math

import numpy as np
import pytest

pytest.importorskip("torch")

from engine.core.system import PAPER_SYSTEMS  # noqa: E402
from engine.runtime.records import ReplayResult  # noqa: E402
from engine.runtime.split_engine import SplitEngine  # noqa: E402
from engine.specs.loader import load_model_spec  # noqa: E402
from fidelity.replay import MeasuredClock, ReplayedTimes, ScheduleDiverged  # noqa: E402
from sim.core.fleet import FleetSetup  # noqa: E402
from sim.core.routers import make_router, router_spec  # noqa: E402
from sim.core.split_fleet import SplitSetup, serve_split  # noqa: E402
from sim.workload.trace import Trace  # noqa: E402

SYSTEM = dataclasses.replace(PAPER_SYSTEMS["vllm"], block_size=4)
PREFILL_BLOCKS, DECODE_BLOCKS = 40, 16  # 16 decode blocks: two or three requests at a time, the rest held


def a_trace(num_requests=12, seed=5, mean_gap_s=1e-3):
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(mean_gap_s, num_requests))
    output = rng.integers(2, 12, num_requests)
    output[3] = 1  # one request ends on the prefill side
    return Trace(arrival, rng.integers(3, 30, num_requests), output, source="test")


@pytest.fixture(scope="module")
def engine_run():
    spec, trace = load_model_spec("opt-tiny"), a_trace()
    split = SplitEngine.build(spec, SYSTEM, PREFILL_BLOCKS, DECODE_BLOCKS, attention_backend="torch")
    clocks = [MeasuredClock(engine.runner) for engine in (split.prefill, split.decode)]
    split.prefill.time_fn, split.decode.time_fn = clocks
    return spec, trace, split.replay(trace), clocks


def simulated(spec, trace, result, clocks, decode_blocks=DECODE_BLOCKS):
    copies = iter(result.copy_s)

    def pool(clock, blocks):
        return FleetSetup(spec, SYSTEM, ReplayedTimes(clock.times, clock.shapes), blocks, 0, 1, math.inf, False,
                          False)
    setup = SplitSetup(pool(clocks[0], PREFILL_BLOCKS), pool(clocks[1], decode_blocks), lambda n: next(copies))
    return serve_split(trace, setup, make_router(router_spec("round_robin"), None)), setup


def test_the_simulators_split_fleet_fed_the_engines_times_takes_its_decisions(engine_run):
    spec, trace, result, clocks = engine_run
    assert clocks[0].times == result.prefill_times and clocks[1].times == result.decode_times
    runs, setup = simulated(spec, trace, result, clocks)
    assert setup.prefill.cost_model.exhausted and setup.decode.cost_model.exhausted
    prefill, decode = (ReplayResult.of(run.records) for run in runs.runs[:2])
    assert prefill.iterations == result.prefill.iterations  # every column, start_s and kv usage included
    assert decode.iterations == result.decode.iterations
    assert decode.requests == result.decode.requests
    assert runs.transfers == sorted(result.transfers)
    # and the schedule was not a trivial one: requests waited with their KV held for decode blocks (a copy that
    # started after its first token but not where the copy before it ended), and decodes ran together
    copy_ends = {row[5] for row in result.transfers}
    assert any(start > prefilled and start not in copy_ends for _, _, _, prefilled, start, *_ in result.transfers)
    assert max(it.num_decodes for it in result.decode.iterations) > 1
    assert max(it.num_waiting for it in result.prefill.iterations) > 0
    fleet_requests = ReplayResult.of(runs.runs[2].records).requests
    assert [r.request_id for r in fleet_requests] == result.finished_on_prefill == [3]


def test_a_different_decode_pool_is_caught(engine_run):
    """The check has teeth: a decode pool of two blocks less on the simulator's side and the schedules part."""
    spec, trace, result, clocks = engine_run
    with pytest.raises(ScheduleDiverged, match="iteration"):
        simulated(spec, trace, result, clocks, decode_blocks=DECODE_BLOCKS - 2)
