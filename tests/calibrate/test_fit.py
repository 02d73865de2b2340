"""The fit recovers known physics from noisy timings and reports error on held-out shapes only."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from calibrate.fitting.fit import fit_profile
from calibrate.fitting.folds import assign_folds
from calibrate.profiling.grid import GRIDS
from calibrate.work.features import TERMS
from engine.errors import SpecError
from tests.helpers.synthetic_profile import TRUE, gpu_like_token_cost, synthetic_raw  # noqa: E402


def test_recovers_known_coefficients_from_noisy_timings():
    result = fit_profile(synthetic_raw(noise=0.01), "synthetic.csv", "test")
    profile = result.profile
    for term in ("prefill_attention_s", "decode_context_s", "per_sequence_s", "per_prefill_s", "mixed_s"):
        assert profile.coefficients[term] == pytest.approx(TRUE[term], rel=0.15), term
    # the token-cost table at its knots is the true cost there
    truth = gpu_like_token_cost(profile.token_knots)
    assert profile.token_costs_s == pytest.approx(list(truth), rel=0.05)
    assert profile.heldout_mape < 0.03
    assert set(profile.coefficients) == set(TERMS)


def test_without_noise_the_fit_is_exact():
    result = fit_profile(synthetic_raw(noise=0.0), "synthetic.csv", "test")
    assert result.profile.heldout_mape < 1e-3
    assert result.predictions["predicted_s"].to_numpy() == pytest.approx(result.predictions["time_s"].to_numpy(),
                                                                        rel=1e-6)


def cpu_like_token_cost(tokens):
    """As the project's CPU measured it: 4 rows cost much more than 3, and 9-15 more than 16."""
    tokens = np.asarray(tokens, dtype=float)
    small = 0.045 + 0.002 * tokens + 0.03 * (tokens >= 4) + 0.011 * np.clip(tokens - 4, 0, 11)
    return np.where(tokens >= 16, 0.075 + 0.0011 * (tokens - 16), small)


def test_the_table_follows_a_cost_that_falls_where_the_kernel_changes():
    raw = synthetic_raw(noise=0.0, grid=GRIDS["cpu"], token_cost=cpu_like_token_cost)
    result = fit_profile(raw, "cpu.csv", "test")
    table = dict(zip(result.profile.token_knots, result.profile.token_costs_s))
    assert table[12] > table[16] and table[4] > 1.4 * table[3]
    assert result.profile.heldout_mape < 0.02  # every size up to 16 is measured, so held-out rows are too


def test_heldout_error_comes_from_fits_that_never_saw_the_row():
    raw = synthetic_raw(noise=0.0)
    poisoned = raw.copy()
    poisoned.loc[10, "time_s"] *= 10.0  # one bad measurement
    result = fit_profile(poisoned, "poisoned.csv", "test")
    row = result.predictions.loc[10]
    # predicted from the other rows, it lands near the truth, so its error is the poison's ~90%
    assert row["heldout_predicted_s"] == pytest.approx(raw.loc[10, "time_s"], rel=0.05)
    assert row["ape"] == pytest.approx(0.9, abs=0.05)
    assert result.profile.heldout_mape == pytest.approx(result.predictions["ape"].mean())
    assert result.profile.heldout_rows == len(raw)


def test_every_kind_is_in_every_fold():
    raw = synthetic_raw(noise=0.0)
    fold = assign_folds(raw, 5, seed=1)
    for kind in raw["kind"].unique():
        assert set(fold[raw["kind"].to_numpy() == kind]) == set(range(5)), kind


def test_bad_raw_csv_is_refused_with_the_column():
    raw = synthetic_raw(noise=0.0).drop(columns=["sum_decode_context"])
    with pytest.raises(SpecError, match="sum_decode_context"):
        fit_profile(raw, "raw.csv", "test")
    raw = synthetic_raw(noise=0.0)
    raw.loc[3, "time_s"] = -1.0
    with pytest.raises(SpecError, match="row 4"):
        fit_profile(raw, "raw.csv", "test")


