"""Expert parallelism's dispatch and combine: every MoE layer's all-gather and reduce-scatter of the ranks' hidden
states, their bytes by hand, priced over the GPUs' link (PCIe on a GPU without NVLink) at the ring formula's
latency or the measured all-reduce's, as a device kind of its own; none for one rank."""
from __future__ import annotations

import pytest

from calibrate.clock.breakdown import KIND_MEANINGS
from calibrate.clock.roofline import RooflineCostModel
from calibrate.hardware.hardware import load_hardware
from calibrate.parts.all_reduce import AllReduceTable
from calibrate.parts.expert_dispatch import dispatch_bytes_per_token
from calibrate.work.expert_parallel import ExpertParallel
from engine.core.batch import BatchShape
from engine.specs.loader import load_model_spec

QWEN3_MOE, RTX_PRO = load_model_spec("qwen3-30b-a3b"), load_hardware("rtx-pro-6000")


def test_a_token_moves_its_hidden_state_out_and_back_to_each_other_rank_every_layer():
    # 48 layers x (all-gather + reduce-scatter) x (N - 1) other ranks x 2,048 wide x 2 bytes
    assert dispatch_bytes_per_token(QWEN3_MOE, ExpertParallel(2, 1), 2) == 48 * 2 * 1 * 2048 * 2 == 393_216
    assert dispatch_bytes_per_token(QWEN3_MOE, ExpertParallel(4, 2), 2) == 48 * 2 * 3 * 2048 * 2
    assert dispatch_bytes_per_token(QWEN3_MOE, ExpertParallel(1, 2), 2) == 0


@pytest.mark.parametrize("decodes", [1, 54, 256])
def test_the_dispatch_is_a_kind_of_its_own_over_pcie_at_the_ring_formulas_latency(decodes):
    cost = RooflineCostModel(QWEN3_MOE, RTX_PRO, expert_parallel=ExpertParallel(2, 1))
    assert RTX_PRO.nvlink_bytes_per_s == RTX_PRO.pcie_bytes_per_s == 64e9  # no NVLink: the sheet gives PCIe's
    parts = cost.breakdown(BatchShape((), (500,) * decodes)).device
    expected = decodes * 393_216 / 64e9 + 48 * 2 * 10e-6
    assert parts["expert_dispatch"] == pytest.approx(expected, rel=1e-12)
    assert list(parts)[:4] == ["linear", "attention", "all_reduce", "expert_dispatch"]
    assert "expert_dispatch" in KIND_MEANINGS


def test_a_measured_all_reduce_gives_each_collective_its_smallest_messages_time():
    table = AllReduceTable({2: ((1024.0, 1 << 20), (25e-6, 80e-6))})
    cost = RooflineCostModel(QWEN3_MOE, RTX_PRO, all_reduce=table, expert_parallel=ExpertParallel(2, 1))
    parts = cost.breakdown(BatchShape((), (500,) * 8)).device
    assert parts["expert_dispatch"] == pytest.approx(8 * 393_216 / 64e9 + 48 * 2 * 25e-6, rel=1e-12)


def test_one_rank_gathers_nothing_and_the_padding_rows_pay_the_dispatch():
    one_rank = RooflineCostModel(QWEN3_MOE, RTX_PRO, tp=2, expert_parallel=ExpertParallel(1, 2))
    assert "expert_dispatch" not in one_rank.breakdown(BatchShape((), (500,) * 8)).device
    two = RooflineCostModel(QWEN3_MOE, RTX_PRO, expert_parallel=ExpertParallel(2, 1))
    parts = two.breakdown(BatchShape((), (500,) * 8)).device
    # the token-dependent device time a CUDA graph's padding rows run through (engine_clock.py) includes it
    assert two.token_time(8, 8) == pytest.approx(parts["linear"] + parts["expert_dispatch"], rel=1e-12)
