"""The cost model in two parts: the device part from device_s, the host part from host_s and the host replay,
each with its own held-out error; `calibrate show` prints both; the simulator charges both."""
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from calibrate.cost_models.profile_model import ProfileCostModel
from calibrate.fitting.fit import fit_profile
from calibrate.fitting.profile_file import FORMAT, load_profile
from engine.core.batch import Batch
from engine.errors import SpecError
from servesim.cli import main
from tests.helpers.synthetic_profile import HOST_TRUE, LAUNCH_S, TRUE, gpu_like_token_cost, split_raw  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_RAW = ROOT / "calibrate" / "profiles" / "cpu-opt-125m.raw.csv"
SHIPPED = ROOT / "calibrate" / "profiles" / "cpu-opt-125m.yaml"
REPLAYED = ROOT / "results" / "reference" / "validation" / "cpu-opt-125m-calibrated" / "profile"


@pytest.fixture(scope="module")
def split_fit():
    return fit_profile(split_raw(noise=0.01), "split.csv", "test")


def test_the_fit_recovers_a_known_device_and_a_known_host_cost(split_fit):
    profile = split_fit.profile
    # the device part is fitted to device_s: the launches in time_s are not in it
    for term in ("prefill_attention_s", "decode_context_s", "per_sequence_s", "per_prefill_s", "mixed_s"):
        assert profile.coefficients[term] == pytest.approx(TRUE[term], rel=0.15), term
    assert profile.token_costs_s == pytest.approx(list(gpu_like_token_cost(profile.token_knots)), rel=0.05)
    assert profile.device_part["measured_from"].startswith("device_s")
    assert profile.device_part["shapes"] == profile.train_rows
    assert profile.heldout_mape < 0.03
    host = profile.host
    for term, value in HOST_TRUE.items():
        assert host[term] == pytest.approx(value, rel=0.1), term
    assert host["rows"] == profile.train_rows  # every shape measured its host time
    assert host["measured_from"] == f"host_s of {profile.train_rows} profiled shapes"
    assert 0 < host["heldout_mape"] < 0.03 and host["heldout_mape"] <= host["heldout_p95_ape"]
    assert 0 < host["heldout_mean_abs_error_s"] <= host["heldout_p95_abs_error_s"]


def test_each_part_reports_its_own_heldout_error():
    """Noise on the host times only: the device part stays exact, the host part says how wrong it is."""
    raw = split_raw(noise=0.0)
    raw["host_s"] *= 1 + np.random.default_rng(5).normal(0, 0.05, len(raw))
    profile = fit_profile(raw, "split.csv", "test").profile
    assert profile.heldout_mape < 1e-3
    assert 0.02 < profile.host["heldout_mape"] < 0.08


def test_the_host_part_joins_the_shapes_host_s_and_the_host_replay():
    raw = split_raw(noise=0.0)
    rng = np.random.default_rng(2)
    seqs, tokens = rng.integers(1, 30, 40), rng.integers(0, 300, 40)
    replay = pd.DataFrame({"kind": "host", "num_seqs": seqs, "num_prefill_tokens": tokens,
                           "num_prefills": 1, "num_decodes": seqs - 1,
                           "time_s": HOST_TRUE["per_iteration_s"] + HOST_TRUE["per_sequence_s"] * seqs
                           + HOST_TRUE["per_prefill_token_s"] * tokens})
    both = pd.concat([raw, replay.assign(model="opt-13b", device="cuda", device_name="synthetic",
                                         dtype="float16", tensor_parallel=1, block_size=16)], ignore_index=True)
    profile = fit_profile(both, "split.csv", "test").profile
    host = profile.host
    assert host["rows"] == profile.train_rows + 40
    assert host["measured_from"] == (f"host_s of {profile.train_rows} profiled shapes and 40 iterations of the "
                                     f"host replay (time_s: each step beyond its forward)")
    assert set(host["heldout_mape_by_source"]) == {"host replay", "profiled shapes"}
    assert host["per_iteration_s"] == pytest.approx(HOST_TRUE["per_iteration_s"], rel=1e-6)
    plain = fit_profile(raw, "split.csv", "test").profile
    assert profile.coefficients == plain.coefficients  # replay rows are not shapes of the device part