def test_grids_stay_inside_the_model_and_memory():
    for grid in GRIDS.values():
        for shape in grid.shapes():
            assert shape.kv_tokens <= grid.max_kv_tokens
            assert all(n <= grid.max_seq_len for n in shape.prefill_lens + shape.decode_context_lens)


def test_knots_are_every_small_count_then_every_twenty_percent():
    from calibrate.work.features import choose_knots

    assert choose_knots([1, 2, 3, 5, 16, 17, 18, 20, 24, 100]) == [1, 2, 3, 5, 16, 20, 24, 100]
    # the largest count ends the table, replacing a knot a few tokens before it
    assert choose_knots([1, 2, 100, 384, 400]) == [1, 2, 100, 400]
    assert choose_knots([4, 8, 9]) == [4, 8, 9]  # small counts are all knots


def test_the_host_fit_recovers_a_known_host_cost_from_noisy_iterations():
    from calibrate.fitting.fit import fit_host

    rng = np.random.default_rng(1)
    seqs, tokens = rng.integers(1, 40, 400), rng.integers(0, 600, 400) * (rng.random(400) < 0.3)
    truth = 2e-3 + 5e-5 * seqs + 2e-6 * tokens
    rows = pd.DataFrame({"num_seqs": seqs, "num_prefill_tokens": tokens,
                         "time_s": truth * (1 + rng.normal(0, 0.02, 400))})
    host = fit_host(rows)
    assert host["per_iteration_s"] == pytest.approx(2e-3, rel=0.05)
    assert host["per_sequence_s"] == pytest.approx(5e-5, rel=0.05)
    assert host["per_prefill_token_s"] == pytest.approx(2e-6, rel=0.1)
    assert host["heldout_mean_abs_error_s"] < 0.05 * host["mean_s"]


def test_the_simulator_charges_the_host_work_a_profile_measured():
    from calibrate.cost_models.profile_model import ProfileCostModel
    from engine.core.batch import Batch

    profile = fit_profile(synthetic_raw(noise=0.0), "synthetic.csv", "test").profile
    host = {"per_iteration_s": 1e-3, "per_sequence_s": 1e-4, "per_prefill_token_s": 1e-6}
    without, with_host = ProfileCostModel(profile), ProfileCostModel(dataclasses.replace(profile, host=host))
    batch = Batch(prefill_seq_ids=[0], prefill_lens=[100], decode_seq_ids=[1, 2], decode_context_lens=[50, 60])
    assert with_host.iteration_time(batch) - without.iteration_time(batch) == pytest.approx(1e-3 + 3e-4 + 1e-4)
    with_host.charge_host = False  # a validation whose real clock is the forward alone
    assert with_host.iteration_time(batch) == pytest.approx(without.iteration_time(batch))


def test_the_serving_factor_is_the_time_weighted_ratio_of_served_to_alone():
    from calibrate.profiling.serving import serving_factor

    served, alone = [0.11, 0.22, 0.33], [0.1, 0.2, 0.3]
    assert serving_factor(served, alone) == {"factor": pytest.approx(1.1), "iterations": 3,
                                             "served_s": pytest.approx(0.66), "alone_s": pytest.approx(0.6)}
    with pytest.raises(ValueError):
        serving_factor([0.1], [0.0])


def test_a_fit_measures_the_serving_factor_from_serving_rows_and_the_simulator_charges_it():
    from calibrate.cost_models.profile_model import ProfileCostModel
    from engine.core.batch import Batch

    raw = synthetic_raw(noise=0.0)
    alone = raw[raw["kind"] == "decode"].head(12).assign(kind="serving")
    served = alone.assign(alone_s=alone["time_s"], time_s=alone["time_s"] * 1.03)
    profile = fit_profile(pd.concat([raw, served], ignore_index=True), "synthetic.csv", "test").profile
    assert profile.serving["factor"] == pytest.approx(1.03)
    assert profile.serving["iterations"] == 12
    plain = fit_profile(raw, "synthetic.csv", "test").profile
    assert plain.serving is None
    assert profile.coefficients == plain.coefficients  # serving rows are not shapes to fit
    host = {"per_iteration_s": 1e-3, "per_sequence_s": 0.0, "per_prefill_token_s": 0.0}
    batch = Batch(prefill_seq_ids=[0], prefill_lens=[100], decode_seq_ids=[1, 2], decode_context_lens=[50, 60])
    forward = ProfileCostModel(plain).iteration_time(batch)
    served_model = ProfileCostModel(dataclasses.replace(profile, host=host))
    assert served_model.iteration_time(batch) == pytest.approx(forward * 1.03 + 1e-3)  # host work is not scaled


