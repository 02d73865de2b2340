"""A split fleet at its horizon (sim/core/split_fleet.py): a KV copy the horizon cuts off stops there and is recorded
unfinished, as is a request still waiting for a decode replica; nothing the fleet records happens after the run's
end. A copy priced at no finite time is refused, naming the request."""
from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from engine.core.system import PAPER_SYSTEMS
from sim.core.fleet import FleetSetup
from sim.core.merge import merged_records
from sim.core.routers import make_router, router_spec
from sim.core.split_fleet import SplitFleet, SplitSetup, serve_split
from sim.workload.trace import Trace
from tests.helpers.simulation import MODEL, ROOFLINE

VLLM = PAPER_SYSTEMS["vllm"]
HORIZON_S = 10.0


def setup_of(copy, decode_blocks: int = 400, on_decode_full: str = "hold", horizon_s: float = HORIZON_S
             ) -> SplitSetup:
    def pool(blocks: int) -> FleetSetup:
        return FleetSetup(MODEL, VLLM, ROOFLINE, blocks, 64, 1, horizon_s, False, False)
    return SplitSetup(pool(400), pool(decode_blocks), copy, on_decode_full)


def served(trace: Trace, setup: SplitSetup):
    fleet = SplitFleet(simpy.Environment(), setup, make_router(router_spec("round_robin"), None))
    return fleet, fleet.serve(trace)


def burst(count: int, prompt: int = 100, output: int = 20) -> Trace:
    return Trace(np.zeros(count), np.full(count, prompt), np.full(count, output), source="test")


def test_copies_the_horizon_cuts_off_stop_there_unfinished():
    # four copies of 4 s each, queued on one link from about t = 0: two end, the third is cut at 10 s, the fourth
    # never starts
    fleet, runs = served(burst(4), setup_of(lambda tokens: 4.0))
    kinds = [row[-1] for row in runs.transfers]
    assert kinds == ["copied", "copied", "unfinished", "unfinished"]
    starts, ends = [row[4] for row in runs.transfers], [row[5] for row in runs.transfers]
    assert starts[2] == pytest.approx(starts[0] + 8.0) and math.isnan(ends[2]) and math.isnan(starts[3])
    assert max(ends[:2]) <= HORIZON_S and fleet.env.now <= HORIZON_S
    records = merged_records(runs.runs).requests
    finished = dict(zip(records["request_id"], records["finish_s"]))
    assert [finished[rid] is not None for rid in range(4)] == [True, True, False, False]
    assert sorted(records["request_id"]) == [0, 1, 2, 3]  # each recorded once, the cut ones unfinished


def test_a_request_still_waiting_for_a_decode_replica_at_the_horizon_is_a_waiting_transfer():
    # a decode pool with room for one 200-token prompt (13 blocks of 24) at a time, its 100 tokens' decode running
    # past a horizon of 1 s
    trace = burst(2, prompt=200, output=100)
    fleet, runs = served(trace, setup_of(lambda tokens: 1e-3, decode_blocks=24, horizon_s=1.0))
    (first, second) = runs.transfers
    assert first[-1] == "copied" and second[-1] == "waiting"
    assert second[2] == -1 and math.isnan(second[4]) and math.isnan(second[5])
    assert second[3] < 1.0  # its wait, from its first token, began inside the run
    records = merged_records(runs.runs).requests
    assert sorted(records["request_id"]) == [0, 1] and all(f is None for f in records["finish_s"])


@pytest.mark.parametrize("price", [math.nan, math.inf, -1.0])
def test_a_copy_priced_at_no_finite_time_is_refused_naming_the_request(price):
    with pytest.raises(ValueError, match=r"request 0: a KV copy of its 100 prompt tokens is priced at .*finite"):
        serve_split(burst(1), setup_of(lambda tokens: price), make_router(router_spec("round_robin"), None))


def test_copies_inside_the_horizon_are_as_before():
    trace = burst(3)
    _, runs = served(trace, setup_of(lambda tokens: 1e-5 + 1e-6 * tokens))
    assert [row[-1] for row in runs.transfers] == ["copied"] * 3
    assert all(row[5] - row[4] == pytest.approx(1e-5 + 1e-4) for row in runs.transfers)
