"""Block size in the cost models: decode attention pays per KV block read, a swap per copy it issues, and
so Fig. 18a's paged-over-dense gap and Fig. 19a's swap-against-recompute crossover come out (the figures
themselves: tests/sim/reproduce/test_ablations.py)."""
import pytest

from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from engine.core.batch import Batch, BatchShape

KV_BYTES = 819_200  # OPT-13B fp16: 2 x 40 layers x 5120 x 2 bytes per token
A100_BANDWIDTH = 1.555e12 * 0.76  # the roofline's achieved HBM bandwidth
A100_PCIE = 32e9 * 0.8


def decode(contexts):
    return Batch(decode_seq_ids=list(range(len(contexts))), decode_context_lens=list(contexts))


def test_decode_blocks_counts_each_partly_filled_block(opt13b):
    assert BatchShape(decode_context_lens=(100, 300, 16, 17)).decode_blocks(16) == 7 + 19 + 1 + 2
    assert BatchShape(decode_context_lens=(100, 300)).decode_blocks(1) == 400
    assert BatchShape(prefill_lens=(500,)).decode_blocks(16) == 0  # a prefill reads no blocks


def test_the_per_block_term_by_hand(opt13b, a100):
    """Decodes at 100 and 300 tokens in 16-token blocks read 7 + 19 blocks, each 3.68 tokens' K/V extra."""
    paged = RooflineCostModel(opt13b, a100, block_size=16)
    dense = RooflineCostModel(opt13b, a100, block_size=16, paged=False)
    extra = paged.iteration_time(decode([100, 300])) - dense.iteration_time(decode([100, 300]))
    assert extra == pytest.approx(26 * 3.68 * KV_BYTES / A100_BANDWIDTH)
    assert 60e-9 < extra / 26 / 40 < 70e-9  # per block per layer: ~64 ns
    custom = RooflineCostModel(opt13b, a100, block_size=16, params=RooflineParams(block_read_overhead_tokens=1.0))
    assert custom.iteration_time(decode([100, 300])) - dense.iteration_time(decode([100, 300])) == pytest.approx(
        26 * KV_BYTES / A100_BANDWIDTH)


def test_smaller_blocks_cost_more_attention(opt13b, a100):
    times = [RooflineCostModel(opt13b, a100, block_size=b).iteration_time(decode([512] * 32))
             for b in (1, 4, 16, 64, 256)]
    assert times == sorted(times, reverse=True) and len(set(times)) == 5
    dense = RooflineCostModel(opt13b, a100, paged=False)
    assert dense.iteration_time(decode([512] * 32)) < times[-1]


def test_the_per_transfer_swap_term_by_hand(opt13b, a100):
    """One 16-token block of OPT-13B: 80 copies (K and V of 40 layers) of 5 us, then 13.1 MB over PCIe."""
    cost = RooflineCostModel(opt13b, a100, block_size=16)
    assert cost.swap_time(1) == pytest.approx(80 * 5e-6 + 16 * KV_BYTES / A100_PCIE)
    assert cost.swap_time(10) == pytest.approx(10 * cost.swap_time(1))
    tokenwise = RooflineCostModel(opt13b, a100, block_size=1)
    assert tokenwise.swap_time(16) == pytest.approx(16 * 80 * 5e-6 + 16 * KV_BYTES / A100_PCIE)
    free = RooflineCostModel(opt13b, a100, block_size=1, params=RooflineParams(swap_copy_latency_s=0.0))
    assert free.swap_time(16) == pytest.approx(16 * KV_BYTES / A100_PCIE)  # the bytes alone, the old price
