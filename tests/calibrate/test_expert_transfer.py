"""A mixture of experts on a measured linear part (`cost_model: {kind: transfer}`): its price is its dense ops'
prices composed by hand (attention and router over every token, each of the D expected distinct experts the dense
MLP over its share of the routed tokens), k experts' latencies at one token and all E at a large batch, and a
one-expert mixture prices as its dense twin."""
from __future__ import annotations

from dataclasses import replace

import pytest
from cost_model_cases import H100, MIXTRAL, PROFILES

from calibrate.clock.roofline import RooflineCostModel
from calibrate.cost_models.profile_model import transferred_roofline
from calibrate.maths.ridge import bent_roofs, ridge_exponent
from calibrate.parts.expert_ops import expert_kernels
from calibrate.work.expert_routing import expected_experts_read
from calibrate.work.layer_ops import LayerShape, gemm_work
from engine.core.batch import BatchShape
from engine.specs.loader import load_model_spec
from tests.calibrate.synthetic_ops import TRUE_FIT

TP = 2


def hand_priced(tokens: int, experts: float, fit=TRUE_FIT) -> float:
    """Mixtral's linear layers and kernels for one prefill of `tokens` at tp 2, from its dense ops' work: the bent
    roof over every matmul's FLOPs and weights (the router a hidden x E matmul), each matmul's latency, each
    elementwise kernel's latency and bytes; `experts` experts each running the dense MLP over tokens k / experts."""
    m, shape = MIXTRAL, LayerShape.of(MIXTRAL)
    dims, moved = shape.gemm_dims(TP), shape.elementwise_bytes_per_token(TP)
    rows = tokens * m.experts_per_token / experts
    resident = [gemm_work(dims[op], tokens) for op in ("attn_pre_proj", "attn_post_proj")]
    resident.append(gemm_work((m.hidden_size, m.num_experts // TP), tokens))  # the router
    expert = [gemm_work(dims[op], rows) for op in ("mlp_up_proj", "mlp_down_proj")]
    head = gemm_work((m.hidden_size, m.vocab_size // TP), 1)
    flops = (m.num_layers * (sum(f for f, _ in resident) + experts * sum(f for f, _ in expert)) + head[0])
    weights = (m.num_layers * (sum(b for _, b in resident) + experts * sum(b for _, b in expert)) + head[1])
    matmuls = float(fit.gemm_time(flops, weights, H100)) - fit.gemm_latency_s
    gemm_latencies = (m.num_layers * (3 + 2 * experts) + 1) * fit.gemm_latency_s
    every_token = sum(float(fit.elementwise_time(op, tokens * moved[op], H100))
                      for op in ("input_layernorm", "attn_rope", "post_attention_layernorm", "add"))
    activation = experts * float(fit.elementwise_time("mlp_act", rows * moved["mlp_act"], H100))
    embedding = float(fit.elementwise_time("emb", tokens * moved["emb"], H100))
    return matmuls + gemm_latencies + m.num_layers * (every_token + activation) + embedding


def priced(cost, tokens: int) -> float:
    device = cost.breakdown(BatchShape((tokens,), ())).device
    return device["linear"] + device["other_kernels"]


@pytest.mark.parametrize("tokens", [1, 3, 16, 200, 4096])
def test_a_mixtures_price_is_its_dense_ops_composed_by_hand(tokens):
    cost = RooflineCostModel(MIXTRAL, H100, tp=TP, linear=TRUE_FIT)
    experts = expected_experts_read(MIXTRAL.num_experts, MIXTRAL.experts_per_token, tokens)
    assert priced(cost, tokens) == pytest.approx(hand_priced(tokens, experts), rel=1e-12)


def test_one_token_runs_its_k_experts_and_a_large_batch_all_e():
    cost = RooflineCostModel(MIXTRAL, H100, tp=TP, linear=TRUE_FIT)
    assert priced(cost, 1) == pytest.approx(hand_priced(1, 2.0), rel=1e-12)
    assert priced(cost, 4096) == pytest.approx(hand_priced(4096, 8.0), rel=1e-12)
    # fewer experts would be cheaper at one token, and more dearer: the count is what it prices
    assert hand_priced(1, 1.9) < priced(cost, 1) < hand_priced(1, 2.1)
    kernels = [cost.breakdown(BatchShape((), (64,) * n)).device["other_kernels"] for n in (1, 2, 4, 16, 64)]
    assert all(a < b for a, b in zip(kernels, kernels[1:]))


@pytest.mark.parametrize("tokens", [1, 5, 64])
def test_d_experts_priced_one_by_one_are_the_routed_tokens_and_d_weight_reads(tokens):
    # the derivation in calibrate/parts/expert_ops.py: the bend is homogeneous of degree one
    shape, k = LayerShape.of(MIXTRAL), MIXTRAL.experts_per_token
    experts = expected_experts_read(MIXTRAL.num_experts, k, tokens)
    flops, weights = gemm_work(shape.gemm_dims(TP)["mlp_up_proj"], tokens * k / experts)
    one_by_one = experts * float(TRUE_FIT.gemm_time(flops, weights, H100))
    compute = tokens * k * flops / (tokens * k / experts) / (H100.peak_flops * TRUE_FIT.compute_efficiency)
    reads = experts * weights / (H100.hbm_bytes_per_s * TRUE_FIT.bandwidth_efficiency)
    together = experts * TRUE_FIT.gemm_latency_s + float(bent_roofs(compute, reads,
                                                                    ridge_exponent(TRUE_FIT.ridge_efficiency)))
    assert one_by_one == pytest.approx(together, rel=1e-12)


def test_a_one_expert_mixture_prices_exactly_as_its_dense_twin():
    one_expert = replace(MIXTRAL, num_experts=1, experts_per_token=1)
    mistral = load_model_spec("mistral-7b")  # Mixtral's attention and one expert's MLP, dense
    profile = PROFILES / "a100-80gb.yaml"
    twin, dense = (transferred_roofline(profile, None, m, H100, TP, 2, 16) for m in (one_expert, mistral))
    for batch in (BatchShape((), (100,)), BatchShape((), (700,) * 48), BatchShape((3000,), (50,) * 8)):
        assert twin.iteration_time(batch) == dense.iteration_time(batch)
        assert twin.breakdown(batch).device == dense.breakdown(batch).device


@pytest.mark.parametrize("tokens", [1, 17, 900])
def test_the_expert_composition_of_one_expert_is_the_dense_kernels(tokens):
    dense = RooflineCostModel(load_model_spec("mistral-7b"), H100, tp=TP, linear=TRUE_FIT)
    kernels = expert_kernels(replace(MIXTRAL, num_experts=1, experts_per_token=1), TRUE_FIT, H100, TP)
    composed = kernels.fixed_s + 1.0 * kernels.per_expert_s + tokens * kernels.per_token_s
    measured = dense.breakdown(BatchShape((tokens,), ())).device["other_kernels"]
    assert composed == pytest.approx(measured, rel=1e-12)


def test_mixtral_on_the_shipped_h100_fit_says_how_it_is_priced():
    cost = transferred_roofline(PROFILES / "a100-80gb.yaml", None, MIXTRAL, H100, TP, 2, 16)
    assert "8 experts, 2 a token" in cost.source and "h100-sxm's own fit" in cost.source
    assert cost.breakdown(BatchShape((), (100,))).device["other_kernels"] > 0


def test_a_whole_iteration_profiles_efficiencies_price_mixtral_as_the_roofline_does():
    cost = transferred_roofline(PROFILES / "h200-opt-13b.yaml", None, MIXTRAL, H100, TP, 2, 16)
    assert "at efficiencies from h200-opt-13b.yaml" in cost.source
    assert cost.weights_time(1) < cost.weights_time(4) < cost.weights_time(64)
    roofline = RooflineCostModel(MIXTRAL, H100, tp=TP, params=cost.params)
    assert cost.weights_time(3) == roofline.weights_time(3)
