"""The transfer cost model off its measured chip: the roofline in each regime the transfer did not beat, and says so."""
from pathlib import Path

import pandas as pd
import pytest

from calibrate.clock.roofline import RooflineCostModel
from calibrate.cost_models.carry_file import shipped_choice
from calibrate.cost_models.profile_model import transferred_roofline
from calibrate.cost_models.transfer_cost import RegimeCostModel, by_regime
from calibrate.fitting.profile_file import load_profile
from calibrate.hardware.hardware import load_hardware
from calibrate.judging.transfer_judge import PROFILES, choose, judge_profile
from calibrate.parts.transfer import COMPUTE_BOUND, LATENCY, MEMORY_BOUND, RegimeChoice, regime_of
from engine.core.batch import Batch
from engine.specs.loader import load_model_spec
from servesim.cli import main

A100_PROFILE = PROFILES / "a100-80gb-linear.yaml"
NEW_GPUS = ("h100-sxm", "h100-pcie", "h200", "l40s", "a10g", "b200", "a40", "l4", "a10", "gh200", "mi300x",
            "rtx-4090", "rtx-pro-6000", "rtx-pro-6000-server")


def decode(n: int, context: int = 256) -> Batch:
    return Batch(decode_seq_ids=list(range(n)), decode_context_lens=[context] * n)


def prefill(tokens: int) -> Batch:
    return Batch(prefill_seq_ids=[0], prefill_lens=[tokens], prefill_sample_ids=[(0,)])


def test_on_the_measured_chip_the_transfer_is_unchanged():
    spec, a40 = load_model_spec("opt-13b"), load_hardware("a100-40gb")
    cost = transferred_roofline(A100_PROFILE, None, spec, a40, 1, 2, 16)
    assert isinstance(cost, RooflineCostModel) and cost.linear is not None
    assert "linear part measured" in cost.source


@pytest.mark.parametrize("name", NEW_GPUS)
def test_every_new_gpu_prices_a_batch_by_default_and_with_the_transfer(name):
    spec, hw = load_model_spec("llama-7b"), load_hardware(name)
    plain = RooflineCostModel(spec, hw)
    carried = transferred_roofline(A100_PROFILE, None, spec, hw, 1, 2, 16)
    for batch in (decode(8), prefill(1024)):
        assert 0 < plain.iteration_time(batch) < 1.0
        assert carried.iteration_time(batch) >= plain.iteration_time(batch)  # + the measured host work
    # 8 tokens are the fixed-latency regime on every new GPU, which no carry won on the held-out GPUs: the
    # device part is the roofline's, and the source says which regimes carry
    assert regime_of(8, hw, latency=True) == LATENCY and not shipped_choice().uses_transfer(LATENCY)
    assert shipped_choice().describe() in carried.source
    carried.charge_host = False
    assert carried.iteration_time(decode(8)) == plain.iteration_time(decode(8))


def test_by_regime_prices_each_regime_with_its_chosen_model():
    spec, h100, a100 = load_model_spec("llama-7b"), load_hardware("h100-sxm"), load_hardware("a100-80gb")
    from calibrate.parts.linear_model import LinearFit

    fit = LinearFit.from_dict(load_profile(A100_PROFILE).linear)
    measured = RooflineCostModel(spec, h100, linear=fit)
    roofline = RooflineCostModel(spec, h100)
    choice = RegimeChoice(frozenset({MEMORY_BOUND}), {MEMORY_BOUND: "synthetic"})
    cost = by_regime(measured, A100_PROFILE, a100, spec, h100, 1, 2, 16, True, None, choice)
    assert isinstance(cost, RegimeCostModel) and "memory-bound decode: transfer (synthetic)" in cost.source
    assert cost.iteration_time(decode(8)) == measured.iteration_time(decode(8))
    assert cost.iteration_time(prefill(2048)) == roofline.iteration_time(prefill(2048))
    assert measured.iteration_time(decode(8)) != roofline.iteration_time(decode(8))
    stretch = cost.decode_iteration_times(decode(8), 4)
    assert list(stretch) == [cost.iteration_time(decode(8, 256 + i)) for i in range(4)]
    cost.charge_host = True
    assert cost.models == [measured, cost.roofline] and all(model.charge_host for model in cost.models)


