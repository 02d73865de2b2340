"""The cost models' per-iteration arithmetic as written for speed gives the very floats of the reference
expression it replaced: RooflineCostModel.iteration_time (inlined, constants bound once) against
reference_iteration_time (the _time expression a decode stretch is priced with), and the decode stretch's
block sums counted per residue (stretch_block_sums) against every step's sum of ceilings (reference_block_sums).
(and a short decode stretch priced a step at a time on Python floats, _stretch_on_floats, against
reference_decode_iteration_times on arrays).
The simulator adds these times into its clock, so == on the floats' bits, never approx: one different rounding
changes every record after it. ProfileCostModel.iteration_time is unchanged; its decode stretches use the new
block sums, so its stretches are checked against one call per step here too.
"""
from __future__ import annotations

import pickle

import numpy as np
from cost_model_cases import (
    A100_80,
    LLAMA7B,
    PROFILE_MODELS,
    PROFILES,
    ROOFLINES,
    batches,
    bits,
)
from hypothesis import given
from hypothesis import strategies as st

from calibrate.clock.costmodel import SCALAR_STEPS, decode_shapes, reference_block_sums, stretch_block_sums
from calibrate.cost_models.profile_model import transferred_roofline
from engine.core.batch import BatchShape
from tests.helpers.core_harness import hyp


@hyp(max_examples=150)
@given(batch=batches)
def test_iteration_time_is_the_reference_expression_to_the_bit(batch):
    shape = batch.shape()  # the simulator prices live batches and, in fast-forward, their shapes
    for name, model in ROOFLINES.items():
        reference = model.reference_iteration_time(batch)
        assert isinstance(model.iteration_time(batch), float), name
        assert bits(model.iteration_time(batch)) == bits(reference), name
        assert bits(model.iteration_time(shape)) == bits(model.reference_iteration_time(shape)) == bits(reference), name


def test_the_empty_and_decode_only_and_prefill_only_batches_and_a_speculative_verify():
    verify = BatchShape((7, 4, 4), (20,), 0, 0, 4, (0, 99, 2047), extra_logit_rows=6)  # two decodes verifying 3 each
    for batch in (BatchShape((), ()), BatchShape((), (17, 1, 4096)), BatchShape((512,), ()),
                  BatchShape((3, 900), (16, 32, 33), 2, 3, 5, (0, 16)), verify):
        for name, model in ROOFLINES.items():
            assert bits(model.iteration_time(batch)) == bits(model.reference_iteration_time(batch)), (name, batch)


@hyp(max_examples=300)
@given(contexts=st.lists(st.integers(0, 5000), max_size=64), num_steps=st.integers(1, 200),
       block_size=st.sampled_from([1, 2, 8, 16, 32, 256]) | st.integers(1, 300))
def test_stretch_block_sums_are_every_steps_sum_of_ceilings(contexts, num_steps, block_size):
    # num_steps crosses LIST_STEPS (a Python list below, numpy above): both ways give the same integers
    batch = BatchShape((), tuple(contexts))
    fast, reference = stretch_block_sums(batch, num_steps, block_size), reference_block_sums(batch, num_steps,
                                                                                              block_size)
    assert fast.dtype == reference.dtype == np.int64 and fast.shape == (num_steps,)
    assert fast.tolist() == reference.tolist()


@hyp(max_examples=40)
@given(batch=batches, num_steps=st.integers(1, 150))
def test_every_kind_prices_a_stretch_as_one_call_per_step(batch, num_steps):
    for name, model in {**ROOFLINES, **PROFILE_MODELS}.items():
        at_once = model.decode_iteration_times(batch, num_steps)
        one_by_one = [model.iteration_time(shape) for shape in decode_shapes(batch, num_steps)]
        assert at_once.tobytes() == np.array(one_by_one, dtype=float).tobytes(), name


@hyp(max_examples=80)
@given(batch=batches, num_steps=st.integers(1, 40) | st.integers(SCALAR_STEPS - 8, SCALAR_STEPS + 8))
def test_a_short_stretch_on_floats_is_the_array_expression_to_the_bit(batch, num_steps):
    # up to SCALAR_STEPS a roofline prices a stretch a step at a time on Python floats; above, on arrays
    for name, model in ROOFLINES.items():
        fast = model.decode_iteration_times(batch, num_steps)
        reference = model.reference_decode_iteration_times(batch, num_steps)
        assert fast.dtype == reference.dtype == np.float64 and fast.shape == reference.shape == (num_steps,)
        assert fast.tobytes() == reference.tobytes(), name


@hyp(max_examples=60)
@given(batch=batches, num_steps=st.integers(1, 40))
def test_a_stretch_as_python_floats_is_its_step_times(batch, num_steps):
    # fast-forward adds up decode_step_time_list one float at a time: the same floats as decode_step_times,
    # with swaps (priced apart) or without (the roofline's short stretch straight from RooflineTerms)
    for name, model in {**ROOFLINES, **PROFILE_MODELS}.items():
        floats = model.decode_step_time_list(batch, num_steps)
        assert [type(t) for t in floats] == [float] * num_steps, name
        assert np.array(floats).tobytes() == model.decode_step_times(batch, num_steps).tobytes(), name


def test_a_roofline_pickled_or_with_its_host_work_turned_off_prices_as_the_reference():
    # the bound terms (calibrate/clock/roofline_terms.py, compiled where the control plane is) are bound again on
    # arrival in a worker process, and when a validation turns charge_host off after construction
    batch = BatchShape((3, 900), (16, 32, 33), 2, 3, 5, (0, 16))
    for name, model in ROOFLINES.items():
        arrived = pickle.loads(pickle.dumps(model))
        assert bits(arrived.iteration_time(batch)) == bits(model.iteration_time(batch)), name
        assert arrived.decode_iteration_times(batch, 7).tobytes() == model.decode_iteration_times(batch, 7).tobytes()
    model = transferred_roofline(PROFILES / "a100-80gb-linear.yaml", None, LLAMA7B, A100_80, 1, 2, 16)
    with_host = model.iteration_time(batch)
    model.charge_host = False
    assert bits(model.iteration_time(batch)) == bits(model.reference_iteration_time(batch))
    assert model.iteration_time(batch) < with_host
    stretch = model.decode_iteration_times(batch, 3)
    assert stretch.tobytes() == model.reference_decode_iteration_times(batch, 3).tobytes()
