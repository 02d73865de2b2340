"""Expert parallelism on the roofline: one GPU runs its own experts for every rank's tokens at equal load. The
distinct experts it reads against a simulated router; Mixtral-8x7B's weight reads, compute and measured expert
kernels on hand-computed examples; and without expert parallelism every time main's clock gave, to the bit."""
from __future__ import annotations

import math

import numpy as np
import pytest
from cost_model_cases import H100, MIXTRAL, PROFILES

from calibrate.clock.roofline import RooflineCostModel
from calibrate.cost_models.profile_model import transferred_roofline
from calibrate.hardware.hardware import load_hardware
from calibrate.parts.expert_ops import expert_kernels
from calibrate.work.expert_parallel import ExpertParallel, expected_local_experts_read
from calibrate.work.expert_routing import expected_experts_read
from engine.core.batch import BatchShape
from engine.specs.loader import load_model_spec

TWO_RANKS = ExpertParallel(2, 1)


def local_reads(rng: np.random.Generator, num_experts: int, k: int, tokens: int, group: ExpertParallel,
                trials: int) -> tuple[np.ndarray, np.ndarray]:
    """Per trial, the distinct experts of GPU 0's share (experts 0 .. E/EP - 1) that the ranks' gathered tokens are
    routed to, and the rows routed to them: every token of every rank picks k distinct experts, uniformly."""
    gathered = group.data_parallel * tokens
    picks = rng.random((trials, gathered, num_experts)).argsort(axis=-1)[..., :k]
    own = picks < num_experts // group.degree
    hit = np.zeros((trials, num_experts), dtype=bool)
    np.put_along_axis(hit, picks.reshape(trials, gathered * k), True, axis=1)
    return hit[:, :num_experts // group.degree].sum(axis=1), own.sum(axis=(1, 2))


@pytest.mark.parametrize("num_experts,k,group", [(8, 2, TWO_RANKS), (64, 6, ExpertParallel(4, 2)),
                                                 (128, 8, TWO_RANKS)])
@pytest.mark.parametrize("tokens", [1, 3, 20])
def test_a_gpus_experts_read_and_rows_are_a_simulated_routers(num_experts, k, group, tokens):
    rng = np.random.default_rng(7 + num_experts + 13 * tokens)
    read, rows = local_reads(rng, num_experts, k, tokens, group, trials=3000)
    expected = expected_local_experts_read(num_experts, k, tokens, group)
    # + 1e-4: where every trial reads every expert of the share the spread is 0, the true miss chance ~1e-5
    assert abs(read.mean() - expected) <= 4 * read.std() / math.sqrt(read.size) + 1e-4
    # the rows routed to a GPU: T k / TP, what tensor parallelism alone runs at 1/TP of each expert's width
    assert abs(rows.mean() - tokens * k / group.tensor_parallel) <= 4 * rows.std() / math.sqrt(rows.size) + 1e-6


def test_two_ranks_of_one_token_read_one_and_three_quarter_experts_a_gpu():
    # Mixtral: 8 experts, 2 a token. Two tokens miss an expert with (3/4)^2, so 8 (1 - 9/16) = 3.5 of the 8 are
    # read across the group, 1.75 on each GPU; eight tokens (four a rank) 8 (1 - (3/4)^8) / 2
    assert expected_local_experts_read(8, 2, 1, TWO_RANKS) == pytest.approx(1.75, abs=1e-15)
    assert expected_local_experts_read(8, 2, 4, TWO_RANKS) == pytest.approx(4 * (1 - 0.75 ** 8), abs=1e-15)
    assert expected_local_experts_read(8, 2, 4, ExpertParallel(1, 2)) == pytest.approx(4 * (1 - 0.75 ** 4))


def resident_seconds(tp: int, bandwidth: float) -> float:
    """Attention, routers and the head of Mixtral, read once a step at tensor parallelism tp."""
    m = MIXTRAL
    return ((m.num_layers * (m.layer_attention_params() + m.hidden_size * m.num_experts) + m.vocab_size * m.hidden_size)
            * 2 / tp / bandwidth)


@pytest.mark.parametrize("group", [TWO_RANKS, ExpertParallel(2, 2), ExpertParallel(1, 2)])
@pytest.mark.parametrize("tokens", [1, 4, 64])
def test_a_gpu_reads_its_own_experts_whole_for_every_ranks_tokens(group, tokens):
    cost = RooflineCostModel(MIXTRAL, H100, tp=group.tensor_parallel, expert_parallel=group)
    bandwidth = H100.hbm_bytes_per_s * cost.params.bandwidth_efficiency
    m = MIXTRAL
    experts = 8 * (1 - 0.75 ** (group.data_parallel * tokens)) / group.degree  # written out: D(N T) / EP
    whole = m.num_layers * 3 * m.hidden_size * m.ffn_dim * 2 / bandwidth
    assert cost.weights_time(tokens) == pytest.approx(resident_seconds(group.tensor_parallel, bandwidth)
                                                      + experts * whole, rel=1e-12)


def test_at_a_large_batch_two_ranks_read_half_the_experts_and_at_one_token_nearly_as_many():
    plain, ep = RooflineCostModel(MIXTRAL, H100), RooflineCostModel(MIXTRAL, H100, expert_parallel=TWO_RANKS)
    bandwidth = H100.hbm_bytes_per_s * plain.params.bandwidth_efficiency
    resident = resident_seconds(1, bandwidth)
    assert (ep.weights_time(256) - resident) / (plain.weights_time(256) - resident) == pytest.approx(0.5, rel=1e-9)
    assert (ep.weights_time(1) - resident) / (plain.weights_time(1) - resident) == pytest.approx(1.75 / 2, rel=1e-12)


def test_compute_is_tensor_parallelisms_the_same_rows_at_full_width():
    prefill = BatchShape((8192,), ())  # compute-bound: the linear kind is the compute alone in both
    for group in (TWO_RANKS, ExpertParallel(2, 2)):
        tp = group.tensor_parallel
        plain = RooflineCostModel(MIXTRAL, H100, tp=tp).breakdown(prefill).device["linear"]
        ep = RooflineCostModel(MIXTRAL, H100, tp=tp, expert_parallel=group).breakdown(prefill).device["linear"]
        assert ep == plain


def test_measured_expert_kernels_launch_once_per_expert_the_gpu_runs():
    plain = transferred_roofline(PROFILES / "a100-80gb.yaml", None, MIXTRAL, H100, 1, 2, 16)
    ep = transferred_roofline(PROFILES / "a100-80gb.yaml", None, MIXTRAL, H100, 1, 2, 16, expert_parallel=TWO_RANKS)
    assert "expert parallel over 2 x 1 GPUs (EP 2) at equal load" in ep.source
    # the same kernels per token and per iteration; the per-expert latencies D(N T) / EP times instead of D(T)
    kernels = expert_kernels(MIXTRAL, plain.linear, H100)
    for tokens in (1, 5, 40):
        expected = (kernels.fixed_s + expected_local_experts_read(8, 2, tokens, TWO_RANKS) * kernels.per_expert_s
                    + tokens * kernels.per_token_s)
        assert ep.kernels_time(tokens) == pytest.approx(expected, rel=1e-12)
        assert plain.kernels_time(tokens) == pytest.approx(expected + (expected_experts_read(8, 2, tokens) - (
            expected_local_experts_read(8, 2, tokens, TWO_RANKS))) * kernels.per_expert_s, rel=1e-12)


def test_a_dense_model_ignores_expert_parallelism():
    llama = load_model_spec("llama-3-8b")
    plain, ep = RooflineCostModel(llama, H100), RooflineCostModel(llama, H100, expert_parallel=TWO_RANKS)
    batch = BatchShape((300,), (17, 900))
    assert ep.expert_parallel is None and ep.source == plain.source
    assert ep.iteration_time(batch) == plain.iteration_time(batch)


# main's clock before expert parallelism, as float.hex: iteration times of four batches and a five-step decode stretch
MAIN_TIMES = {
    "mixtral tp2": ["0x1.7263d65750d08p-8", "0x1.4e4c07f0d0ca7p-6", "0x1.40cae434f1688p-6", "0x1.4a3ee0c5a41d0p-6"],
    "mixtral transferred tp2": ["0x1.ec23c7828eda9p-8", "0x1.78aa1483f6468p-6", "0x1.eab5ac40c4193p-6",
                                "0x1.37b8faa77360cp-5"],
    "qwen3-30b-a3b rtx": ["0x1.2553665907898p-8", "0x1.630f7412abdb0p-5", "0x1.6e05d154c2365p-5",
                          "0x1.7392770c08fbep-5"],
}
MAIN_STRETCH = ["0x1.4e4c07f0d0ca7p-6", "0x1.4e53f6d99ef75p-6", "0x1.4e5786ef65551p-6", "0x1.4e5b17052bb2cp-6",
                "0x1.4e5ea71af2108p-6"]
BATCHES = [BatchShape((), (100,)), BatchShape((), (17, 1, 4096) * 11), BatchShape((512,), ()),
           BatchShape((3, 900), (16, 32, 33), 2, 3, 5, (0, 16))]


def test_without_expert_parallelism_a_mixture_is_priced_as_main_priced_it_to_the_bit():
    models = {"mixtral tp2": RooflineCostModel(MIXTRAL, H100, tp=2),
              "mixtral transferred tp2": transferred_roofline(PROFILES / "a100-80gb.yaml", None, MIXTRAL, H100, 2, 2,
                                                              16),
              "qwen3-30b-a3b rtx": RooflineCostModel(load_model_spec("qwen3-30b-a3b"), load_hardware("rtx-pro-6000"))}
    for name, model in models.items():
        assert [model.iteration_time(b).hex() for b in BATCHES] == MAIN_TIMES[name], name
    stretch = models["mixtral tp2"].decode_iteration_times(BATCHES[1], 5)
    assert [float(t).hex() for t in stretch] == MAIN_STRETCH


@pytest.mark.parametrize("profile", ["a100-80gb.yaml", "a100-80gb-linear.yaml"])
def test_a_transfer_off_its_measured_gpu_prices_expert_parallelism_in_every_regime(profile):
    cost = transferred_roofline(PROFILES / profile, None, MIXTRAL, load_hardware("rtx-pro-6000"), 1, 2, 16,
                                expert_parallel=TWO_RANKS)
    models = cost.models if hasattr(cost, "models") else [cost]  # a regime model's every roofline
    assert all(model.expert_parallel == TWO_RANKS for model in models)
    assert "expert parallel over 2 x 1 GPUs (EP 2)" in cost.source