def test_the_shipped_judgement_keeps_the_roofline_where_the_transfer_does_not_win():
    errors = judge_profile(load_profile(A100_PROFILE))
    forward = next(e for e in errors if e.direction == "a100-80gb -> h200")
    assert forward.regime == COMPUTE_BOUND and forward.rows == 6
    assert forward.mean < 0.08 and forward.roofline_mean < 0.08
    choice = choose(errors)
    assert choice.uses_transfer(COMPUTE_BOUND) == all(e.beats_roofline for e in errors)
    assert not choice.uses_transfer(MEMORY_BOUND)  # no held-out GPU measured it


def test_capacity_on_a_new_gpu_works_out_of_the_box(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(f"""
name: l40s-capacity
model: opt-13b
hardware: l40s
kv_cache_gib: 8
cost_model: {{kind: transfer, path: {Path(A100_PROFILE).as_posix()}}}
workload: {{dataset: sharegpt-standin, arrival: poisson, duration_s: 120}}
systems: [vllm]
rates: [0.5]
seeds: [0]
warmup_s: 10
""")
    out = tmp_path / "cap"
    assert main(["capacity", str(config), "--target", "ttft_p90_s=5", "--out", str(out), "--tolerance", "0.3"]) == 0
    table = pd.read_csv(out / "capacity.csv")
    assert table["max_rate_per_replica_rps"][0] > 0


def test_calibrate_fit_of_a_gpu_profile_prints_the_held_out_gpu(tmp_path, capsys):
    assert main(["calibrate", "fit", str(PROFILES / "h200-llama-7b.raw.csv"), "--out", str(tmp_path / "p.yaml")]) == 0
    out = capsys.readouterr().out
    assert "a100-80gb -> h200" in out and "h200 -> a100-80gb" in out
    assert "on this judgement alone: memory-bound decode: roofline" in out and "held-out-gpus.yaml" in out


def test_calibrate_fit_of_a_cpu_profile_prints_no_gpu_judgement(tmp_path, capsys):
    assert main(["calibrate", "fit", str(PROFILES / "cpu-opt-125m.raw.csv"), "--out", str(tmp_path / "p.yaml")]) == 0
    assert "never saw" not in capsys.readouterr().out


def test_a_run_off_the_measured_gpu_needs_no_held_out_measurements(tmp_path, monkeypatch):
    from calibrate.judging import transfer_judge

    monkeypatch.setattr(transfer_judge, "H200_RAW", (tmp_path / "gone.raw.csv",))
    monkeypatch.setattr(transfer_judge.judge_profile, "__defaults__", ((tmp_path / "gone.raw.csv",),))
    cost = transferred_roofline(A100_PROFILE, None, load_model_spec("llama-7b"), load_hardware("l40s"), 1, 2, 16)
    assert shipped_choice().describe() in cost.source  # the choice is shipped data, not judged at run time


def test_the_cost_model_column_says_what_prices_each_regime(tmp_path):
    from sim.experiment.config import load_experiment
    from sim.experiment.run import run_one

    config = tmp_path / "exp.yaml"
    config.write_text(f"""
name: h100
model: opt-13b
hardware: h100-sxm
kv_cache_gib: 8
cost_model: {{kind: transfer, path: {Path(A100_PROFILE).as_posix()}}}
workload: {{dataset: sharegpt-standin, arrival: poisson, duration_s: 30}}
systems: [vllm]
rates: [0.5]
seeds: [0]
warmup_s: 0
""")
    exp = load_experiment(config)
    summary = run_one(exp, exp.systems[0], 0.5, 0).summary
    assert summary["cost_model"] == "transfer a100-80gb-linear.yaml on h100-sxm", "in a few words: kind, file, GPU"
    assert summary["cost_model_source"].startswith("roofline(h100-sxm")
    assert "by regime on h100-sxm: fixed latency: roofline" in summary["cost_model_source"]


def test_the_judge_tells_a_wrong_compute_share_from_a_right_one():
    from calibrate.judging.transfer_judge import a100_to_h200
    from calibrate.parts.linear_model import LinearFit

    shipped = LinearFit.from_dict(load_profile(A100_PROFILE).linear)
    wrong = LinearFit(0.3, shipped.bandwidth_efficiency, shipped.ridge_efficiency, shipped.gemm_latency_s,
                      shipped.elementwise)
    assert a100_to_h200(wrong).mean > 2 * a100_to_h200(shipped).mean
