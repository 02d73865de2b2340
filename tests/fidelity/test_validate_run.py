"""A validation run on a tiny config writes every output file, with the documented columns."""
import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")  # these run the real engine

from servesim.cli import main  # noqa: E402

SUMMARY = ["system", "rate", "real_normalized_latency", "sim_normalized_latency", "normalized_latency_error",
           "real_repeat_spread", "p90_request_error", "real_mean_batched_requests", "sim_mean_batched_requests",
           "real_preemptions", "sim_preemptions", "real_throughput_tokens_per_s", "sim_throughput_tokens_per_s",
           "below_saturation", "exact_replay", "warmup_rule", "speed_factor", "sim_speed_factor",
           "real_speed_spread", "real_repeat_spread_at_speed", "sim_uncorrected_normalized_latency",
           "uncorrected_normalized_latency_error"]
REQUESTS = ["system", "rate", "request_id", "measured", "real_latency_s", "sim_latency_s", "latency_error",
            "real_ttft_s", "sim_ttft_s", "ttft_error", "real_normalized_latency", "sim_normalized_latency"]
SUSTAINABLE = ["system", "latency_threshold", "real_sustainable_rate", "sim_sustainable_rate",
               "sustainable_rate_error"]
FIDELITY = ["system", "max_normalized_latency_error", "max_p90_request_error", "sustainable_rate_error",
            "max_real_repeat_spread", "max_real_repeat_spread_at_speed", "max_uncorrected_normalized_latency_error",
            "min_speed_factor", "max_speed_factor", "exact_replay", "median_normalized_latency_error",
            "rows_within_target", "rows_within_noise", "max_real_request_spread_p90"]
ITERATIONS = ["system", "rate", "repeat", "kind", "measured_s", "predicted_s", "speed_factor", "error"]
SPEED = ["system", "rate", "repeat", "decode_probe_s", "prefill_probe_s", "probe_samples", "decode_speed_factor",
         "prefill_speed_factor", "speed_factor"]
VERDICT = ["real_low_error", "real_high_error", "grid_speed_corrected", "grid_normalized_latency_error",
           "loo_sim_normalized_latency", "loo_normalized_latency_error", "loo_plain_normalized_latency_error",
           "loo_at_speed_normalized_latency_error", "loo_speed_corrected", "loo_heldout_iteration_error",
           "within_noise", "grid_within_noise", "real_queue_growth", "real_queue_growth_stderr", "past_saturation",
           "real_makespan_low_error", "real_makespan_high_error", "loo_sim_makespan_s", "loo_makespan_error",
           "judged_by", "judged_error", "judged_within_target"]
EXACT = ["system", "rate", "repeat", "same_batches", "same_preemptions", "max_time_diff_s", "identical"]


def has_columns(path, columns):
    frame = pd.read_csv(path)
    missing = [c for c in columns if c not in frame.columns]
    assert not missing, f"{path.name} lacks {missing}"
    return frame


