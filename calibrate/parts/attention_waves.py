"""Decode attention counted in waves of the kernel's thread blocks over the GPU's SMs.

The measured decode kernel is FlashAttention 2's paged split-KV kernel (flash_attn_with_kvcache). How it launches
is read from Dao-AILab/flash-attention, csrc/flash_attn/flash_api.cpp at commit
0251105a2fb19d2957484b7f023cd8c115286ced (num_splits_heuristic, set_params_splitkv, mha_fwd_kvcache):
- a decode of a grouped-query layer swaps the query heads of each KV head into the query length
  (seqlenq_ngroups_swapped), so the grid has one block per (sequence, KV head, 64 query rows, split);
- the keys are cut into tiles of 256 (head dim <= 64), 128 (<= 128) or 64 tokens, counted over the block
  table's width (the launch's max_seqlen_k: a paged cache's blocks per sequence x page size), not each
  sequence's own length;
- num_splits_heuristic picks the splits of the keys: one if the blocks already fill 0.8 of the SMs, else the
  fewest splits (of those that change the tiles per split, at most 128, the SM count and the tiles) whose wave
  efficiency (blocks / (waves x SMs)) is within 0.85 of the best.
  The SM count the heuristic is given is multiProcessorCount before, and multiProcessorCount * 2 since,
  commit 9eb3d099c1fb806b4f6351a7b18f2e7731bcec64 (2024-04-07: "we're using 128 threads per block", two
  blocks to an SM). Which the measured kernel ran is a fitted integer
  (heuristic_sm_multiple): on Vidur's A100 table the splits stop at batch 22 = 0.8 x 108 / 4 KV heads, the
  older count.

The time of one layer's decode (`decode_time`): latency + a combine latency where the keys are split + a latency
per wave of the launched grid + the bytes of the busiest blocks' waves at a share of HBM bandwidth. Each wave of
blocks_per_sm x SMs slots takes as long as its blocks' K/V read at that bandwidth, but no less than a floor of
blocks' worth: a wave whose busiest SM runs j blocks takes at least floor_shares[j-1] x SMs blocks' time, since a
block alone reads more slowly than its share of the whole GPU (on the A100 the blocks spilling into a new wave
cost 0.37 of a full one, not all of it, nor the 4/108 a pure bandwidth model gives them). With every floor at
the wave's slots this is wave efficiency = grid blocks / (waves x SMs x blocks per SM) exactly. A split's
blocks read their tiles of the keys (the last of a context the rest), empty splits none.

The fit: NNLS on relative error for the latencies and the bandwidth (calibrate/maths/nnls.py), over a small grid of
the integers (the heuristic's SM multiple, blocks per SM, each floor in blocks) chosen on the rows fitted only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from calibrate.maths.nnls import relative_nnls

if TYPE_CHECKING:
    import pandas as pd

    from calibrate.hardware.hardware import HardwareSpec

MAX_SPLITS = 128
QUERY_ROWS_PER_BLOCK = 64  # the split kernel's kBlockM: a grouped-query decode's query heads per block
SPLIT_THRESHOLD = 0.8  # blocks filling this share of the SMs are not split
NEAR_BEST = 0.85  # the fewest splits within this share of the best wave efficiency
HEURISTIC_SM_MULTIPLES = (1, 2)
BLOCKS_PER_SM = (1, 2)
FLOOR_SPAN = 2  # floors searched up to FLOOR_SPAN x the SMs per block an SM holds


def key_tile(head_dim: int) -> int:
    """Keys per tile of the split kernel (set_params_splitkv's block_n)."""
    return 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64


def num_splits(blocks: int, sms: int, key_tiles: int, max_splits: int = MAX_SPLITS) -> int:
    """FlashAttention 2's num_splits_heuristic: `blocks` = batch x heads x query blocks, `sms` the count it is
    given, `key_tiles` the launch's tiles of keys."""
    if blocks >= SPLIT_THRESHOLD * sms:
        return 1
    most = min(max_splits, sms, key_tiles)

    def eligible(splits: int) -> bool:  # a split count that does not change the tiles per split is the smaller one
        return splits == 1 or -(-key_tiles // splits) != -(-key_tiles // (splits - 1))

    efficiency = {}
    for splits in range(1, most + 1):
        if eligible(splits):
            waves = blocks * splits / sms
            efficiency[splits] = waves / math.ceil(waves)
    best = max(efficiency.values())
    return next(s for s, e in efficiency.items() if e >= NEAR_BEST * best)


@dataclass(frozen=True)
class DecodeGrid:
    """One layer's decode launch on one GPU: blocks per sequence before splitting, the key tile, and the bytes of
    one head's K and V per token."""
    heads: int  # KV heads x blocks of their query heads
    tile: int
    head_bytes_per_token: float

    @classmethod
    def of_heads(cls, q_heads: int, kv_heads: int, head_dim: int, dtype_bytes: int = 2) -> DecodeGrid:
        groups = max(q_heads // kv_heads, 1)
        return cls(kv_heads * -(-groups // QUERY_ROWS_PER_BLOCK), key_tile(head_dim), 2 * head_dim * dtype_bytes)


@dataclass(frozen=True)
class Launch:
    """What a batch's decode launches: the splits of the keys, the tiles each split reads, and its waves."""
    splits: int
    tiles_per_split: int
    waves: int


@dataclass(frozen=True)
class WaveFit:
    """Per-layer latencies (seconds), the share of HBM bandwidth, and the wave geometry (module docstring)."""
    latency_s: float
    split_latency_s: float  # the combine kernel, where the keys are split
    wave_latency_s: float  # per wave of the launched grid
    bandwidth_efficiency: float
    blocks_per_sm: int
    floor_shares: tuple[float, ...]  # per blocks on the busiest SM (1..blocks_per_sm): the floor / SMs
    heuristic_sm_multiple: int  # the SM count num_splits_heuristic is given, in SMs
    launch_tokens: int  # the block table's width the launch counts tiles over

    def launch(self, grid: DecodeGrid, sm_count: int, batch: int) -> Launch:
        tiles = -(-self.launch_tokens // grid.tile)
        splits = num_splits(batch * grid.heads, self.heuristic_sm_multiple * sm_count, tiles)
        slots = sm_count * self.blocks_per_sm
        return Launch(splits, -(-tiles // splits), -(-(batch * grid.heads * splits) // slots))

    def launch_seconds(self, launch: Launch) -> float:
        """The latencies of one layer's launch: its own, the combine's where split, and one per wave."""
        return (self.latency_s + (self.split_latency_s if launch.splits > 1 else 0.0)
                + launch.waves * self.wave_latency_s)

    def floors(self, sm_count: int) -> list[float]:
        return [share * sm_count for share in self.floor_shares]

    def read_tokens(self, grid: DecodeGrid, sm_count: int, batch: int, launch: Launch, mean_context):
        """Tokens of one head's K/V whose read at the fitted bandwidth takes as long as the waves of busy blocks,
        for `batch` sequences of `mean_context` tokens each (a number or an array). The same steps as
        calibrate.clock.roofline_terms.wave_tokens_float takes on floats (a test holds the two equal to the bit)."""
        return wave_tokens(mean_context, batch * grid.heads, grid.tile, launch.splits, launch.tiles_per_split,
                            sm_count, self.blocks_per_sm, np.asarray(self.floors(sm_count)))

    def decode_time(self, grid: DecodeGrid, hw: HardwareSpec, batch, context) -> np.ndarray:
        """One layer's decode attention, per row of batch sizes and contexts (arrays of one length)."""
        batch, context = np.asarray(batch, dtype=int), np.asarray(context, dtype=float)
        sms = _sm_count(hw)
        out = np.zeros(len(batch))
        for size in np.unique(batch):
            rows = batch == size
            launch = self.launch(grid, sms, int(size))
            out[rows] = self.launch_seconds(launch) + self.read_tokens(grid, sms, int(size), launch, context[rows]) * (
                grid.head_bytes_per_token / (hw.hbm_bytes_per_s * self.bandwidth_efficiency))
        return out

    def to_dict(self) -> dict:
        return {"latency_s": self.latency_s, "split_latency_s": self.split_latency_s,
                "wave_latency_s": self.wave_latency_s, "bandwidth_efficiency": self.bandwidth_efficiency,
                "blocks_per_sm": self.blocks_per_sm, "floor_shares": list(self.floor_shares),
                "heuristic_sm_multiple": self.heuristic_sm_multiple, "launch_tokens": self.launch_tokens}

    @classmethod
    def from_dict(cls, raw: dict) -> WaveFit:
        return cls(raw["latency_s"], raw["split_latency_s"], raw["wave_latency_s"], raw["bandwidth_efficiency"],
                   raw["blocks_per_sm"], tuple(raw["floor_shares"]), raw["heuristic_sm_multiple"],
                   raw["launch_tokens"])


WAVE_KEYS = tuple(WaveFit.__dataclass_fields__)


def wave_tokens(mean_context, blocks_per_split, tile: int, splits, tiles_per_split, sm_count: int,
                 blocks_per_sm: int, floors: np.ndarray):
    """WaveFit.read_tokens, elementwise: the launch's numbers may be arrays too (one per row, as the fit has them)."""
    tiles = np.ceil(mean_context / tile)
    busy = np.maximum(np.minimum(np.ceil(tiles / tiles_per_split), splits), 1)
    blocks = blocks_per_split * busy
    slots = sm_count * blocks_per_sm
    waves = np.ceil(blocks / slots)
    tail = blocks - (waves - 1) * slots
    busiest = np.minimum(np.ceil(tail / sm_count), blocks_per_sm).astype(int)
    equivalent = (waves - 1) * max(slots, floors[-1]) + np.maximum(tail, floors[busiest - 1])
    per_block = np.maximum(np.minimum(mean_context, tiles_per_split * tile), mean_context / splits)
    return equivalent * per_block


def _sm_count(hw: HardwareSpec) -> int:
    if hw.sm_count is None:
        raise ValueError(f"{hw.name}: its sheet gives no sm_count, so decode attention cannot be counted in waves")
    return hw.sm_count


def candidate_floors(blocks_per_sm: int, sm_count: int, step: int, around=None, span: int = 0):
    """Floors in blocks per level: a coarse grid, or the grid at `step` within `span` of `around`."""
    levels = []
    for level in range(1, blocks_per_sm + 1):
        top = FLOOR_SPAN * level * sm_count
        if around is None:
            levels.append(range(step, top + 1, step))
        else:
            centre = around[level - 1]
            levels.append(range(max(1, centre - span), min(top, centre + span) + 1, step))
    grid = [()]
    for values in levels:
        grid = [floors + (k,) for floors in grid for k in values]
    return grid


def fit_waves(decode: pd.DataFrame, grid: DecodeGrid, hw: HardwareSpec, launch_tokens: int) -> WaveFit:
    """The wave model fitted to the decode rows given (batch, context, time_s) of one layer shape."""
    return fit_waves_on([(decode, grid)], hw, launch_tokens)


def fit_waves_on(parts: list[tuple[pd.DataFrame, DecodeGrid]], hw: HardwareSpec, launch_tokens: int) -> WaveFit:
    """The wave model fitted to the decode rows of one or several layer shapes (each rows' own grid): NNLS for the
    latencies and the bandwidth at each candidate of the integers, the candidate with the least mean |relative
    error| kept."""
    sms = _sm_count(hw)
    batch, context, time_s = (np.concatenate([d[c].to_numpy(kind) for d, _ in parts])
                              for c, kind in (("batch", int), ("context", float), ("time_s", float)))
    heads, tile, head_bytes = (np.concatenate([np.full(len(d), getattr(g, name)) for d, g in parts])
                               for name in ("heads", "tile", "head_bytes_per_token"))
    best: tuple[float, WaveFit] | None = None
    launches = {(multiple, per_sm): _parts_launches(WaveFit(0.0, 0.0, 0.0, 1.0, per_sm, (1.0,) * per_sm, multiple,
                                                            launch_tokens), parts, sms)
                for multiple in HEURISTIC_SM_MULTIPLES for per_sm in BLOCKS_PER_SM}

    def consider(multiple: int, per_sm: int, floors: tuple[int, ...]) -> None:
        nonlocal best
        splits, tiles_per_split, waves = launches[multiple, per_sm]
        read = wave_tokens(context, batch * heads, tile, splits, tiles_per_split, sms, per_sm,
                            np.asarray(floors, dtype=float))
        columns = np.column_stack([np.ones(len(batch)), (splits > 1).astype(float), waves,
                                   read * head_bytes / hw.hbm_bytes_per_s])
        coefficients = relative_nnls(columns, time_s)
        if coefficients[3] <= 0:
            return
        error = float(np.mean(np.abs(columns @ coefficients - time_s) / time_s))
        if best is None or error < best[0]:
            latency, split, wave, per_peak = (float(c) for c in coefficients)
            best = (error, WaveFit(latency, split, wave, 1.0 / per_peak, per_sm, tuple(k / sms for k in floors),
                                   multiple, launch_tokens))

    coarse = max(1, sms // 9)
    for multiple, per_sm in launches:
        for floors in candidate_floors(per_sm, sms, coarse):
            consider(multiple, per_sm, floors)
    if best is None:
        raise ValueError("the decode rows show no cost growing with the K/V read")
    for step, span in ((max(1, coarse // 4), coarse), (1, max(1, coarse // 4))):
        chosen = best[1]
        centre = tuple(round(share * sms) for share in chosen.floor_shares)
        for floors in candidate_floors(chosen.blocks_per_sm, sms, step, centre, span):
            consider(chosen.heuristic_sm_multiple, chosen.blocks_per_sm, floors)
    return best[1]


def _parts_launches(fit: WaveFit, parts: list[tuple[pd.DataFrame, DecodeGrid]], sms: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """_row_launches of every part's rows, in the parts' order."""
    rows = [_row_launches(fit, grid, sms, decode["batch"].to_numpy(int)) for decode, grid in parts]
    return tuple(np.concatenate([r[i] for r in rows]) for i in range(3))  # type: ignore[return-value]


def _row_launches(fit: WaveFit, grid: DecodeGrid, sms: int, batch: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the splits, tiles per split and launched waves of its batch's launch (the floors play no part)."""
    splits, tiles_per_split, waves = (np.zeros(len(batch), dtype=int) for _ in range(3))
    for size in np.unique(batch):
        rows = batch == size
        launch = fit.launch(grid, sms, int(size))
        splits[rows], tiles_per_split[rows], waves[rows] = launch.splits, launch.tiles_per_split, launch.waves
    return splits, tiles_per_split, waves
