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
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from calibrate.attention_fit import AttentionFit
from calibrate.attention_waves import WaveFit
from calibrate.costmodel import decode_shapes, reference_block_sums, stretch_block_sums
from calibrate.hardware import load_hardware
from calibrate.profile_model import ProfileCostModel, transferred_roofline
from calibrate.roofline import RooflineCostModel, RooflineParams
from engine.core.batch import Batch, BatchShape
from engine.specs.loader import load_model_spec
from tests.helpers.core_harness import hyp

PROFILES = Path(__file__).resolve().parents[2] / "calibrate" / "profiles"
OPT13B, A100 = load_model_spec("opt-13b"), load_hardware("a100-40gb")
LLAMA7B, A100_80 = load_model_spec("llama-7b"), load_hardware("a100-80gb")

MEASURED = AttentionFit(15e-6, 0.75, 12e-6, 0.45, 0.4, 0.1)
# decode in waves: the A100 fit's geometry, and one block per SM with floors past the slots
WAVES = WaveFit(5e-6, 2e-6, 6e-6, 0.84, 2, (95 / 108, 157 / 108), 1, 4096)
ONE_PER_SM = WaveFit(5e-6, 0.0, 6e-6, 0.8, 1, (1.3,), 2, 2048)
ROOFLINES = {  # every switch of the inlined expression: ridge bend, overhead, ring or measured all-reduce, copies,
    # dense or paged attention, measured attention, measured kernels, host work
    "roofline": RooflineCostModel(OPT13B, A100),
    "roofline dense": RooflineCostModel(OPT13B, A100, paged=False, block_size=32),
    "roofline bent, overhead, tp 2": RooflineCostModel(OPT13B, A100, tp=2, params=RooflineParams(
        ridge_efficiency=0.8, overhead_s=0.0013)),
    "roofline block size 1": RooflineCostModel(OPT13B, A100, block_size=1),
    "transferred (linear profile)": transferred_roofline(PROFILES / "a100-80gb-linear.yaml", None, LLAMA7B, A100_80,
                                                         1, 2, 16),
    "transferred, tp 4": transferred_roofline(PROFILES / "a100-80gb-linear.yaml", None,
                                              load_model_spec("llama-13b"), A100_80, 4, 2, 16),
    "roofline, measured attention, tp 2": RooflineCostModel(OPT13B, A100, tp=2, attention=MEASURED),
    "roofline, measured attention without its byte terms": RooflineCostModel(OPT13B, A100, attention=replace(
        MEASURED, prefill_kv_bandwidth_efficiency=None, prefill_output_bandwidth_efficiency=None)),
    "roofline, measured attention in waves, tp 2": RooflineCostModel(LLAMA7B, A100_80, tp=2,
                                                                     attention=replace(MEASURED, waves=WAVES)),
    "roofline, measured attention in waves, one block per SM": RooflineCostModel(
        OPT13B, load_hardware("h100-sxm"), attention=replace(MEASURED, waves=ONE_PER_SM)),
    "transferred (profile with measured attention)": transferred_roofline(PROFILES / "a100-80gb.yaml", None, LLAMA7B,
                                                                         A100_80, 1, 2, 16),
    "transferred h200 profile (host work)": transferred_roofline(PROFILES / "h200-opt-13b.yaml", None, OPT13B, A100,
                                                                 1, 2, 16),
}
PROFILE_MODELS = {
    "h200 profile (host work, serving factor)": ProfileCostModel.from_profile(PROFILES / "h200-opt-13b.yaml"),
    "cpu profile": ProfileCostModel.from_profile(PROFILES / "cpu-opt-125m.yaml"),
}

lengths = st.lists(st.integers(1, 4000), max_size=200)
batches = st.builds(
    lambda decodes, prefills, cached, copies, swaps: Batch(
        prefill_seq_ids=list(range(len(prefills))), prefill_lens=prefills,
        prefill_sample_ids=[(i,) for i in range(len(prefills))],
        prefill_cached_lens=[cached] * len(prefills) if cached else [],
        decode_seq_ids=list(range(100, 100 + len(decodes))), decode_context_lens=decodes,
        blocks_to_copy=[(0, 1)] * copies, blocks_to_swap_in=[(0, 1)] * swaps,
        num_running_groups=len(prefills) + len(decodes)),
    lengths, st.lists(st.integers(1, 3000), max_size=4), st.sampled_from([0, 0, 16, 80, 1000]),
    st.integers(0, 3), st.integers(0, 2))


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


@hyp(max_examples=150)
@given(batch=batches)
def test_iteration_time_is_the_reference_expression_to_the_bit(batch):
    shape = batch.shape()  # the simulator prices live batches and, in fast-forward, their shapes
    for name, model in ROOFLINES.items():
        reference = model.reference_iteration_time(batch)
        assert isinstance(model.iteration_time(batch), float), name
        assert bits(model.iteration_time(batch)) == bits(reference), name
        assert bits(model.iteration_time(shape)) == bits(model.reference_iteration_time(shape)) == bits(reference), name


def test_the_empty_and_decode_only_and_prefill_only_batches():
    for batch in (BatchShape((), ()), BatchShape((), (17, 1, 4096)), BatchShape((512,), ()),
                  BatchShape((3, 900), (16, 32, 33), 2, 3, 5, (0, 16))):
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
@given(batch=batches, num_steps=st.integers(1, 40))
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
    # the bound terms (calibrate/roofline_terms.py, compiled where the control plane is) are bound again on
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
