"""The transfer judged on per-operation tables of several GPUs: a fit on some GPUs alone predicts another's
tables, per regime of the target's own ridge, beside the spec-sheet roofline.

Each held-out GPU is one the fit never saw: its rows enter nothing but the errors. Errors are per iteration
(a model's layers x one layer's non-attention operations + the embedding lookup, at each token count and
tensor-parallel degree) and per operation. The regimes are calibrate/parts/transfer.py's four (FINE_REGIMES):
fixed latency, memory-bound decode, the ridge, compute-bound prefill. With two GPUs, each is held out from a fit
on the other (`both_ways`); a fit may be made on several GPUs together (`hold_out`), and
research/judging/gpu_holdout.py judges every carry on each of several GPUs held out in turn.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from calibrate.fitting.op_fit import fit_linear_on, today_roofline
from calibrate.hardware.hardware import HardwareSpec
from calibrate.judging.regime_errors import RegimeError
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.transfer import FINE_REGIMES, regimes_of
from calibrate.tables.table_models import layers_of
from calibrate.work.layer_ops import ITERATION_ELEMENTWISE

REFERENCE_MODEL = "meta-llama_Llama-2-7b-hf"  # the decode target's model: LLaMA-2-7B at tp 1, 1-1,024 tokens
REFERENCE_TP, REFERENCE_MAX_TOKENS = 1, 1024


@dataclass(frozen=True)
class GpuTables:
    """One GPU's per-operation rows (calibrate/tables/op_table.py, every model's together) and its spec sheet."""
    hw: HardwareSpec
    ops: pd.DataFrame
    layers: dict[str, int] | None = None  # label -> layers; None: calibrate/tables/table_models.LAYERS
    # kernels this GPU ran fused into another's and timed in that one's rows (vLLM's residual add inside the next
    # RMSNorm): a fit that prices them apart is charged them on this GPU's iterations, as the cost model would
    # charge them, against no measured time of their own; never fitted on
    fused: pd.DataFrame | None = None

    @property
    def judged_ops(self) -> pd.DataFrame:
        """The rows an iteration is priced on: the measured ones and the fused kernels'."""
        return self.ops if self.fused is None else pd.concat([self.ops, self.fused], ignore_index=True)


def iterations(fit: LinearFit, gpu: GpuTables) -> pd.DataFrame:
    """Each (model, tp, tokens) of `gpu`'s tables as one iteration, measured and as `fit` prices it on `gpu`'s
    spec sheet: time_s, predicted_s, ape and the regime by `gpu`'s ridge."""
    layer = fit.predict_layers(gpu.judged_ops, gpu.hw)
    once = gpu.ops[gpu.ops["op"].isin(ITERATION_ELEMENTWISE)]
    once = once.assign(predicted_s=fit.predict_ops(once, gpu.hw)).groupby(
        ["model", "tp", "tokens"], as_index=False)[["time_s", "predicted_s"]].sum()
    frame = layer.merge(once, on=["model", "tp", "tokens"], how="left", suffixes=("", "_once")).fillna(0.0)
    count = np.array([layers_of(m, "per-operation tables", gpu.layers) for m in frame["model"]], dtype=float)
    measured = count * frame["time_s"] + frame["time_s_once"]
    predicted = count * frame["predicted_s"] + frame["predicted_s_once"]
    return pd.DataFrame({"model": frame["model"], "tp": frame["tp"], "tokens": frame["tokens"],
                         "time_s": measured, "predicted_s": predicted,
                         "ape": np.abs(predicted - measured) / measured,
                         "regime": regimes_of(frame["tokens"], gpu.hw, latency=True)})


def operations(fit: LinearFit, gpu: GpuTables) -> pd.DataFrame:
    """Each measured operation of `gpu`'s tables with `fit`'s price and its |error|; regime by `gpu`'s ridge."""
    predicted = fit.predict_ops(gpu.ops, gpu.hw)
    return gpu.ops.assign(predicted_s=predicted, ape=np.abs(predicted - gpu.ops["time_s"]) / gpu.ops["time_s"],
                          regime=regimes_of(gpu.ops["tokens"], gpu.hw, latency=True))


