"""Fast-forward (sim/core/fast_forward.py) against the step-by-step loop: the same records, to the last bit.

Every comparison runs one trace both ways and asserts requests.csv and iterations.csv byte-identical
and the summary identical in every digit; each also asserts that the fast path did skip iterations,
so a test cannot pass by never taking it.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import sim.core.fleet
from calibrate.clock.costmodel import CostModel
from calibrate.clock.speculative_pricing import SpeculativeCostModel
from engine.core.speculative import SpeculativeSpec
from engine.errors import SpecError
from sim.core.fast_forward import FastForward
from sim.core.simulate import simulate
from sim.experiment.config import load_experiment
from sim.experiment.metrics import summarize
from sim.experiment.run import make_cost_model, trace_for
from sim.workload.trace import Trace
from tests.helpers.simulation import MODEL, ROOFLINE, SYSTEMS, GridCost, NanAfter, random_trace

ROOT = Path(__file__).resolve().parents[3]


class Stretches(FastForward):
    """FastForward that remembers its last instance, to check the fast path was taken, and counts its stretches
    and the cuts of a request reaching its replica."""

    last: Stretches | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.num_stretches = self.num_cuts = 0
        Stretches.last = self

    def cut(self, stretch, now_s):
        cut = super().cut(stretch, now_s)
        self.num_cuts += cut
        return cut

    def _finish(self, core, stretch):
        self.num_stretches += 1
        return super()._finish(core, stretch)


@pytest.fixture(autouse=True)
def counted(monkeypatch):
    monkeypatch.setattr(sim.core.fleet, "FastForward", Stretches)
    Stretches.last = None


def both_ways(trace: Trace, system, cost: CostModel = ROOFLINE, gpu_blocks: int = 96, cpu_blocks: int = 256, *,
              spec=MODEL, seed: int = 0, min_forwarded: float = 0.1, **kwargs):
    """Simulate the trace step by step and fast-forwarded; assert the same bytes; return the records."""
    runs = {}
    for fast in (False, True):
        runs[fast] = simulate(trace, spec, system, cost, gpu_blocks, cpu_blocks, rng=np.random.default_rng(seed),
                              fast_forward=fast, **kwargs)
    step, fast = runs[False], runs[True]
    assert fast.requests_frame().to_csv(index=False) == step.requests_frame().to_csv(index=False)
    assert fast.iterations_frame().to_csv(index=False) == step.iterations_frame().to_csv(index=False)
    horizon = kwargs.get("horizon_s", math.inf)
    horizon = horizon if horizon < math.inf else 1e9
    summaries = [json.dumps(summarize(r.requests_frame(), r.iterations_frame(), pool_slots=gpu_blocks * 16,
                                      warmup_s=float(trace.arrival_s[len(trace) // 10]), horizon_s=horizon))
                 for r in (step, fast)]
    assert summaries[0] == summaries[1]
    assert fast.speculation_values == step.speculation_values  # a speculating run's, each iteration's pair
    forward = Stretches.last
    assert forward is not None and forward.num_forwarded >= min_forwarded * step.num_iterations, (
        f"only {forward.num_forwarded if forward else 0} of {step.num_iterations} iterations fast-forwarded")
    return fast


# --- every system, seeded random traces -------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SYSTEMS))
@pytest.mark.parametrize("seed", range(3))
def test_random_traces_give_the_same_records(name, seed):
    arrivals = ("poisson", "burst", "gamma")[seed]
    both_ways(random_trace(seed, arrivals=arrivals), SYSTEMS[name])


@pytest.mark.parametrize("name", ["vllm", "vllm-recompute", "vllm-swap", "orca-oracle", "fastertransformer",
                                  "vllm-separate", "vllm-chunked"])
@pytest.mark.parametrize("seed", range(2))
def test_parallel_samples(name, seed):
    both_ways(random_trace(seed, n=3), SYSTEMS[name], gpu_blocks=160)


@pytest.mark.parametrize("name", ["vllm", "vllm-recompute", "orca-pow2", "fastertransformer", "vllm-separate",
                                  "vllm-chunked"])
def test_beam_searches_among_plain_requests(name):
    # beams are drawn per step, so their batches go step by step; the plain requests between them do not
    both_ways(random_trace(4, beams=3), SYSTEMS[name], gpu_blocks=160, min_forwarded=0.01)


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_beam_searches_in_a_fleet_draw_their_parents_in_the_same_order(router):
    # one Generator draws every replica's beam parents, in the order their iterations end
    both_ways(random_trace(10, count=160, rate=20.0, beams=2), SYSTEMS["vllm"], gpu_blocks=160, replicas=3,
              router=router, min_forwarded=0.01)


@pytest.mark.parametrize("name", ["vllm", "vllm-swap", "orca-max", "vllm-separate", "vllm-chunked"])
def test_a_shared_prefix(name):
    both_ways(random_trace(5, prefix=40), SYSTEMS[name], gpu_blocks=128)


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
@pytest.mark.parametrize("name", ["vllm", "orca-oracle", "fastertransformer"])
def test_fleets_behind_either_router(router, name):
    both_ways(random_trace(6, count=200, rate=30.0), SYSTEMS[name], replicas=3, router=router)


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_a_replica_that_knows_when_its_next_request_comes_prices_no_stretch_past_it(router):
    # behind round robin each replica knows it (FastForward.by_replica): a stretch ends at the iteration in flight
    # when that request comes, so none is cut short; behind least_outstanding any request may come, and cuts
    both_ways(random_trace(4, count=200, rate=20.0), SYSTEMS["vllm"], replicas=2, router=router)
    forward = Stretches.last
    assert forward is not None and forward.num_stretches > 20
    assert forward.num_cuts == 0 if router == "round_robin" else forward.num_cuts > 0


class Counting(CostModel):
    """Decode steps of `step_s` (or a step time given per context sum), counting the steps it priced."""

    source = "counting(test)"

    def __init__(self, step_s=0.5, by_context=None):
        self.step_s, self.by_context, self.priced = step_s, by_context or {}, 0

    def iteration_time(self, batch) -> float:
        self.priced += 1
        return self.by_context.get(batch.sum_decode_context, self.step_s)

    def swap_time(self, num_blocks: int) -> float:
        return 0.0


def ends_of(cost: Counting, num_steps: int, until: float, seconds: float = 0.5) -> list[float]:
    from engine.core.batch import Batch

    batch = Batch(decode_seq_ids=[1], decode_context_lens=[10], num_running_groups=1)  # context sum 10 + step
    return FastForward._ends(cost, batch, 100.0 + seconds, num_steps, until, seconds)


def test_a_stretch_is_priced_up_to_the_iteration_in_flight_when_the_next_request_comes():
    cost = Counting()
    assert ends_of(cost, 1000, 102.2) == [100.5, 101.0, 101.5, 102.0, 102.5]  # 102.5 is in flight at 102.2
    assert cost.priced <= 8  # not the 999 the scheduler allowed
    assert ends_of(Counting(), 3, 102.2) == [100.5, 101.0, 101.5]  # never more than allowed
    assert ends_of(Counting(), 4, math.inf) == [100.5, 101.0, 101.5, 102.0]
    # an iteration ending exactly at the arrival is not the one in flight (plan stops before such a tie)
    assert ends_of(Counting(), 1000, 102.0) == [100.5, 101.0, 101.5, 102.0, 102.5]
    # steps shorter than the first: priced again, twice as many, until one ends past the arrival
    short = Counting(step_s=0.0625)
    assert ends_of(short, 1000, 101.0, seconds=0.5)[-2:] == [101.0, 101.0625] and short.priced < 20
    # a first step so short that the steps to the arrival overflow an int; one that takes no time
    assert len(ends_of(Counting(step_s=1e-320), 5, 102.2, seconds=1e-320)) == 5
    assert len(ends_of(Counting(step_s=0.0), 5, 102.2, seconds=0.0)) == 5


def test_a_stretch_stops_before_a_step_time_that_is_negative_nan_or_infinite():
    for bad in (-1.0, math.nan, math.inf):
        assert ends_of(Counting(by_context={13: bad}), 1000, math.inf) == [100.5, 101.0, 101.5]  # 13: step 3


@pytest.mark.parametrize("name", ["vllm", "orca-oracle", "fastertransformer"])
def test_a_horizon_cuts_both_at_the_same_iteration(name):
    records = both_ways(random_trace(7, rate=20.0), SYSTEMS[name], gpu_blocks=64, horizon_s=9.0)
    assert records.requests_frame()["finish_s"].isna().any()  # the run was cut with requests in it


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
@pytest.mark.parametrize("name", ["vllm", "vllm-swap", "orca-max", "orca-oracle", "fastertransformer", "vllm-separate",
                                  "vllm-chunked"])
def test_requests_queueing_behind_a_refused_head_run_through_a_stretch(name, router):
    # saturated: the queue never empties, so arrivals join it without cutting the stretch; each iteration
    # still records the requests waiting at its end, as step by step
    records = both_ways(random_trace(11, count=240, rate=60.0), SYSTEMS[name], gpu_blocks=48, replicas=2,
                        router=router)
    assert Stretches.last is not None and Stretches.last.num_queued > 20
    assert records.iterations_frame()["num_waiting"].max() > 20


# --- the paper's workloads, through their configs ---------------------------------------------------------
WORKLOADS = {
    "sharegpt": ("configs/quickstart.yaml", ["workload.duration_s=60"], 3.0),
    "n4": ("configs/paper/fig14_parallel_n4.yaml", ["workload.duration_s=30"], 3.0),
    "beam4": ("configs/paper/fig14_beam_w4.yaml", ["workload.duration_s=20"], 2.0),
    "prefix": ("configs/paper/fig16b_prefix_5shot.yaml", ["workload.duration_s=20"], 15.0),
    "chatbot": ("configs/paper/fig17_chatbot.yaml", ["workload.duration_s=60"], 1.5),
    "replay": ("configs/examples/replay.yaml", ["workload.window_s=[0, 150]"], 3.0),
    "alpaca": ("configs/paper/fig12d_alpaca_opt13b.yaml", ["workload.duration_s=20"], 20.0),
    "block sizes": ("configs/paper/fig18b_block_size.yaml", ["workload.duration_s=60"], 6.0),
    "preemption modes": ("configs/paper/fig19b_recompute_vs_swap.yaml", ["workload.duration_s=60"], 7.0),
}
SLOW_WORKLOADS = {"block sizes", "preemption modes"}  # the others run every system in the default tier


@pytest.mark.parametrize("workload", [pytest.param(w, marks=pytest.mark.slow) if w in SLOW_WORKLOADS else w
                                      for w in sorted(WORKLOADS)])
def test_paper_workloads_on_every_system(workload):
    path, overrides, rate = WORKLOADS[workload]
    exp = load_experiment(ROOT / path, [*overrides, "warmup_s=5"])
    for system in exp.systems:
        rng = np.random.default_rng(0)
        trace = trace_for(exp, rate, 0, rng)
        pool = exp.kv_pool(system)
        runs = {}
        for fast in (False, True):
            runs[fast] = simulate(trace, exp.model, system, make_cost_model(exp, system), pool.num_gpu_blocks,
                                  pool.num_cpu_blocks, rng=np.random.default_rng(1), fast_forward=fast,
                                  beam_continue=exp.workload.beam_continue, horizon_s=400.0)
        for frame in ("requests_frame", "iterations_frame"):
            step_csv = getattr(runs[False], frame)().to_csv(index=False)
            assert getattr(runs[True], frame)().to_csv(index=False) == step_csv, (workload, system.name, frame)
        forwarded = Stretches.last.num_forwarded if Stretches.last is not None else 0
        assert forwarded > 0 or workload == "beam4", (workload, system.name)  # every request a beam search: none


# --- the clock's corner cases -----------------------------------------------------------------------------
@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_an_arrival_at_the_very_end_of_an_iteration_is_ordered_as_step_by_step(router):
    rng = np.random.default_rng(8)
    arrival = np.sort(rng.integers(0, 400, 150)) * 0.125  # on the iterations' grid
    trace = Trace(arrival, rng.integers(5, 200, 150), rng.integers(2, 200, 150), source="grid")
    for name in ("vllm", "orca-oracle", "fastertransformer"):
        both_ways(trace, SYSTEMS[name], GridCost(), replicas=2, router=router)


def test_iterations_that_take_no_time():
    rng = np.random.default_rng(9)
    trace = Trace(np.sort(rng.integers(0, 40, 60)) * 0.25, rng.integers(5, 100, 60), rng.integers(2, 60, 60),
                  source="zero")
    both_ways(trace, SYSTEMS["vllm"], GridCost(decode_s=0.0), min_forwarded=0.0)


def test_a_bad_step_time_inside_a_stretch_is_the_same_error():
    trace = Trace([0.0, 0.1], [100, 300], [400, 50], source="test")
    messages = []
    for fast in (False, True):
        with pytest.raises(SpecError) as err:
            simulate(trace, MODEL, SYSTEMS["vllm"], NanAfter(), 96, 0, fast_forward=fast)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "nan" in messages[0]


def test_the_environment_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv("SERVESIM_FAST_FORWARD", "0")
    simulate(random_trace(0), MODEL, SYSTEMS["vllm"], ROOFLINE, 96, 0)
    assert Stretches.last is None
    monkeypatch.setenv("SERVESIM_FAST_FORWARD", "1")
    simulate(random_trace(0), MODEL, SYSTEMS["vllm"], ROOFLINE, 96, 0)
    assert Stretches.last is not None and Stretches.last.num_forwarded > 0


def test_a_cost_model_that_cannot_price_ahead_runs_step_by_step():
    class InOrder(GridCost):
        prices_ahead = False

    simulate(random_trace(0), MODEL, SYSTEMS["vllm"], InOrder(), 96, 0, fast_forward=True)
    assert Stretches.last is None


@pytest.mark.parametrize("chunk", [1, 5])
def test_records_moved_into_columns_in_small_chunks_are_the_same(monkeypatch, chunk):
    import engine.core.records

    trace = random_trace(3, count=80)
    whole = simulate(trace, MODEL, SYSTEMS["vllm"], ROOFLINE, 96, 256)
    monkeypatch.setattr(engine.core.records, "ROWS_PER_CHUNK", chunk)
    monkeypatch.setattr(engine.core.records, "ROWS_PER_COLUMNS", 3 * chunk)
    for replicas in (1, 2):
        chunked = both_ways(trace, SYSTEMS["vllm"], replicas=replicas)
        if replicas == 1:
            assert chunked.iterations_frame().equals(whole.iterations_frame())


# --- speculating systems: each stretch planned on the accepted counts drawn ahead ----------------------------------
NGRAM = SpeculativeCostModel(ROOFLINE, "ngram", None)
EAGLE = SpeculativeCostModel(ROOFLINE, "eagle", ROOFLINE)  # a head priced as the whole model: any proposer's clock


def speculating(name: str, k: int = 3, rates: tuple[float, ...] | None = None, **changes):
    rates = rates if rates is not None else tuple(0.9 - 0.15 * i for i in range(k))
    return replace(SYSTEMS[name], speculative=SpeculativeSpec("ngram", k, rates), **changes)


def speculated(records, share: float = 0.1) -> None:
    """The stretches that ran were speculating ones, and ran at least `share` of the iterations."""
    forward = Stretches.last
    assert forward is not None and forward.num_speculated == forward.num_forwarded
    assert forward.num_speculated >= share * records.num_iterations


@pytest.mark.parametrize("name", ["vllm", "vllm-v1", "vllm-separate", "vllm-chunked", "vllm-block8"])
@pytest.mark.parametrize("seed", range(3))
def test_speculating_random_traces_give_the_same_records(name, seed):
    k = (1, 3, 5)[seed]
    arrivals = ("poisson", "burst", "gamma")[seed]
    speculated(both_ways(random_trace(seed, arrivals=arrivals), speculating(name, k), (NGRAM, EAGLE)[seed % 2],
                         gpu_blocks=320, seed=seed))


@pytest.mark.parametrize("rates", [(1.0, 1.0, 1.0, 1.0), (0.0, 0.0, 0.0, 0.0), (0.95, 0.9, 0.2, 0.9)])
def test_speculating_stretches_at_every_acceptance(rates):
    # all accepted: the proposals shrink to what a request can still use, and its last steps decode plainly
    speculated(both_ways(random_trace(12, count=80), speculating("vllm-v1", 4, rates), NGRAM, gpu_blocks=160))


@pytest.mark.parametrize("name", ["vllm-swap", "vllm-recompute", "vllm-v1"])
def test_a_speculating_stretch_ends_before_the_step_whose_slots_do_not_fit(name):
    # a pool so small that the proposals' blocks run short: the stretch stops before the step that preempts
    records = both_ways(random_trace(13, count=60, rate=2.0), speculating(name, 4), NGRAM, gpu_blocks=40,
                        cpu_blocks=400)
    speculated(records)
    assert sum(row[8] for row in records.request_values) > 0  # it preempted


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_speculating_fleets_behind_either_router(router):
    # behind least_outstanding the replicas share one SimPy clock, and a request reaching one cuts its stretch
    speculated(both_ways(random_trace(14, count=200, rate=30.0), speculating("vllm-v1", 3), EAGLE, gpu_blocks=160,
                         replicas=3, router=router))


@pytest.mark.parametrize("replicas", [1, 2])
def test_speculating_behind_a_clients_gate(replicas):
    # the gate sends a request when another finishes (at a speculating stretch's last iteration): it reaches a
    # replica as any request does, cutting its stretch at the iteration in flight
    speculated(both_ways(random_trace(17, count=100, rate=12.0), speculating("vllm-v1", 3), EAGLE, gpu_blocks=320,
                         replicas=replicas, max_concurrency=4))


def test_a_horizon_cuts_a_speculating_stretch_where_stepping_stops():
    records = both_ways(random_trace(15), speculating("vllm", 2), NGRAM, gpu_blocks=320, horizon_s=9.0)
    assert records.requests_frame()["finish_s"].isna().any()


def test_speculating_over_a_cached_shared_prefix():
    # the prefix's blocks are shared: a sequence's first decode copies its last block on write, in the stretch's
    # first step, which is scheduled as any
    system = speculating("vllm-v1", 3, prefix_caching=True)
    speculated(both_ways(random_trace(16, prefix=40), system, NGRAM, gpu_blocks=160))


def test_a_bad_step_time_inside_a_speculating_stretch_is_the_same_error():
    trace = Trace([0.0, 0.1], [100, 300], [400, 50], source="test")
    cost = SpeculativeCostModel(NanAfter(), "ngram", None)
    messages = []
    for fast in (False, True):
        with pytest.raises(SpecError) as err:
            simulate(trace, MODEL, speculating("vllm", 3), cost, 96, 0, fast_forward=fast,
                     rng=np.random.default_rng(0))
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "nan" in messages[0]
