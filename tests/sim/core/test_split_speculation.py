"""A split fleet whose decode pool speculates (sim/core/split_fleet.py, docs/speculative-decoding.md): the decode
replicas reserve each decode's lookahead slots from the step a request joins on and draw its acceptance from their
own generators; the prefill replicas propose nothing. With nothing accepted and a free proposer it serves every
request as the fleet without speculation; its accepted tokens a step come to the configured expectation; and the
control plane's invariants hold on its decode replicas at every step, as they do on a colocated speculating run."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st

from calibrate.clock.costmodel import CostModel
from calibrate.clock.speculative_pricing import SpeculativeCostModel
from engine.core.batch import Batch
from engine.core.records import ITERATION_COLUMNS
from engine.core.speculative import SpeculativeSpec
from sim.core.merge import merged_records
from sim.core.routers import make_router, router_spec
from sim.core.split_fleet import SplitFleet, serve_split
from tests.helpers.core_harness import StepInvariants, hyp
from tests.helpers.simulation import ROOFLINE, SYSTEMS, random_trace
from tests.helpers.split_harness import VLLM, check_end, run_checked, setup_of

NGRAM = SpeculativeCostModel(ROOFLINE, "ngram", None)


def speculating(system, k: int, rates: tuple[float, ...]):
    return replace(system, speculative=SpeculativeSpec("ngram", k, rates))


class PerSequence(CostModel):
    """A time that depends on the sequences a step runs alone: a verify step costs what the decode it replaces does."""

    source = "per-sequence(test)"

    def iteration_time(self, batch) -> float:
        return 0.01 + 0.001 * batch.num_seqs

    def swap_time(self, num_blocks: int) -> float:
        return 0.0


def served(setup, trace, seed: int = 0):
    return serve_split(trace, setup, make_router(router_spec("round_robin"), None), np.random.default_rng(seed))


def test_with_nothing_accepted_every_request_is_served_as_without_speculation():
    """Decode pools roomy enough that no placement or join waits on the proposals' slots (held while a step runs):
    the same requests, copies and iterations but for the pool's breakdown, which holds those slots."""
    trace = random_trace(3, count=80, rate=30.0)
    clock = PerSequence()
    plain = served(setup_of(2, 2, decode_blocks=1000, cost=clock, decode_cost=clock), trace)
    free = SpeculativeCostModel(clock, "ngram", None, ngram_s_per_sequence=0.0)
    spec = served(setup_of(2, 2, decode_blocks=1000, cost=clock, decode_system=speculating(VLLM, 3, (0.0,) * 3),
                           decode_cost=free), trace)
    assert spec.transfers == plain.transfers
    a, b = merged_records(plain.runs), merged_records(spec.runs)
    assert sorted(row[:9] for row in b.request_values) == sorted(a.request_values)
    assert all(row[-1] == 0 and row[-2] > 0 for row in b.request_values if row[6] > 1)
    same = [name for name in ITERATION_COLUMNS if not name.startswith("kv_") and "blocks" not in name] + ["kv_token"]
    assert {name: a.iterations[name] for name in same} == {name: b.iterations[name] for name in same}
    for run in spec.runs[:2]:  # the prefill replicas: every iteration recorded, none proposing
        assert run.records.speculation_values == [(0, 0)] * run.num_iterations > []
    for run in spec.runs[2:4]:
        assert len(run.records.speculation_values) == run.num_iterations
        assert sum(p for p, _ in run.records.speculation_values) > 0


class Noted:
    """An acceptance source that hands on another's counts and notes each decode's proposed and accepted."""

    def __init__(self, source):
        self.source, self.pairs = source, []

    def accepted(self, batch: Batch) -> list[int]:
        accepted = self.source.accepted(batch)
        self.pairs.extend(zip(batch.decode_proposed, accepted))
        return accepted


