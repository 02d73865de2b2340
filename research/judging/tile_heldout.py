"""The tile-aware GEMM form held out on one GPU: each matmul's FLOPs counted on its token rows padded up to a
whole tile (research/judging/transfer_shape.padded_gemms), fitted as the smooth form is, and judged with a value of
`by` (a model, a tensor-parallel degree) held out.

A tensor-core GEMM computes every tile of rows it launches, full or not, so its compute steps where the tokens
cross a multiple of the tile. The tile is either fixed, or chosen (`chosen`) like every other parameter on the
fitted rows alone: for each held-out value, the tile whose fit prices the remaining values best when each of
them is held out in turn; the held-out value's rows enter nothing but its error.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from calibrate.fitting.op_fit import fit_linear
from calibrate.hardware.hardware import HardwareSpec
from calibrate.judging.op_import import Errors, with_errors
from research.judging.transfer_shape import TILES, padded_gemms


@dataclass
class TiledErrors:
    errors: Errors
    tiles: dict  # held-out value -> the tile its fit used


def heldout_at(ops: pd.DataFrame, hw: HardwareSpec, by: str, tile: int) -> Errors:
    """Every row predicted by a fit on the other values of `by`, GEMMs padded to `tile` rows (1: the smooth form,
    the same floats as op_import.heldout)."""
    return _heldout(ops, hw, by, {value: tile for value in ops[by].unique()}).errors


def chosen(ops: pd.DataFrame, hw: HardwareSpec, by: str, tiles=TILES) -> TiledErrors:
    """Every row predicted at the tile chosen without it: the best mean over the other values, each held out."""
    choice = {}
    for value in sorted(ops[by].unique()):
        rest = ops[ops[by] != value]
        means = {tile: float(heldout_at(rest, hw, by, tile).layers["ape"].mean()) for tile in tiles}
        choice[value] = min(means, key=lambda tile: (means[tile], tile))
    return _heldout(ops, hw, by, choice)


def _heldout(ops: pd.DataFrame, hw: HardwareSpec, by: str, tiles: dict) -> TiledErrors:
    predicted, layers = np.zeros(len(ops)), []
    padded = {}
    for value in sorted(ops[by].unique()):
        tile = tiles[value]
        if tile not in padded:
            padded[tile] = padded_gemms(ops, tile)
        frame = padded[tile]
        test = (frame[by] == value).to_numpy()
        fit = fit_linear(frame[~test], hw)
        predicted[test] = fit.predict_ops(frame[test], hw)
        layers.append(fit.predict_layers(frame[test], hw))
    return TiledErrors(with_errors(ops, pd.concat(layers, ignore_index=True), predicted, hw), dict(tiles))
