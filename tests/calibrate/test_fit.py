"""The fit recovers known physics from noisy timings and reports error on held-out shapes only."""
import pytest

from calibrate.features import TERMS
from calibrate.fit import assign_folds, fit_profile
from calibrate.grid import GRIDS
from engine.core.errors import SpecError

from synthetic_profile import KNEE, TRUE, synthetic_raw  # noqa: E402


def test_recovers_known_coefficients_from_noisy_timings():
    result = fit_profile(synthetic_raw(noise=0.01), "synthetic.csv", "test")
    fitted = result.profile.coefficients
    # terms with their own physics come back; per-token slope, knee and the large-size steps
    # trade off against each other on a grid, so they are checked through the predictions
    for term in ("fixed_s", "decode_context_s", "per_sequence_s", "step_4_tokens_s"):
        assert fitted[term] == pytest.approx(TRUE[term], rel=0.15), term
    assert result.profile.heldout_mape < 0.03
    assert set(fitted) == set(TERMS)


def test_without_noise_the_fit_is_exact():
    result = fit_profile(synthetic_raw(noise=0.0), "synthetic.csv", "test")
    assert result.profile.heldout_mape < 1e-3
    assert result.profile.knee_tokens == pytest.approx(KNEE, rel=0.5)


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
