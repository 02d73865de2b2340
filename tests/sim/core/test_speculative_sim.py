"""Speculative decoding in the simulator: the accepted counts drawn from the run's seeded generator at the configured
rates, a run with nothing accepted serving every request as a run without speculation (its time differing only by
pricing), and the same seed the same bytes."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from calibrate.clock.costmodel import CostModel
from calibrate.clock.speculative_pricing import SpeculativeCostModel
from engine.core.batch import Batch
from engine.core.records import ITERATION_COLUMNS
from engine.core.speculative import SpeculativeSpec, rate_for_mean
from engine.core.system import PAPER_SYSTEMS
from sim.core.acceptance import AcceptanceModel
from sim.core.simulate import simulate
from tests.helpers.simulation import MODEL, ROOFLINE, random_trace

VLLM = replace(PAPER_SYSTEMS["vllm"], max_num_batched_tokens=None)


def speculating(k: int, rates: tuple[float, ...]) -> SpeculativeSpec:
    return SpeculativeSpec("ngram", k, rates)


class PerSequence(CostModel):
    """A time that depends on the sequences a step runs alone: a verify step costs what the decode it replaces does."""

    source = "per-sequence(test)"

    def iteration_time(self, batch) -> float:
        return 0.01 + 0.001 * batch.num_seqs

    def swap_time(self, num_blocks: int) -> float:
        return 0.0


@pytest.mark.parametrize("rates", [(rate_for_mean(2.0, 4),) * 4, (0.9, 0.7, 0.5, 0.3)])
def test_accepted_tokens_a_step_are_within_one_percent_of_the_configured_mean(rates):
    spec = speculating(4, rates)
    model = AcceptanceModel(spec, np.random.default_rng(7))
    batch = Batch(decode_seq_ids=list(range(1000)), decode_context_lens=[10] * 1000, decode_proposed=[4] * 1000)
    drawn = np.concatenate([model.accepted(batch) for _ in range(300)])
    assert set(np.unique(drawn)) <= {0, 1, 2, 3, 4}
    assert abs(drawn.mean() - spec.expected_accepted) <= 0.01 * spec.expected_accepted
    # the rates are conditional: the share that got past position i over the share that reached it
    reached = [(drawn >= i).mean() for i in range(5)]
    for i, rate in enumerate(rates):
        assert reached[i + 1] / reached[i] == pytest.approx(rate, abs=0.01)


def test_a_decode_proposing_fewer_reads_only_its_first_positions():
    model = AcceptanceModel(speculating(3, (1.0, 1.0, 1.0)), np.random.default_rng(0))
    assert model.accepted(Batch(decode_seq_ids=[0, 1, 2], decode_context_lens=[5, 5, 5],
                                decode_proposed=[3, 1, 0])) == [3, 1, 0]


def test_with_nothing_accepted_every_request_is_served_as_without_speculation():
    trace = random_trace(3, count=80)
    plain = simulate(trace, MODEL, VLLM, PerSequence(), 400, 64, rng=np.random.default_rng(0))
    spec = replace(VLLM, speculative=speculating(3, (0.0, 0.0, 0.0)))
    free = SpeculativeCostModel(PerSequence(), "ngram", None, ngram_s_per_sequence=0.0)
    spec_run = simulate(trace, MODEL, spec, free, 400, 64, rng=np.random.default_rng(0))
    assert [row[:9] for row in spec_run.request_values] == [row[:9] for row in plain.request_values]
    assert all(row[-1] == 0 and row[-2] > 0 for row in spec_run.request_values if row[6] > 1)
    # every iteration the same but for the pool's breakdown, which holds the proposals' slots while they run
    same = [name for name in ITERATION_COLUMNS if not name.startswith("kv_") and "blocks" not in name] + ["kv_token"]
    a, b = plain.iterations, spec_run.iterations
    assert {name: a[name] for name in same} == {name: b[name] for name in same}
    assert not plain.speculation_values and len(spec_run.speculation_values) == spec_run.num_iterations


def test_speculation_serves_every_request_exactly_in_fewer_steps():
    trace = random_trace(4, count=60)
    plain = simulate(trace, MODEL, VLLM, ROOFLINE, 400, 64, rng=np.random.default_rng(1))
    spec = replace(VLLM, speculative=speculating(4, (0.8,) * 4))
    cost = SpeculativeCostModel(ROOFLINE, "ngram", None)
    run = simulate(trace, MODEL, spec, cost, 400, 64, rng=np.random.default_rng(1))
    assert sorted(row[:2] + row[5:8] for row in run.request_values) == \
        sorted(row[:2] + row[5:8] for row in plain.request_values)
    assert run.num_iterations < plain.num_iterations
    proposed = sum(p for p, _ in run.speculation_values)
    accepted = sum(a for _, a in run.speculation_values)
    rows = run.request_values
    assert (proposed, accepted) == (sum(row[-2] for row in rows), sum(row[-1] for row in rows))
    assert 0 < accepted < proposed


def test_the_same_seed_gives_the_same_bytes_and_a_plain_run_draws_nothing_new():
    trace = random_trace(5, count=60)
    spec = replace(VLLM, speculative=speculating(3, (0.7, 0.5, 0.3)))
    cost = SpeculativeCostModel(ROOFLINE, "ngram", None)
    runs = [simulate(trace, MODEL, spec, cost, 200, 64, rng=np.random.default_rng(9), replicas=2) for _ in range(2)]
    assert runs[0].requests_frame().to_csv() == runs[1].requests_frame().to_csv()
    assert runs[0].iterations_frame().to_csv() == runs[1].iterations_frame().to_csv()
    rng = np.random.default_rng(9)
    state = rng.bit_generator.state
    simulate(trace, MODEL, VLLM, ROOFLINE, 200, 64, rng=rng, replicas=2)
    assert rng.bit_generator.state == state


def test_a_speculating_run_needs_the_seeded_generator():
    spec = replace(VLLM, speculative=speculating(2, (0.5, 0.5)))
    with pytest.raises(ValueError, match="seeded rng"):
        simulate(random_trace(0, count=5), MODEL, spec, SpeculativeCostModel(ROOFLINE, "ngram", None), 200, 64)


class FirstProposalKept:
    """An acceptance source that keeps each decode's first proposal, and notes every batch it was asked about."""

    def __init__(self):
        self.asked: list[list[int]] = []

    def accepted(self, batch: Batch) -> list[int]:
        self.asked.append(list(batch.decode_proposed))
        return [min(1, proposed) for proposed in batch.decode_proposed]


