"""A mixed step's decodes as the one varlen launch prices them (calibrate/parts/attention_mixed.py): a row worked out
by hand, the fit (calibrate/parts/attention_mixed_fit.py) recovering the term its rows were made by, and a profile's
malformed mixed part refused by name."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from calibrate.hardware.hardware import load_hardware
from calibrate.parts.attention_mixed import MixedFit, MixedGrid, check_mixed, empty_blocks
from calibrate.parts.attention_mixed_fit import MixedRows, fit_mixed
from engine.errors import SpecError

# ten SMs, a 1 MiB L2 and 1 TB/s, so that every count below is small enough to follow
SMALL = replace(load_hardware("rtx-pro-6000-server"), sm_count=10, l2_cache_bytes=2**20, hbm_bytes_per_s=1e12)
GRID = MixedGrid.of_heads(8, 2, 128)  # 512 bytes of one head's K and V a token, groups of four query heads
HAND = MixedFit(latency_s=5e-6, wave_latency_s=2e-6, empty_block_s=1e-9, bandwidth_efficiency=2.0,
                miss_bandwidth_efficiency=0.5, blocks_per_sm=1, floor_shares=(0.6,))


def test_a_mixed_row_priced_by_hand():
    # 3 decodes x 8 query heads = 24 blocks over 10 slots: 3 waves, the last of 4 blocks costing the floor's 6, so
    # 10 + 10 + 6 = 26 blocks' streams of 1,000 tokens x 512 bytes at twice 1 TB/s: 6.656 us
    stream = 26 * 1000 * 512 / 2e12
    # a 100-token chunk takes 2 query blocks of 64 a sequence: each decode's second one, x 8 heads, exits at once
    launch = 5e-6 + 3 * 2e-6 + 24 * 1e-9
    # a window of 10 blocks streams 10 x 1,000 x 512 bytes, past the 1 MiB L2 (204.8 tokens): a group's four heads
    # over 4 sequences span 1.6 windows, so 0.6 of the 3 x 1,000 x 2 x 512 K/V bytes are read again, at 0.5 TB/s
    reread = 3 * 1000 * 2 * 512 * 0.6 / 0.5e12
    got = HAND.decode_time(GRID, SMALL, [3], [1000], [100])[0]
    assert got == pytest.approx(stream + launch + reread, rel=1e-12)
    assert got == pytest.approx(21.3664e-6, rel=1e-12)
    # 200 tokens of context: a window's stream fits in the L2, nothing is read again
    short = HAND.decode_time(GRID, SMALL, [3], [200], [100])[0]
    assert short == pytest.approx(26 * 200 * 512 / 2e12 + launch, rel=1e-12)
    # without the sheet's L2 the term is not charged; a chunk of one query block leaves no block empty
    assert HAND.decode_time(GRID, replace(SMALL, l2_cache_bytes=None), [3], [1000], [100])[0] == pytest.approx(
        stream + launch, rel=1e-12)
    assert empty_blocks(np.array([3.0]), np.array([64.0]), 8)[0] == 0


def test_the_fit_recovers_the_term_its_rows_were_made_by():
    hw = load_hardware("rtx-pro-6000-server")
    truth = MixedFit(latency_s=3e-6, wave_latency_s=2.5e-6, empty_block_s=2e-9, bandwidth_efficiency=2.5,
                     miss_bandwidth_efficiency=0.8, blocks_per_sm=1, floor_shares=(120 / 188,))
    parts = []
    for q_heads, kv_heads in ((32, 8), (64, 8)):
        grid = MixedGrid.of_heads(q_heads, kv_heads, 128)
        rows = pd.DataFrame([(chunk, 0, batch, context) for chunk in (16, 128, 512, 2048)
                             for batch in (1, 2, 4, 8, 16, 32, 64, 128) for context in (17, 257, 1025, 4097, 16385)],
                            columns=["chunk", "cached", "batch", "context"])
        prefill = 1e-5 + rows["chunk"].to_numpy(float) * 1e-8  # any prefill part: the fit takes it as given
        rows["time_s"] = prefill + truth.decode_time(grid, hw, rows["batch"], rows["context"], rows["chunk"])
        parts.append(MixedRows(rows, grid, prefill))
    got = fit_mixed(parts, hw)
    assert (got.blocks_per_sm, got.floor_shares) == (1, truth.floor_shares)
    for name in ("latency_s", "wave_latency_s", "empty_block_s", "bandwidth_efficiency", "miss_bandwidth_efficiency"):
        assert getattr(got, name) == pytest.approx(getattr(truth, name), rel=1e-6, abs=1e-12), name
    # on a sheet without the L2 no reread is fitted
    assert fit_mixed(parts, replace(hw, l2_cache_bytes=None)).miss_bandwidth_efficiency is None


def test_a_malformed_mixed_part_of_a_profile_is_refused_naming_the_key():
    good = HAND.to_dict()
    check_mixed(good, "p.yaml")
    assert MixedFit.from_dict(good) == HAND
    check_mixed({**good, "miss_bandwidth_efficiency": None}, "p.yaml")
    for key, value, match in (("bandwidth_efficiency", 9.0, "mixed.bandwidth_efficiency"),
                              ("miss_bandwidth_efficiency", 0.0, "mixed.miss_bandwidth_efficiency"),
                              ("miss_bandwidth_efficiency", 8.5, "mixed.miss_bandwidth_efficiency"),
                              ("blocks_per_sm", 0, "mixed.blocks_per_sm"),
                              ("floor_shares", [0.5, 0.9], "mixed.floor_shares"),
                              ("wave_latency_s", -1.0, "mixed.wave_latency_s"),
                              ("tiles", 2, "mixed.tiles.*unknown key")):
        with pytest.raises(SpecError, match=match):
            check_mixed({**good, key: value}, "p.yaml")
    with pytest.raises(SpecError, match="attention.mixed.*must map"):
        check_mixed([1, 2], "p.yaml")


def _bundles(tmp_path):
    """Llama-3.1-8B's and Qwen3-32B's attention tables at tp 1 and 2, mixed rows made by TRUE_MIXED."""
    from synthetic_bundle import synthetic_bundle

    from calibrate.tables.bundle_attention import bundle_attention
    from calibrate.tables.bundle_models import bundle_label, bundle_model
    from calibrate.tables.llmservingsim_bundle import read_bundle

    out = {}
    for name, model in (("llama", "meta-llama/Llama-3.1-8B"), ("qwen", "Qwen/Qwen3-32B")):
        bundle = read_bundle(synthetic_bundle(tmp_path / name / "bf16", model))
        out.update({f"{bundle_label(bundle)} tp {a.table.shape.tp}": a
                    for a in bundle_attention(bundle, bundle_model(bundle))})
    return out


def _poisoned(attention, rows):
    """`attention` with its mixed rows where `rows` is set timed 100 times over."""
    mixed = attention.mixed.copy()
    mixed.loc[rows, "time_s"] *= 100
    return replace(attention, mixed=mixed)


@pytest.mark.slow
def test_held_out_mixed_rows_never_enter_the_fit_that_predicts_them(tmp_path):
    from calibrate.judging.bundle_attention_fit import fit_without
    from calibrate.judging.mixed_attention import region_fit, region_masks
    from calibrate.parts.attention_fit import fit_attention

    attentions = _bundles(tmp_path)
    hw = load_hardware("rtx-pro-6000-server")
    tables = list(attentions.values())
    fit = fit_attention([a.table for a in tables], hw)
    # the longest contexts held out: poisoning them moves the fit on the rest not at all
    poisoned = [_poisoned(a, m) for a, m in zip(tables, region_masks(tables))]
    assert region_fit(fit, poisoned, hw) == region_fit(fit, tables, hw)
    assert region_fit(fit, [_poisoned(a, ~m) for a, m in zip(tables, region_masks(tables))], hw) != region_fit(
        fit, tables, hw)  # while the rows it is fitted on do
    # a table held out: its pure and mixed rows poisoned, the fit on the other tables is the same
    label = next(iter(attentions))
    held = attentions[label]
    table = replace(held.table, decode=held.table.decode.assign(time_s=held.table.decode["time_s"] * 100))
    spoiled = {**attentions, label: replace(_poisoned(held, held.mixed.index == held.mixed.index), table=table)}
    assert fit_without(spoiled, label, hw) == fit_without(attentions, label, hw)
