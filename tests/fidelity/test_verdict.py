"""The verdict: leave-one-trace-out on served iterations, a speed correction kept only where it
helps, the within-noise count, and --repeat's spread and resume. Synthetic iterations: no engine runs."""
import json

import numpy as np
import pandas as pd
import pytest

from engine.core.batch import BatchShape
from fidelity.heldout import grid_columns
from fidelity.repeat import run_repeats, spread
from fidelity.served import fit_error, fit_without, replay_error, served_rows
from fidelity.verdict import correction_helps, grid_correction_by_rate, headline, within_noise


def known_cost(shape: BatchShape) -> float:
    """A cost the served fit can express: a token table that is a line, KV reads, causal attention."""
    return 0.010 + 2e-4 * shape.num_tokens + 1e-6 * shape.sum_decode_context + 3e-8 * shape.sum_prefill_sq


def random_shapes(rng, n: int) -> list[BatchShape]:
    shapes = []
    for _ in range(n):
        prefills = tuple(int(x) for x in rng.integers(8, 128, size=rng.integers(0, 3)))
        decodes = tuple(int(x) for x in rng.integers(8, 256, size=rng.integers(0 if prefills else 1, 6)))
        shapes.append(BatchShape(prefills, decodes))
    return shapes


def synthetic_served(factors=None, times_follow_factor: bool = True, seed: int = 0) -> pd.DataFrame:
    """Two systems x three rates x two repeats of served iterations at the known cost; each replay's probe
    read factors[(system, rate, repeat)], and its times followed that factor or did not."""
    rng = np.random.default_rng(seed)
    frames = []
    for system in ("orca", "vllm"):
        for rate in (0.5, 1.0, 2.0):
            for repeat in range(2):
                factor = 1.0 if factors is None else factors[(system, rate, repeat)]
                shapes = random_shapes(rng, 60)
                times = [known_cost(s) * (factor if times_follow_factor else 1.0) for s in shapes]
                frames.append(served_rows(system, rate, repeat, times, shapes, factor))
    return pd.concat(frames, ignore_index=True)


def test_served_rows_leave_out_each_replays_first_iteration_and_swaps():
    shapes = [BatchShape((16,), ()), BatchShape((), (20,)), BatchShape((), (21,), num_swap_blocks=2),
              BatchShape((), (22,))]
    rows = served_rows("vllm", 1.0, 0, [0.1, 0.02, 0.5, 0.021], shapes, 1.1)
    assert rows["time_s"].tolist() == [0.02, 0.021]
    assert rows["sum_decode_context"].tolist() == [20, 22] and (rows["speed_factor"] == 1.1).all()


@pytest.mark.parametrize("held_out", [0.5, pytest.param(1.0, marks=pytest.mark.slow),
                                      pytest.param(2.0, marks=pytest.mark.slow)])
def test_leave_one_trace_out_recovers_a_known_cost_without_the_held_out_iterations(held_out):
    rows = synthetic_served()
    # poison the held-out trace's own iterations: a fit that read any of them would mispredict it badly
    poisoned = rows.assign(time_s=np.where(rows["rate"] == held_out, rows["time_s"] * 50.0, rows["time_s"]))
    left = fit_without(poisoned, held_out)
    held = rows[rows["rate"] == held_out]
    assert left.train_rows == int((rows["rate"] != held_out).sum())
    assert fit_error(left.plain, held) < 0.01  # the true (unpoisoned) held-out times, predicted within 1%
    assert fit_error(left.plain, poisoned[poisoned["rate"] != held_out]) < 0.01


def test_sum_matching_removes_a_relative_fits_bias_below_the_mean_of_noisy_times():
    rows = synthetic_served()
    # contention makes some iterations much slower, never faster: right-skewed noise around the known cost
    noise = np.random.default_rng(3).lognormal(0.0, 0.4, size=len(rows))
    noisy = rows.assign(time_s=rows["time_s"] * noise)
    left = fit_without(noisy, 1.0)
    held = noisy[noisy["rate"] == 1.0]
    assert replay_error(left.relative, held) > 0.15  # the relative fit predicts well below the summed times
    # sum-matched on the other traces, it lands on them within what 60 noisy iterations a replay allow
    assert replay_error(left.plain, held) < 0.06


def test_leave_one_trace_out_needs_other_traces():
    rows = synthetic_served()
    with pytest.raises(ValueError, match="outside the trace at 0.5"):
        fit_without(rows[rows["rate"] == 0.5], 0.5)


