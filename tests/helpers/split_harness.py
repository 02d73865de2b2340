"""A split fleet (sim/core/split_fleet.py) run with its conservation checked after every iteration of every replica:
each request in exactly one place (a prefill replica, waiting for a decode replica with its KV held, being copied,
on a decode replica, or recorded), held KV exactly that of the requests waiting or being copied, and every pool's
blocks held by its tables alone; at the end every block back, each finished request copied once (or recomputed)
and recorded once."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import simpy

from calibrate.clock.costmodel import CostModel
from engine.core.sequence import SeqStatus
from engine.core.system import PAPER_SYSTEMS
from sim.core.fleet import FleetSetup
from sim.core.merge import merged_records
from sim.core.routers import make_router, router_spec
from sim.core.split_fleet import SplitFleet, SplitSetup
from sim.workload.trace import Trace
from tests.helpers.core_harness import check_block_manager
from tests.helpers.simulation import MODEL, ROOFLINE

VLLM = PAPER_SYSTEMS["vllm"]


def linear_copy(num_tokens: int) -> float:
    """A KV copy of 10 us plus 1 us a token: easy to check by hand."""
    return 1e-5 + 1e-6 * num_tokens


def setup_of(num_prefill: int = 1, num_decode: int = 1, prefill_blocks: int = 400, decode_blocks: int = 400,
             on_decode_full: str = "hold", horizon_s: float = 1e9, system=VLLM, copy=linear_copy,
             decode_system=VLLM, decode_cost: CostModel = ROOFLINE, cost: CostModel = ROOFLINE,
             cpu_blocks: int = 64) -> SplitSetup:
    """`system` the prefill pool's, `decode_system` the decode pool's (a speculating one priced by `decode_cost`)."""
    def pool(n: int, blocks: int, pool_system, clock: CostModel) -> FleetSetup:
        return FleetSetup(MODEL, pool_system, clock, blocks, cpu_blocks, n, horizon_s, False, False)
    return SplitSetup(pool(num_prefill, prefill_blocks, system, cost),
                      pool(num_decode, decode_blocks, decode_system, decode_cost), copy, on_decode_full)


class Conservation:
    """The fleet's invariants, asked after every iteration of every replica."""

    def __init__(self, fleet: SplitFleet, trace: Trace):
        self.fleet, self.num_requests, self.checks = fleet, len(trace), 0
        for replica in (*fleet.prefill, *fleet.decode):
            told = replica.after_step
            replica.after_step = self._checking(told)

    def _checking(self, told):
        def after_step(replica, finished):
            told(replica, finished)
            self.check()
        return after_step

    def places(self) -> Counter:
        fleet, places = self.fleet, Counter()
        for replica in fleet.prefill:
            places.update(g.request_id for g in replica.core.scheduler.groups_in_system())
        places.update(h.request.request_id for h in fleet.waiting)
        for replica in fleet.decode:
            places.update(g.request_id for g in replica.core.scheduler.groups_in_system())
        for replica in fleet.decode:
            places.update(values[0] for values in replica.core.records.request_values)
        places.update(values[0] for values in fleet.records.request_values)
        return places

    def check(self) -> None:
        self.checks += 1
        fleet = self.fleet
        places = self.places()
        assert all(count == 1 for count in places.values()), [r for r, c in places.items() if c > 1]
        arrived = set(fleet.requests)
        assert set(places) <= arrived
        held = set()
        for replica in fleet.prefill:
            held |= set(replica.core.scheduler.held_kv)
        copying = set()
        for replica in fleet.decode:
            copying |= set(replica.core.scheduler.incoming.copying)
        assert len(copying) == fleet.num_copying
        assert held == {h.request.request_id for h in fleet.waiting} | copying
        for replica in (*fleet.prefill, *fleet.decode):
            self.check_blocks(replica)

    @staticmethod
    def check_blocks(replica) -> None:
        scheduler = replica.core.scheduler
        status = {seq.seq_id: seq.status for group in scheduler.groups_in_system() for seq in group.seqs}
        status.update({seq.seq_id: seq.status for group in scheduler.held_kv.values() for seq in group.seqs})
        check_block_manager(scheduler.allocator, lambda seq_id: status.get(seq_id, SeqStatus.FINISHED))


def run_checked(trace: Trace, setup: SplitSetup, router: str = "round_robin", seed: int = 0,
                watch: Callable[[SplitFleet], object] | None = None):
    """The fleet and its Conservation checks, after serving the trace (a speculating decode pool drawing from
    children of the `seed`'s generator, after the router's); `watch(fleet)` sets more checks before it serves."""
    env, rng = simpy.Environment(), np.random.default_rng(seed)
    fleet = SplitFleet(env, setup, make_router(router_spec(router), rng), rng)
    checks = Conservation(fleet, trace)
    if watch is not None:
        watch(fleet)
    return fleet, checks, fleet.serve(trace)


def check_end(fleet: SplitFleet, runs, trace: Trace) -> None:
    records = merged_records(runs.runs)
    ids = [values[0] for values in records.request_values]
    assert sorted(ids) == list(range(len(trace))), "every request recorded once"
    rows = Counter(row[0] for row in runs.transfers)
    assert all(count == 1 for count in rows.values()), "a request's KV moves once"
    requests = records.requests
    for rid, output_len, finish in zip(requests["request_id"], requests["output_len"], requests["finish_s"]):
        if finish is not None and output_len > 1:
            assert rows[rid] == 1, f"request {rid} finished without a transfer"
        assert output_len == int(trace.output_len[rid])
    for replica in (*fleet.prefill, *fleet.decode):
        scheduler = replica.core.scheduler
        assert not scheduler.held_kv and not scheduler.has_unfinished()
        assert scheduler.allocator.num_used_gpu_blocks == 0, f"replica {replica.index} leaked blocks"
        assert scheduler.allocator.cpu.num_free == scheduler.allocator.cpu.num_blocks
