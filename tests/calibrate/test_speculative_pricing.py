"""A speculating iteration's price: the verify step as prefill chunks of k + 1 tokens over each context, plus the
proposer's forwards on its own spec (or the n-gram lookups on the host)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from calibrate.clock.costmodel import CostModel
from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.clock.speculative_pricing import PROPOSER_KIND, SpeculativeCostModel, verify_shape
from calibrate.hardware.hardware import load_hardware
from engine.core.batch import Batch, BatchShape
from engine.specs.loader import load_model_spec

TARGET = load_model_spec("llama-3-70b")
DRAFT = load_model_spec("llama-3-8b")
H100 = load_hardware("h100-sxm")
EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "examples" / "speculative_llama3_70b_h100.yaml"


class Shapes(CostModel):
    """Records every shape it prices, at a second each."""

    source = "shapes(test)"

    def __init__(self):
        self.shapes = []

    def iteration_time(self, batch) -> float:
        self.shapes.append((tuple(batch.prefill_lens), tuple(batch.prefill_cached_lens),
                            tuple(batch.decode_context_lens)))
        return 1.0

    def swap_time(self, num_blocks: int) -> float:
        return 0.0


def speculating(contexts, proposed, prefills=()) -> Batch:
    return Batch(prefill_seq_ids=list(range(100, 100 + len(prefills))), prefill_lens=list(prefills),
                 prefill_sample_ids=[(100 + i,) for i in range(len(prefills))],
                 decode_seq_ids=list(range(len(contexts))), decode_context_lens=list(contexts),
                 decode_proposed=list(proposed), num_running_groups=len(contexts) + len(prefills))


def test_a_speculating_decode_is_priced_as_a_chunk_of_k_plus_one_tokens_over_its_context():
    shape = verify_shape(speculating([10, 20, 30], [3, 0, 2], prefills=[7]))
    assert shape.prefill_lens == (7, 4, 3) and shape.prefill_cached_lens == (0, 9, 29)
    assert shape.decode_context_lens == (20,) and shape.num_seqs == 4 and shape.num_tokens == 7 + 4 + 3 + 1
    assert shape.num_logit_rows == 1 + 4 + 3 + 1  # every verified position is scored, a prompt's last alone
    plain = Batch(decode_seq_ids=[0], decode_context_lens=[10])
    assert verify_shape(plain) is plain


@pytest.mark.parametrize("k", [1, 3, 5])
def test_the_verify_prices_the_lm_head_on_each_of_its_k_plus_one_positions(k):
    """Past the ridge (a batch the linear layers are compute bound for), the verify costs the LM head of k more rows
    a sequence than a chunk sampled once: vocab x hidden multiply-adds a row, on the 16-bit roof; below it the
    weights' read hides them, as it hides the rest of the verify's width."""
    roofline = RooflineCostModel(TARGET, H100, tp=4)
    per_row = 2 * TARGET.vocab_size * TARGET.hidden_size / 4 / (H100.peak_flops * RooflineParams().compute_efficiency)
    for batch, head_rows in ((1024, 1024 * k), (1, 0)):
        shape = verify_shape(speculating([100] * batch, [k] * batch))
        sampled_once = replace(shape, extra_logit_rows=0)
        extra = roofline.iteration_time(shape) - roofline.iteration_time(sampled_once)
        assert extra == pytest.approx(head_rows * per_row, rel=1e-9, abs=1e-15)
        assert roofline.breakdown(shape).device_s == roofline.iteration_time(shape)


def test_a_draft_runs_k_decode_forwards_and_the_prompts_on_its_own_clock():
    target, draft = Shapes(), Shapes()
    cost = SpeculativeCostModel(target, "draft", draft)
    assert cost.iteration_time(speculating([10, 20], [3, 1], prefills=[5])) == 1.0 + 4 * 1.0
    assert draft.shapes == [((5,), (), ()), ((), (), (10, 20)), ((), (), (11,)), ((), (), (12,))]
    assert target.shapes == [((5, 4, 2), (0, 9, 19), ())]


def test_an_ngram_proposer_costs_its_lookups_on_the_host_per_speculating_sequence():
    cost = SpeculativeCostModel(Shapes(), "ngram", None, ngram_s_per_sequence=0.5)
    assert cost.iteration_time(speculating([10, 20, 30], [2, 0, 2])) == 1.0 + 2 * 0.5
    breakdown = cost.breakdown(speculating([10], [2]))
    assert breakdown.device[PROPOSER_KIND] == 0.5 and breakdown.device_s == pytest.approx(1.5)


def test_a_proposer_is_for_the_methods_that_run_one():
    with pytest.raises(ValueError, match="ngram"):
        SpeculativeCostModel(Shapes(), "ngram", Shapes())
    with pytest.raises(ValueError, match="draft"):
        SpeculativeCostModel(Shapes(), "draft", None)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_the_verify_is_nearly_free_below_the_ridge_and_costs_k_plus_one_decodes_above_it(k):
    """What makes speculation pay, on the roofline: a decode batch reads every weight once whatever its tokens, so at
    batch 1 verifying k + 1 tokens costs about a decode; far past the ridge a step is compute bound, and k + 1
    tokens a sequence cost about k + 1 decodes (less over long contexts: the verify reads each context once for its
    k + 1 tokens, as k + 1 decodes would read it k + 1 times)."""
    roofline = RooflineCostModel(TARGET, H100, tp=4)
    cost = SpeculativeCostModel(roofline, "ngram", None, ngram_s_per_sequence=0.0)

    def ratio(batch: int) -> float:
        contexts = [100] * batch
        plain = roofline.iteration_time(BatchShape((), tuple(contexts)))
        return cost.iteration_time(speculating(contexts, [k] * batch)) / plain

    assert ratio(1) < 1.05
    assert ratio(1024) > 0.8 * (k + 1)


def test_a_draft_costs_less_than_the_target_it_proposes_for():
    target = RooflineCostModel(TARGET, H100, tp=4)
    draft = RooflineCostModel(DRAFT, H100, tp=4)
    head = RooflineCostModel(replace(TARGET, num_layers=1), H100, tp=4)
    batch = speculating([1000] * 8, [3] * 8)
    by_draft = SpeculativeCostModel(target, "draft", draft).proposer_time(batch)
    by_head = SpeculativeCostModel(target, "eagle", head).proposer_time(batch)
    decode = target.iteration_time(BatchShape((), (1000,) * 8))
    assert 0 < by_head < by_draft < 3 * decode


def test_a_decode_that_proposes_nothing_costs_what_the_base_says_and_a_prompt_the_proposer_too():
    roofline = RooflineCostModel(TARGET, H100, tp=4)
    head = RooflineCostModel(replace(TARGET, num_layers=1), H100, tp=4)
    cost = SpeculativeCostModel(roofline, "eagle", head)
    for batch in (Batch(decode_seq_ids=[0, 1], decode_context_lens=[10, 900]),
                  speculating([10, 20], [0, 0])):
        assert cost.iteration_time(batch) == roofline.iteration_time(batch)
        assert cost.breakdown(batch) == roofline.breakdown(batch)
    prompts = Batch(prefill_seq_ids=[0], prefill_lens=[300], prefill_sample_ids=[(0,)])
    assert cost.iteration_time(prompts) == roofline.iteration_time(prompts) + head.iteration_time(BatchShape((300,)))


@pytest.mark.parametrize("proposed", [[3, 3, 3, 3], [3, 1, 0, 2], [0, 0, 5, 5], [1, 1, 1, 1]])
def test_the_proposers_forwards_priced_as_stretches_are_the_floats_of_one_call_each(proposed):
    # the example's EAGLE head on the example's clock: the j-th forward runs the decodes proposing more than j, each
    # over its context + j (contexts that cross a block boundary on the way)
    from sim.experiment.config import load_experiment
    from sim.experiment.run import make_cost_model

    exp = load_experiment(EXAMPLE)
    cost = make_cost_model(exp, next(s for s in exp.systems if s.name == "eagle k=5"))
    contexts = [15, 16, 17, 1000]
    batch = speculating(contexts, proposed, prefills=[300])
    expected = cost.proposer.iteration_time(BatchShape((300,), ()))
    for j in range(max(proposed)):
        expected += cost.proposer.iteration_time(BatchShape((), tuple(c + j for c, k in zip(contexts, proposed)
                                                                      if k > j)))
    assert cost.proposer_time(batch) == expected


def stretch_of(seed: int, k: int, num_decodes: int, steps: int = 12) -> list[Batch]:
    """A speculating stretch's batches: the same decodes, each context grown by 1 + an accepted count a step, each
    proposing k but fewer near its end (some contexts crossing a block boundary)."""
    rng = np.random.default_rng(seed)
    contexts = [int(c) for c in rng.integers(1, 3000, num_decodes)]
    finals = [c + int(rng.integers(2, 60)) for c in contexts]
    batches = []
    for _ in range(steps):
        proposed = [min(k, max(f - c - 1, 0)) for c, f in zip(contexts, finals)]
        batches.append(speculating(contexts, proposed))
        contexts = [min(c + 1 + int(rng.integers(0, p + 1)), f - 1) for c, p, f in zip(contexts, proposed, finals)]
    return batches


@pytest.mark.parametrize("system", ["eagle k=3", "eagle k=5", "ngram", "roofline draft", "roofline eagle"])
@pytest.mark.parametrize("seed", range(3))
def test_a_speculating_stretch_priced_together_is_the_floats_of_one_call_each(system, seed):
    # the example's clock (the engine's overlap and graph padding over a fitted roofline with decode waves) and a bare
    # roofline (its per-block term); a step with a prompt or a swap is priced a call each
    from sim.experiment.config import load_experiment
    from sim.experiment.run import make_cost_model

    if system.startswith("roofline"):
        target = RooflineCostModel(TARGET, H100, tp=4)
        proposer = RooflineCostModel(DRAFT if system.endswith("draft") else replace(TARGET, num_layers=1), H100, tp=4)
        cost, k = SpeculativeCostModel(target, system.split()[1], proposer), 4
    else:
        exp = load_experiment(EXAMPLE)
        spec = next(s for s in exp.systems if s.name == ("eagle k=3" if system == "ngram" else system))
        if system == "ngram":
            spec = replace(spec, speculative=replace(spec.speculative, method="ngram"))
        cost, k = make_cost_model(exp, spec), spec.speculative.num_speculative_tokens
    batches = stretch_of(seed, k, (1, 6, 40)[seed])
    assert cost.step_time_list(batches) == [cost.step_time(batch) for batch in batches]
    mixed = [*batches[:3], speculating([100, 200], [k, 1], prefills=[50]), *batches[3:]]
    assert cost.step_time_list(mixed) == [cost.step_time(batch) for batch in mixed]
