"""The mixed step's decode term (calibrate/parts/attention_mixed.py) fitted on measured mixed rows.

Each row's time is its prefill part, as the pure rows' fit prices it (the prefill of a mixed step is priced so), plus
the decode term: NNLS on relative error for its latencies and shares, at each candidate of its integers (blocks per
SM, each floor in blocks; calibrate/parts/attention_waves.py's grid), the candidate with the least mean |relative
error| over the rows fitted kept. The L2 term is a column only where the measured GPU's sheet gives its L2.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from calibrate.hardware.hardware import HardwareSpec
from calibrate.maths.nnls import nnls
from calibrate.parts.attention_mixed import (
    MixedFit,
    MixedGrid,
    empty_blocks,
    equivalent_blocks,
    extra_reads,
    sm_count_of,
)
from calibrate.parts.attention_waves import BLOCKS_PER_SM, candidate_floors

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class MixedRows:
    """One layer shape's mixed rows (chunk, cached, batch, context, time_s) and each row's prefill part, seconds."""
    rows: pd.DataFrame
    grid: MixedGrid
    prefill_s: np.ndarray


@dataclass(frozen=True)
class _Joined:
    """Every part's rows as arrays, in the parts' order."""
    batch: np.ndarray
    context: np.ndarray
    time_s: np.ndarray
    prefill_s: np.ndarray
    empty: np.ndarray  # empty query blocks
    q_heads: np.ndarray
    head_bytes: np.ndarray


def _joined(parts: list[MixedRows], hw: HardwareSpec) -> tuple[_Joined, dict[int, np.ndarray]]:
    """The rows as arrays, and the K/V bytes each row rereads from HBM at each blocks_per_sm (none without an L2)."""
    def cat(values) -> np.ndarray:
        return np.concatenate([np.asarray(v, dtype=float) for v in values])

    batch = cat(p.rows["batch"] for p in parts)
    context = cat(p.rows["context"] for p in parts)
    joined = _Joined(batch, context, cat(p.rows["time_s"] for p in parts), cat(p.prefill_s for p in parts),
                     cat(empty_blocks(p.rows["batch"].to_numpy(float), p.rows["chunk"].to_numpy(float),
                                      p.grid.q_heads) for p in parts),
                     cat(np.full(len(p.rows), p.grid.q_heads) for p in parts),
                     cat(np.full(len(p.rows), p.grid.head_bytes_per_token) for p in parts))
    rereads = {}  # per blocks_per_sm: the bytes read once more per round past the L2
    if hw.l2_cache_bytes is not None:
        sms = sm_count_of(hw)
        for per_sm in BLOCKS_PER_SM:
            rereads[per_sm] = cat(
                p.rows["batch"].to_numpy(float) * p.rows["context"].to_numpy(float) * p.grid.kv_heads
                * p.grid.head_bytes_per_token
                * extra_reads(p.grid, sms * per_sm, hw.l2_cache_bytes, p.rows["batch"].to_numpy(float) + 1,
                              p.rows["context"]) for p in parts)
    return joined, rereads


def _nnls_on_gram(gram: np.ndarray, moments: np.ndarray) -> np.ndarray:
    """argmin ||x c - y|| over c >= 0, given x.T @ x and x.T @ y: NNLS on a square factor of the Gram matrix, the
    same minimiser as on every row (a fit tries hundreds of candidates over 10^5 rows)."""
    scale = np.sqrt(np.diag(gram))
    scale[scale == 0] = 1.0
    weights, vectors = np.linalg.eigh(gram / np.outer(scale, scale))
    roots = np.sqrt(np.clip(weights, 0.0, None))
    inverse = np.divide(1.0, roots, out=np.zeros_like(roots), where=roots > roots.max() * 1e-12)
    factor = roots[:, None] * vectors.T  # factor.T @ factor is the scaled Gram matrix
    return nnls(factor, inverse * (vectors.T @ (moments / scale))) / scale


class _Search:
    """The candidates tried, each fitted by NNLS on relative error and judged by its mean |relative error|; the
    best kept. The columns that do not change with the floors are divided by the times once; the stream's column
    is its blocks' worth (few distinct launches) times a fixed column."""

    def __init__(self, rows: _Joined, rereads: dict[int, np.ndarray], hw: HardwareSpec):
        self.rows, self.hw, self.sms = rows, hw, sm_count_of(hw)
        self.blocks, self.launch = np.unique(rows.batch * rows.q_heads, return_inverse=True)
        time_s = rows.time_s
        self.goal = (time_s - rows.prefill_s) / time_s  # the relative error is prefill / t + x / t @ c - 1
        self.stream = rows.context * rows.head_bytes / hw.hbm_bytes_per_s / time_s
        self.fixed = {per_sm: np.column_stack([np.ones(len(time_s)) / time_s, rows.empty / time_s]
                                              + ([rereads[per_sm] / hw.hbm_bytes_per_s / time_s] if rereads else []))
                      for per_sm in BLOCKS_PER_SM}
        self.with_l2 = bool(rereads)
        self.best: tuple[float, MixedFit] | None = None

    def consider(self, per_sm: int, floors: tuple[int, ...]) -> None:
        equivalent, waves = equivalent_blocks(self.blocks, self.sms, per_sm, [float(f) for f in floors])
        x = np.column_stack([self.fixed[per_sm], waves[self.launch] / self.rows.time_s,
                             equivalent[self.launch] * self.stream])
        coefficients = _nnls_on_gram(x.T @ x, x.T @ self.goal)
        if coefficients[-1] <= 0:
            return
        error = float(np.mean(np.abs(x @ coefficients - self.goal)))
        if self.best is None or error < self.best[0]:
            self.best = (error, self._fit(coefficients, per_sm, floors))

    def _fit(self, coefficients: np.ndarray, per_sm: int, floors: tuple[int, ...]) -> MixedFit:
        latency, empty = float(coefficients[0]), float(coefficients[1])
        miss = float(coefficients[2]) if self.with_l2 else 0.0
        wave, per_stream = float(coefficients[-2]), float(coefficients[-1])
        return MixedFit(latency, wave, empty, 1.0 / per_stream, 1.0 / miss if miss > 0 else None, per_sm,
                        tuple(k / self.sms for k in floors))


def fit_mixed(parts: list[MixedRows], hw: HardwareSpec) -> MixedFit:
    """The decode term of a mixed launch, fitted on every part's rows (module docstring)."""
    search = _Search(*_joined(parts, hw), hw)
    sms = search.sms
    coarse = max(1, sms // 9)
    for per_sm in BLOCKS_PER_SM:
        for floors in candidate_floors(per_sm, sms, coarse):
            if list(floors) == sorted(floors):  # a busier SM's floor is no lower
                search.consider(per_sm, floors)
    if search.best is None:
        raise ValueError("the mixed rows show no cost growing with the decodes' K/V read")
    for step, span in ((max(1, coarse // 4), coarse), (1, max(1, coarse // 4))):
        chosen = search.best[1]
        centre = tuple(round(share * sms) for share in chosen.floor_shares)
        for floors in candidate_floors(chosen.blocks_per_sm, sms, step, centre, span):
            search.consider(chosen.blocks_per_sm, floors)
    return search.best[1]