def test_accepted_tokens_a_step_come_to_the_configured_expectation():
    rates = (0.8, 0.6, 0.4)
    system = speculating(VLLM, 3, rates)
    setup = setup_of(1, 2, decode_blocks=600, decode_system=system, decode_cost=NGRAM)
    trace = random_trace(11, count=300, rate=20.0)
    rng = np.random.default_rng(5)
    fleet = SplitFleet(simpy.Environment(), setup, make_router(router_spec("round_robin"), rng), rng)
    noted = []
    for replica in fleet.decode:
        replica.acceptance = Noted(replica.acceptance)
        noted.append(replica.acceptance)
    runs = fleet.serve(trace)
    full = [accepted for note in noted for proposed, accepted in note.pairs if proposed == 3]
    assert len(full) > 10_000
    assert np.mean(full) == pytest.approx(system.speculative.expected_accepted, rel=0.02)
    assert not noted[0].pairs[:50] == noted[1].pairs[:50]  # each decode replica draws from its own generator
    records = merged_records(runs.runs)
    proposed = sum(p for run in runs.runs for p, _ in run.records.speculation_values)
    accepted = sum(a for run in runs.runs for _, a in run.records.speculation_values)
    assert (proposed, accepted) == (sum(row[-2] for row in records.request_values),
                                    sum(row[-1] for row in records.request_values))
    assert accepted == sum(a for note in noted for _, a in note.pairs)


class DecodeInvariants:
    """StepInvariants on each decode replica's scheduler: after each schedule(), and right after each completion."""

    def __init__(self, fleet):
        self.checker, self.steps = StepInvariants(), 0
        for replica in fleet.decode:
            self._watch(replica)

    def _watch(self, replica) -> None:
        sched, told = replica.core.scheduler, replica.after_step
        schedule = sched.schedule

        def checked_schedule():
            batch = schedule()
            self.checker.after(sched, batch, self.steps)
            self.steps += 1
            return batch

        def after_step(r, finished):
            told(r, finished)
            self.checker.before(sched, self.steps)
        sched.schedule = checked_schedule
        replica.after_step = after_step


@hyp(max_examples=15)
@given(seed=st.integers(0, 10_000), num_prefill=st.integers(1, 2), num_decode=st.integers(1, 3),
       decode_blocks=st.integers(40, 160), on_decode_full=st.sampled_from(["hold", "recompute"]),
       decode=st.sampled_from(["vllm", "vllm-swap", "vllm-chunked", "vllm-v1"]), k=st.integers(1, 5),
       rate=st.floats(0.0, 1.0), router=st.sampled_from(["round_robin", "least_outstanding", "power_of_two"]))
def test_random_speculating_split_fleets_keep_the_control_planes_invariants(seed, num_prefill, num_decode,
                                                                           decode_blocks, on_decode_full, decode, k,
                                                                           rate, router):
    """Pools tight enough to preempt (by recompute and by swap) while proposals hold their slots, every decode
    replica's blocks, rows, budget and written slots checked at every step, every request conserved."""
    trace = random_trace(seed, 30, rate=30.0)
    system = speculating(SYSTEMS[decode], k, (rate,) * k)
    setup = setup_of(num_prefill, num_decode, 200, decode_blocks, on_decode_full, decode_system=system,
                     decode_cost=NGRAM, cpu_blocks=400)
    watching: list[DecodeInvariants] = []
    fleet, checks, runs = run_checked(trace, setup, router, seed, lambda f: watching.append(DecodeInvariants(f)))
    check_end(fleet, runs, trace)
    assert checks.checks > 0 and watching[0].steps > 0


def test_the_prefill_pool_never_speculates_and_a_speculating_decode_pool_needs_the_generator():
    trace, router = random_trace(0, 5), make_router(router_spec("round_robin"), None)
    system = speculating(VLLM, 2, (0.5, 0.5))
    with pytest.raises(ValueError, match="prefill pool does not speculate"):
        serve_split(trace, setup_of(system=system), router, np.random.default_rng(0))
    with pytest.raises(ValueError, match="speculating decode pool needs the run's seeded rng"):
        serve_split(trace, setup_of(decode_system=system, decode_cost=NGRAM), router)
