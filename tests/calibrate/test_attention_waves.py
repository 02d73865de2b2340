"""Decode attention in waves: FlashAttention 2's split heuristic, the wave fit, its held-out rows, its profile keys
and the cost model that prices with it. No test reads the published measurements."""
from dataclasses import replace

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from synthetic_attention import HARDWARE, TRUE_FIT, TRUE_WAVES, WAVE_BATCHES, rows, write_table

from calibrate.clock.roofline import RooflineCostModel
from calibrate.clock.roofline_terms import wave_tokens_float
from calibrate.fitting.profile_file import _check_attention
from calibrate.hardware.hardware import load_hardware
from calibrate.parts.attention_fit import AttentionFit, heldout_errors, import_attention, region_fit, region_masks
from calibrate.parts.attention_waves import DecodeGrid, fit_waves, key_tile, num_splits, wave_tokens
from calibrate.tables.attention_table import read_attention_table
from engine.core.batch import BatchShape
from engine.errors import SpecError
from engine.specs.loader import load_model_spec
from tests.helpers.core_harness import hyp

HW = load_hardware(HARDWARE)
GRID = DecodeGrid.of_heads(32, 4, 128)
WAVE_FIT = replace(TRUE_FIT, waves=TRUE_WAVES)


def test_the_split_heuristic_matches_hand_counted_launches():
    # blocks that fill 0.8 of the SMs are not split: batch x heads = 108 on 108 SMs is one wave already
    assert num_splits(108, 108, 32) == 1 and num_splits(88, 108, 32) == 1
    # flash_api.cpp's own example: 48 blocks on 108 SMs, 2 splits (efficiency 0.89) beats 3 (0.67)
    assert num_splits(48, 108, 32) == 2
    # one sequence of 4 KV heads over 32 tiles: splits that change the tiles per split are 1-8, 11, 16, 32;
    # 16 gives 64 blocks (0.59 of a wave), 32 two waves of 128 (0.59 too): the fewer, 16
    assert num_splits(4, 108, 32) == 16
    # 56 blocks (batch 14): the best eligible count is 32 splits (16.6 waves, 0.976); the fewest within 0.85 of it
    # is 5 (2.59 waves, 0.864), not 4 (0.691) nor 3 (0.778)
    assert num_splits(56, 108, 32) == 5
    # a single key tile cannot be split; the twice-the-SMs count of newer releases splits less
    assert num_splits(4, 108, 1) == 1
    assert num_splits(88, 216, 32) == 2 and num_splits(176, 216, 32) == 1
    assert key_tile(64) == 256 and key_tile(128) == 128 and key_tile(256) == 64


def test_a_grouped_query_decode_launches_one_block_per_kv_head():
    # the query heads of a KV head ride in the query length (64 rows a block): 32 query over 4 KV heads -> 4
    assert GRID.heads == 4 and DecodeGrid.of_heads(32, 32, 128).heads == 32
    assert DecodeGrid.of_heads(128, 1, 128).heads == 2  # 128 query heads of one KV head: two blocks of 64
    assert GRID.head_bytes_per_token == 2 * 128 * 2


def test_a_wave_more_costs_at_least_its_floor_and_a_full_wave_its_bytes():
    fit, sms = TRUE_WAVES, HW.sm_count
    context = 4032.0
    one = fit.read_tokens(GRID, sms, 27, fit.launch(GRID, sms, 27), context)  # 108 blocks: one per SM
    spill = fit.read_tokens(GRID, sms, 55, fit.launch(GRID, sms, 55), context)  # 220: 4 past the 216 slots
    full = fit.read_tokens(GRID, sms, 54, fit.launch(GRID, sms, 54), context)  # 216: every slot
    assert one == pytest.approx(108 * context)  # above its floor (95): its bytes
    assert full == pytest.approx(216 * context)
    assert spill == pytest.approx((216 + 95) * context)  # the 4 spilled blocks cost the floor of one per SM
    pure = replace(fit, floor_shares=(2.0, 2.0))  # every floor at the 216 slots: wave efficiency exactly
    assert pure.read_tokens(GRID, sms, 55, pure.launch(GRID, sms, 55), context) == pytest.approx(2 * 216 * context)


def test_a_table_made_by_the_wave_model_is_recovered(tmp_path):
    table = read_attention_table(write_table(tmp_path / "a.csv", rows(WAVE_FIT, WAVE_BATCHES)))
    fit = fit_waves(table.decode, GRID, HW, table.launch_tokens)
    assert (fit.blocks_per_sm, fit.heuristic_sm_multiple, fit.launch_tokens) == (2, 1, 4032)
    assert fit.floor_shares == pytest.approx(TRUE_WAVES.floor_shares, rel=1e-12)
    for name in ("latency_s", "split_latency_s", "wave_latency_s", "bandwidth_efficiency"):
        assert getattr(fit, name) == pytest.approx(getattr(TRUE_WAVES, name), rel=1e-6), name


