"""Weights and KV cache formats apart: their bytes, the matmul rate, and what the roofline makes of them (the KV
pool's blocks at each format: tests/sim/experiment/test_kv_pool.py)."""
from __future__ import annotations

import pytest
from batches import decode, prefill

from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.hardware.hardware import hardware_from_dict, load_hardware
from calibrate.hardware.precision import Precision, precision_from_config
from engine.core.batch import Batch
from engine.errors import SpecError
from engine.specs.loader import load_model_spec

LLAMA3 = load_model_spec("llama-3-8b")
H100, A100 = load_hardware("h100-sxm"), load_hardware("a100-80gb")
PARAMS = RooflineParams()


def roofline(hw, **formats) -> RooflineCostModel:
    return RooflineCostModel(LLAMA3, hw, precision=Precision(**formats))


# --- the value and its config ---------------------------------------------------------------------------------
def test_formats_give_their_bytes():
    assert [Precision(weights=w).weight_bytes for w in ("fp16", "bf16", "fp8", "int8", "int4")] == [2, 2, 1, 1, 0.5]
    assert [Precision(kv_cache=k).kv_bytes for k in ("fp16", "bf16", "fp8")] == [2, 2, 1]
    assert {Precision(weights="int4", kv_cache="fp8").activation_bytes, Precision().activation_bytes} == {2}
    legacy = Precision.uniform(4)  # dtype_bytes' old meaning: every byte count, activations too
    assert (legacy.weight_bytes, legacy.kv_bytes, legacy.activation_bytes) == (4, 4, 4)


def test_the_config_mapping_is_read_and_defaults_to_fp16():
    assert precision_from_config({"kv_cache": "fp8"}, None, "c.yaml") == Precision("fp16", "fp8")
    assert precision_from_config({}, None, "c.yaml") == Precision()
    assert precision_from_config(None, None, "c.yaml") == Precision.uniform(2)
    assert precision_from_config(None, 4, "c.yaml") == Precision.uniform(4)


@pytest.mark.parametrize("raw, dtype_bytes, key, words", [
    ({"weights": "fp4"}, None, "precision.weights", ["'fp4'", "fp16", "bf16", "fp8", "int8", "int4"]),
    ({"kv_cache": "int8"}, None, "precision.kv_cache", ["'int8'", "fp16", "bf16", "fp8"]),
    ({"kv_cache": ["fp8"]}, None, "precision.kv_cache", ["fp8"]),
    ({"weight": "fp8"}, None, "precision.weight", ["kv_cache", "weights"]),
    ("fp8", None, "precision", ["mapping", "kv_cache", "weights"]),
    ({"kv_cache": "fp8"}, 2, "precision", ["dtype_bytes", "give one"]),
])
def test_bad_precision_is_one_line_naming_the_key_and_what_is_valid(raw, dtype_bytes, key, words):
    with pytest.raises(SpecError) as err:
        precision_from_config(raw, dtype_bytes, "c.yaml")
    assert err.value.key == key and "c.yaml" in str(err.value) and "\n" not in str(err.value)
    assert all(word in err.value.message for word in words)


def test_a_sheet_gives_its_fp8_rate_where_the_part_has_one():
    assert H100.peak_flops_fp8 == 1979e12 and load_hardware("l40s").peak_flops_fp8 == 733e12
    assert all(load_hardware(name).peak_flops_fp8 is None for name in ("a100-40gb", "a100-80gb", "a10", "a10g", "a40"))
    raw = {"name": "x", "peak_flops": 1e12, "hbm_bytes_per_s": 1e12, "memory_gib": 10, "nvlink_bytes_per_s": 1e9,
           "pcie_bytes_per_s": 1e9, "peak_flops_fp8": -1}
    with pytest.raises(SpecError) as err:
        hardware_from_dict(raw, "x.yaml")
    assert err.value.key == "peak_flops_fp8" and "positive" in err.value.message