def test_an_implausible_serving_factor_is_left_out_with_a_warning_not_written_unloadable():
    raw = synthetic_raw(noise=0.0)
    alone = raw[raw["kind"] == "decode"].head(12).assign(kind="serving")
    served = alone.assign(alone_s=alone["time_s"], time_s=alone["time_s"] * 0.37)  # re-timing hit by contention
    with pytest.warns(UserWarning, match="serving factor 0.370"):
        profile = fit_profile(pd.concat([raw, served], ignore_index=True), "synthetic.csv", "test").profile
    assert profile.serving is None


def test_a_block_size_sweep_tells_the_cost_per_block_from_the_cost_per_token():
    raw = synthetic_raw(noise=0.01, block_sizes=(1, 4, 16, 64, 256), decode_block_s=3e-6)
    profile = fit_profile(raw, "sweep.csv", "test").profile
    assert profile.coefficients["decode_block_s"] == pytest.approx(3e-6, rel=0.15)
    assert profile.coefficients["decode_context_s"] == pytest.approx(TRUE["decode_context_s"], rel=0.15)
    assert profile.block_size == 16 and profile.block_sizes == [1, 4, 16, 64, 256]
    assert profile.heldout_mape < 0.03


def test_at_one_block_size_the_cost_per_block_is_not_fitted():
    """ceil(context / 16) is nearly context / 16 + 1/2: a fit at one size would split it from the per-token and
    per-sequence costs by noise, so it stays 0 and they keep it."""
    raw = synthetic_raw(noise=0.0, decode_block_s=3e-6)
    profile = fit_profile(raw, "one-size.csv", "test").profile
    assert profile.coefficients["decode_block_s"] == 0.0 and profile.block_sizes == [16]
    assert profile.heldout_mape < 0.03  # the per-token and per-sequence costs carry the blocks at this size
    old = fit_profile(raw.drop(columns=["sum_decode_blocks"]), "old.csv", "test").profile  # a CSV from before
    assert old.coefficients["decode_block_s"] == 0.0


def swap_row(transfers: int, num_bytes: int, seconds: float) -> dict:
    return {"kind": "swap", "swap_copies": transfers, "swap_bytes": num_bytes, "swap_s": seconds,
            "model": "opt-13b", "dtype": "float16", "block_size": 16}


def test_the_swap_fit_separates_the_cost_per_copy_from_the_cost_per_byte():
    from calibrate.fitting.fit import fit_swap

    per_copy, per_byte = 5e-6, 1 / 25e9
    rows = pd.DataFrame([swap_row(t, b, t * per_copy + b * per_byte)
                         for t, b in ((160, 10**9), (128 * 160, 10**9), (640, 4 * 10**8), (16 * 640, 4 * 10**8))])
    assert fit_swap(rows, "raw.csv") == pytest.approx((per_copy, per_byte), rel=1e-6)
    assert fit_swap(rows.iloc[:0], "raw.csv") == (None, None)
    # a CSV from before the copies were named so calls them swap_transfers
    old = rows.rename(columns={"swap_copies": "swap_transfers"})
    assert fit_swap(old, "raw.csv") == pytest.approx((per_copy, per_byte), rel=1e-6)


def test_a_csv_from_before_copies_were_counted_reads_its_swap_as_bytes():
    from calibrate.fitting.fit import fit_swap

    rows = pd.DataFrame([{"kind": "swap", "swap_s_per_block": 2e-4, "model": "opt-13b", "dtype": "float16",
                          "block_size": 16}])
    per_copy, per_byte = fit_swap(rows, "raw.csv")
    assert per_copy == 0.0 and per_byte == pytest.approx(2e-4 / (16 * 819_200))
