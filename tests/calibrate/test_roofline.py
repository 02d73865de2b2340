"""The roofline cost model: spec-sheet timings, anchored on kipply's FasterTransformer
OPT-13B-class numbers for one A100-40GB (decode 22 ms/token at context 512, prefill 63 ms)."""
from __future__ import annotations

from pathlib import Path

import pytest
from batches import decode, prefill

from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.hardware.hardware import load_hardware
from engine.core.batch import Batch


def test_opt13b_anchors(opt13b, a100):
    cost = RooflineCostModel(opt13b, a100)
    assert cost.iteration_time(decode([512])) == pytest.approx(0.022, rel=0.25)
    assert cost.iteration_time(prefill([512])) == pytest.approx(0.06317, rel=0.25)
    # first principles: a decode step cannot beat reading the weights at peak bandwidth
    assert cost.iteration_time(decode([512])) > opt13b.weight_bytes(2) / a100.hbm_bytes_per_s


def test_tp2_is_faster_and_near_kipply(opt13b, a100):
    one, two = RooflineCostModel(opt13b, a100, tp=1), RooflineCostModel(opt13b, a100, tp=2)
    for batch in (decode([512]), decode([512] * 32), prefill([512]), prefill([100, 700])):
        assert two.iteration_time(batch) < one.iteration_time(batch)
    assert two.iteration_time(decode([512])) == pytest.approx(0.0135, rel=0.25)  # kipply TP2: 13.5 ms


def test_time_grows_with_context_and_batch(opt13b, a100):
    cost = RooflineCostModel(opt13b, a100)
    by_context = [cost.iteration_time(decode([c] * 8)) for c in (16, 128, 512, 1024, 2048)]
    assert by_context == sorted(by_context) and len(set(by_context)) == len(by_context)
    by_batch = [cost.iteration_time(decode([300] * b)) for b in (1, 2, 8, 32, 128, 256)]
    assert by_batch == sorted(by_batch) and len(set(by_batch)) == len(by_batch)
    by_prompt = [cost.iteration_time(prefill([n])) for n in (16, 128, 512, 1024, 2048)]
    assert by_prompt == sorted(by_prompt) and len(set(by_prompt)) == len(by_prompt)
    # a large batch of decodes becomes compute-bound: far more than the weight-read floor
    assert cost.iteration_time(decode([10] * 2048)) > 3 * cost.iteration_time(decode([10]))


def test_decode_kv_reads_cost_about_half_a_microsecond_per_context_token(opt13b, a100):
    cost = RooflineCostModel(opt13b, a100, paged=False)  # the bytes alone: no cost per block
    extra = cost.iteration_time(decode([1000] * 16)) - cost.iteration_time(decode([1] * 16))
    per_token = extra / (16 * 999)
    assert 0.4e-6 < per_token < 0.8e-6  # 800 KB per token at ~1.2-1.5 TB/s


def test_mixed_batch_costs_at_least_its_parts(opt13b, a100):
    cost = RooflineCostModel(opt13b, a100)
    mixed = Batch(prefill_seq_ids=[0], prefill_lens=[400], prefill_sample_ids=[(0,)],
                  decode_seq_ids=[1, 2], decode_context_lens=[300, 700])
    assert cost.iteration_time(mixed) >= max(cost.iteration_time(prefill([400])),
                                             cost.iteration_time(decode([300, 700])))


def test_block_copies_add_time(opt13b, a100):
    cost = RooflineCostModel(opt13b, a100)
    plain = decode([100, 100])
    copies = decode([100, 100])
    copies.blocks_to_copy = [(0, 1), (2, 3)]
    assert cost.iteration_time(copies) > cost.iteration_time(plain)


def test_swap_time_is_linear_in_blocks(opt13b, a100):
    cost = RooflineCostModel(opt13b, a100)
    assert cost.swap_time(0) == 0.0
    one = cost.swap_time(1)
    assert one > 0
    assert [cost.swap_time(n) for n in (2, 10, 983)] == pytest.approx([2 * one, 10 * one, 983 * one])
    # one 16-token OPT-13B block (12.5 MiB): 80 copies of 5 us, then PCIe 4.0 x16 at 80% of 32 GB/s
    assert one == pytest.approx(80 * 5e-6 + 16 * 819200 / (32e9 * 0.8))
    # each GPU of a tensor-parallel pair moves half the bytes, in as many copies (its half of every layer)
    assert RooflineCostModel(opt13b, a100, tp=2).swap_time(10) == pytest.approx(
        10 * (80 * 5e-6 + 8 * 819200 / (32e9 * 0.8)))


