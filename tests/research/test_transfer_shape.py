"""Carrying the measured kernels' steps between two GPUs: the ratio carry and the tile-aware GEMM roofline
recover a known step pattern that the smooth fit cannot, and neither reads the held-out GPU's times."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from calibrate.hardware.hardware import load_hardware
from calibrate.judging.transfer_two_gpus import GpuTables, hold_out
from calibrate.tables.op_table import read_op_table
from calibrate.work.layer_ops import GEMMS
from research.judging.transfer_shape import (
    choose_tile,
    padded_gemms,
    ratio_hold_out,
    ratio_prices,
    residual_correlation,
    tile_hold_out,
)
from tests.calibrate.synthetic_ops import (
    HARDWARE,
    LAYERS,
    MODELS,
    SECOND_HARDWARE,
    TRUE_FIT,
    assert_same_fit,
    write_tables,
    write_two_gpus,
)

TILE = 64


def gpu(paths, hardware: str) -> GpuTables:
    ops = pd.concat([read_op_table(p).ops for p in paths], ignore_index=True)
    return GpuTables(load_hardware(hardware), ops, LAYERS)


@pytest.fixture(scope="module")
def tiled(tmp_path_factory):
    """Both GPUs' GEMMs compute their tokens rounded up to 64 rows: flat from 1 to 64 tokens, a step past it."""
    first, second = write_two_gpus(tmp_path_factory.mktemp("tiled"), tile=TILE)
    return gpu(first, HARDWARE), gpu(second, SECOND_HARDWARE)


def stepped(folder, hardware: str, steps: dict[int, float]) -> GpuTables:
    """TRUE_FIT's tables on `hardware` with every GEMM at the token counts in `steps` slowed by that factor: a
    step pattern no spec sheet explains, the same on both GPUs."""
    folder.mkdir(parents=True, exist_ok=True)
    ops = gpu(write_tables(folder, hardware=hardware), hardware).ops
    factor = np.where(ops["op"].isin(GEMMS), ops["tokens"].map(steps).fillna(1.0), 1.0)
    return GpuTables(load_hardware(hardware), ops.assign(time_s=ops["time_s"] * factor), LAYERS)


STEPS = {96: 1.3, 160: 1.25, 384: 1.2}


@pytest.fixture(scope="module")
def steps_on_both(tmp_path_factory):
    folder = tmp_path_factory.mktemp("steps")
    return stepped(folder / "a", HARDWARE, STEPS), stepped(folder / "h", SECOND_HARDWARE, STEPS)


def test_padding_counts_a_gemms_flops_on_whole_tiles_and_leaves_the_rest(tiled):
    ops = tiled[0].ops
    out = padded_gemms(ops, TILE)
    gemm = ops["op"].isin(GEMMS).to_numpy()
    ratio = out["flops"].to_numpy()[gemm] / ops["flops"].to_numpy()[gemm]
    assert np.allclose(ratio, np.ceil(ops["tokens"][gemm] / TILE) * TILE / ops["tokens"][gemm])
    assert (out["flops"][~gemm] == ops["flops"][~gemm]).all()
    assert (out["weight_bytes"] == ops["weight_bytes"]).all() and (out["time_s"] == ops["time_s"]).all()
    assert padded_gemms(ops, 1) is ops


@pytest.mark.slow
def test_the_tile_aware_fit_recovers_the_tiles_steps_on_the_other_gpu_where_the_smooth_fit_cannot(tiled):
    a, h = tiled
    tile, errors = choose_tile(a, (1, 32, TILE, 128))
    assert tile == TILE and errors[TILE][1] < 1e-6 < errors[1][1]
    for train, test in ((a, h), (h, a)):
        carried = tile_hold_out(train, test, TILE)
        assert_same_fit(carried.fit, TRUE_FIT)
        assert carried.ours["ape"].max() < 1e-6
        assert hold_out(train, test).ours["ape"].max() > 0.05  # one smooth bend does not follow the steps


def test_the_ratio_carry_brings_the_sources_steps_to_the_target(steps_on_both):
    a, h = steps_on_both
    # with the true linear part the factor is exact: the source's steps land on the target's rows as measured
    assert np.allclose(ratio_prices(TRUE_FIT, a, h), h.ops["time_s"], rtol=1e-9)
    for train, test in ((a, h), (h, a)):
        carried, smooth = ratio_hold_out(train, test), hold_out(train, test)
        at_steps = carried.ours["tokens"].isin(list(STEPS)).to_numpy()
        assert carried.ours["ape"][at_steps].max() < smooth.ours["ape"][at_steps].max() / 3
        assert carried.ours["ape"].mean() < smooth.ours["ape"].mean() / 2


def test_a_model_the_source_never_measured_is_priced_by_the_fit(steps_on_both):
    a, h = steps_on_both
    known = next(iter(MODELS))
    carried = ratio_hold_out(replace(a, ops=a.ops[a.ops["model"] == known]), h)
    smooth = hold_out(replace(a, ops=a.ops[a.ops["model"] == known]), h)
    for model in MODELS:
        ours = carried.ours[carried.ours["model"] == model].sort_values(["tp", "tokens"])
        fit = smooth.ours[smooth.ours["model"] == model].sort_values(["tp", "tokens"])
        same = np.array_equal(ours["predicted_s"].to_numpy(), fit["predicted_s"].to_numpy())
        assert same == (model != known)


@pytest.mark.parametrize("carry", [ratio_hold_out, lambda train, test: tile_hold_out(train, test, TILE)],
                         ids=["ratio", "tile"])
def test_the_held_out_gpus_times_are_never_read(tiled, carry):
    a, h = tiled
    for train, test in ((a, h), (h, a)):
        poisoned = replace(test, ops=test.ops.assign(time_s=test.ops["time_s"] * 100))
        clean, dirty = carry(train, test), carry(train, poisoned)
        assert dirty.fit == clean.fit
        assert np.array_equal(dirty.ours["predicted_s"].to_numpy(), clean.ours["predicted_s"].to_numpy())
        assert np.array_equal(dirty.ours_ops["predicted_s"].to_numpy(), clean.ours_ops["predicted_s"].to_numpy())
        assert dirty.ours["ape"].min() > 0.95  # the poison is only in the errors


def test_the_residuals_correlate_where_both_gpus_step_alike(steps_on_both, tmp_path):
    a, h = steps_on_both
    alike = residual_correlation(a, h)
    assert alike["all GEMMs"] > 0.9
    other = stepped(tmp_path / "other", SECOND_HARDWARE, {48: 1.3, 256: 1.25, 768: 1.2})
    assert residual_correlation(a, other)["all GEMMs"] < 0.5
