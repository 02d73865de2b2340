"""The commonest speculating iteration priced written out (calibrate/clock/speculating_terms.py) is the float the
composed models give: the target's engine model on the verify shape plus the proposer's forwards, a call each."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from calibrate.clock.engine_clock import EngineCostModel
from calibrate.clock.roofline import RooflineCostModel
from calibrate.clock.speculative_pricing import SpeculativeCostModel, proposer_stretches, verify_shape
from calibrate.hardware.hardware import load_hardware
from engine.core.batch import Batch, BatchShape
from engine.specs.loader import load_model_spec

TARGET = load_model_spec("llama-3-70b")
DRAFT = load_model_spec("llama-3-8b")
H100 = load_hardware("h100-sxm")
EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "examples" / "speculative_llama3_70b_h100.yaml"
GRAPHS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def example(name: str, method: str | None = None) -> SpeculativeCostModel:
    """The example's clock: engine models (overlap, graph padding) over fitted rooflines with decode waves."""
    from sim.experiment.config import load_experiment
    from sim.experiment.run import make_cost_model

    exp = load_experiment(EXAMPLE)
    system = next(s for s in exp.systems if s.name == name)
    if method is not None:
        system = replace(system, speculative=replace(system.speculative, method=method))
    return make_cost_model(exp, system)


def engine(model: RooflineCostModel, overlap: bool, serial: bool) -> EngineCostModel:
    return EngineCostModel(model, overlap, GRAPHS, (lambda seqs, tokens: 2e-4 + 1e-6 * seqs) if serial else None)


def bare(method: str, wrap=None) -> SpeculativeCostModel:
    """Rooflines of the formula (a per-block term, no fit), under engine models `wrap` builds, or none."""
    target = RooflineCostModel(TARGET, H100, tp=4)
    proposer = RooflineCostModel(DRAFT if method == "draft" else replace(TARGET, num_layers=1), H100, tp=4)
    if wrap is not None:
        target, proposer = wrap(target), wrap(proposer)
    return SpeculativeCostModel(target, method, proposer)


SYSTEMS = {
    "example eagle k=3": lambda: example("eagle k=3"),
    "example eagle k=5": lambda: example("eagle k=5"),
    "example ngram": lambda: example("eagle k=3", "ngram"),
    "roofline draft": lambda: bare("draft"),
    "roofline eagle": lambda: bare("eagle"),
    "engine in series": lambda: bare("draft", lambda m: engine(m, overlap=False, serial=False)),
    "engine overlapping, serial work": lambda: bare("eagle", lambda m: engine(m, overlap=True, serial=True)),
}


def speculating(rng: np.random.Generator, k: int, num_decodes: int) -> Batch:
    """Decodes alone over contexts from 1 (nothing cached) to 4000, each proposing k (half the batches), else 1 to k
    (mostly k)."""
    contexts = [int(c) for c in rng.integers(1, 4000, num_decodes)]
    if rng.random() < 0.2:
        contexts[0] = 1
    alike = rng.random() < 0.5
    proposed = [k if alike or rng.random() < 0.7 else int(rng.integers(1, k + 1)) for _ in contexts]
    return Batch(decode_seq_ids=list(range(num_decodes)), decode_context_lens=contexts, decode_proposed=proposed,
                 num_running_groups=num_decodes)


def composed(cost: SpeculativeCostModel, batch: Batch) -> float:
    """The iteration as the models compose it, a call each: the target's on the verify shape, the proposer's."""
    return cost.base.iteration_time(verify_shape(batch)) + composed_proposer(cost, batch)


def composed_proposer(cost: SpeculativeCostModel, batch: Batch) -> float:
    """The proposals' seconds as the proposer's model gives them: on the prompts, then each run of its forwards."""
    if cost.proposer is None:
        return cost.ngram_s_per_sequence * sum(1 for k in batch.decode_proposed if k)
    seconds = 0.0
    if batch.prefill_lens:
        seconds += cost.proposer.iteration_time(BatchShape(tuple(batch.prefill_lens), ()))
    for shape, num_steps in proposer_stretches(batch.decode_context_lens, batch.decode_proposed):
        for step_s in cost.proposer.decode_step_time_list(shape, num_steps):
            seconds += step_s
    return seconds


@pytest.mark.parametrize("system", SYSTEMS)
def test_a_speculating_iteration_written_out_is_the_composed_models_float(system):
    cost = SYSTEMS[system]()
    terms = cost.terms()
    assert terms is not None
    rng = np.random.default_rng(len(system))
    k = 5 if "k=5" in system else 3
    batches = [speculating(rng, k, int(n)) for n in rng.integers(1, 300, 60)]
    for batch in batches:
        assert terms.prices(batch)
        assert cost.iteration_time(batch) == composed(cost, batch), (batch.decode_context_lens, batch.decode_proposed)
    assert cost.step_time_list(batches) == [composed(cost, batch) + 0.0 for batch in batches]


@pytest.mark.parametrize("system", SYSTEMS)
def test_a_step_with_prompts_or_decodes_proposing_nothing_runs_the_proposers_forwards_written_out(system):
    cost = SYSTEMS[system]()
    rng = np.random.default_rng(len(system))
    for n in rng.integers(1, 200, 60):
        batch = speculating(rng, 3, int(n))
        batch.decode_proposed = [k if rng.random() < 0.8 else 0 for k in batch.decode_proposed]
        if rng.random() < 0.6:
            prompts = [int(p) for p in rng.integers(1, 3000, int(rng.integers(1, 4)))]
            batch.prefill_seq_ids, batch.prefill_lens = list(range(1000, 1000 + len(prompts))), prompts
            batch.prefill_sample_ids = [(i,) for i in batch.prefill_seq_ids]
        assert cost.proposer_time(batch) == composed_proposer(cost, batch)
        assert cost.iteration_time(batch) == composed(cost, batch)


def test_what_it_does_not_price_is_priced_as_the_models_compose_it():
    cost = example("eagle k=3")
    terms = cost.terms()
    assert terms is not None
    some_propose = Batch(decode_seq_ids=[0, 1], decode_context_lens=[10, 20], decode_proposed=[3, 0])
    with_prompt = Batch(prefill_seq_ids=[5], prefill_lens=[40], prefill_sample_ids=[(5,)], decode_seq_ids=[0],
                        decode_context_lens=[10], decode_proposed=[3])
    swapping = Batch(decode_seq_ids=[0], decode_context_lens=[10], decode_proposed=[3], blocks_to_swap_in=[(1, 2)])
    for batch in (some_propose, with_prompt, swapping):
        assert not terms.prices(batch)
    assert cost.step_time_list([some_propose, with_prompt]) == [composed(cost, some_propose) + 0.0,
                                                                composed(cost, with_prompt) + 0.0]


def test_a_clock_of_another_kind_is_priced_as_the_models_compose_it():
    class Subclassed(RooflineCostModel):
        pass

    cost = SpeculativeCostModel(Subclassed(TARGET, H100, tp=4), "ngram", None)
    assert cost.terms() is None


def test_what_it_keeps_goes_when_a_roofline_binds_its_terms_afresh():
    cost = example("eagle k=3")
    batch = speculating(np.random.default_rng(0), 3, 40)
    kept = cost.terms()
    assert cost.terms() is kept
    cost.charge_host = False  # the verify's roofline binds its terms afresh, without the host work
    assert cost.terms() is not kept
    assert cost.iteration_time(batch) == composed(cost, batch)
