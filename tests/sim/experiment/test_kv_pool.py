"""How much KV cache a deployment has: Table 1 of Kwon et al. 2023 by arithmetic, and the
paper-era memory rule (0.95 x memory - weights - activations - 1 GiB)."""
from __future__ import annotations

import pytest

from calibrate.hardware.hardware import GIB, load_hardware
from calibrate.hardware.precision import Precision
from engine.specs.loader import load_model_spec
from sim.experiment.kv_pool import (
    block_bytes,
    kv_cache_bytes_by_rule,
    kv_pool,
    max_activation_bytes,
)

MIB = 1 << 20
LLAMA3 = load_model_spec("llama-3-8b")
H100 = load_hardware("h100-sxm")


@pytest.fixture(scope="module")
def opt13b():
    return load_model_spec("opt-13b")


def test_opt13b_kv_is_800_kib_per_token(opt13b):
    assert opt13b.kv_bytes_per_token(2) == 819200 == 800 * 1024
    assert 2048 * opt13b.kv_bytes_per_token(2) == 1600 * MIB  # "up to 1.6 GB" for a 2048-token request
    assert block_bytes(opt13b, 16, 1, 2) == 16 * 819200


def test_table1_opt13b_12_gib(opt13b):
    pool = kv_pool(opt13b, load_hardware("a100-40gb"), tp=1, precision=2, block_size=16,
                   kv_cache_gib=12, swap_space_gib=0)
    assert 12 * GIB / opt13b.kv_bytes_per_token(2) == pytest.approx(15728.64)
    assert round(12 * GIB / opt13b.kv_bytes_per_token(2)) == 15729  # Table 1: 15.7K slots
    assert pool.num_gpu_blocks == 983 and pool.num_cpu_blocks == 0 and pool.block_size == 16
    assert pool.num_slots == 983 * 16 == 15728  # whole blocks: 15,728 usable slots
    assert pool.block_bytes == 16 * 819200


def test_swap_space_in_blocks(opt13b):
    pool = kv_pool(opt13b, load_hardware("a100-40gb"), 1, 2, 16, kv_cache_gib=12, swap_space_gib=20)
    assert pool.num_cpu_blocks == (20 * GIB) // (16 * 819200) == 1638


def test_table1_opt175b_264_gib_over_8_gpus():
    # 264 GiB / 4.5 MiB = 60,074 slots = 3,754 blocks of 16 (Table 1: 60.1K). kv_cache_gib is
    # per GPU (as sim.experiment.config documents it): 33 GiB on each of 8 tensor-parallel GPUs, each
    # holding 1/8 of every block, gives the same 3,754 blocks
    opt175b = load_model_spec("opt-175b")
    assert opt175b.kv_bytes_per_token(2) == 4.5 * MIB
    assert int(264 * GIB / opt175b.kv_bytes_per_token(2)) == 60074
    pool = kv_pool(opt175b, load_hardware("a100-80gb"), tp=8, precision=2, block_size=16,
                   kv_cache_gib=264 / 8, swap_space_gib=0)
    assert pool.block_bytes == 16 * 4.5 * MIB / 8
    assert pool.num_gpu_blocks == 3754 == (264 * GIB) // (16 * opt175b.kv_bytes_per_token(2))


def test_table1_opt66b_21_gib_over_4_gpus():
    opt66b = load_model_spec("opt-66b")
    pool = kv_pool(opt66b, load_hardware("a100-40gb"), tp=4, precision=2, block_size=16,
                   kv_cache_gib=21 / 4, swap_space_gib=0)
    assert pool.num_gpu_blocks == (21 * GIB) // (16 * opt66b.kv_bytes_per_token(2)) == 597  # 9,557 slots


def test_tensor_parallelism_splits_blocks_not_the_pool():
    opt13b = load_model_spec("opt-13b")
    one = kv_pool(opt13b, load_hardware("a100-40gb"), 1, 2, 16, kv_cache_gib=12, swap_space_gib=4)
    two = kv_pool(opt13b, load_hardware("a100-40gb"), 2, 2, 16, kv_cache_gib=6, swap_space_gib=2)
    assert two.block_bytes * 2 == one.block_bytes
    assert (two.num_gpu_blocks, two.num_cpu_blocks) == (one.num_gpu_blocks, one.num_cpu_blocks)


def test_memory_rule_opt13b_on_a100_40gb(opt13b):
    hw = load_hardware("a100-40gb")
    weights = opt13b.weight_bytes(2)
    assert 23.8 < weights / GIB < 24.0
    act = max_activation_bytes(opt13b, 2560, 1, 2)
    assert act == 2 * 50272 * 2560 * 2  # the logits term dominates: 2 x vocab per token
    kv = kv_cache_bytes_by_rule(opt13b, hw, tp=1, precision=2)
    assert kv == int(0.95 * hw.memory_bytes - weights - act - GIB)
    assert kv / GIB == pytest.approx(12.2, abs=0.1)  # matches Table 1's 12 GB
    pool = kv_pool(opt13b, hw, 1, 2, 16, kv_cache_gib=None, swap_space_gib=0)
    assert pool.num_gpu_blocks == kv // (16 * 819200)
    assert 975 <= pool.num_gpu_blocks <= 1000


def test_memory_rule_scales_with_tensor_parallelism(opt13b):
    hw = load_hardware("a100-40gb")
    one, two = (kv_cache_bytes_by_rule(opt13b, hw, tp, 2) for tp in (1, 2))
    assert two > one  # half the weights per GPU
    assert max_activation_bytes(opt13b, 2560, 2, 2) <= max_activation_bytes(opt13b, 2560, 1, 2)
    assert max_activation_bytes(opt13b, 5120, 1, 2) == 2 * max_activation_bytes(opt13b, 2560, 1, 2)


def test_a_model_that_does_not_fit_gets_an_empty_pool_not_a_negative_one():
    opt175b = load_model_spec("opt-175b")
    pool = kv_pool(opt175b, load_hardware("a100-40gb"), 1, 2, 16, kv_cache_gib=None, swap_space_gib=0)
    assert pool.num_gpu_blocks == 0


def test_an_fp8_kv_cache_holds_twice_the_blocks_and_fp8_weights_free_more():
    def blocks(**formats):
        return kv_pool(LLAMA3, H100, 1, Precision(**formats), 16, None, 4).num_gpu_blocks

    fp16, fp8_kv, fp8_all = blocks(), blocks(kv_cache="fp8"), blocks(weights="fp8", kv_cache="fp8")
    assert abs(fp8_kv - 2 * fp16) <= 1  # the same bytes, half a block's
    assert fp8_all > fp8_kv
    quantized = LLAMA3.num_layers * LLAMA3.layer_linear_params()
    assert Precision(weights="fp8").weight_memory_bytes(LLAMA3) == LLAMA3.weight_bytes(2) - quantized
    assert Precision().weight_memory_bytes(LLAMA3) == LLAMA3.weight_bytes(2)