def test_a_given_acceptance_source_decides_every_step_in_place_of_the_draws():
    """Keeping the first proposal alone is what rates (1, 0, 0) draw: the same records to the bit, with no generator;
    and the iterations' frame carries each step's tokens proposed and accepted, as the real engine's does."""
    trace = random_trace(7, count=60, rate=20.0)
    spec = replace(VLLM, speculative=speculating(3, (1.0, 0.0, 0.0)))
    cost = SpeculativeCostModel(ROOFLINE, "ngram", None)
    given = FirstProposalKept()
    replayed = simulate(trace, MODEL, spec, cost, 60, 400, acceptance=given)
    drawn = simulate(trace, MODEL, spec, cost, 60, 400, rng=np.random.default_rng(4))
    assert replayed.requests_frame().to_csv() == drawn.requests_frame().to_csv()
    assert replayed.iterations_frame().to_csv() == drawn.iterations_frame().to_csv()
    iterations = replayed.iterations_frame()
    decoding = iterations[iterations["num_decodes"] > 0]  # every step with decodes asks, in the order they ran
    assert decoding["proposed_tokens"].tolist() == [sum(asked) for asked in given.asked]
    assert decoding["accepted_tokens"].tolist() == [sum(min(1, p) for p in asked) for asked in given.asked]
    requests = replayed.requests_frame()
    assert requests["accepted_tokens"].sum() == iterations["accepted_tokens"].sum() > 0
    assert "proposed_tokens" not in simulate(trace, MODEL, VLLM, cost, 60, 400).iterations_frame()