def load_benchmark(name: str):
    """A script of benchmarks/fidelity/ as a module (that folder is no package: its scripts run by path)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_validate_writes_every_output(tiny_validation, tmp_path, capsys):
    out = tmp_path / "out"
    config = tiny_validation()
    assert main(["validate", str(config), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "targets:" in printed and "warm-up:" in printed

    summary = has_columns(out / "summary.csv", SUMMARY)
    assert len(summary) == 5 * 2  # one row per system x rate
    assert summary["exact_replay"].all()
    assert (summary["real_repeat_spread"] >= 0).all()
    assert summary["warmup_rule"].str.contains("10%").all()  # the rule used is said, row by row
    requests = has_columns(out / "requests.csv", REQUESTS)
    assert set(requests["system"]) == set(summary["system"])
    assert (requests["real_latency_s"] > 0).all() and (requests["sim_latency_s"] > 0).all()
    assert not requests["measured"].all()  # the warm-up excluded someone
    assert len(has_columns(out / "sustainable.csv", SUSTAINABLE)) == 5
    assert len(has_columns(out / "fidelity.csv", FIDELITY)) == 5
    iterations = has_columns(out / "iterations.csv", ITERATIONS)
    assert set(iterations["kind"]) >= {"prefill", "decode"}
    # the machine was probed through every replay and the simulator ran at the speed it measured
    assert (summary["speed_factor"] > 0).all()
    assert summary["sim_speed_factor"].to_numpy() == pytest.approx(summary["speed_factor"].to_numpy())
    assert (iterations["speed_factor"] > 0).all()
    speed = has_columns(out / "speed.csv", SPEED)
    assert len(speed) == 5 * 2 * 2 and (speed["probe_samples"] >= 2).all()  # before and after, at least
    assert (speed["decode_probe_s"] > 0).all() and (speed["prefill_probe_s"] > 0).all()
    # the reference says decode 2 ms, prefill 4 ms: each factor is its probe over that
    assert speed["decode_speed_factor"].to_numpy() == pytest.approx((speed["decode_probe_s"] / 0.002).to_numpy())
    assert speed["prefill_speed_factor"].to_numpy() == pytest.approx((speed["prefill_probe_s"] / 0.004).to_numpy())
    # every iteration was scaled by its own replay's factor: the geometric mean of the two probes'
    joined = iterations.merge(speed, on=["system", "rate", "repeat"], suffixes=("", "_replay"))
    expected = (joined["decode_speed_factor"] * joined["prefill_speed_factor"]) ** 0.5
    assert joined["speed_factor"].to_numpy() == pytest.approx(expected.to_numpy())
    scaled = iterations["predicted_s"] * iterations["speed_factor"] / iterations["measured_s"] - 1
    assert iterations["error"].to_numpy() == pytest.approx(scaled.to_numpy())
    assert has_columns(out / "exact.csv", EXACT)["identical"].all()
    for figure in ("normalized_latency.png", "request_scatter.png"):
        assert (out / figure).read_bytes()[:4] == b"\x89PNG"
    meta = json.loads((out / "validation.json").read_text())
    assert meta["repeats"] == 2 and meta["pool"]["vLLM"]["num_gpu_blocks"] == 16
    assert "60-s rule" in meta["warmup_rule"] and meta["torch_threads"] == 1
    assert meta["speed_correction"] and meta["profile"]["speed_reference"]["decode_s"] == 0.002
    assert (out / "summary.txt").exists()
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary files
    # the verdict: every point predicted leave-one-trace-out, with its place in the real replays' own range
    summary = has_columns(out / "summary.csv", VERDICT)
    assert summary["loo_normalized_latency_error"].notna().all()
    assert (summary["real_low_error"] <= 0).all() and (summary["real_high_error"] >= 0).all()
    loo = has_columns(out / "loo.csv", ["held_out_rate", "train_iterations", "heldout_iteration_error",
                                        "speed_corrected", "train_error", "train_error_at_speed"])
    assert sorted(loo["held_out_rate"]) == [4, 12] and (loo["train_iterations"] >= 12).all()
    headline = json.loads((out / "headline.json").read_text())
    assert headline["verdict"]["points"] == 10
    assert headline["verdict"]["within_noise"] == int(summary["within_noise"].sum())
    assert headline["grid_as_calibrated"]["mean_abs_error"] == pytest.approx(
        summary["uncorrected_normalized_latency_error"].abs().mean())
    # points past saturation (read from the real replays) are judged by makespan, the others by latency
    assert set(summary["judged_by"]) <= {"latency", "makespan"}
    assert (summary["judged_by"] == "makespan").sum() == headline["verdict"]["past_saturation"]
    assert (summary.loc[~summary["past_saturation"], "judged_by"] == "latency").all()
    assert headline["verdict"]["within_target_with_rule"] == int(summary["judged_within_target"].sum())
    assert "per-point target" in (out / "summary.txt").read_text()
    assert "how the verdict judged them" in (out / "summary.txt").read_text()
    # benchmarks/fidelity/fidelity.py --other-profile with the run's own grid profile gives the grid's error as
    # calibrated
    bench = load_benchmark("fidelity")
    again = bench.other_profile_headline(str(config), [], out, str(config.parent / "profile.yaml"))
    assert again["mean_abs_error"] == pytest.approx(headline["grid_as_calibrated"]["mean_abs_error"])
    # and carried at the speed the run's probes measured against its probe times, the grid's error at speed
    at_speed = bench.other_profile_headline(str(config), [], out, str(config.parent / "profile.yaml"), at_speed=True)
    assert at_speed["mean_abs_error"] == pytest.approx(headline["grid_at_speed"]["mean_abs_error"])
    assert at_speed["mean_abs_error"] != pytest.approx(again["mean_abs_error"])  # the probe moved it
    assert meta["verdict"]["column"] == "loo_normalized_latency_error"
    assert "VERDICT verdict" in printed and "within noise" in printed
    assert "speed correction, leave-one-trace-out: applied for" in printed


@pytest.mark.slow
def test_repeat_runs_the_whole_validation_again_and_reports_the_spread(tiny_validation, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["validate", str(tiny_validation()), "--out", str(out), "--set", "experiment.rates=[4,12]",
            "--set", "experiment.systems=[vllm]", "--repeats", "2", "--repeat", "2"]
    assert main(args) == 0
    assert sorted(p.name for p in out.iterdir()) == ["repeat-1", "repeat-2", "repeats.csv", "repeats.txt"]
    repeats = pd.read_csv(out / "repeats.csv")
    assert sorted(set(repeats["repeat"])) == [1, 2] and "verdict" in set(repeats["figure"])
    assert "2 repeat(s)" in capsys.readouterr().out
    assert main(args) == 0  # run again: both repeats finished, so nothing replays
    assert "already finished" in capsys.readouterr().out


def test_without_correction_the_simulator_runs_as_calibrated(tiny_validation, tmp_path, capsys):
    out = tmp_path / "plain"
    args = ["validate", str(tiny_validation()), "--out", str(out), "--set", "validation.speed_correction=false",
            "--set", "experiment.systems=[vllm]", "--set", "validation.repeats=1"]
    assert main(args) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert (summary["speed_factor"] > 0).all()  # still measured and reported
    assert (summary["sim_speed_factor"] == 1.0).all()
    assert summary["normalized_latency_error"].to_numpy() == pytest.approx(
        summary["uncorrected_normalized_latency_error"].to_numpy())


def test_a_profile_without_a_speed_reference_is_simulated_as_calibrated(tiny_validation, tmp_path, capsys):
    from tests.helpers.validate_tiny import profile_text

    out = tmp_path / "old"
    args = ["validate", str(tiny_validation(profile=profile_text(speed_reference=False))), "--out", str(out),
            "--set", "experiment.systems=[orca-max]", "--set", "validation.repeats=1"]
    assert main(args) == 0
    assert "no speed reference" in capsys.readouterr().out
    summary = pd.read_csv(out / "summary.csv")
    assert summary["speed_factor"].isna().all() and (summary["sim_speed_factor"] == 1.0).all()


def test_exact_mode_only_proves_the_schedules(tiny_validation, tmp_path, capsys):
    out = tmp_path / "exact"
    args = ["validate", str(tiny_validation()), "--out", str(out), "--exact",
            "--set", "experiment.systems=[vllm, orca-pow2]", "--set", "experiment.rates=[12]"]
    assert main(args) == 0
    assert "2/2 schedules identical" in capsys.readouterr().out
    exact = pd.read_csv(out / "exact.csv")
    assert list(exact["system"]) == ["vLLM", "Orca (Pow2)"] and exact["identical"].all()
    assert not (out / "summary.csv").exists()


def test_errors_are_read_against_the_real_engines_own_spread():
    from fidelity.report import fidelity_table

    summary = pd.DataFrame({
        "system": ["A"] * 4, "rate": [1, 2, 3, 4], "below_saturation": [True, True, True, False],
        "normalized_latency_error": [0.03, -0.12, 0.20, 0.9], "uncorrected_normalized_latency_error": [0.1] * 4,
        "real_repeat_spread": [0.01, 0.30, 0.30, 0.0], "real_repeat_spread_at_speed": [0.01, 0.15, float("nan"), 0.0],
        "p90_request_error": [0.05, 0.2, 0.3, 1.0], "real_request_spread_p90": [0.04, 0.25, 0.1, 0.0],
        "speed_factor": [1.0, 1.1, 1.2, 1.0], "speed_corrected": [True] * 4, "iteration_time_error": [0.05] * 4})
    sustainable = pd.DataFrame({"system": ["A"], "sustainable_rate_error": [0.02], "real_sustainable_rate": [3.5],
                                "sim_sustainable_rate": [3.6]})
    exact = pd.DataFrame({"system": ["A"], "identical": [True]})
    row = fidelity_table(summary, sustainable, exact).iloc[0]
    assert row["max_normalized_latency_error"] == pytest.approx(0.20)  # saturated rows are not counted
    assert row["median_normalized_latency_error"] == pytest.approx(0.12)
    assert row["rows_within_target"] == "1/3"
    # -12% lies inside a 15% spread at speed; 20% inside the raw 30% spread (that row was not probed)
    assert row["rows_within_noise"] == "3/3"
    assert row["max_real_request_spread_p90"] == pytest.approx(0.25)


def test_without_speed_correction_the_noise_band_is_the_raw_spread():
    from fidelity.report import noise_band

    summary = pd.DataFrame({"real_repeat_spread": [0.3, 0.3], "real_repeat_spread_at_speed": [0.05, 0.05],
                            "speed_corrected": [True, False]})
    assert list(noise_band(summary)) == pytest.approx([0.05, 0.3])


@pytest.mark.slow
def test_validate_calibrate_profiles_this_device_first_and_uses_that_profile(tiny_validation, tmp_path, capsys):
    from tests.helpers.validate_tiny import profile_text

    config = tiny_validation(profile=profile_text(device_name="Some Other CPU @ 2.0GHz"))
    out = tmp_path / "out"
    assert main(["validate", str(config), "--out", str(out), "--calibrate", "--set", "validation.calibrate_grid=tiny",
                 "--set", "validation.calibrate_repeats=1", "--set", "experiment.systems=[vllm]",
                 "--set", "experiment.rates=[2]", "--repeats", "1"]) == 0
    printed = capsys.readouterr().out
    assert "calibrating opt-tiny on this cpu first" in printed and "[1/1," in printed
    profile = out / "profile" / "cpu-opt-tiny.yaml"
    assert profile.exists() and (out / "profile" / "cpu-opt-tiny.raw.csv").exists()
    meta = json.loads((out / "validation.json").read_text())
    assert meta["cost_model"] == str(profile)  # the fresh profile, not the foreign one the config names
