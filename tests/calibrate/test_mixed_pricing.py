"""The roofline cost model prices a mixed step's decodes by a fit's mixed term (calibrate/clock/mixed_pricing.py):
as the term prices the measured rows, all layers; pure decode and pure prefill steps, and every step of a profile
without the term, to the bit as before (a profile's floats from before the term held here)."""
from dataclasses import replace
from pathlib import Path

import pytest

from calibrate.clock.roofline import RooflineCostModel
from calibrate.cost_models.profile_model import transferred_roofline
from calibrate.hardware.hardware import load_hardware
from calibrate.parts.attention_fit import AttentionFit, AttentionWork
from calibrate.parts.attention_mixed import MixedFit, MixedGrid
from calibrate.parts.attention_waves import WaveFit
from engine.core.batch import BatchShape
from engine.specs.loader import load_model_spec

PROFILES = Path(__file__).resolve().parents[2] / "calibrate" / "profiles"
LLAMA, PRO = load_model_spec("llama-3.1-8b"), load_hardware("rtx-pro-6000-server")
MIXED = MixedFit(latency_s=3e-6, wave_latency_s=2.5e-6, empty_block_s=2e-9, bandwidth_efficiency=2.5,
                 miss_bandwidth_efficiency=0.8, blocks_per_sm=1, floor_shares=(120 / 188,))
WAVES = WaveFit(9.8e-6, 0.0, 1.9e-6, 0.94, 2, (0.9, 1.4), 2, 16385)
FIT = AttentionFit(15e-6, 0.75, 12e-6, 0.45, 0.4, 0.1, waves=WAVES)
BATCHES = (BatchShape((512,), (2000,) * 40), BatchShape((), (17, 900, 4000)), BatchShape((3000,), ()),
           BatchShape((300, 16), (100, 2000, 37), 0, 0, 0, (64, 0)))
# main's floats before the mixed term (iteration_time of BATCHES, float.hex): a profile without it must not move
BEFORE = {("a100-80gb", "llama-7b", 1): ("0x1.114b34000fcc2p-4", "0x1.6cbaf0c8a92f5p-7", "0x1.d685af305d19ap-3",
                                         "0x1.bc95d3d32ac04p-6"),
          ("a100-80gb", "llama-13b", 2): ("0x1.1028150f80dd3p-4", "0x1.ef6a2b752e525p-7", "0x1.e2e6840e7c348p-3",
                                          "0x1.07714e56763c0p-5")}


def test_a_mixed_step_is_priced_as_the_term_prices_its_rows_all_layers():
    cost = RooflineCostModel(LLAMA, PRO, attention=replace(FIT, mixed=MIXED))
    grid, work = MixedGrid.of_heads(32, 8, 128), AttentionWork.of_model(LLAMA, 1)
    step = BatchShape((512,), (2000,) * 40)
    decodes = LLAMA.num_layers * MIXED.decode_time(grid, PRO, [40], [2000], [512])[0]
    assert cost.decode_attention_time(step) == pytest.approx(decodes, rel=1e-12)
    prefill = LLAMA.num_layers * FIT.prefill_time(work, PRO, 512, 0)
    assert cost.prefill_attention_time(step) == pytest.approx(prefill, rel=1e-12)
    # the fit without the term priced the same step as its decode part plus its prefill part: 40 decodes of 2,000
    # keys in the split decode launch cost less than 1,280 unsplit blocks, one a query head, streaming them
    before = RooflineCostModel(LLAMA, PRO, attention=FIT)
    assert cost.iteration_time(step) - before.iteration_time(step) == pytest.approx(
        decodes - before.decode_attention_time(step), rel=1e-9)
    assert decodes > 1.5 * before.decode_attention_time(step)
    assert "mixed steps as one launch over 188 SMs and 128 MB of L2" in cost.source


def test_pure_steps_and_one_token_prefills_price_to_the_bit_as_without_the_term():
    # a step whose every query is one token long runs the split decode kernel, whatever its prefills
    pure = (BatchShape((), (17, 900, 4000)), BatchShape((3000,), ()), BatchShape((1, 1), (500, 600)),
            BatchShape((64, 700), (), 0, 0, 0, (16, 0)))
    for hw in (PRO, replace(PRO, l2_cache_bytes=None), replace(PRO, sm_count=None)):
        with_term = RooflineCostModel(LLAMA, hw, attention=replace(FIT, mixed=MIXED))
        without = RooflineCostModel(LLAMA, hw, attention=FIT)
        for step in pure:
            assert with_term.iteration_time(step).hex() == without.iteration_time(step).hex(), (hw.name, step)
            assert with_term.decode_iteration_times(step, 7).tobytes() == without.decode_iteration_times(
                step, 7).tobytes()
    # on a sheet without the SM count the term is not bound: a mixed step is its decode and prefill parts
    blind = replace(PRO, sm_count=None)
    step = BATCHES[0]
    assert (RooflineCostModel(LLAMA, blind, attention=replace(FIT, mixed=MIXED)).iteration_time(step)
            == RooflineCostModel(LLAMA, blind, attention=FIT).iteration_time(step))


def test_a_profile_without_the_term_prices_every_step_as_before_to_the_bit():
    for (name, model, tp), floats in BEFORE.items():
        hw = load_hardware(name)
        cost = transferred_roofline(PROFILES / f"{name}.yaml", None, load_model_spec(model), hw, tp, 2, 16)
        assert [cost.iteration_time(step).hex() for step in BATCHES] == list(floats), (name, model, tp)


def test_without_the_sheets_l2_no_reread_is_charged():
    step = BatchShape((2048,), (16385,) * 128)  # a window of 188 blocks streams 1.6 GB: past any L2
    with_l2 = RooflineCostModel(LLAMA, PRO, attention=replace(FIT, mixed=MIXED))
    without_l2 = RooflineCostModel(LLAMA, replace(PRO, l2_cache_bytes=None), attention=replace(FIT, mixed=MIXED))
    grid = MixedGrid.of_heads(32, 8, 128)
    # a group's four heads over 129 sequences span 2.7 windows of 188: 1.7 more reads of the K/V past the L2
    reread = LLAMA.num_layers * 128 * 16385 * 8 * grid.head_bytes_per_token * (4 * 129 / 188 - 1) / (
        PRO.hbm_bytes_per_s * 0.8)
    assert with_l2.decode_attention_time(step) - without_l2.decode_attention_time(step) == pytest.approx(
        reread, rel=1e-9)
    assert "no L2 rereads" in without_l2.source