@dataclass(frozen=True)
class HoldOut:
    """A fit on `train`'s GPUs alone priced on `test`'s tables, with the roofline's prices beside it."""
    direction: str  # e.g. "a100-80gb -> h100-sxm", "a100-80gb + h100-sxm -> rtx-4090"
    fit: LinearFit
    ours: pd.DataFrame  # iterations()
    roofline: pd.DataFrame
    ours_ops: pd.DataFrame  # operations()
    roofline_ops: pd.DataFrame

    def regime_errors(self) -> list[RegimeError]:
        out = []
        for regime in FINE_REGIMES:
            at = (self.ours["regime"] == regime).to_numpy()
            if not at.any():
                continue
            ours, roof = self.ours["ape"][at], self.roofline["ape"][at]
            out.append(RegimeError(self.direction, regime, int(at.sum()), float(ours.mean()), float(ours.max()),
                                   float(roof.mean()), float(roof.max()),
                                   "per iteration (layers x a layer's operations + the embedding), every model, "
                                   "tp and token count of the held-out GPU's tables"))
        return out

    def by_model(self) -> pd.DataFrame:
        """Mean and worst |error| per held-out model, the fit's and the roofline's."""
        return _mean_worst(self.ours, self.roofline, "model")

    def reference(self) -> tuple[float, float, float, float]:
        """(mean, worst) of the fit and of the roofline on LLaMA-2-7B at tp 1, 1-1,024 tokens."""
        at = ((self.ours["model"] == REFERENCE_MODEL) & (self.ours["tp"] == REFERENCE_TP)
              & (self.ours["tokens"] <= REFERENCE_MAX_TOKENS)).to_numpy()
        ours, roof = self.ours["ape"][at], self.roofline["ape"][at]
        return float(ours.mean()), float(ours.max()), float(roof.mean()), float(roof.max())

    def per_op(self) -> pd.DataFrame:
        return _mean_worst(self.ours_ops, self.roofline_ops, "op")


def _mean_worst(ours: pd.DataFrame, roof: pd.DataFrame, by: str) -> pd.DataFrame:
    a = ours.groupby(by, sort=False)["ape"].agg(["mean", "max"])
    b = roof.groupby(by, sort=False)["ape"].agg(["mean", "max"])
    return pd.DataFrame({"mean": a["mean"], "worst": a["max"], "roofline_mean": b["mean"],
                         "roofline_worst": b["max"]})


def hold_out(train: GpuTables | Sequence[GpuTables], test: GpuTables) -> HoldOut:
    """`train`'s GPUs fitted together (one GPU: its own fit, to the bit), carried to `test`'s spec sheet at the same
    shares and latencies."""
    fitted = [train] if isinstance(train, GpuTables) else list(train)
    if any(gpu.hw.name == test.hw.name for gpu in fitted):
        raise ValueError(f"{test.hw.name} is held out, so no fit that judges it may be fitted on it")
    fit, roofline = fit_linear_on([(gpu.ops, gpu.hw) for gpu in fitted]), today_roofline()
    direction = f"{' + '.join(gpu.hw.name for gpu in fitted)} -> {test.hw.name}"
    return HoldOut(direction, fit, iterations(fit, test), iterations(roofline, test), operations(fit, test),
                   operations(roofline, test))


def both_ways(a: GpuTables, b: GpuTables) -> list[HoldOut]:
    """`a`'s fit judged on `b`, then `b`'s on `a` (the order an import's profile keeps them in)."""
    return [hold_out(a, b), hold_out(b, a)]


def judgement(holdouts: list[HoldOut]) -> list[RegimeError]:
    return [e for h in holdouts for e in h.regime_errors()]


