"""Measured attention: the table's reader, the fit and its held-out errors, and the cost model it prices."""
import math

import numpy as np
import pandas as pd
import pytest
from synthetic_attention import HARDWARE, TRUE_FIT, rows, write_table

from calibrate.clock.roofline import RooflineCostModel
from calibrate.hardware.hardware import load_hardware
from calibrate.parts.attention_fit import (
    AttentionFit,
    AttentionWork,
    fit_attention,
    heldout_errors,
    import_attention,
    region_fit,
    region_masks,
)
from calibrate.tables.attention_table import read_attention_table
from engine.core.batch import BatchShape
from engine.errors import SpecError
from engine.specs.loader import load_model_spec

HW = load_hardware(HARDWARE)
COEFFICIENTS = ("decode_latency_s", "decode_bandwidth_efficiency", "prefill_latency_s", "prefill_compute_efficiency",
                "prefill_kv_bandwidth_efficiency", "prefill_output_bandwidth_efficiency")


def coefficients(fit: AttentionFit) -> list[float]:
    return [getattr(fit, name) for name in COEFFICIENTS]


def test_a_well_formed_table_is_read_into_decode_and_prefill_rows(tmp_path):
    table = read_attention_table(write_table(tmp_path / "attention.csv"))
    shape = table.shape
    assert (shape.q_heads, shape.kv_heads, shape.head_dim, shape.tp, shape.block_size) == (32, 4, 128, 2, 16)
    assert set(table.decode.columns) == {"batch", "context", "time_s"}
    assert set(table.prefill.columns) == {"chunk", "cached", "time_s"}
    work = AttentionWork.of_table(shape)
    first = table.decode[(table.decode["batch"] == 8) & (table.decode["context"] == 1024)]["time_s"].iloc[0]
    # the kernel's and the output reshape's milliseconds summed, in seconds
    assert first == pytest.approx(float(TRUE_FIT.decode_time(work, HW, 8 * 1024)))


def test_rows_measured_twice_are_averaged(tmp_path):
    frame = rows()
    twice = frame.iloc[[0]].copy()
    twice["time_stats.attn_decode.median"] *= 3
    table = read_attention_table(write_table(tmp_path / "a.csv", pd.concat([frame.iloc[[0]], twice])))
    assert len(table.decode) == 1
    assert table.decode["time_s"].iloc[0] == pytest.approx(
        (frame["time_stats.attn_decode.median"].iloc[0] * 2 + frame["time_stats.attn_output_reshape.median"].iloc[0])
        * 1e-3)


def _break(frame, row, column, value):
    frame = frame.copy()
    frame[column] = frame[column].astype(object)
    frame.loc[row, column] = value
    return frame


MALFORMED = [  # (edit, what the message names)
    (lambda f: f.drop(columns=["kv_cache_size"]), "column kv_cache_size"),
    (lambda f: f.drop(columns=["time_stats.attn_output_reshape.median"]),
     "column time_stats.attn_output_reshape.median"),
    (lambda f: _break(f, 4, "time_stats.attn_decode.median", "fast"), "row 5 (line 6), column time_stats.attn_decode"),
    (lambda f: _break(f, 2, "time_stats.attn_output_reshape.median", -0.001),
     "row 3 (line 4), column time_stats.attn_output_reshape"),
    (lambda f: _break(f, 7, "is_prefill", "maybe"), "row 8 (line 9), column is_prefill"),
    (lambda f: _break(f, 1, "batch_size", 2.5), "row 2 (line 3), column batch_size"),
    (lambda f: _break(f, 3, "kv_cache_size", 0), "row 4 (line 5), column kv_cache_size"),
    (lambda f: _break(f, len(f) - 1, "time_stats.attn_prefill.median", ""),
     f"row {len(rows())} (line {len(rows()) + 1}), column time_stats.attn_prefill"),
    (lambda f: _break(f, 0, "n_kv_head", 16), "column n_kv_head"),
]


@pytest.mark.parametrize("edit, where", MALFORMED)
def test_a_malformed_table_is_refused_naming_file_row_and_column(tmp_path, edit, where):
    path = write_table(tmp_path / "bad.csv", edit(rows()))
    with pytest.raises(SpecError) as err:
        read_attention_table(path)
    message = str(err.value)
    assert str(path) in message and where in message and "\n" not in message