def drifting_factors(seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {(s, r, k): float(rng.uniform(0.83, 1.04)) for s in ("orca", "vllm") for r in (0.5, 1.0, 2.0)
            for k in range(2)}


@pytest.mark.slow
def test_a_speed_correction_that_worsens_the_fit_is_reported_and_not_applied():
    # the probe read 0.83-1.04 on a shared 2-core VM, but the served iterations ran at one speed
    rows = synthetic_served(drifting_factors(), times_follow_factor=False)
    left = fit_without(rows, 1.0)
    assert left.at_speed is not None  # measured and reported ...
    assert left.train_error_at_speed > left.train_error + 0.02
    assert not left.corrected  # ... and not applied


@pytest.mark.slow
def test_a_speed_correction_that_explains_the_drift_is_applied():
    rows = synthetic_served(drifting_factors(), times_follow_factor=True)
    left = fit_without(rows, 1.0)
    assert left.corrected and left.train_error_at_speed < 0.01 < left.train_error
    held = rows[rows["rate"] == 1.0]
    assert fit_error(left.at_speed, held, held["speed_factor"].to_numpy()) < 0.01


def test_the_grid_profiles_correction_is_judged_on_the_other_rates_and_dropped_where_it_hurts():
    rows = synthetic_served(drifting_factors(), times_follow_factor=False)
    shapes_cost = rows["time_s"]  # the grid profile predicts the served times exactly, as calibrated
    iterations = rows.assign(measured_s=rows["time_s"], predicted_s=shapes_cost)
    speed = rows.groupby(["system", "rate", "repeat"], as_index=False)["speed_factor"].first()
    choice = grid_correction_by_rate(iterations, speed)
    assert set(choice) == {0.5, 1.0, 2.0}
    for corrected, plain, at_speed in choice.values():
        assert not corrected and plain == pytest.approx(0.0) and at_speed > 0.02
    plain, at_speed = correction_helps([1.0, 2.0], [0.9, 1.8], [1.1, 1.1])
    assert at_speed < plain  # where the machine did slow down, the correction is kept
    row = {"speed_corrected": True, "normalized_latency_error": -0.12, "uncorrected_normalized_latency_error": -0.03,
           "real_low_error": -0.05, "real_high_error": 0.05}
    grid_columns(row, correction_helps=False)
    assert row["grid_normalized_latency_error"] == -0.03 and not row["grid_speed_corrected"]
    assert row["grid_within_noise"]


def test_within_noise_counts_points_inside_the_real_replays_own_range():
    summary = pd.DataFrame({
        "loo_normalized_latency_error": [0.02, -0.08, 0.30, -0.01, np.nan],
        "real_low_error": [-0.05, -0.05, -0.10, -0.01, -0.1],
        "real_high_error": [0.05, 0.05, 0.10, 0.01, 0.1]})
    assert within_noise(summary["loo_normalized_latency_error"], summary["real_low_error"],
                        summary["real_high_error"]).tolist() == [True, False, False, True, False]
    h = headline(summary, "loo_normalized_latency_error")
    assert h["points"] == 4 and h["within_noise"] == 2 and h["within_10pct"] == 3
    assert h["mean_abs_error"] == pytest.approx((0.02 + 0.08 + 0.30 + 0.01) / 4)
    assert h["signed_mean_error"] == pytest.approx((0.02 - 0.08 + 0.30 - 0.01) / 4)
    assert h["worst_error"] == pytest.approx(0.30)
    assert (h["under_predicted"], h["over_predicted"]) == (2, 2)


class Interrupted(Exception):
    pass


def fake_validation(values: dict, calls: list, interrupt_at: int | None = None):
    """A validate_once that writes a headline (last, as validate does) with the k-th mean |error|."""
    def once(folder):
        calls.append(folder.name)
        folder.mkdir(parents=True)
        (folder / "summary.csv").write_text("partial\n")
        if len(calls) == interrupt_at:
            raise Interrupted
        k = len(calls)
        figures = {"verdict": {"points": 20, "mean_abs_error": values[k], "signed_mean_error": -values[k] / 2,
                               "worst_error": -3 * values[k], "within_noise": 10 + k, "within_10pct": 20,
                               "under_predicted": 12, "over_predicted": 8}}
        (folder / "headline.json").write_text(json.dumps(figures))
        return figures
    return once


def test_repeat_reports_the_spread_and_resumes_after_an_interruption(tmp_path):
    first: list = []
    values = {1: 0.03, 2: 0.05}  # each run's k-th call's mean |error|
    with pytest.raises(Interrupted):
        run_repeats(3, tmp_path, fake_validation(values, first, interrupt_at=2), log=lambda _: None)
    assert first == [".repeat-1.partial", ".repeat-2.partial"]
    assert (tmp_path / "repeat-1" / "headline.json").exists()
    assert not (tmp_path / "repeat-2").exists() and (tmp_path / ".repeat-2.partial").exists()
    assert not (tmp_path / "repeats.csv").exists()

    second: list = []
    frame = run_repeats(3, tmp_path, fake_validation(values, second), log=lambda _: None)
    assert second == [".repeat-2.partial", ".repeat-3.partial"]  # repeat 1 kept, the interrupted 2 redone, 3 run
    assert not (tmp_path / ".repeat-2.partial").exists()
    assert sorted(p.name for p in tmp_path.glob("repeat-*")) == ["repeat-1", "repeat-2", "repeat-3"]
    assert frame["repeat"].tolist() == [1, 2, 3]
    # repeat 1 from the first run (call 1); repeats 2 and 3 from the second run's calls 1 and 2
    assert frame["mean_abs_error"].tolist() == [0.03, 0.03, 0.05]
    rows = spread(frame).set_index("key")
    assert rows.loc["mean_abs_error", "spread"] == pytest.approx(0.02)
    assert rows.loc["within_noise", "min"] == 11 and rows.loc["within_noise", "max"] == 12
    assert pd.read_csv(tmp_path / "repeats.csv")["repeat"].tolist() == [1, 2, 3]
    text = (tmp_path / "repeats.txt").read_text()
    assert "3 repeat(s)" in text and "3.0%, 3.0%, 5.0%" in text and "(spread 2.0 points)" in text

    again: list = []
    run_repeats(3, tmp_path, fake_validation(values, again), log=lambda _: None)
    assert again == []  # everything finished: nothing runs again


@pytest.mark.parametrize("flags, says", [(["--repeat", "0"], "must be a whole number >= 1, got 0"),
                                         (["--repeat", "2", "--exact"], "give one of them")])
def test_a_bad_repeat_is_refused_naming_the_flag(tmp_path, capsys, flags, says):
    from servesim.cli import main

    assert main(["validate", str(tmp_path / "never-read.yaml"), *flags]) == 2
    err = capsys.readouterr().err
    assert "--repeat" in err and says in err
