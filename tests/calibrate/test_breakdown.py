"""Every cost model's breakdown of an iteration is its clock: device_s + host_s is iteration_time to the bit,
step_s is step_time, and the parts say where the seconds went (a roofline's add up to device_s to the bit).
The simulator's breakdown columns and trace events are only as true as this."""
from __future__ import annotations

import math

from cost_model_cases import LLAMA7B, PROFILE_MODELS, PROFILES, ROOFLINES, batches, bits
from hypothesis import given

from calibrate.clock.breakdown import DEVICE_KINDS, KIND_MEANINGS, IterationTime, fold
from calibrate.clock.costmodel import ScaledCostModel
from calibrate.clock.roofline import RooflineCostModel
from calibrate.cost_models.profile_model import transferred_roofline
from calibrate.cost_models.transfer_cost import RegimeCostModel
from calibrate.hardware.hardware import load_hardware
from engine.core.batch import Batch
from tests.helpers.core_harness import hyp

HOST = {"per_iteration_s": 1.7e-3, "per_sequence_s": 2.9e-5, "per_prefill_token_s": 3.1e-7}
WITH_HOST = {**ROOFLINES, "roofline with host work": RooflineCostModel(LLAMA7B, load_hardware("h100-sxm"), host=HOST)}
BY_REGIME = transferred_roofline(PROFILES / "a100-80gb-linear.yaml", None, LLAMA7B, load_hardware("h200"), 1, 2, 16)


def check_clock(model, batch) -> IterationTime:
    b = model.breakdown(batch)
    assert bits(b.total_s) == bits(model.iteration_time(batch))
    assert bits(b.step_s) == bits(model.step_time(batch))
    assert bits(b.device_s) == bits(model.device_time(batch)) and bits(b.host_s) == bits(model.host_time(batch))
    assert set(b.device) <= set(KIND_MEANINGS)
    assert math.isclose(sum(b.device.values()), b.device_s, rel_tol=1e-12)
    assert math.isclose(sum(b.host.values()), b.host_s, rel_tol=1e-12, abs_tol=1e-18)
    return b


@hyp(max_examples=100)
@given(batch=batches)
def test_a_roofline_breakdown_is_its_clock_and_its_kinds_add_up_to_the_bit(batch):
    for name, model in WITH_HOST.items():
        b = check_clock(model, batch)
        assert list(b.device) == [k for k in DEVICE_KINDS if k in b.device], name
        assert bits(fold(b.device.values())) == bits(b.device_s), name
        assert bits(fold(b.host.values())) == bits(b.host_s), name


@hyp(max_examples=60)
@given(batch=batches)
def test_profiles_by_regime_and_scaled_models_break_down_to_their_clock(batch):
    for model in (*PROFILE_MODELS.values(), BY_REGIME):
        check_clock(model, batch)
    scaled = ScaledCostModel(ROOFLINES["roofline"], 1.07)
    b = scaled.breakdown(batch)
    assert not b.parts_exact and math.isclose(b.total_s, scaled.iteration_time(batch), rel_tol=1e-12)


def test_the_parts_are_where_the_time_goes():
    """Not just any split that adds up: a decode's time grows in attention with its context, a prefill's in
    linear with its tokens, host work by sequence, swaps apart from the forward."""
    model = WITH_HOST["roofline with host work"]
    short, long = (Batch(decode_seq_ids=[0], decode_context_lens=[n], num_running_groups=1) for n in (100, 4000))
    a, b = model.breakdown(short), model.breakdown(long)
    assert b.device["attention"] > 10 * a.device["attention"] and b.device["linear"] == a.device["linear"]
    many = Batch(decode_seq_ids=list(range(32)), decode_context_lens=[100] * 32, num_running_groups=32,
                 blocks_to_swap_in=[(0, 1)] * 3)
    c = model.breakdown(many)
    assert c.host["per_sequence"] == HOST["per_sequence_s"] * 32 and c.host["per_iteration"] == HOST["per_iteration_s"]
    assert c.swap_s == model.swap_time(3) > 0 and bits(c.step_s) == bits(model.step_time(many))
    assert "all_reduce" in c.device and c.device["all_reduce"] == 0.0  # one GPU: no all-reduce


def test_by_regime_host_part_is_the_chosen_models():
    """A model chosen by regime reports the chosen model's host part, not none (its host work is charged)."""
    assert isinstance(BY_REGIME, RegimeCostModel) or BY_REGIME.charge_host
    batch = Batch(decode_seq_ids=[0, 1], decode_context_lens=[10, 20], num_running_groups=2)
    assert BY_REGIME.host_time(batch) > 0
    assert bits(BY_REGIME.device_time(batch) + BY_REGIME.host_time(batch)) == bits(BY_REGIME.iteration_time(batch))