def test_an_empty_or_unreadable_file_is_refused(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(SpecError, match="empty.csv"):
        read_attention_table(empty)


def test_the_fit_recovers_the_coefficients_the_table_was_made_from(tmp_path):
    fit = fit_attention(read_attention_table(write_table(tmp_path / "a.csv")), HW)
    assert coefficients(fit) == pytest.approx(coefficients(TRUE_FIT), rel=1e-6)
    assert fit.block_size == 16 and fit.measured_on == HARDWARE


@pytest.mark.slow
def test_the_held_out_regions_never_reach_the_fit_that_predicts_them(tmp_path):
    table = read_attention_table(write_table(tmp_path / "a.csv"))
    long_context, big_chunk = region_masks(table)
    assert long_context.any() and (~long_context).any() and big_chunk.any() and (~big_chunk).any()
    poisoned = read_attention_table(write_table(tmp_path / "a.csv"))
    poisoned.decode.loc[long_context, "time_s"] *= 100
    poisoned.prefill.loc[big_chunk, "time_s"] *= 100
    assert coefficients(region_fit(poisoned, HW)) == coefficients(region_fit(table, HW))
    clean, dirty = heldout_errors(table, HW), heldout_errors(poisoned, HW)
    for kind in ("decode", "prefill"):
        assert dirty[kind]["trained_region"] == clean[kind]["trained_region"]
        assert clean[kind]["heldout_region"]["mean"] < 1e-6  # the table is the model: nothing to miss
        assert dirty[kind]["heldout_region"]["mean"] > 0.9  # priced as the clean rows, 100x off


@pytest.mark.slow
def test_the_import_keeps_its_held_out_errors_and_source(tmp_path):
    fit = import_attention(write_table(tmp_path / "attention.csv"), HW, "synthetic")
    assert set(fit.heldout) == {"decode", "prefill", "decode_waves"}  # the A100 sheet gives its SM count
    assert fit.source.endswith("synthetic") and "32 query and 4 KV heads" in fit.source
    assert AttentionFit.from_dict(fit.to_dict()) == fit


def test_the_shares_carry_through_bytes_and_flops_to_other_heads():
    base = AttentionWork.of_heads(32, 4, 128)
    twice_kv = AttentionWork.of_heads(32, 8, 128)
    twice_q = AttentionWork.of_heads(64, 4, 128)
    assert twice_kv.kv_bytes_per_token == 2 * base.kv_bytes_per_token  # GQA: bytes follow the KV heads
    assert twice_kv.flops_per_pair == base.flops_per_pair
    assert twice_q.flops_per_pair == 2 * base.flops_per_pair  # FLOPs follow the query heads
    assert twice_q.kv_bytes_per_token == base.kv_bytes_per_token
    # a decode's bytes term doubles with the KV heads, at the same share of the same sheet
    base_s = TRUE_FIT.decode_time(base, HW, 10_000) - TRUE_FIT.decode_latency_s
    assert TRUE_FIT.decode_time(twice_kv, HW, 10_000) - TRUE_FIT.decode_latency_s == pytest.approx(2 * base_s)
    # on a GPU with twice the bandwidth the same bytes take half the time
    fast = type(HW)(**{**HW.__dict__, "hbm_bytes_per_s": 2 * HW.hbm_bytes_per_s})
    assert TRUE_FIT.decode_time(base, fast, 10_000) - TRUE_FIT.decode_latency_s == pytest.approx(base_s / 2)


LLAMA13B = load_model_spec("llama-13b")


def test_the_cost_model_charges_what_the_fit_says_for_decodes_and_prefills():
    cost = RooflineCostModel(LLAMA13B, HW, tp=2, attention=TRUE_FIT)
    work, layers = AttentionWork.of_model(LLAMA13B, 2), LLAMA13B.num_layers
    decodes = BatchShape((), (100, 2000, 37))
    expected = layers * float(TRUE_FIT.decode_time(work, HW, 2137))
    assert cost.decode_attention_time(decodes) == pytest.approx(expected, rel=1e-12)
    assert cost.prefill_attention_time(decodes) == 0.0
    prefill = BatchShape((700,), (), prefill_cached_lens=(300,))
    expected = layers * float(TRUE_FIT.prefill_time(work, HW, 700, 300))
    assert cost.prefill_attention_time(prefill) == pytest.approx(expected, rel=1e-12)
    assert cost.decode_attention_time(prefill) == 0.0
    # the rest of the iteration is the roofline's: the same model without the fit differs by attention alone
    plain = RooflineCostModel(LLAMA13B, HW, tp=2)
    for batch in (decodes, prefill):
        rest = plain.iteration_time(batch) - plain.decode_attention_time(batch) - plain.prefill_attention_time(batch)
        with_fit = cost.iteration_time(batch) - cost.decode_attention_time(batch) - cost.prefill_attention_time(batch)
        assert with_fit == pytest.approx(rest, rel=1e-9)
    assert "attention measured" in cost.source and "attention measured" not in plain.source


def test_two_prefills_pay_the_prefill_latency_once_and_each_its_pairs():
    cost = RooflineCostModel(LLAMA13B, HW, attention=TRUE_FIT)
    work, layers = AttentionWork.of_model(LLAMA13B, 1), LLAMA13B.num_layers
    both = cost.prefill_attention_time(BatchShape((300, 500), ()))
    alone = [float(TRUE_FIT.prefill_time(work, HW, n, 0)) for n in (300, 500)]
    assert both == pytest.approx(layers * (sum(alone) - TRUE_FIT.prefill_latency_s), rel=1e-12)


def test_a_dropped_prefill_term_costs_nothing():
    fit = AttentionFit(**{**TRUE_FIT.to_dict(), "prefill_kv_bandwidth_efficiency": None,
                          "prefill_output_bandwidth_efficiency": None})
    work = AttentionWork.of_model(LLAMA13B, 1)
    cost = RooflineCostModel(LLAMA13B, HW, attention=fit)
    expected = LLAMA13B.num_layers * (fit.prefill_latency_s + 512 * 512 * work.flops_per_pair / (
        HW.peak_flops * fit.prefill_compute_efficiency))
    assert cost.prefill_attention_time(BatchShape((512,), ())) == pytest.approx(expected, rel=1e-12)
    assert not math.isnan(cost.iteration_time(BatchShape((512,), (40,))))


def test_without_a_fit_the_roofline_is_as_it_was():
    # the same floats as a cost model built without the new argument at all
    batch = BatchShape((3, 900), (16, 32, 33), 2, 3, 5, (0, 16))
    a, b = RooflineCostModel(LLAMA13B, HW, attention=None), RooflineCostModel(LLAMA13B, HW)
    assert a.iteration_time(batch) == b.iteration_time(batch) and a.source == b.source
    assert np.array_equal(a.decode_iteration_times(batch, 50), b.decode_iteration_times(batch, 50))
