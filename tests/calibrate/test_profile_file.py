"""A profile round-trips through its file and is refused, by file and field, when it is wrong."""
import dataclasses

import pytest
import yaml

from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.cost_models.profile_model import (
    ProfileCostModel,
    implied_efficiency,
    transferred_roofline,
)
from calibrate.fitting.profile_file import FORMAT, Profile, load_profile
from calibrate.hardware.hardware import load_hardware
from calibrate.work.features import TERMS
from engine.core.batch import Batch
from engine.errors import SpecError
from engine.specs.loader import load_model_spec


def coefficients(**values) -> dict:
    return {**{term: 0.0 for term in TERMS}, **values}


def make_profile(**changes) -> Profile:
    profile = Profile(model="opt-13b", device="cuda", device_name="NVIDIA H200", dtype="float16",
                      tensor_parallel=1, block_size=16, token_knots=[1, 4, 512, 1024],
                      token_costs_s=[0.01, 0.013, 0.03, 0.05],
                      coefficients=coefficients(prefill_attention_s=1e-9, decode_context_s=4e-7,
                                                decode_padded_context_s=1e-7, per_sequence_s=5e-5),
                      heldout_mape=0.04, heldout_p95_ape=0.09, train_rows=80, heldout_rows=20,
                      created="2026-11-29", command="test", swap_s_per_copy=1e-6, swap_s_per_byte=1e-11)
    return dataclasses.replace(profile, **changes)