def before_the_split(raw: pd.DataFrame) -> pd.DataFrame:
    """A raw CSV as profiled before device and host time were measured apart: its shapes, probes and swaps,
    no device_s, host_s, host replay or re-timed serving rows."""
    return raw[raw["kind"].isin(["prefill", "decode", "decode_mixed", "mixed", "swap", "probe"])].drop(
        columns=["device_s", "host_s", "alone_s"], errors="ignore")


def old_profile(tmp_path: Path) -> Path:
    """The shipped CPU profile as a format /3 profile wrote it: no device part, no host part."""
    data = yaml.safe_load(SHIPPED.read_text())
    for key in ("device_part", "host", "serving"):
        data.pop(key, None)
    data["format"] = "servesim-profile/3"
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_raw_csv_from_before_the_split_fits_the_forward_as_the_device_part_and_measures_no_host():
    raw = before_the_split(pd.read_csv(SHIPPED_RAW))
    assert "device_s" not in raw.columns and "host_s" not in raw.columns and "host" not in set(raw["kind"])
    profile = fit_profile(raw, str(SHIPPED_RAW), "test").profile
    assert profile.device_part["measured_from"].startswith("time_s: the forward's wall time")
    assert profile.host is None
    cost = ProfileCostModel(profile)
    assert "(device part; no host part)" in cost.source and cost.host_time(Batch(decode_seq_ids=[0],
                                                                                decode_context_lens=[9])) == 0.0


def test_a_raw_csv_from_before_the_split_takes_its_host_part_from_the_replay():
    raw = pd.read_csv(REPLAYED / "cpu-opt-125m.raw.csv")
    before = load_profile(REPLAYED / "cpu-opt-125m.yaml")  # fitted before the split (format /4)
    profile = fit_profile(raw, "replayed.csv", "test").profile
    assert profile.host["measured_from"] == "182 iterations of the host replay (time_s: each step beyond its forward)"
    for key in ("per_iteration_s", "per_sequence_s", "per_prefill_token_s", "heldout_mean_abs_error_s", "rows"):
        # the same fit as before, now with relative errors; to the last bits only on the CPU that fitted it (a
        # least-squares solve rounds differently through another CPU's BLAS kernels)
        assert profile.host[key] == pytest.approx(before.host[key], rel=1e-12), key
    assert profile.coefficients == pytest.approx(before.coefficients, rel=1e-12)
    assert 0 < profile.host["heldout_mape"] < 1


@pytest.mark.parametrize("column, value, message", [
    ("device_s", 0.0, "device_s must be a positive number of seconds or empty"),
    ("host_s", "slow", "host_s must be a number of seconds or empty"),
    ("device_s", "fast", "device_s must be a positive"),
])
def test_bad_device_or_host_times_are_refused_by_row(column, value, message):
    raw = split_raw(noise=0.0)
    raw[column] = raw[column].astype(object)
    raw.loc[3, column] = value
    with pytest.raises(SpecError, match=f"row 4.*{message}"):
        fit_profile(raw, "split.csv", "test")


def test_a_host_time_a_little_below_zero_is_read_as_zero_with_a_warning():
    raw = split_raw(noise=0.0)
    raw.loc[3, "host_s"] = -2e-6  # the device span outran the wall clock
    with pytest.warns(UserWarning, match=r"1 rows measured host_s below 0 \(down to -2.0 us"):
        profile = fit_profile(raw, "split.csv", "test").profile
    assert profile.host["rows"] == profile.train_rows


def test_a_shape_without_device_s_falls_back_to_its_forward_time_and_says_so():
    raw = split_raw(noise=0.0)
    raw.loc[:4, "device_s"] = np.nan
    profile = fit_profile(raw, "split.csv", "test").profile
    assert profile.device_part["measured_from"].endswith("time_s (the forward's wall time) on 5 that lack it")


def test_a_split_profile_round_trips_and_old_profiles_read_unchanged(split_fit, tmp_path):
    path = split_fit.profile.save(tmp_path / "split.yaml")
    text = path.read_text()
    assert "# held-out error of the device part: mean" in text and "# held-out error of the host part: mean" in text
    loaded = load_profile(path)
    assert loaded == split_fit.profile and loaded.format == FORMAT
    shipped = load_profile(old_profile(tmp_path))
    assert shipped.device_part is None and shipped.host is None
    # saved again, an old profile writes no device_part it never had
    assert "device_part" not in yaml.safe_load(shipped.save(tmp_path / "old.yaml").read_text())


