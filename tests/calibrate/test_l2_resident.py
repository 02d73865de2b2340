"""The L2 rule of a one-layer profile's linear part (calibrate/fitting/l2_resident.py, calibrate/judging/
bundle_linear.py): which rows it judges by hand; a bundle whose small matmuls read their weights from the L2 faster
than HBM comes back with the HBM share it was made by (today's one share is pulled up by them); a sheet without the
L2 keeps today's fit to the bit; the judges on the rows a real model reads from HBM."""
from dataclasses import replace

import pandas as pd
import pytest
from synthetic_bundle import TRUE_FIT, synthetic_bundle

from calibrate.fitting.l2_resident import l2_resident
from calibrate.fitting.op_fit import fit_linear
from calibrate.hardware.hardware import load_hardware
from calibrate.judging.bundle_import import import_bundles
from calibrate.judging.bundle_linear import bundle_fit, resident
from calibrate.tables.bundle_models import bundle_model
from calibrate.tables.bundle_ops import bundle_op_table
from calibrate.tables.llmservingsim_bundle import read_bundle
from tests.calibrate.synthetic_ops import assert_same_fit

PRO = load_hardware("rtx-pro-6000-server")  # 128 MiB of L2: 134,217,728 bytes


def test_a_matmul_is_judged_in_the_l2_where_its_weights_and_activations_fit():
    ops = pd.DataFrame({"op": ["attn_pre_proj", "mlp_up_proj", "mlp_up_proj", "input_layernorm", "lm_head"],
                        "weight_bytes": [100e6, 120e6, 120e6, 0.0, 1e9],
                        "activation_bytes": [34e6, 14e6, 15e6, 1e3, 1e5]})
    # 134.0 MB fits, 134.2 MB does not (just over 2^27 bytes); a norm is no matmul; nothing fits without the L2
    assert l2_resident(ops, PRO).tolist() == [True, True, False, False, False]
    assert not l2_resident(ops, replace(PRO, l2_cache_bytes=None)).any()
    assert not l2_resident(ops.drop(columns="activation_bytes"), PRO).any()  # a table that gives no activations


@pytest.fixture(scope="module")
def l2_bundle(tmp_path_factory):
    """Llama-3.1-8B at tp 1 and 2 whose matmuls that fit in the L2 read their weights at 1.3 x HBM."""
    return synthetic_bundle(tmp_path_factory.mktemp("l2") / "bf16", l2_share=1.3)


def test_the_fit_keeps_the_l2_rows_bandwidth_apart_and_recovers_the_hbm_share(l2_bundle):
    bundle = read_bundle(l2_bundle)
    ops = bundle_op_table(bundle, bundle_model(bundle)).ops
    in_l2 = resident(ops, PRO)
    assert 0 < in_l2.sum() < ops["op"].isin(["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj",
                                               "lm_head"]).sum()
    fit = bundle_fit(ops, PRO)
    # the HBM share, compute share, ridge and latency the bundle was made by
    assert_same_fit(fit, replace(TRUE_FIT, elementwise={op: TRUE_FIT.elementwise[op] for op in fit.elementwise}))
    assert fit.resident_bandwidth_efficiency == pytest.approx(1.3, rel=1e-6)
    # one share for every row, as before the rule: the L2 rows pull it above the HBM rows' 0.9
    assert fit_linear(ops, PRO).bandwidth_efficiency > 0.95
    # a sheet without the L2: today's fit, to the bit
    blind = replace(PRO, l2_cache_bytes=None)
    assert bundle_fit(ops, blind) == fit_linear(ops, blind)


@pytest.mark.slow
def test_the_import_prices_a_real_model_at_the_hbm_share_and_judges_the_hbm_rows(l2_bundle):
    result = import_bundles([l2_bundle], "llama-3.1-8b", None, "test")
    linear = result.profile.linear
    assert linear["bandwidth_efficiency"] == pytest.approx(0.9, rel=1e-6)
    assert linear["resident_bandwidth_efficiency"] == pytest.approx(1.3, rel=1e-6)
    assert linear["l2"]["l2_cache_bytes"] == 2**27 and 0 < linear["l2"]["matmul_rows_in_l2"] < linear["l2"][
        "matmul_rows"]
    # each tp degree held out, each row as measured: each operation exact; a layer, one bend over its matmuls as
    # the cost model prices it, within 0.1% (its L2 and HBM matmuls no longer in one ratio of FLOPs to bytes)
    assert linear["heldout"]["by_tp"]["per_op_all"]["mape"] < 1e-6
    assert linear["heldout"]["by_tp"]["per_iteration"]["mape"] < 1e-3
    assert linear["heldout"]["from_hbm"]["by_tp"]["matmuls"]["mape"] < 1e-6
    assert linear["heldout"]["from_hbm"]["roofline"]["matmuls"]["mape"] > 0.05


def test_held_out_rows_never_enter_the_fit_that_predicts_them(l2_bundle):
    from calibrate.judging.bundle_linear import bundle_heldout

    bundle = read_bundle(l2_bundle)
    ops = bundle_op_table(bundle, bundle_model(bundle)).ops
    poisoned = ops.assign(time_s=ops["time_s"].where(ops["tp"] != 2, ops["time_s"] * 100))
    clean, spoiled = bundle_heldout(ops, PRO, "tp"), bundle_heldout(poisoned, PRO, "tp")
    held = (ops["tp"] == 2).to_numpy()
    # tp 2's rows, poisoned, are priced by the fit on tp 1 alone: the same seconds; tp 1's, by a fit on tp 2, move
    assert (spoiled.ops["predicted_s"][held] == clean.ops["predicted_s"][held]).all()
    assert not (spoiled.ops["predicted_s"][~held] == clean.ops["predicted_s"][~held]).all()
