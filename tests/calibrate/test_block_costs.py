"""Block size in the cost models: decode attention pays per KV block read, a swap per copy it issues, and
so Fig. 18a's paged-over-dense gap and Fig. 19a's swap-against-recompute crossover come out."""
import pytest

from calibrate.ablations import fig18a_frame, fig19a_frame, kernel_latency, preemption_cost, roofline_at
from calibrate.roofline import RooflineCostModel, RooflineParams
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


def test_fig18a_paged_kernel_is_23_percent_slower_at_the_papers_shapes(opt13b, a100):
    """The default charges Fig. 18a's measured gap (20-26%) to the blocks: at block size 16 and contexts
    that fill their blocks, the paged kernel costs 1 + 3.68 / 16 of the dense one at every shape."""
    frame = fig18a_frame(opt13b, a100)
    assert list(zip(frame["batch"], frame["context"])) == [(8, 64), (8, 128), (8, 256), (32, 64), (32, 128),
                                                            (32, 256)]
    assert frame["ratio"].to_numpy() == pytest.approx(1.23)
    one = kernel_latency(opt13b, a100, batch=32, context=256)
    assert one.dense_s == pytest.approx(32 * 256 * KV_BYTES / 40 / A100_BANDWIDTH)
    assert 100e-6 < one.paged_s < 250e-6  # inside the paper's 0-250 us axis


def test_the_per_transfer_swap_term_by_hand(opt13b, a100):
    """One 16-token block of OPT-13B: 80 copies (K and V of 40 layers) of 5 us, then 13.1 MB over PCIe."""
    cost = RooflineCostModel(opt13b, a100, block_size=16)
    assert cost.swap_time(1) == pytest.approx(80 * 5e-6 + 16 * KV_BYTES / A100_PCIE)
    assert cost.swap_time(10) == pytest.approx(10 * cost.swap_time(1))
    tokenwise = RooflineCostModel(opt13b, a100, block_size=1)
    assert tokenwise.swap_time(16) == pytest.approx(16 * 80 * 5e-6 + 16 * KV_BYTES / A100_PCIE)
    free = RooflineCostModel(opt13b, a100, block_size=1, params=RooflineParams(swap_transfer_latency_s=0.0))
    assert free.swap_time(16) == pytest.approx(16 * KV_BYTES / A100_PCIE)  # the bytes alone, the old price


def test_swap_vs_recompute_crosses_over_as_the_paper_measured(opt13b, a100):
    """Fig. 19a with the default A100 costs, for a 512-token OPT-13B sequence: recomputing it (a 512-token
    prefill, ~63 ms whatever the block size) beats swapping it out and in from 1-token blocks (512 x 80
    copies each way), and loses to swapping it from 256-token blocks (2 blocks: the bytes alone)."""
    at = roofline_at(opt13b, a100)
    tiny, large = preemption_cost(at(1), 512, 1), preemption_cost(at(256), 512, 256)
    assert tiny.recompute_s == pytest.approx(large.recompute_s) == pytest.approx(0.063, rel=0.1)
    assert tiny.swap_in_out_s > tiny.recompute_s
    assert large.swap_in_out_s < large.recompute_s
    assert large.swap_in_out_s == pytest.approx(2 * (2 * 80 * 5e-6 + 512 * KV_BYTES / A100_PCIE))
    curves = fig19a_frame(at, tokens=512)
    assert list(curves["block_size"]) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert curves["recompute_ms"].nunique() == 1  # flat across block sizes
    swap = curves["swap_in_out_ms"].to_list()
    assert swap == sorted(swap, reverse=True)
    assert (curves["swap_in_ms"] + curves["swap_out_ms"]).to_numpy() == pytest.approx(curves["swap_in_out_ms"])