def test_a_newer_format_is_refused_without_being_told_to_refit(split_fit, tmp_path):
    path = split_fit.profile.save(tmp_path / "new.yaml")
    path.write_text(path.read_text().replace(f"format: {FORMAT}", "format: servesim-profile/7"))
    with pytest.raises(SpecError) as err:
        load_profile(path)
    message = str(err.value)
    assert "written by a newer servesim" in message and "servesim-profile/2 to servesim-profile/6" in message
    assert "re-fit" not in message and "calibrate fit" not in message
    path.write_text(path.read_text().replace("format: servesim-profile/7", "format: someone-else/1"))
    with pytest.raises(SpecError, match="not a servesim profile format"):
        load_profile(path)


def test_show_prints_both_parts_with_their_errors_and_sources(split_fit, tmp_path, capsys):
    path = split_fit.profile.save(tmp_path / "split.yaml")
    assert main(["calibrate", "show", str(path)]) == 0
    report = capsys.readouterr().out
    host = split_fit.profile.host
    assert (f"device part: held-out error: mean {split_fit.profile.heldout_mape:.1%}, "
            f"p95 {split_fit.profile.heldout_p95_ape:.1%}") in report
    assert "  from device_s: the forward's device time" in report
    assert (f"host part (host work around the forward): held-out error: mean {host['heldout_mape']:.1%}, "
            f"p95 {host['heldout_p95_ape']:.1%}") in report
    assert f"  from host_s of {split_fit.profile.train_rows} profiled shapes" in report
    assert "per_prefill_token_s" in report and "token-cost table" in report


def test_show_says_what_the_shipped_cpu_profile_measured(capsys):
    assert main(["calibrate", "show", str(SHIPPED)]) == 0
    report = capsys.readouterr().out
    shipped = load_profile(SHIPPED)
    assert (f"device part: held-out error: mean {shipped.heldout_mape:.1%}, "
            f"p95 {shipped.heldout_p95_ape:.1%}") in report
    assert "  from device_s: the forward's device time" in report
    assert f"host part (host work around the forward): held-out error: mean {shipped.host['heldout_mape']:.1%}" \
        in report


def test_show_says_what_an_old_profile_measured(capsys, tmp_path):
    assert main(["calibrate", "show", str(old_profile(tmp_path))]) == 0
    report = capsys.readouterr().out
    old = load_profile(old_profile(tmp_path))
    assert f"device part: held-out error: mean {old.heldout_mape:.1%}, p95 {old.heldout_p95_ape:.1%}" in report
    assert "  from time_s: the forward's wall time (fitted before device and host time were measured apart)" in report
    assert "host part (host work around the forward): not measured (fitted before host work was measured)" in report
    assert main(["calibrate", "show", str(REPLAYED / "cpu-opt-125m.yaml")]) == 0
    report = capsys.readouterr().out
    assert "held-out error: mean |error| 0.024 ms (relative error not recorded: fitted before format /5" in report


def test_the_cost_model_charges_the_device_part_plus_the_host_part(split_fit):
    cost = ProfileCostModel(split_fit.profile)
    batch = Batch(prefill_seq_ids=[0], prefill_lens=[100], decode_seq_ids=[1, 2], decode_context_lens=[50, 60])
    host = split_fit.profile.host
    expected_host = host["per_iteration_s"] + 3 * host["per_sequence_s"] + 100 * host["per_prefill_token_s"]
    assert cost.host_time(batch) == pytest.approx(expected_host)
    assert cost.iteration_time(batch) == cost.device_time(batch) + cost.host_time(batch)
    assert "(device part), host part" in cost.source
    cost.charge_host = False  # a validation whose real clock is the forward alone
    assert cost.host_time(batch) == 0.0 and cost.iteration_time(batch) == cost.device_time(batch)
    # the device part is the device's time, not the forward's wall time (LAUNCH_S more)
    device = (gpu_like_token_cost(batch.num_tokens) + TRUE["prefill_attention_s"] * 100 ** 2
              + TRUE["decode_context_s"] * 110 + TRUE["per_sequence_s"] * 3 + TRUE["per_prefill_s"] + TRUE["mixed_s"])
    assert cost.device_time(batch) == pytest.approx(device, abs=LAUNCH_S / 3)