# --- the roofline -----------------------------------------------------------------------------------------------
def test_an_fp8_kv_cache_reads_half_the_kv_bytes_of_a_decode():
    contexts = [300, 1000, 17]
    batch = decode(contexts)
    blocks = sum(-(-c // 16) for c in contexts)  # the paged kernel's blocks visited, a cost per block read
    per_token = 2 * LLAMA3.num_layers * LLAMA3.num_kv_heads * LLAMA3.head_dim * 1  # K and V, one byte each
    bandwidth = H100.hbm_bytes_per_s * PARAMS.bandwidth_efficiency
    hand = (sum(contexts) + blocks * PARAMS.block_read_overhead_tokens) * per_token / bandwidth
    fp8 = roofline(H100, kv_cache="fp8").decode_attention_time(batch)
    assert fp8 == pytest.approx(hand, rel=1e-12)
    assert fp8 == pytest.approx(roofline(H100).decode_attention_time(batch) / 2, rel=1e-12)


def test_an_fp8_kv_cache_copies_and_swaps_half_the_bytes():
    fp16, fp8 = roofline(H100), roofline(H100, kv_cache="fp8")
    latency = 2 * LLAMA3.num_layers * PARAMS.swap_copy_latency_s  # per copy, the same for any format
    assert fp8.swap_time(3) - 3 * latency == pytest.approx((fp16.swap_time(3) - 3 * latency) / 2, rel=1e-12)
    copy = Batch(decode_seq_ids=[0], decode_context_lens=[20], num_running_groups=1,
                 blocks_to_copy=[(0, 1), (2, 3), (4, 5), (6, 7)])
    assert fp8.breakdown(copy).device["block_copies"] == pytest.approx(
        fp16.breakdown(copy).device["block_copies"] / 2, rel=1e-12)


def test_int4_weights_read_a_quarter_of_the_decoder_weights_and_a_16_bit_head():
    layers = LLAMA3.num_layers * LLAMA3.layer_active_linear_params()
    head = LLAMA3.vocab_size * LLAMA3.hidden_size
    bandwidth = H100.hbm_bytes_per_s * PARAMS.bandwidth_efficiency
    int4, fp16 = roofline(H100, weights="int4").weights_time(1), roofline(H100).weights_time(1)
    assert int4 == pytest.approx((layers * 0.5 + head * 2) / bandwidth, rel=1e-12)
    head_s = head * 2 / bandwidth
    assert int4 - head_s == pytest.approx((fp16 - head_s) / 4, rel=1e-12)


@pytest.mark.parametrize("tokens", [1, 7, 512])
def test_a_mixtures_experts_are_read_at_the_weight_format_too(tokens):
    mixtral = load_model_spec("mixtral-8x7b")
    int4, fp16 = (RooflineCostModel(mixtral, H100, tp=2, precision=Precision(weights=w)) for w in ("int4", "fp16"))
    head_s = mixtral.vocab_size * mixtral.hidden_size / 2 * 2 / (H100.hbm_bytes_per_s * PARAMS.bandwidth_efficiency)
    assert int4.weights_time(tokens) - head_s == pytest.approx((fp16.weights_time(tokens) - head_s) / 4, rel=1e-12)


@pytest.mark.parametrize("hw, rate", [(H100, H100.peak_flops_fp8), (A100, A100.peak_flops)])
def test_fp8_weights_compute_w8a8_where_the_sheet_has_an_fp8_rate_else_at_the_16_bit_rate(hw, rate):
    """On the sheet's rate: without the measured FP8 GEMMs (tests/calibrate/test_fp8_pricing.py prices with them)."""
    batch = prefill([4096, 4096])  # compute-bound: 8192 tokens are past every sheet's ridge
    tokens, layers = 8192, LLAMA3.num_layers * LLAMA3.layer_active_linear_params()
    head = LLAMA3.vocab_size * LLAMA3.hidden_size
    eff = PARAMS.compute_efficiency
    hand = tokens * 2 * layers / (rate * eff) + 2 * 2 * head / (hw.peak_flops * eff)  # the head stays 16-bit
    sheet = RooflineCostModel(LLAMA3, hw, precision=Precision(weights="fp8"), fp8_gemms=False)
    assert sheet.breakdown(batch).device["linear"] == pytest.approx(hand, rel=1e-12)
    assert ("W8A8" in sheet.source) == (hw is H100)


def test_int8_weights_are_weight_only_at_the_16_bit_rate_even_on_an_h100():
    batch = prefill([4096, 4096])
    int8, fp16 = roofline(H100, weights="int8"), roofline(H100)
    assert int8.breakdown(batch).device["linear"] == fp16.breakdown(batch).device["linear"]
    assert int8.weights_time(1) < fp16.weights_time(1)


def test_the_defaults_price_as_dtype_bytes_did():
    batch = decode([100, 900])
    old = RooflineCostModel(LLAMA3, H100, 1, 2)
    for precision in (Precision(), Precision.uniform(2), Precision("bf16", "bf16")):
        new = RooflineCostModel(LLAMA3, H100, precision=precision)
        assert new.iteration_time(batch) == old.iteration_time(batch) and new.swap_time(5) == old.swap_time(5)
    assert RooflineCostModel(LLAMA3, H100, precision=Precision()).source == old.source