@pytest.mark.slow
def test_the_held_out_rows_never_reach_the_waves_that_predict_them(tmp_path):
    table = read_attention_table(write_table(tmp_path / "a.csv", rows(WAVE_FIT, WAVE_BATCHES)))
    long_context, _ = region_masks(table)
    poisoned = read_attention_table(write_table(tmp_path / "a.csv", rows(WAVE_FIT, WAVE_BATCHES)))
    poisoned.decode.loc[long_context, "time_s"] *= 100
    assert region_fit(poisoned, HW).waves == region_fit(table, HW).waves
    clean, dirty = heldout_errors(table, HW)["decode_waves"], heldout_errors(poisoned, HW)["decode_waves"]
    assert dirty["trained_region"] == clean["trained_region"]
    assert clean["heldout_region"]["mean"] < 1e-6 < 0.9 < dirty["heldout_region"]["mean"]


@pytest.mark.slow
def test_the_import_keeps_the_waves_and_a_sheet_without_sm_count_fits_none(tmp_path):
    path = write_table(tmp_path / "attention.csv", rows(WAVE_FIT, WAVE_BATCHES))
    fit = import_attention(path, HW, "synthetic")
    assert fit.waves is not None and "decode_waves" in fit.heldout
    assert AttentionFit.from_dict(fit.to_dict()) == fit
    unknown = replace(HW, sm_count=None)
    assert import_attention(path, unknown).waves is None
    assert "decode_waves" not in import_attention(path, unknown).heldout


def test_a_launch_wider_than_the_table_is_read_and_a_narrower_one_refused(tmp_path):
    frame = rows(WAVE_FIT, (1, 2))
    frame["max_model_len"] = 4096
    assert read_attention_table(write_table(tmp_path / "a.csv", frame)).launch_tokens == 4096
    frame["max_model_len"] = 1024
    with pytest.raises(SpecError, match="max_model_len.*shorter than the longest context"):
        read_attention_table(write_table(tmp_path / "b.csv", frame))


@hyp(max_examples=300)
@given(context=st.floats(1, 40_000), batch=st.integers(1, 300), per_sm=st.sampled_from([1, 2, 3]),
       launch_tokens=st.sampled_from([256, 4096, 32_768]), sms=st.sampled_from([108, 132, 84]))
def test_the_float_waves_are_the_array_waves_to_the_bit(context, batch, per_sm, launch_tokens, sms):
    fit = replace(TRUE_WAVES, blocks_per_sm=per_sm, floor_shares=tuple(0.6 * (j + 1) for j in range(per_sm)),
                  launch_tokens=launch_tokens)
    launch = fit.launch(GRID, sms, batch)
    array = wave_tokens(np.array([context]), batch * GRID.heads, GRID.tile, launch.splits, launch.tiles_per_split,
                        sms, per_sm, np.asarray(fit.floors(sms)))[0]
    assert wave_tokens_float(context, batch * GRID.heads, GRID.tile, launch.splits, launch.tiles_per_split, sms,
                             per_sm, fit.floors(sms)) == array


def test_the_cost_model_prices_decodes_in_waves_where_the_sheet_gives_sm_count():
    model = load_model_spec("llama-13b")
    cost = RooflineCostModel(model, HW, tp=2, attention=WAVE_FIT)
    grid = DecodeGrid.of_heads(model.num_heads // 2, model.num_kv_heads // 2, model.head_dim)
    uniform = BatchShape((), (1000,) * 30)
    expected = model.num_layers * TRUE_WAVES.decode_time(grid, HW, [30], [1000])[0]
    assert cost.decode_attention_time(uniform) == pytest.approx(expected, rel=1e-12)
    assert "decode in waves over 108 SMs" in cost.source
    # a spill into a new wave costs a step the bytes alone do not: 20 heads a GPU, 10 sequences fill 200 of the
    # 216 slots, 11 spill 4 blocks into a second wave
    per_token = [cost.decode_attention_time(BatchShape((), (3000,) * n)) / n for n in (10, 11)]
    assert per_token[1] > 1.3 * per_token[0]
    # the same fit on a sheet with no SM count: today's bytes and latency, and the source says so
    blind = RooflineCostModel(model, replace(HW, sm_count=None), tp=2, attention=WAVE_FIT)
    today = RooflineCostModel(model, replace(HW, sm_count=None), tp=2, attention=TRUE_FIT)
    batch = BatchShape((300,), (100, 2000, 37))
    assert blind.iteration_time(batch) == today.iteration_time(batch)
    assert "decode without waves" in blind.source


def test_a_malformed_wave_part_of_a_profile_is_refused_naming_the_key():
    good = WAVE_FIT.to_dict()
    _check_attention(yaml.safe_load(yaml.safe_dump(good)), "p.yaml")
    for key, value, match in (("bandwidth_efficiency", 1.5, "waves.bandwidth_efficiency"),
                              ("blocks_per_sm", 0, "waves.blocks_per_sm"),
                              ("floor_shares", [0.9], "waves.floor_shares"),
                              ("launch_tokens", "wide", "waves.launch_tokens"),
                              ("wave_latency_s", -1.0, "waves.wave_latency_s"),
                              ("occupancy", 2, "waves.occupancy.*unknown key")):
        bad = {**good, "waves": {**good["waves"], key: value}}
        with pytest.raises(SpecError, match=match):
            _check_attention(bad, "p.yaml")