def test_round_trip(tmp_path):
    path = make_profile().save(tmp_path / "p.yaml")
    assert load_profile(path) == make_profile()


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.pop("heldout_mape"), "heldout_mape"),
    (lambda d: d.update(model="opt-14b"), "model"),
    (lambda d: d["coefficients"].update(decode_context_s=-1e-7), "coefficients.decode_context_s"),
    (lambda d: d["coefficients"].pop("per_sequence_s"), "coefficients.per_sequence_s"),
    (lambda d: d.update(token_knots=[1, 8, 4, 16]), "token_knots"),
    (lambda d: d.update(token_costs_s=[0.01, 0.02]), "token_costs_s"),
    (lambda d: d["token_costs_s"].__setitem__(2, -0.5), "token_costs_s[2]"),
    (lambda d: d.update(format="servesim-profile/1"), "format"),
    (lambda d: d.update(speed_reference=[0.05, 0.1]), "speed_reference"),
    (lambda d: d.update(speed_reference={"decode_s": 0.05, "prefill_s": 0}), "speed_reference.prefill_s"),
    (lambda d: d.update(speed_reference={"prefill_s": 0.1}), "speed_reference.decode_s"),
    (lambda d: d.update(colour="blue"), "colour"),
    (lambda d: d.update(dtype="float8"), "dtype"),
    (lambda d: d.update(block_sizes=[16, 0]), "block_sizes[1]"),
    (lambda d: d.update(block_sizes=16), "block_sizes"),
    (lambda d: d.update(swap_s_per_byte=-1e-11), "swap_s_per_byte"),
    (lambda d: d["coefficients"].update(decode_block_s=-1e-6), "coefficients.decode_block_s"),
    (lambda d: d.update(swap_s_per_block=2e-4), "swap_s_per_block"),  # a /3 field in a /4 profile
])
def test_bad_profile_is_refused_naming_file_and_field(tmp_path, edit, field):
    path = make_profile().save(tmp_path / "p.yaml")
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as err:
        load_profile(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_cost_model_evaluates_the_fitted_terms(tmp_path):
    path = make_profile().save(tmp_path / "p.yaml")
    cost = ProfileCostModel.from_profile(path, load_model_spec("opt-13b"))
    batch = Batch(prefill_seq_ids=[0], prefill_lens=[600], prefill_sample_ids=[(0,)],
                  decode_seq_ids=[1, 2], decode_context_lens=[100, 300])
    c = make_profile().coefficients
    table = 0.03 + (0.05 - 0.03) * (602 - 512) / (1024 - 512)  # 602 tokens: between the knots 512 and 1024
    expected = (table + 600 ** 2 * c["prefill_attention_s"] + 400 * c["decode_context_s"]
                + 2 * 300 * c["decode_padded_context_s"] + 3 * c["per_sequence_s"])
    assert cost.iteration_time(batch) == pytest.approx(expected)
    # a block of OPT-13B at 16 tokens: 80 copies (K and V of 40 layers) and 16 x 800 KiB of fp16
    assert cost.swap_time(10) == pytest.approx(10 * (80 * 1e-6 + 16 * 819_200 * 1e-11))


def test_cost_model_charges_each_kv_block_a_decode_reads():
    profile = make_profile(coefficients=coefficients(decode_block_s=2e-6))
    batch = Batch(decode_seq_ids=[0, 1], decode_context_lens=[100, 300])
    for block_size, blocks in ((16, 7 + 19), (1, 400), (256, 1 + 2)):
        cost = ProfileCostModel(profile, block_size=block_size)
        assert cost.iteration_time(batch) == pytest.approx(cost.token_cost(2) + blocks * 2e-6)


def test_swap_cost_scales_by_copies_and_bytes_with_the_block_size():
    """The same 16 tokens: as 1-token blocks 16 x 80 copies, as one 16-token block 80; the same bytes."""
    profile = make_profile(swap_s_per_copy=5e-6, swap_s_per_byte=1 / 25e9)
    one, sixteen = (ProfileCostModel(profile, block_size=b) for b in (1, 16))
    per_token_bytes = 819_200 / 25e9
    assert one.swap_time(16) == pytest.approx(16 * (80 * 5e-6 + per_token_bytes))
    assert sixteen.swap_time(1) == pytest.approx(80 * 5e-6 + 16 * per_token_bytes)


def test_cost_model_charges_each_prompt_and_a_mixed_iteration(tmp_path):
    base = ProfileCostModel(make_profile())
    charged = ProfileCostModel(make_profile(coefficients=coefficients(per_prefill_s=4e-3, mixed_s=1e-3)))
    two_prompts = Batch(prefill_seq_ids=[0, 1], prefill_lens=[10, 20])
    mixed = Batch(prefill_seq_ids=[0], prefill_lens=[10], decode_seq_ids=[1], decode_context_lens=[50])
    decode_only = Batch(decode_seq_ids=[1], decode_context_lens=[50])
    assert charged.iteration_time(two_prompts) - charged.token_cost(30) == pytest.approx(2 * 4e-3)
    assert charged.iteration_time(mixed) - charged.token_cost(11) == pytest.approx(4e-3 + 1e-3)
    assert charged.iteration_time(decode_only) == pytest.approx(charged.token_cost(1))
    assert base.iteration_time(mixed) == pytest.approx(base.token_cost(11) + 100 * 1e-9 + 50 * 4e-7 + 50 * 1e-7
                                                       + 2 * 5e-5)


def old_format(path, version: str, swap_s_per_block: float | None = 2e-4):
    """A profile as format `version` wrote it: without the terms added since, one swap cost per block."""
    data = yaml.safe_load(path.read_text())
    data["format"] = version
    dropped = ("decode_block_s",) + (("per_prefill_s", "mixed_s") if version == "servesim-profile/2" else ())
    for term in dropped:
        del data["coefficients"][term]
    for key in ("swap_s_per_copy", "swap_s_per_byte", "block_sizes"):
        del data[key]
    data["swap_s_per_block"] = swap_s_per_block
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_format_2_profile_is_read_with_the_new_terms_at_zero(tmp_path):
    path = old_format(make_profile().save(tmp_path / "p.yaml"), "servesim-profile/2")
    profile = load_profile(path)
    assert profile.coefficients["per_prefill_s"] == 0.0 and profile.coefficients["mixed_s"] == 0.0
    assert profile.coefficients["decode_block_s"] == 0.0


def test_a_format_3_profile_is_read_and_charges_what_it_did(tmp_path):
    """/3 had no cost per KV block and one swap cost per block: read, the block term is 0 and the swap a cost
    per byte, so at its block size it prices every iteration and swap as before; it says so elsewhere."""
    path = old_format(make_profile().save(tmp_path / "p.yaml"), "servesim-profile/3")
    profile = load_profile(path)
    assert profile.format == FORMAT and profile.coefficients["decode_block_s"] == 0.0
    assert profile.swap_s_per_copy == 0.0
    assert profile.swap_s_per_byte == pytest.approx(2e-4 / (16 * 819_200))
    opt13b = load_model_spec("opt-13b")
    at_16 = ProfileCostModel.from_profile(path, opt13b, block_size=16)
    at_64 = ProfileCostModel.from_profile(path, opt13b, block_size=64)
    batch = Batch(decode_seq_ids=[0, 1], decode_context_lens=[100, 300])
    c = profile.coefficients
    before = (at_16.token_cost(2) + 400 * c["decode_context_s"] + 2 * 300 * c["decode_padded_context_s"]
              + 2 * c["per_sequence_s"])
    assert at_16.iteration_time(batch) == pytest.approx(before) == at_64.iteration_time(batch)
    assert at_16.swap_time(10) == pytest.approx(10 * 2e-4)
    assert at_64.swap_time(10) == pytest.approx(4 * 10 * 2e-4)  # four times the bytes a block
    assert "block size 16 only, run at 64" in at_64.source and "only" not in at_16.source
    resaved = load_profile(profile.save(tmp_path / "resaved.yaml"))
    assert resaved == profile  # written back in the current format


def test_a_format_4_profile_is_read_as_it_was_and_charges_what_it_did(tmp_path):
    """/4 had neither the device part's source nor the host part's relative errors: read, it has none, and
    its host work and forward cost what they did."""
    host = {"per_iteration_s": 1e-3, "per_sequence_s": 2e-5, "per_prefill_token_s": 1e-7,
            "heldout_mean_abs_error_s": 1e-5, "mean_s": 2e-3, "rows": 40}
    path = make_profile(host=host).save(tmp_path / "p.yaml")
    path.write_text(path.read_text().replace(f"format: {FORMAT}", "format: servesim-profile/4"))
    profile = load_profile(path)
    assert profile.device_part is None and profile.host == host and profile == make_profile(host=host)
    cost = ProfileCostModel(profile)
    batch = Batch(prefill_seq_ids=[0], prefill_lens=[10], decode_seq_ids=[1], decode_context_lens=[30])
    assert cost.host_time(batch) == pytest.approx(1e-3 + 2 * 2e-5 + 10 * 1e-7)
    assert cost.iteration_time(batch) == cost.device_time(batch) + cost.host_time(batch)
    assert "host part" not in cost.source and "held-out MAPE 4.0%" in cost.source


def test_a_format_3_profile_without_a_swap_measurement_prices_swaps_by_the_roofline(tmp_path):
    path = old_format(make_profile().save(tmp_path / "p.yaml"), "servesim-profile/3", swap_s_per_block=None)
    a100 = load_hardware("a100-40gb")
    cost = ProfileCostModel.from_profile(path, load_model_spec("opt-13b"), a100, block_size=16)
    assert cost.swap_time(1) == pytest.approx(80 * 5e-6 + 16 * 819_200 / (0.8 * a100.pcie_bytes_per_s))


@pytest.mark.parametrize("tokens, expected", [
    (1, 0.01), (2, 0.011), (4, 0.013), (1024, 0.05),
    (2048, 0.05 + 1024 * 0.02 / 512),  # past the last knot: the last segment's slope continued
])
def test_token_cost_table_interpolates_between_knots(tokens, expected):
    cost = ProfileCostModel(make_profile())
    assert cost.token_cost(tokens) == pytest.approx(expected)


def test_a_table_that_falls_at_its_end_does_not_extrapolate_below_its_last_value():
    cost = ProfileCostModel(make_profile(token_costs_s=[0.01, 0.013, 0.05, 0.03]))
    assert cost.token_cost(4096) == pytest.approx(0.03)


def test_an_old_format_profile_is_refused_with_how_to_refit(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("model: opt-13b\nknee_tokens: 512\ncoefficients: {fixed_s: 0.01}\n")
    with pytest.raises(SpecError, match="re-fit"):
        load_profile(path)


def test_profile_for_another_model_is_refused(tmp_path):
    path = make_profile().save(tmp_path / "p.yaml")
    with pytest.raises(SpecError) as err:
        ProfileCostModel.from_profile(path, load_model_spec("llama-13b"))
    assert "opt-13b" in str(err.value) and "llama-13b" in str(err.value)


def test_implied_efficiency_inverts_the_roofline():
    """A profile fitted to the roofline's own times gives back the roofline's efficiencies."""
    hw, model = load_hardware("h200"), load_model_spec("opt-13b")
    params = RooflineParams(compute_efficiency=0.55, bandwidth_efficiency=0.7, overhead_s=0.002)
    roof = RooflineCostModel(model, hw, params=params)
    per_token = roof._s_per_token_linear
    knots = [1, 1024, 2048, 4096]
    table = [max(per_token * k, roof._s_weights) + params.overhead_s for k in knots]
    profile = make_profile(token_knots=knots, token_costs_s=table, coefficients=coefficients(
        prefill_attention_s=roof._s_per_prompt_sq, decode_context_s=roof._s_per_context_token))
    implied = implied_efficiency(profile, hw)
    assert implied.compute_efficiency == pytest.approx(0.55, rel=1e-6)
    assert implied.bandwidth_efficiency == pytest.approx(0.7, rel=1e-6)
    assert implied.overhead_s == pytest.approx(0.002, rel=1e-3)


def test_transfer_refuses_a_cpu_profile(tmp_path):
    path = make_profile(device="cpu", device_name="some cpu").save(tmp_path / "p.yaml")
    with pytest.raises(SpecError, match="GPU"):
        transferred_roofline(path, None, load_model_spec("opt-13b"), load_hardware("a100-40gb"), 1, 2, 16)


def test_transfer_to_a_slower_gpu_is_slower(tmp_path):
    path = make_profile().save(tmp_path / "p.yaml")
    model = load_model_spec("llama-13b")
    decode = Batch(decode_seq_ids=[0, 1], decode_context_lens=[512, 512])
    fast = transferred_roofline(path, None, model, load_hardware("h200"), 1, 2, 16).iteration_time(decode)
    slow = transferred_roofline(path, None, model, load_hardware("a100-40gb"), 1, 2, 16).iteration_time(decode)
    assert slow > 2 * fast


def test_the_simulator_and_the_fit_read_the_table_alike():
    """ProfileCostModel.token_cost (one value) and features.token_costs (arrays) are one function,
    and within the knots the fit's hat basis times the table is that function too."""
    import numpy as np

    from calibrate.work.features import token_basis, token_costs

    for costs in ([0.01, 0.013, 0.03, 0.05], [0.01, 0.013, 0.05, 0.03]):  # rising, and falling at the end
        profile = make_profile(token_costs_s=costs)
        cost = ProfileCostModel(profile)
        tokens = np.array([1, 2, 3, 4, 5, 100, 512, 600, 1024, 1500, 4096])
        vectorized = token_costs(tokens, profile.token_knots, costs)
        assert [cost.token_cost(int(t)) for t in tokens] == pytest.approx(list(vectorized))
        inside = tokens[tokens <= profile.token_knots[-1]]
        assert token_basis(inside, profile.token_knots) @ np.array(costs) == pytest.approx(
            token_costs(inside, profile.token_knots, costs))


def test_a_profile_of_another_device_than_the_configs_hardware_says_so_in_its_source(tmp_path):
    path = make_profile().save(tmp_path / "p.yaml")  # measured on an NVIDIA H200
    opt13b = load_model_spec("opt-13b")
    on_a100 = ProfileCostModel.from_profile(path, opt13b, load_hardware("a100-40gb"))
    on_h200 = ProfileCostModel.from_profile(path, opt13b, load_hardware("h200"))
    assert "measured on NVIDIA H200, not on a100-40gb" in on_a100.source
    assert "not on" not in on_h200.source


@pytest.mark.parametrize("serving, key", [
    ({"factor": 3.0, "iterations": 40}, "serving.factor"),
    ({"factor": "fast", "iterations": 40}, "serving.factor"),
    ({"factor": 1.02, "iterations": 0}, "serving.iterations"),
    ([1.02], "serving"),
])
def test_a_broken_serving_factor_is_refused(tmp_path, serving, key):
    path = make_profile().save(tmp_path / "p.yaml")
    raw = yaml.safe_load(path.read_text())
    raw["serving"] = serving
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError) as err:
        load_profile(path)
    assert key in str(err.value)


def test_transfer_carries_the_measured_cost_per_block_and_per_copy():
    """As tokens' worth of K/V (so it scales with the target's bandwidth), and the swap's latency as measured;
    a profile that measured neither carries 0 (its per-token cost already holds its block size's work)."""
    hw = load_hardware("h200")
    measured = make_profile(coefficients=coefficients(decode_context_s=4e-7, decode_block_s=1e-6),
                            block_sizes=[1, 16], swap_s_per_copy=7e-6)
    params = implied_efficiency(measured, hw)
    assert params.block_read_overhead_tokens == pytest.approx(2.5)
    assert params.swap_copy_latency_s == 7e-6
    plain = implied_efficiency(make_profile(swap_s_per_copy=None, swap_s_per_byte=None), hw)
    assert plain.block_read_overhead_tokens == 0.0 and plain.swap_copy_latency_s == 0.0
