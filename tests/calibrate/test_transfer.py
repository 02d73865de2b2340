"""The transfer by regime: synthetic GPUs recovered exactly, each term carried as it should be, and clear errors."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from calibrate.fitting.op_fit import fit_linear
from calibrate.hardware.hardware import HardwareSpec, load_hardware
from calibrate.judging.transfer_judge import RegimeError, choose, device_rows, h200_to_a100
from calibrate.parts.transfer import (
    COMPUTE_BOUND,
    MEMORY_BOUND,
    REGIMES,
    RIDGE,
    KernelShares,
    RegimeChoice,
    RegimeTransfer,
    carried_host,
    kernel_terms,
    regime_of,
    require_spec,
    ridge_tokens,
    same_chip,
)
from calibrate.tables.op_table import read_op_table
from calibrate.work.layer_ops import LayerShape
from engine.errors import SpecError
from tests.calibrate.synthetic_ops import MODELS, TRUE_FIT, write_tables

# two made-up GPUs: the "true" one the fit sees and another with other peaks
TRUE_GPU = HardwareSpec("true-gpu", peak_flops=300e12, hbm_bytes_per_s=2.0e12, memory_gib=80,
                        nvlink_bytes_per_s=300e9, pcie_bytes_per_s=32e9)
OTHER_GPU = HardwareSpec("other-gpu", peak_flops=1000e12, hbm_bytes_per_s=4.0e12, memory_gib=141,
                         nvlink_bytes_per_s=450e9, pcie_bytes_per_s=64e9)
NEW_GPUS = ("h100-sxm", "h100-pcie", "h200", "l40s", "a10g", "b200", "a40", "l4", "a10", "gh200", "mi300x",
            "rtx-4090", "rtx-pro-6000", "rtx-pro-6000-server")


def test_a_transfer_fitted_on_one_gpu_recovers_another_within_2_percent(tmp_path):
    # measurements made by TRUE_FIT on TRUE_GPU (the synthetic tables price with the hardware named there)
    truth = RegimeTransfer.from_linear_fit(TRUE_FIT, TRUE_GPU.name)
    paths = write_tables(tmp_path)
    ops = pd.concat([read_op_table(p).ops for p in paths], ignore_index=True)
    # re-price every row on TRUE_GPU so the fit sees that GPU's times
    fit_hw = load_hardware("a100-80gb")
    scale_rows = TRUE_FIT.predict_ops(ops, TRUE_GPU) / TRUE_FIT.predict_ops(ops, fit_hw)
    ops = ops.assign(time_s=ops["time_s"] * scale_rows)
    fitted = RegimeTransfer.from_linear_fit(fit_linear(ops, TRUE_GPU), TRUE_GPU.name)
    worst = 0.0
    for shape in MODELS.values():
        for tokens in (1, 8, 64, 200, 512, 4096):
            want = truth.layer_time(shape, tokens, OTHER_GPU)
            got = fitted.layer_time(shape, tokens, OTHER_GPU)
            worst = max(worst, abs(got - want) / want)
    assert worst < 0.02


def test_fixed_latencies_stay_fixed_across_gpus():
    shares = KernelShares(compute_share=0.7, bandwidth_share=0.8, latency_s=5e-6)
    small = kernel_terms(shares, "gemm", flops=2e6, moved_bytes=2e3, hw=TRUE_GPU, count=4)
    other = kernel_terms(shares, "gemm", flops=2e6, moved_bytes=2e3, hw=OTHER_GPU, count=4)
    assert small.latency_s == other.latency_s == pytest.approx(20e-6)


def test_bandwidth_terms_scale_with_the_spec_sheet():
    shares = KernelShares(bandwidth_share=0.5, latency_s=3e-6)
    a = kernel_terms(shares, "elementwise", 0.0, 1e9, TRUE_GPU)
    b = kernel_terms(shares, "elementwise", 0.0, 1e9, OTHER_GPU)
    assert a.memory_s == pytest.approx(1e9 / (2.0e12 * 0.5))
    assert a.memory_s / b.memory_s == pytest.approx(OTHER_GPU.hbm_bytes_per_s / TRUE_GPU.hbm_bytes_per_s)
    assert a.total_s - a.memory_s == pytest.approx(3e-6)  # the latency rides on top, unscaled


def test_compute_terms_scale_with_peak_flops():
    shares = KernelShares(compute_share=0.6, bandwidth_share=0.8)
    a = kernel_terms(shares, "gemm", 1e15, 1e6, TRUE_GPU)
    b = kernel_terms(shares, "gemm", 1e15, 1e6, OTHER_GPU)
    assert a.compute_s / b.compute_s == pytest.approx(OTHER_GPU.peak_flops / TRUE_GPU.peak_flops)
    assert a.total_s == pytest.approx(a.compute_s)  # compute-bound: the hard max at ridge efficiency 1


def test_all_reduce_moves_over_the_links():
    shares = KernelShares(bandwidth_share=0.5, latency_s=10e-6)
    a = kernel_terms(shares, "all_reduce", 0.0, 1e8, TRUE_GPU)
    assert a.memory_s == pytest.approx(1e8 / (300e9 * 0.5))


def test_regimes_are_relative_to_each_gpus_ridge():
    a100, h100 = load_hardware("a100-80gb"), load_hardware("h100-sxm")
    assert ridge_tokens(a100) == pytest.approx(153, abs=1)
    assert ridge_tokens(h100) == pytest.approx(295, abs=1)
    assert regime_of(64, a100) == MEMORY_BOUND and regime_of(200, a100) == RIDGE
    assert regime_of(400, a100) == COMPUTE_BOUND and regime_of(400, h100) == RIDGE


def test_a_missing_hardware_field_names_it():
    partial = replace(TRUE_GPU, nvlink_bytes_per_s=0.0)
    with pytest.raises(SpecError, match="nvlink_bytes_per_s"):
        require_spec(partial, "all_reduce", "h-new.yaml")
    with pytest.raises(SpecError, match="valid kinds"):
        require_spec(TRUE_GPU, "softmax")


@pytest.mark.parametrize("name", NEW_GPUS)
def test_a_hardware_yaml_without_a_field_is_one_line_naming_it(tmp_path, name):
    from calibrate.hardware.hardware import HARDWARE_DIR

    text = (HARDWARE_DIR / f"{name}.yaml").read_text()
    cut = "\n".join(line for line in text.splitlines() if not line.startswith("hbm_bytes_per_s"))
    path = tmp_path / f"{name}.yaml"
    path.write_text(cut)
    with pytest.raises(SpecError) as err:
        load_hardware(path)
    assert "hbm_bytes_per_s" in str(err.value) and "\n" not in str(err.value)


def test_a_kind_the_transfer_never_measured_names_it():
    transfer = RegimeTransfer.from_linear_fit(TRUE_FIT, "true-gpu")
    with pytest.raises(SpecError, match="attention.*not measured on true-gpu"):
        transfer.shares("attention")


def test_a_profile_without_device_dominated_prefills_names_the_regime(tmp_path):
    raw = pd.DataFrame({"kind": ["prefill", "decode"], "num_prefills": [1, 0], "num_tokens": [512, 8],
                        "sum_prefill_sq": [512**2, 0], "time_s": [0.03, 0.02], "model": ["llama-7b"] * 2})
    path = tmp_path / "short.raw.csv"
    raw.to_csv(path, index=False)
    with pytest.raises(SpecError, match=COMPUTE_BOUND):
        device_rows(path)


def test_a_token_table_without_compute_bound_rows_names_the_regime():
    from calibrate.fitting.profile_file import load_profile
    from calibrate.judging.transfer_judge import PROFILES

    profile = load_profile(PROFILES / "a100-80gb-linear.yaml")
    short = replace(profile, token_knots=profile.token_knots[:5], token_costs_s=profile.token_costs_s[:5])
    with pytest.raises(SpecError, match=COMPUTE_BOUND):
        h200_to_a100(short, 0.7)


def _error(regime, mean, roof_mean, direction="x -> y"):
    return RegimeError(direction, regime, 3, mean, mean * 2, roof_mean, roof_mean * 2)


def test_the_roofline_keeps_every_regime_the_transfer_did_not_beat():
    choice = choose([_error(MEMORY_BOUND, 0.03, 0.10), _error(RIDGE, 0.12, 0.10),
                     _error(MEMORY_BOUND, 0.04, 0.05, "y -> x")])
    assert choice.use_transfer == {MEMORY_BOUND}
    assert "no better than the roofline" in choice.reasons[RIDGE]
    assert "no held-out GPU" in choice.reasons[COMPUTE_BOUND]
    # one direction losing is enough to keep the roofline
    assert not choose([_error(RIDGE, 0.03, 0.10), _error(RIDGE, 0.2, 0.1, "y -> x")]).use_transfer


def test_same_chip_only_when_the_silicon_matches():
    a40, a80 = load_hardware("a100-40gb"), load_hardware("a100-80gb")
    assert same_chip(a80, a40) and same_chip(a80, a80)
    assert not same_chip(load_hardware("h100-sxm"), load_hardware("h100-pcie"))
    assert not same_chip(a80, load_hardware("h200"))


def test_host_part_is_carried_and_scaled_by_cpu_speed():
    host = {"per_iteration_s": 1e-4, "per_sequence_s": 2e-6, "per_prefill_token_s": 1e-7, "source": "x"}
    assert carried_host(host) is host
    faster = carried_host(host, measured_cpu_speed=1.0, target_cpu_speed=2.0)
    assert faster["per_iteration_s"] == pytest.approx(5e-5) and faster["source"] == "x"


def test_choice_describes_every_regime():
    text = RegimeChoice(frozenset({RIDGE}), {RIDGE: "because"}).describe()
    assert all(r in text for r in REGIMES) and "ridge: transfer (because)" in text
    assert RegimeChoice.everywhere().uses_transfer(COMPUTE_BOUND)


def test_elementwise_terms_are_measured_kinds_only():
    shape = LayerShape(4096, 32, 32, 11008, True)
    terms = RegimeTransfer.from_linear_fit(TRUE_FIT, "a").layer_terms(shape, 16, OTHER_GPU)
    assert set(terms) == {"gemm", *(f"elementwise.{op}" for op in ("input_layernorm", "attn_rope",
                                                                   "post_attention_layernorm", "mlp_act", "add"))}
    assert all(np.isfinite(t.total_s) and t.total_s > t.latency_s for t in terms.values())


@pytest.mark.parametrize("measured_on", ["a100-80gb", "h100-sxm"])
def test_import_reports_each_regime_and_the_gpu_the_fit_never_saw(tmp_path, measured_on):
    from calibrate.judging.op_import import import_profile, report

    result = import_profile(write_tables(tmp_path), None, "llama-7b", measured_on, "test")
    assert set(result.by_model.summary()["per_iteration_by_regime"]) == set(REGIMES)
    printed = report(result)
    assert all(f"  {regime}" in printed for regime in REGIMES)
    if measured_on == "a100-80gb":
        assert [e.direction for e in result.gpu] == ["a100-80gb -> h200", "h200 -> a100-80gb"]
        assert "on a GPU the fit never saw" in printed and "on this judgement alone" in printed
        saved = result.profile.linear["heldout"]["gpu"]
        assert saved[0]["regime"] == COMPUTE_BOUND and saved[0]["rows"] == 6
    else:
        assert result.gpu == [] and "not judged" in printed


def test_the_roofline_cost_model_charges_what_the_regime_terms_add_up_to():
    from calibrate.clock.roofline import RooflineCostModel
    from calibrate.work.layer_ops import ITERATION_ELEMENTWISE
    from engine.core.batch import Batch
    from engine.specs.loader import load_model_spec

    spec = replace(load_model_spec("llama-7b"), vocab_size=0)
    shape, transfer = LayerShape.of(spec), RegimeTransfer.from_linear_fit(TRUE_FIT, "true-gpu")
    cost = RooflineCostModel(spec, OTHER_GPU, linear=TRUE_FIT)
    for tokens in (1, 64, 300, 2048):
        batch = Batch(decode_seq_ids=list(range(tokens)), decode_context_lens=[0] * tokens)
        per_iteration = sum(TRUE_FIT.elementwise_time(op, tokens * shape.elementwise_bytes_per_token(1)[op],
                                                      OTHER_GPU) for op in ITERATION_ELEMENTWISE)
        want = (spec.num_layers * transfer.layer_time(shape, tokens, OTHER_GPU)
                + TRUE_FIT.gemm_latency_s + per_iteration)  # + the LM head's launch, + the embedding
        assert cost.iteration_time(batch) == pytest.approx(want, rel=1e-9)


def test_device_time_measured_apart_is_judged_in_place_of_the_whole_forward(tmp_path):
    from calibrate.judging.transfer_judge import H200_RAW

    raw = pd.read_csv(H200_RAW[0])
    raw.assign(device_s=raw["time_s"] * 0.5).to_csv(tmp_path / "split.raw.csv", index=False)
    whole, split = device_rows(H200_RAW[0]), device_rows(tmp_path / "split.raw.csv")
    assert np.allclose(split["time_s"], whole["time_s"] * 0.5)