def test_step_time_charges_swaps(opt13b, a100):
    cost = RooflineCostModel(opt13b, a100)
    batch = decode([100])
    assert cost.step_time(batch) == cost.iteration_time(batch)
    batch.blocks_to_swap_out = [(0, 0), (1, 1), (2, 2)]
    batch.blocks_to_swap_in = [(5, 5)]
    assert cost.step_time(batch) == pytest.approx(cost.iteration_time(batch) + cost.swap_time(4))


def test_efficiencies_and_overhead_move_time_the_right_way(opt13b, a100):
    base = RooflineCostModel(opt13b, a100)
    slow = RooflineCostModel(opt13b, a100, params=RooflineParams(compute_efficiency=0.34, bandwidth_efficiency=0.38))
    over = RooflineCostModel(opt13b, a100, params=RooflineParams(overhead_s=0.005))
    for batch in (decode([512]), prefill([512])):
        assert slow.iteration_time(batch) > 1.9 * base.iteration_time(batch)
        assert over.iteration_time(batch) == pytest.approx(base.iteration_time(batch) + 0.005)
    assert "a100-40gb" in base.source and "tp=1" in base.source


def test_faster_hardware_is_faster(opt13b, a100):
    h100 = load_hardware("h100-sxm")
    for batch in (decode([512] * 8), prefill([512])):
        on_h100 = RooflineCostModel(opt13b, h100).iteration_time(batch)
        assert on_h100 < RooflineCostModel(opt13b, a100).iteration_time(batch)


def test_empty_batch_costs_at_most_the_weight_read(opt13b, a100):
    cost = RooflineCostModel(opt13b, a100)
    assert 0 <= cost.iteration_time(Batch()) <= cost.iteration_time(decode([1]))


def test_a_prefill_over_a_cached_prefix_costs_its_attention_not_its_linear_layers(opt13b, a100):
    from calibrate.cost_models.profile_model import ProfileCostModel
    from engine.core.batch import BatchShape

    own, cached = BatchShape((40,)), BatchShape((40,), prefill_cached_lens=(336,))
    full = BatchShape((376,))
    assert cached.sum_prefill_sq == 40 * (40 + 2 * 336) and cached.num_tokens == 40
    roofline = RooflineCostModel(opt13b, a100)
    assert roofline.iteration_time(own) < roofline.iteration_time(cached) < roofline.iteration_time(full)
    shipped = Path(__file__).resolve().parents[2] / "calibrate" / "profiles" / "h200-opt-13b.yaml"
    profile = ProfileCostModel.from_profile(shipped)
    assert profile.iteration_time(own) < profile.iteration_time(cached) < profile.iteration_time(full)
    # nothing cached: the plain prompt's n^2, whether the list is empty or all zeros
    zeros = prefill([40])
    zeros.prefill_cached_lens.append(0)
    assert zeros.sum_prefill_sq == 1600 and zeros.shape() == prefill([40]).shape()


def test_attention_times_are_what_attention_adds_to_an_iteration(opt13b, a100):
    """decode_attention_time and prefill_attention_time (benchmarks/peers/vidur_attention.py tabulates them) are the
    part of iteration_time that the contexts and the cached prefix change, and nothing else."""
    from engine.core.batch import BatchShape

    cost = RooflineCostModel(opt13b, a100)
    decodes, no_context = BatchShape(decode_context_lens=(300, 17, 64)), BatchShape(decode_context_lens=(0, 0, 0))
    assert cost.decode_attention_time(no_context) == 0
    assert cost.iteration_time(decodes) - cost.iteration_time(no_context) == pytest.approx(
        cost.decode_attention_time(decodes), rel=1e-9)
    own, cached = BatchShape((40,)), BatchShape((40,), prefill_cached_lens=(336,))
    assert cost.iteration_time(cached) - cost.iteration_time(own) == pytest.approx(
        cost.prefill_attention_time(cached) - cost.prefill_attention_time(own), rel=1e-9)
    assert cost.prefill_attention_time(own) == pytest.approx(
        2 * 40**2 * opt13b.hidden_size * opt13b.num_layers / (a100.peak_flops * RooflineParams().compute_efficiency))
