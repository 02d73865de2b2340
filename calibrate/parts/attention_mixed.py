"""The decodes of a mixed step (a prefill chunk and decodes in one iteration), priced as the one launch vLLM runs.

Which kernel, from the source:
- vLLM 0.19.0 (vllm-project/vllm, tag v0.19.0, commit 2a69949bd) picks FLASH_ATTN first on every CUDA GPU but
  compute capability 10.x (vllm/platforms/cuda.py, _get_backend_priorities), and FlashAttention 2 on any GPU but
  SM90 (FA3) and SM100 (FA4) (vllm/v1/attention/backends/fa_utils.py, get_flash_attn_version): the RTX 4090 (8.9)
  and the RTX PRO 6000 (12.0) run FA2. FlashAttentionImpl.forward (vllm/v1/attention/backends/flash_attn.py)
  makes one flash_attn_varlen_func call over every token of the step, max_seqlen_q the step's longest query.
- FA2's mha_varlen_fwd (vllm-project/flash-attention, csrc/flash_attn/flash_api.cpp, the same at each pin of
  vLLM's build found, 2adfc8c2, 7d346be6 and 28e862d2; which one 0.19.0's wheel built was not found) folds a
  grouped-query layer's query heads into the query length and splits the keys only where max_seqlen_q is 1 ("Only
  apply split-k for decoding"); with a chunk in the step, a paged cache takes the split-KV kernel unsplit
  (num_splits <= 1), Flash_fwd_kernel_traits<d, 64, 128, 4> at head dim 128 (run_mha_fwd_splitkv_dispatch: kBlockM
  64 "Fixed for all head dimensions"), over a grid of ceil(max_seqlen_q / 64) query blocks x sequences x query
  heads (run_flash_splitkv_fwd).
What follows for the decodes (`MixedFit.decode_time`):
- each decode runs one block per query head, reading its whole context of its KV head alone (no split, no
  folding): batch x q blocks, each streaming context x 2 d e bytes, in waves of SMs x blocks_per_sm, a wave
  costing its blocks' stream but at least a floor (a block alone streams slower than its share of the GPU; as
  calibrate/parts/attention_waves.py counts the decode kernel's waves, with one split);
- a group's q / k query heads read the same keys, the heads the grid's slowest dimension: where the group's blocks
  of every sequence span more than one window of co-resident blocks, the later windows reread the keys, from the
  L2 if one window's stream (slots x context x 2 d e) fits in it, else from HBM: (rounds - 1) x the K/V bytes
  more, rounds = clip(q / k x sequences / slots, 1, q / k);
- each of the decode's other query blocks (there are ceil(chunk / 64) per sequence) exits at once: a cost per
  empty block; and the launch, one latency and one per wave.
The bandwidth share is of the query heads' bytes: above 1 where the L2 serves a group's repeated reads. Where a
step's every query is one token long (max_seqlen_q 1) the split decode kernel runs instead: no mixed launch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibrate.hardware.hardware import HardwareSpec
from engine.errors import SpecError
from engine.specs.checks import known_keys, non_negative, number, optional, positive, positive_int

QUERY_ROWS_PER_BLOCK = 64  # the unsplit split-KV kernel's kBlockM, fixed for all head dimensions
# a query head's stream can be at most its group's reads served once: the largest group of a shipped layer shape
MAX_SHARE = 8.0


@dataclass(frozen=True)
class MixedGrid:
    """One layer's heads on one GPU, and one head's K and V bytes per token."""
    q_heads: int
    kv_heads: int
    head_bytes_per_token: float

    @classmethod
    def of_heads(cls, q_heads: int, kv_heads: int, head_dim: int, dtype_bytes: int = 2) -> MixedGrid:
        return cls(q_heads, kv_heads, 2 * head_dim * dtype_bytes)


@dataclass(frozen=True)
class MixedFit:
    """Per-layer latencies (seconds), the shares of HBM bandwidth and the wave geometry (module docstring); a miss
    share None: no L2 term (the measured GPU's sheet gives no l2_cache_bytes, or the fit found no cost in it)."""
    latency_s: float
    wave_latency_s: float
    empty_block_s: float
    bandwidth_efficiency: float  # of the query heads' K/V stream: above 1 where the L2 serves a group's rereads
    # of the K/V bytes the later windows reread past the L2: above 1 where fewer are reread than the count charges
    miss_bandwidth_efficiency: float | None
    blocks_per_sm: int
    floor_shares: tuple[float, ...]  # per blocks on the busiest SM (1..blocks_per_sm): the floor / SMs

    def floors(self, sm_count: int) -> list[float]:
        return [share * sm_count for share in self.floor_shares]

    def decode_time(self, grid: MixedGrid, hw: HardwareSpec, batch, context, chunk) -> np.ndarray:
        """One layer's decodes inside a mixed launch, per row: `batch` decodes of `context` keys beside one prefill
        of `chunk` new tokens (arrays of one length)."""
        batch, context = np.asarray(batch, dtype=float), np.asarray(context, dtype=float)
        sms = sm_count_of(hw)
        equivalent, waves = equivalent_blocks(batch * grid.q_heads, sms, self.blocks_per_sm, self.floors(sms))
        launch = (self.latency_s + waves * self.wave_latency_s
                  + empty_blocks(batch, np.asarray(chunk, dtype=float), grid.q_heads) * self.empty_block_s)
        time = equivalent * context * grid.head_bytes_per_token / (hw.hbm_bytes_per_s * self.bandwidth_efficiency)
        if self.miss_bandwidth_efficiency is not None and hw.l2_cache_bytes is not None:
            reread = extra_reads(grid, sms * self.blocks_per_sm, hw.l2_cache_bytes, batch + 1, context)
            time = time + batch * context * grid.kv_heads * grid.head_bytes_per_token * reread / (
                hw.hbm_bytes_per_s * self.miss_bandwidth_efficiency)
        return time + launch

    def to_dict(self) -> dict:
        return {"latency_s": self.latency_s, "wave_latency_s": self.wave_latency_s,
                "empty_block_s": self.empty_block_s, "bandwidth_efficiency": self.bandwidth_efficiency,
                "miss_bandwidth_efficiency": self.miss_bandwidth_efficiency, "blocks_per_sm": self.blocks_per_sm,
                "floor_shares": list(self.floor_shares)}

    @classmethod
    def from_dict(cls, raw: dict) -> MixedFit:
        return cls(raw["latency_s"], raw["wave_latency_s"], raw["empty_block_s"], raw["bandwidth_efficiency"],
                   raw.get("miss_bandwidth_efficiency"), raw["blocks_per_sm"], tuple(raw["floor_shares"]))


MIXED_KEYS = tuple(MixedFit.__dataclass_fields__)


def sm_count_of(hw: HardwareSpec) -> int:
    if hw.sm_count is None:
        raise ValueError(f"{hw.name}: its sheet gives no sm_count, so a mixed step's launch cannot be counted in waves")
    return hw.sm_count


def equivalent_blocks(blocks, sm_count: int, blocks_per_sm: int, floors: list[float]):
    """(blocks' worth of stream the waves take, waves) of a launch of `blocks` unsplit blocks: each full wave its
    slots (or the last floor), the last its blocks but at least the floor of its busiest SM's count. Elementwise;
    calibrate.clock.roofline_terms.mixed_equivalent_float takes the same steps on one launch's integers."""
    slots = sm_count * blocks_per_sm
    waves = np.ceil(np.asarray(blocks, dtype=float) / slots)
    tail = blocks - (waves - 1) * slots
    busiest = np.minimum(np.ceil(tail / sm_count), blocks_per_sm).astype(int)
    return (waves - 1) * max(slots, floors[-1]) + np.maximum(tail, np.asarray(floors)[busiest - 1]), waves


def empty_blocks(batch, chunk, q_heads: int):
    """The query blocks of the decodes beside one prefill of `chunk` tokens that exit at once: every sequence gets
    the chunk's ceil(chunk / 64), a decode uses one."""
    return (np.ceil(chunk / QUERY_ROWS_PER_BLOCK) - 1) * batch * q_heads


def group_rounds(grid: MixedGrid, slots: int, sequences):
    """The windows of co-resident blocks a group's query heads span, for a launch of `sequences` sequences."""
    group = grid.q_heads / grid.kv_heads
    return np.clip(group * np.asarray(sequences, dtype=float) / slots, 1.0, group)


def extra_reads(grid: MixedGrid, slots: int, l2_bytes: int, sequences, context):
    """How many more times than once each decode's K/V is read from HBM: the later windows' rereads, where one
    window's stream outgrows the L2."""
    misses = np.asarray(context, dtype=float) > miss_tokens(grid, slots, l2_bytes)
    return np.where(misses, group_rounds(grid, slots, sequences) - 1.0, 0.0)


def miss_tokens(grid: MixedGrid, slots: int, l2_bytes: int) -> float:
    """The context past which a window of `slots` blocks streams more than the L2 holds."""
    return l2_bytes / (slots * grid.head_bytes_per_token)


def through_l2(value, source: str, key: str) -> float:
    """A share of HBM bandwidth that the L2 can lift above 1, up to MAX_SHARE."""
    return number(value, source, key, low=0, low_open=True, high=MAX_SHARE)


def check_mixed(mixed, source: str) -> None:
    """A profile's attention.mixed (MixedFit.to_dict), where one was fitted: each key named where it is wrong."""
    if mixed is None:
        return
    if not isinstance(mixed, dict):
        raise SpecError(source, "attention.mixed", f"must map {list(MIXED_KEYS)} (calibrate/parts/attention_mixed.py)")
    known_keys(mixed, MIXED_KEYS, source, "attention.mixed")
    for key in ("latency_s", "wave_latency_s", "empty_block_s"):
        non_negative(mixed.get(key), source, f"attention.mixed.{key}")  # seconds per layer, per wave, per block
    through_l2(mixed.get("bandwidth_efficiency"), source, "attention.mixed.bandwidth_efficiency")
    optional(through_l2, mixed.get("miss_bandwidth_efficiency"), source, "attention.mixed.miss_bandwidth_efficiency")
    per_sm = positive_int(mixed.get("blocks_per_sm"), source, "attention.mixed.blocks_per_sm")
    floors = mixed.get("floor_shares")
    if not isinstance(floors, list) or len(floors) != per_sm:
        raise SpecError(source, "attention.mixed.floor_shares",
                        f"must list one share of the SM count per block an SM holds ({per_sm}), got {floors!r}")
    for i, floor in enumerate(floors):
        positive(floor, source, f"attention.mixed.floor_shares[{i}]")