EXPERIMENT = """
model: opt-13b
hardware: a100-80gb
kv_cache_gib: 4
workload: {dataset: sharegpt-standin, arrival: poisson, duration_s: 10}
systems: [vllm]
rates: [1.0]
warmup_s: 0
"""


def test_a_simulation_charges_the_host_part_on_every_iteration(split_fit, tmp_path):
    from sim.experiment.config import load_experiment
    from sim.experiment.run import simulate_trace
    from sim.workload.trace import Trace

    config = tmp_path / "exp.yaml"
    config.write_text(EXPERIMENT)
    exp = load_experiment(config)
    trace = Trace(arrival_s=np.array([0.0]), prompt_len=np.array([64]), output_len=np.array([6]))
    per_iteration = 0.25  # a host-bound engine: far more than the device part
    profile = dataclasses.replace(split_fit.profile, host={**split_fit.profile.host, "per_iteration_s": per_iteration,
                                                           "per_sequence_s": 0.0, "per_prefill_token_s": 0.0})
    with_host = ProfileCostModel(profile)
    device_only = ProfileCostModel(profile)
    device_only.charge_host = False
    records, _ = simulate_trace(exp, exp.systems[0], trace, with_host)
    alone, _ = simulate_trace(exp, exp.systems[0], trace, device_only)
    iterations = len(records.iterations_frame())
    assert iterations == len(alone.iterations_frame()) == 6  # one prefill, five decodes: the same schedule
    latency = records.requests_frame()["finish_s"] - records.requests_frame()["arrival_s"]
    latency_alone = alone.requests_frame()["finish_s"] - alone.requests_frame()["arrival_s"]
    assert float(latency.iloc[0] - latency_alone.iloc[0]) == pytest.approx(per_iteration * iterations)


def test_the_transfer_model_prices_its_host_work_apart_too():
    from calibrate.cost_models.profile_model import transferred_roofline
    from calibrate.hardware.hardware import load_hardware
    from engine.specs.loader import load_model_spec

    path = ROOT / "calibrate" / "profiles" / "a100-80gb-linear.yaml"  # with host work measured on a CPU
    cost = transferred_roofline(path, None, load_model_spec("opt-13b"), load_hardware("a100-40gb"), 1, 2, 16)
    batch = Batch(decode_seq_ids=[0, 1], decode_context_lens=[100, 300])
    host = load_profile(path).host
    assert cost.host_time(batch) == pytest.approx(host["per_iteration_s"] + 2 * host["per_sequence_s"])
    assert cost.device_time(batch) + cost.host_time(batch) == pytest.approx(cost.iteration_time(batch))
    cost.charge_host = False
    assert cost.host_time(batch) == 0.0


def test_fit_prints_both_parts_and_writes_them(tmp_path, capsys):
    raw, out = tmp_path / "split.csv", tmp_path / "split.yaml"
    split_raw(noise=0.01).to_csv(raw, index=False)
    assert main(["calibrate", "fit", str(raw), "--out", str(out)]) == 0
    report = capsys.readouterr().out
    assert "device part: held-out error: mean" in report and "  from device_s" in report
    assert "host part (host work around the forward): held-out error: mean" in report
    fitted = load_profile(out)
    assert fitted.device_part["measured_from"].startswith("device_s") and "heldout_mape" in fitted.host


def test_a_profile_that_names_the_swap_copy_a_transfer_is_read(split_fit, tmp_path):
    """Formats /4 and /5 called the swap's cost per copy swap_s_per_transfer: read under its name now."""
    path = split_fit.profile.save(tmp_path / "old.yaml")
    text = path.read_text()
    assert f"format: {FORMAT}" in text and "swap_s_per_copy:" in text
    path.write_text(text.replace(f"format: {FORMAT}", "format: servesim-profile/5")
                    .replace("swap_s_per_copy:", "swap_s_per_transfer:"))
    assert load_profile(path).swap_s_per_copy == split_fit.profile.swap_s_per_copy
