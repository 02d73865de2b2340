"""A model whose heads are not hidden / heads wide (Qwen3: q_dim = heads x head_dim is not hidden) is priced at
that width: the QKV and output matmuls' FLOPs and weight reads, the KV bytes decodes read, prompt attention's
FLOPs and the memory rule's peak activation. A model without the key is priced as before, and its layer shape
still equals a measured table's."""
from __future__ import annotations

from dataclasses import replace

import pytest
from batches import decode, prefill

from calibrate.clock.roofline import RooflineCostModel
from calibrate.hardware.hardware import load_hardware
from calibrate.work.layer_ops import LayerShape
from engine.specs.loader import load_model_spec
from sim.experiment.kv_pool import max_activation_bytes

H100 = load_hardware("h100-sxm")
QWEN3_32B = load_model_spec("qwen3-32b")


def test_the_attention_matmuls_are_as_wide_as_q():
    dims = LayerShape.of(QWEN3_32B).gemm_dims(1)
    assert dims["attn_pre_proj"] == (5120, 8192 + 2 * 1024) and dims["attn_post_proj"] == (8192, 5120)
    two = LayerShape.of(QWEN3_32B).gemm_dims(2)
    assert two["attn_pre_proj"] == (5120, (8192 + 2 * 1024) // 2) and two["attn_post_proj"] == (4096, 5120)
    # the matmuls' weights add up to the spec's attention weights
    assert sum(i * o for op, (i, o) in dims.items() if op.startswith("attn")) == QWEN3_32B.layer_attention_params()
    # rotary reads and writes q and k at their widths
    assert LayerShape.of(QWEN3_32B).elementwise_bytes_per_token(1)["attn_rope"] == 2 * (8192 + 1024) * 2


def test_a_model_without_its_own_width_has_a_measured_tables_shape():
    assert LayerShape.of(load_model_spec("llama-2-7b")) == LayerShape(4096, 32, 32, 11008, True)


def test_prompt_attention_flops_are_query_heads_times_head_dim():
    wide = load_model_spec("qwen3-tiny")
    narrow = replace(wide, head_dim=16)  # q as wide as the model, as every earlier spec's is
    flops = H100.peak_flops * RooflineCostModel(wide, H100).params.compute_efficiency
    batch = prefill([100, 40])
    # causal: 4 FLOPs a pair per query dimension over half of each prompt's L^2 pairs, in each layer
    want = 2 * wide.num_heads * wide.head_dim * wide.num_layers * (100 ** 2 + 40 ** 2) / flops
    assert RooflineCostModel(wide, H100).prefill_attention_time(batch) == pytest.approx(want, rel=1e-12)
    assert RooflineCostModel(wide, H100).prefill_attention_time(batch) == pytest.approx(
        2 * RooflineCostModel(narrow, H100).prefill_attention_time(batch), rel=1e-12)


def test_decodes_read_kv_heads_times_head_dim():
    wide = load_model_spec("qwen3-tiny")
    narrow = replace(wide, head_dim=16)
    batch = decode([300, 50])
    assert RooflineCostModel(wide, H100).decode_attention_time(batch) == pytest.approx(
        2 * RooflineCostModel(narrow, H100).decode_attention_time(batch), rel=1e-12)


def test_the_linear_layers_compute_and_read_the_wide_q_and_o():
    cost = RooflineCostModel(QWEN3_32B, H100)
    flops = H100.peak_flops * cost.params.compute_efficiency
    per_layer = 5120 * (8192 + 2 * 1024) + 8192 * 5120 + 3 * 5120 * 25600
    compute = 8192 * 2 * 64 * per_layer / flops  # a prompt far past the ridge: its linear layers compute-bound
    head = 2 * 151936 * 5120 / flops  # one logit row: the prompt's last token's
    assert cost.breakdown(prefill([8192])).device["linear"] == pytest.approx(compute + head, rel=1e-9)
    bandwidth = H100.hbm_bytes_per_s * cost.params.bandwidth_efficiency
    reads = (64 * per_layer + 151936 * 5120) * 2 / bandwidth  # one decode: the weights read once
    assert cost.weights_time(1) == pytest.approx(reads, rel=1e-12)


def test_the_memory_rules_peak_activation_reads_q_width():
    wide = load_model_spec("qwen3-tiny")
    # per token: 2 x (max(qkv 128 + 2 x 64, ffn 128) + hidden 64), or twice the vocabulary if that is more
    assert max_activation_bytes(wide, 10, 1, 2) == max(2 * (128 + 2 * 64 + 64), 2 * 512) * 10 * 2
    big = replace(wide, vocab_size=8)
    assert max_activation_bytes(big, 10, 1, 2) == 2 * (256 + 64) * 10 * 2
    assert max_activation_bytes(replace(big, head_dim=16), 10, 1, 2) == 2 * (128 + 64) * 10 * 2
