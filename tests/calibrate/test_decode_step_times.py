"""CostModel.decode_step_times: the times of a decode stretch at once, the same floats as one call each.

The simulator's fast-forward (sim/core/fast_forward.py) adds these to its clock in place of one step_time call
per iteration, so they must match to the bit, for every cost model a config can name and for the
default that loops.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from calibrate.clock.costmodel import CostModel, ScaledCostModel, decode_shapes
from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.cost_models.profile_model import ProfileCostModel, transferred_roofline
from calibrate.hardware.hardware import load_hardware
from engine.core.batch import Batch
from engine.specs.loader import load_model_spec
from tests.helpers.core_harness import hyp

PROFILES = Path(__file__).resolve().parents[2] / "calibrate" / "profiles"
OPT13B, A100 = load_model_spec("opt-13b"), load_hardware("a100-40gb")


class Affine(CostModel):
    """A cost model with only iteration_time: the default loops over it."""

    source = "affine(test)"

    def iteration_time(self, batch) -> float:
        return 0.003 + 1.7e-5 * batch.sum_decode_context + 3e-6 * batch.max_decode_context + 1e-4 * batch.num_prefills

    def swap_time(self, num_blocks: int) -> float:
        return 1.3e-4 * num_blocks


class OwnStep(Affine):
    """One that overrides step_time itself: the default must call it."""

    def step_time(self, batch) -> float:
        return self.iteration_time(batch) * 1.1 + 0.0007


COST_MODELS = {
    "roofline": RooflineCostModel(OPT13B, A100),
    "roofline bent, overhead, tp 2": RooflineCostModel(OPT13B, A100, tp=2, params=RooflineParams(
        ridge_efficiency=0.8, overhead_s=0.0013)),
    "a100 linear profile (transfer)": transferred_roofline(PROFILES / "a100-80gb-linear.yaml", None,
                                                           load_model_spec("llama-7b"), load_hardware("a100-80gb"),
                                                           1, 2, 16),
    "a100 linear profile, tp 4": transferred_roofline(PROFILES / "a100-80gb-linear.yaml", None,
                                                      load_model_spec("llama-13b"), load_hardware("a100-80gb"),
                                                      4, 2, 16),
    "h200 profile (host work, serving factor)": ProfileCostModel.from_profile(PROFILES / "h200-opt-13b.yaml"),
    "cpu profile": ProfileCostModel.from_profile(PROFILES / "cpu-opt-125m.yaml"),
    "h200 profile transferred": transferred_roofline(PROFILES / "h200-opt-13b.yaml", None, OPT13B, A100, 1, 2, 16),
    "scaled": ScaledCostModel(RooflineCostModel(OPT13B, A100), 1.37),
    "default loop": Affine(),
    "own step_time": OwnStep(),
}

batches = st.builds(
    lambda decodes, prefills, cached, copies, swap_in, swap_out: Batch(
        prefill_seq_ids=list(range(len(prefills))), prefill_lens=prefills,
        prefill_sample_ids=[(i,) for i in range(len(prefills))],
        prefill_cached_lens=[cached] * len(prefills) if cached else [],
        decode_seq_ids=list(range(100, 100 + len(decodes))), decode_context_lens=decodes,
        blocks_to_copy=[(0, 1)] * copies, blocks_to_swap_in=[(0, 1)] * swap_in, blocks_to_swap_out=[(1, 0)] * swap_out,
        num_running_groups=len(prefills) + len(decodes)),
    st.lists(st.integers(1, 2000), min_size=0, max_size=300),
    st.lists(st.integers(1, 1500), max_size=3), st.sampled_from([0, 0, 16, 80]),
    st.integers(0, 3), st.integers(0, 2), st.integers(0, 2))


@hyp(max_examples=60)
@given(batch=batches, num_steps=st.integers(1, 300))
def test_the_same_floats_as_one_call_each(batch, num_steps):
    for name, model in COST_MODELS.items():
        at_once = model.decode_step_times(batch, num_steps)
        one_by_one = np.array([model.step_time(shape) for shape in decode_shapes(batch, num_steps)])
        assert at_once.dtype == np.float64 and at_once.shape == (num_steps,)
        assert at_once.tobytes() == one_by_one.tobytes(), name
        iterations = [model.iteration_time(shape) for shape in decode_shapes(batch, num_steps)]
        assert model.decode_iteration_times(batch, num_steps).tolist() == iterations, name


def test_the_shapes_grow_every_context_by_one_and_keep_the_rest():
    batch = Batch(prefill_seq_ids=[7], prefill_lens=[30], prefill_sample_ids=[(7,)], decode_seq_ids=[1, 2],
                  decode_context_lens=[10, 40], blocks_to_copy=[(3, 4)], num_running_groups=3)
    shapes = list(decode_shapes(batch, 3))
    assert [s.decode_context_lens for s in shapes] == [(10, 40), (11, 41), (12, 42)]
    assert {(s.prefill_lens, s.num_copy_blocks, s.num_running_groups) for s in shapes} == {((30,), 1, 3)}


def test_a_clock_accumulated_at_once_is_the_clock_accumulated_step_by_step():
    # the fast-forward's clock: np.cumsum adds in order, as SimPy adds each delay to now
    times = COST_MODELS["a100 linear profile (transfer)"].decode_step_times(
        Batch(decode_seq_ids=list(range(40)), decode_context_lens=list(range(300, 340))), 2000)
    now, clock = 1234.567, []
    for t in times.tolist():
        now = now + t
        clock.append(now)
    assert np.cumsum(np.concatenate(([1234.567], times)))[1:].tolist() == clock
