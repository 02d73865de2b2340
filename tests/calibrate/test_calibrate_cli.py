"""Profile the real engine, fit it, show it, and simulate from it: the whole calibration path."""
import pandas as pd
import pytest

from calibrate.fitting.fit import NOT_SHAPES
from calibrate.fitting.profile_file import load_profile
from calibrate.profiling.serving import PLAUSIBLE
from servesim.cli import main

EXPERIMENT = """
model: opt-tiny
hardware: a100-40gb
dtype_bytes: 4
kv_cache_gib: 0.01
cost_model: {profile}
workload: {{dataset: {lengths}, arrival: poisson, duration_s: 20}}
systems: [orca-oracle, vllm]
rates: [2.0]
warmup_s: 0
"""


@pytest.mark.slow
def test_profile_fit_show_then_simulate(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    # time the engine as it runs on a CPU (torch kernels), not the Triton interpreter the kernel tests use
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    raw, profile = tmp_path / "raw.csv", tmp_path / "tiny.yaml"
    assert main(["calibrate", "profile", "--model", "opt-tiny", "--grid", "tiny", "--repeats", "2",
                 "--threads", "1", "--block-sizes", "4,16", "--out", str(raw)]) == 0
    rows = pd.read_csv(raw)
    assert {"prefill", "decode", "decode_mixed", "mixed", "swap", "probe", "host", "serving",
            "block_sweep"} <= set(rows["kind"])
    # the sweep's decodes at both block sizes, reading 4x the blocks at 4 tokens; swaps timed at both, each as
    # one run of neighbouring blocks and as scattered blocks (a copy per block per layer's K and V)
    sweep = rows[rows["kind"] == "block_sweep"].set_index(["block_size", "num_decodes"])
    assert (sweep.loc[4, "sum_decode_blocks"] == 4 * sweep.loc[16, "sum_decode_blocks"]).all()
    swaps = rows[rows["kind"] == "swap"]
    assert sorted(swaps["block_size"]) == [4, 4, 16, 16]
    is_scattered = swaps["swap_scattered"].astype(bool)
    scattered, neighbours = swaps[is_scattered], swaps[~is_scattered]
    # swap_blocks counts both ways; opt-tiny has 2 layers, so a block is 4 copies (K and V of each)
    assert (scattered["swap_copies"] == scattered["swap_blocks"] * 4).all()
    assert (neighbours["swap_copies"] == 2 * 4).all()
    assert (swaps.groupby("block_size")["swap_bytes"].nunique() == 1).all()
    assert swaps.loc[swaps["block_size"] == 4, "swap_bytes"].iloc[0] == swaps.loc[
        swaps["block_size"] == 16, "swap_bytes"].iloc[0]  # the same tokens swapped at both sizes
    shapes = rows[~rows["kind"].isin(NOT_SHAPES)]
    assert (shapes["repeats"] == 2).all()  # two shuffled passes over the grid
    assert (rows["time_s"] > 0).all() and (rows["torch_threads"] == 1).all()

    assert main(["calibrate", "fit", str(raw), "--out", str(profile)]) == 0
    assert (tmp_path / "tiny.png").exists()
    fitted = load_profile(profile)
    assert fitted.model == "opt-tiny" and fitted.device == "cpu" and fitted.torch_threads == 1
    assert fitted.block_size == 16 and fitted.block_sizes == [4, 16]
    assert fitted.swap_s_per_copy is not None and fitted.swap_s_per_byte is not None
    assert fitted.speed_reference["decode_s"] > 0 and fitted.speed_reference["prefill_s"] > 0
    assert fitted.speed_reference["samples"] >= 2  # at the start and at the end, at least
    assert fitted.host["rows"] >= 10 and fitted.host["mean_s"] > 0  # the host work was measured and fitted
    served = rows[rows["kind"] == "serving"]
    assert 10 <= len(served) <= 200 and (served["alone_s"] > 0).all()
    factor = served["time_s"].sum() / served["alone_s"].sum()
    # wall time over wall time: on a machine whose load changes between the replay and its re-timing (a busy CI
    # box) the factor leaves the plausible range, and the fit then drops it with a warning (tests/calibrate/test_fit.py)
    if PLAUSIBLE[0] <= factor <= PLAUSIBLE[1]:
        assert fitted.serving["factor"] == pytest.approx(factor)
    else:
        assert fitted.serving is None
    assert fitted.token_knots == sorted(set(fitted.token_knots))
    assert len(fitted.token_costs_s) == len(fitted.token_knots)
    assert main(["calibrate", "show", str(profile)]) == 0
    report = capsys.readouterr().out
    assert "held-out error" in report and "token-cost table" in report and "speed reference" in report
    assert "host work around the forward" in report
    assert "decodes timed at block sizes 4, 16: decode_block_s fitted" in report and "us per copy" in report

    lengths = tmp_path / "lengths.csv"
    lengths.write_text("prompt_len,output_len\n" + "".join(f"{8 + i},{4 + i % 5}\n" for i in range(20)))
    config = tmp_path / "exp.yaml"
    config.write_text(EXPERIMENT.format(profile=profile, lengths=lengths))
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out)]) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert summary["cost_model"].str.contains("tiny.yaml").all()
    assert (summary["num_requests"] > 20).all() and (summary["num_unfinished"] == 0).all()
    assert (summary["normalized_latency"] > 0).all()
