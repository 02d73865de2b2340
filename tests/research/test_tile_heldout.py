"""The tile-aware GEMM form held out by model on one GPU: at a tile of 1 it is today's held-out fit to the float;
on tables whose GEMMs compute whole 64-row tiles it recovers the law exactly where the smooth form cannot, and the
tile each held-out model is priced at is chosen without that model's rows."""
import numpy as np
import pandas as pd
import pytest

from calibrate.fitting.op_fit import fit_linear
from calibrate.hardware.hardware import load_hardware
from calibrate.judging.op_import import heldout
from calibrate.tables.op_table import read_op_table
from calibrate.work.layer_ops import LayerShape
from research.judging.tile_heldout import chosen, heldout_at
from research.judging.transfer_shape import padded_gemms
from tests.calibrate.synthetic_ops import HARDWARE, MODELS, TRUE_FIT, assert_same_fit, write_tables

TILE = 64


def ops_of(paths) -> pd.DataFrame:
    return pd.concat([read_op_table(p).ops for p in paths], ignore_index=True)


@pytest.fixture(scope="module")
def tiled(tmp_path_factory):
    """TRUE_FIT's tables with every GEMM computing its tokens rounded up to 64 rows."""
    return ops_of(write_tables(tmp_path_factory.mktemp("tiled"), tile=TILE))


def test_a_gemms_flops_are_counted_on_whole_tiles_of_rows(tiled):
    # llama-7b's QKV matmul at tp 1: 4,096 inputs x 12,288 outputs; 65 tokens compute two tiles, 128 rows
    qkv = tiled[(tiled["model"] == "meta-llama_Llama-2-7b-hf") & (tiled["op"] == "attn_pre_proj")
                & (tiled["tp"] == 1)]
    assert LayerShape(4096, 32, 32, 11008, True).gemm_dims(1)["attn_pre_proj"] == (4096, 12288)
    padded = padded_gemms(qkv, TILE).set_index("tokens")["flops"]
    assert padded[1] == padded[48] == 2.0 * 64 * 4096 * 12288
    assert padded[96] == padded[128] == 2.0 * 128 * 4096 * 12288
    assert padded[160] == 2.0 * 192 * 4096 * 12288


def test_at_one_row_it_is_todays_held_out_fit(tmp_path):
    ops = ops_of(write_tables(tmp_path))
    hw = load_hardware(HARDWARE)
    today, tiled = heldout(ops, hw, "model"), heldout_at(ops, hw, "model", 1)
    pd.testing.assert_frame_equal(today.layers, tiled.layers)
    assert np.array_equal(today.ops["predicted_s"], tiled.ops["predicted_s"])


def test_the_tiled_law_is_recovered_where_the_smooth_form_cannot_follow_it(tiled):
    hw = load_hardware(HARDWARE)
    assert_same_fit(fit_linear(padded_gemms(tiled, TILE), hw), TRUE_FIT)
    assert heldout_at(tiled, hw, "model", TILE).layers["ape"].max() < 1e-6
    assert heldout_at(tiled, hw, "model", 1).layers["ape"].mean() > 0.01


@pytest.mark.slow
def test_each_models_tile_is_chosen_on_the_others_alone(tiled):
    hw = load_hardware(HARDWARE)
    best = chosen(tiled, hw, "model", tiles=(1, 32, TILE, 128))
    assert best.tiles == {model: TILE for model in MODELS}
    assert best.errors.layers["ape"].max() < 1e-6
    # one model's GEMMs smooth (tile 1): the two tiled others choose 64 for it, and it is priced worst
    smooth = next(iter(MODELS))
    rest = tiled[tiled["model"] != smooth]
    mixed = pd.concat([rest, ops_of_smooth(tiled, smooth)], ignore_index=True)
    best = chosen(mixed, hw, "model", tiles=(1, TILE))
    assert best.tiles[smooth] == TILE
    per_model = best.errors.layers.groupby("model")["ape"].mean()
    assert per_model[smooth] > 0.01 and per_model.idxmax() == smooth


def ops_of_smooth(tiled: pd.DataFrame, model: str) -> pd.DataFrame:
    """`model`'s rows re-timed as TRUE_FIT prices its GEMMs on unpadded tokens."""
    rows = tiled[tiled["model"] == model]
    return rows.assign(time_s=TRUE_FIT.predict_ops(rows, load_hardware(HARDWARE)))
