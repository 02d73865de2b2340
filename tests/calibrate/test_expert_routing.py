"""A mixture of experts on the roofline: the distinct experts a batch reads against a simulated router, and the
weight reads and compute of Mixtral-8x7B's linear layers as the batch grows."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from cost_model_cases import H100, MIXTRAL

from calibrate.clock.roofline import RooflineCostModel
from calibrate.work.expert_routing import expected_experts_read
from engine.core.batch import BatchShape


def routed_experts(rng: np.random.Generator, num_experts: int, k: int, tokens: int, trials: int) -> np.ndarray:
    """Distinct experts a layer reads in each of `trials` batches: every token picks k distinct experts, uniformly."""
    picks = rng.random((trials, tokens, num_experts)).argsort(axis=-1)[..., :k]  # a uniform k-subset per token
    hit = np.zeros((trials, num_experts), dtype=bool)
    np.put_along_axis(hit, picks.reshape(trials, tokens * k), True, axis=1)
    return hit.sum(axis=1)


@pytest.mark.parametrize("num_experts,k", [(8, 2), (64, 6), (8, 1)])
@pytest.mark.parametrize("tokens", [1, 2, 3, 7, 20, 64])
def test_expected_experts_are_a_simulated_routers_within_sampling_error(num_experts, k, tokens):
    rng = np.random.default_rng(20260 + 101 * num_experts + tokens)
    counts = routed_experts(rng, num_experts, k, tokens, trials=4000)
    standard_error = counts.std() / math.sqrt(counts.size)
    # + 1e-6: where every trial reads all E experts the sample spread is 0, the true miss chance ~1e-7
    assert abs(counts.mean() - expected_experts_read(num_experts, k, tokens)) <= 4 * standard_error + 1e-6


def test_one_token_reads_its_k_experts_and_a_large_batch_all_of_them():
    assert expected_experts_read(8, 2, 1) == pytest.approx(2.0, abs=1e-12)
    assert expected_experts_read(8, 2, 0) == 0.0
    assert expected_experts_read(8, 2, 200) == pytest.approx(8.0, abs=1e-12)
    assert expected_experts_read(8, 8, 1) == 8.0


def weight_seconds(experts: float, tp: int, bandwidth: float) -> float:
    """All layers' attention, routers and `experts` experts, and the head, read once, counted from the spec."""
    m = MIXTRAL
    resident = (m.num_layers * (m.layer_attention_params() + m.hidden_size * m.num_experts)
                + m.vocab_size * m.hidden_size)
    return (resident + experts * m.num_layers * 3 * m.hidden_size * m.ffn_dim) * 2 / tp / bandwidth


@pytest.mark.parametrize("tp", [1, 2])
def test_weight_reads_grow_with_the_batch_from_k_experts_toward_all_of_them(tp):
    cost = RooflineCostModel(MIXTRAL, H100, tp=tp)
    bandwidth = H100.hbm_bytes_per_s * cost.params.bandwidth_efficiency
    reads = [cost.weights_time(t) for t in (1, 2, 4, 8, 16, 64)]
    assert all(a < b for a, b in zip(reads, reads[1:]))
    assert reads[0] == pytest.approx(weight_seconds(2, tp, bandwidth), rel=1e-12)
    assert reads[1] == pytest.approx(weight_seconds(8 * (1 - 0.75 ** 2), tp, bandwidth), rel=1e-12)
    assert reads[-1] == pytest.approx(weight_seconds(8, tp, bandwidth), rel=1e-6)
    # a decode batch pays that growth: memory-bound, its linear layers are the weight reads
    for decodes, read in ((1, reads[0]), (8, reads[3])):
        linear = cost.breakdown(BatchShape((), (100,) * decodes)).device["linear"]
        assert linear == pytest.approx(read, rel=1e-12)


def test_compute_is_the_active_parameters_twice_per_token():
    cost = RooflineCostModel(MIXTRAL, H100, tp=2)
    flops = H100.peak_flops * cost.params.compute_efficiency
    m = MIXTRAL
    active = m.num_layers * (m.layer_attention_params() + 2 * 3 * m.hidden_size * m.ffn_dim + m.hidden_size * 8)
    prefill = BatchShape((8192,), ())  # compute-bound: far past the ridge
    expected = 2 * (8192 * active + m.vocab_size * m.hidden_size) / 2 / flops
    assert cost.breakdown(prefill).device["linear"] == pytest.approx(expected, rel=1e-12)
    assert expected > cost.weights_time(8192)


def test_a_dense_model_reads_all_its_weights_at_any_batch():
    cost = RooflineCostModel(replace(MIXTRAL, num_experts=1, experts_per_token=1), H100)
    assert cost.weights_time(1) == cost.weights_time(4096)
