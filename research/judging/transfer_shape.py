"""Two ways to carry the measured kernels' shape (their steps between neighbouring batch sizes) from one GPU
to another, judged as calibrate/judging/transfer_two_gpus.py judges the smooth fit: the target's tables enter
nothing but the errors.

- **Ratio carry**: for a (model, tp, tokens, operation) the source GPU measured, the target's time is the
  source's measured time x the source fit's price on the target's sheet / its price on the source's sheet, so
  the source's residual (its steps) comes along as a factor. A row the source never measured falls back to
  the fit; a model it never measured is priced as the fit prices it.
- **Tile-aware GEMM roofline**: a GEMM's FLOPs counted on its token rows padded up to a multiple of a tile
  (the rows a tensor-core kernel computes whatever the batch), fitted on the source GPU as today and carried
  by spec sheet. The tile is the one that prices the source GPU's own held-out models best: it is chosen,
  like every parameter, on the source alone.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from calibrate.fitting.op_fit import fit_linear, today_roofline
from calibrate.judging.transfer_two_gpus import GpuTables, HoldOut, iterations, operations
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.transfer import regimes_of
from calibrate.tables.table_models import layers_of
from calibrate.work.layer_ops import GEMMS, ITERATION_ELEMENTWISE

OP_KEY = ["model", "tp", "tokens", "op"]
ITERATION_KEY = ["model", "tp", "tokens"]
TILES = (1, 16, 32, 64, 128)  # rows: 1 is today's fit; the rest the M tiles of fp16 tensor-core GEMM kernels


def padded_gemms(ops: pd.DataFrame, tile: int) -> pd.DataFrame:
    """`ops` with each GEMM's FLOPs counted on its tokens rounded up to a multiple of `tile` (weight bytes and
    elementwise rows as they are): FLOPs per token x the padded tokens."""
    if tile == 1:
        return ops
    gemm = ops["op"].isin(GEMMS).to_numpy()
    tokens = ops["tokens"].to_numpy(float)
    padded = np.ceil(tokens / tile) * tile
    flops = ops["flops"].to_numpy(float).copy()
    flops[gemm] = flops[gemm] / tokens[gemm] * padded[gemm]
    return ops.assign(flops=flops)


def padded(gpu: GpuTables, tile: int) -> GpuTables:
    return GpuTables(gpu.hw, padded_gemms(gpu.ops, tile), gpu.layers)


def own_models_error(gpu: GpuTables, tile: int) -> tuple[float, float]:
    """(mean, worst) |error| per iteration on `gpu`'s own tables, each model priced by a fit on the others."""
    tiled = padded(gpu, tile)
    frames = []
    for model in tiled.ops["model"].unique():
        test = (tiled.ops["model"] == model).to_numpy()
        fit = fit_linear(tiled.ops[~test], gpu.hw)
        frames.append(iterations(fit, GpuTables(gpu.hw, tiled.ops[test], gpu.layers)))
    ape = pd.concat(frames, ignore_index=True)["ape"]
    return float(ape.mean()), float(ape.max())


def choose_tile(gpu: GpuTables, tiles=TILES) -> tuple[int, dict[int, tuple[float, float]]]:
    """The tile whose fit prices `gpu`'s own held-out models best (lowest mean), and each tile's (mean, worst)."""
    errors = {tile: own_models_error(gpu, tile) for tile in tiles}
    return min(errors, key=lambda tile: errors[tile][0]), errors


def tile_hold_out(train: GpuTables, test: GpuTables, tile: int) -> HoldOut:
    """`train` alone fitted with its GEMMs padded to `tile`, carried to `test`'s sheet at the same tile."""
    train_t, test_t = padded(train, tile), padded(test, tile)
    fit, roofline = fit_linear(train_t.ops, train.hw), today_roofline()
    return HoldOut(f"{train.hw.name} -> {test.hw.name}", fit, iterations(fit, test_t), iterations(roofline, test),
                   operations(fit, test_t), operations(roofline, test))