def test_a_given_acceptance_source_replays_one_speculating_replica():
    trace, cost = random_trace(0, count=5), SpeculativeCostModel(ROOFLINE, "ngram", None)
    spec = replace(VLLM, speculative=speculating(2, (0.5, 0.5)))
    with pytest.raises(ValueError, match="replays one replica's steps, but the fleet has 2"):
        simulate(trace, MODEL, spec, cost, 200, 64, replicas=2, acceptance=FirstProposalKept())
    with pytest.raises(ValueError, match="system 'vLLM' does not speculate"):
        simulate(trace, MODEL, VLLM, cost, 200, 64, acceptance=FirstProposalKept())


def test_giving_every_decode_its_slots_at_once_decides_what_the_walk_does(monkeypatch):
    """Where every running sequence's slots fit, a speculating step takes them at once instead of walking the groups
    (VLLMScheduler._lookahead_fits_all): the same records to the bit, in a pool tight enough to preempt too."""
    from engine.core.scheduler.vllm import VLLMScheduler

    trace = random_trace(6, count=80, rate=20.0)
    spec = replace(VLLM, speculative=speculating(4, (0.8, 0.6, 0.4, 0.2)), preemption="swap")
    cost = SpeculativeCostModel(ROOFLINE, "ngram", None)

    def run():
        return simulate(trace, MODEL, spec, cost, 60, 400, rng=np.random.default_rng(2))

    fast = run()
    monkeypatch.setattr(VLLMScheduler, "_lookahead_fits_all", lambda self, plan: False)
    walked = run()
    assert fast.requests_frame().to_csv() == walked.requests_frame().to_csv()
    assert fast.iterations_frame().to_csv() == walked.iterations_frame().to_csv()
    assert fast.speculation_values == walked.speculation_values
    assert sum(row[8] for row in fast.request_values) > 0  # it preempted


def test_drawing_a_block_of_decodes_ahead_draws_what_a_step_at_a_time_does():
    spec = speculating(3, (0.9, 0.5, 0.2))
    batches = [Batch(decode_seq_ids=list(range(n)), decode_context_lens=[9] * n, decode_proposed=[3, 2, 0, 1][:n])
               for n in (4, 1, 0, 3, 4, 2) * 50]
    ahead, stepwise = AcceptanceModel(spec, np.random.default_rng(3)), AcceptanceModel(spec, np.random.default_rng(3),
                                                                                        block=1)
    assert [ahead.accepted(b) for b in batches] == [stepwise.accepted(b) for b in batches]


def test_counts_seen_ahead_are_those_handed_out_after():
    # a speculating stretch plans its iterations on the counts ahead (sim.core.fast_forward), then hands out those of
    # the iterations it ran: the draws, and those after, are a step at a time's
    spec = speculating(3, (0.9, 0.5, 0.2))
    batches = [Batch(decode_seq_ids=list(range(n)), decode_context_lens=[9] * n, decode_proposed=[3, 2, 0, 1][:n])
               for n in (4, 1, 3, 4, 2) * 30]
    planned, stepwise = AcceptanceModel(spec, np.random.default_rng(4), block=7), \
        AcceptanceModel(spec, np.random.default_rng(4))
    seen, offset = [], 0
    for batch in batches[:100]:
        seen.append(planned.ahead(batch, offset))
        offset += len(batch.decode_proposed)
    planned.skip(offset)
    assert seen + [planned.accepted(b) for b in batches[100:]] == [stepwise.accepted(b) for b in batches]