def ratio_prices(fit: LinearFit, source: GpuTables, target: GpuTables) -> np.ndarray:
    """Each of `target`'s operations: the source's measured time x fit(target sheet) / fit(source sheet) where
    the source measured that (model, tp, tokens, op), else the fit on the target's sheet."""
    on_source = source.ops.set_index(OP_KEY)
    factor = fit.predict_ops(source.ops, target.hw) / fit.predict_ops(source.ops, source.hw)
    carried = pd.Series(on_source["time_s"].to_numpy() * factor, index=on_source.index)
    at = pd.MultiIndex.from_frame(target.ops[OP_KEY])
    prices = fit.predict_ops(target.ops, target.hw)
    measured = at.isin(carried.index)
    prices[measured] = carried.reindex(at[measured]).to_numpy()
    return prices


def summed_iterations(ops: pd.DataFrame, prices: np.ndarray, gpu: GpuTables) -> pd.DataFrame:
    """Each (model, tp, tokens) as one iteration (layers x a layer's operations + the embedding), measured and
    at `prices` per operation, summed operation by operation; columns as transfer_two_gpus.iterations'."""
    frame = ops.assign(predicted_s=prices)
    once = frame["op"].isin(ITERATION_ELEMENTWISE).to_numpy()
    layer = frame[~once].groupby(ITERATION_KEY, as_index=False)[["time_s", "predicted_s"]].sum()
    per_iteration = frame[once].groupby(ITERATION_KEY, as_index=False)[["time_s", "predicted_s"]].sum()
    both = layer.merge(per_iteration, on=ITERATION_KEY, how="left", suffixes=("", "_once")).fillna(0.0)
    count = np.array([layers_of(m, "per-operation tables", gpu.layers) for m in both["model"]], dtype=float)
    measured = count * both["time_s"] + both["time_s_once"]
    predicted = count * both["predicted_s"] + both["predicted_s_once"]
    return pd.DataFrame({"model": both["model"], "tp": both["tp"], "tokens": both["tokens"], "time_s": measured,
                         "predicted_s": predicted, "ape": np.abs(predicted - measured) / measured,
                         "regime": regimes_of(both["tokens"], gpu.hw, latency=True)})


def ratio_hold_out(train: GpuTables, test: GpuTables) -> HoldOut:
    """The ratio carry from `train` to `test`: `train`'s tables and fit are its input, `test`'s only scored.
    A model `train` never measured is priced by the fit, as transfer_two_gpus.hold_out prices it."""
    fit, roofline = fit_linear(train.ops, train.hw), today_roofline()
    covered = test.ops["model"].isin(train.ops["model"].unique()).to_numpy()
    prices = ratio_prices(fit, train, test)
    carried = summed_iterations(test.ops[covered], prices[covered], test)
    fallback = iterations(fit, GpuTables(test.hw, test.ops[~covered], test.layers)) if (~covered).any() else None
    ours = pd.concat([carried, fallback], ignore_index=True) if fallback is not None else carried
    roof = iterations(roofline, test).set_index(ITERATION_KEY).loc[pd.MultiIndex.from_frame(ours[ITERATION_KEY])]
    ours_ops = test.ops.assign(predicted_s=prices, ape=np.abs(prices - test.ops["time_s"]) / test.ops["time_s"],
                               regime=regimes_of(test.ops["tokens"], test.hw, latency=True))
    return HoldOut(f"{train.hw.name} -> {test.hw.name}", fit, ours, roof.reset_index(), ours_ops,
                   operations(roofline, test))


def residual_correlation(a: GpuTables, b: GpuTables) -> dict[str, float]:
    """Per operation, the correlation of log(measured / own fit) on `a` and on `b` at the rows both measured:
    near 1 where the two GPUs' steps fall at the same batch sizes (what a ratio carry needs), near 0 where not."""
    def residuals(gpu: GpuTables) -> pd.DataFrame:
        fit = fit_linear(gpu.ops, gpu.hw)
        return gpu.ops[OP_KEY].assign(residual=np.log(gpu.ops["time_s"] / fit.predict_ops(gpu.ops, gpu.hw)))

    both = residuals(a).merge(residuals(b), on=OP_KEY, suffixes=("_a", "_b"))
    out = {op: float(np.corrcoef(rows["residual_a"], rows["residual_b"])[0, 1])
           for op, rows in both.groupby("op", sort=False)}
    gemm = both[both["op"].isin(GEMMS)]
    out["all GEMMs"] = float(np.corrcoef(gemm["residual_a"], gemm["residual_b"])[0, 1])
    return out
