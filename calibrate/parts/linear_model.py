"""The linear (non-attention) part of an iteration as per-operation GPU timings describe it.

Matmuls follow the bent roofline (calibrate/maths/ridge.py): t = latency + (c^p + m^p)^(1/p), c the FLOPs at
a share of peak FLOP/s, m the weight bytes at a share of peak bandwidth. Elementwise kernels cost a
latency plus their bytes at their own share of bandwidth. All shares are of the measured GPU's spec
sheet, so they carry to other models, tensor-parallel degrees and GPUs. calibrate/fitting/op_fit.py fits it;
the roofline cost model charges it in place of its spec-sheet matmuls.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from calibrate.hardware.hardware import HardwareSpec
from calibrate.maths.ridge import bent_roofs, ridge_exponent
from calibrate.work.layer_ops import GEMMS, ITERATION_OPS, MATMULS

if TYPE_CHECKING:  # the frames come from the callers that fit and check the part; pricing an iteration needs none
    import pandas as pd


@dataclass(frozen=True)
class LinearFit:
    """The linear part's parameters: shares of the GPU's peaks, and kernel latencies."""
    compute_efficiency: float
    bandwidth_efficiency: float
    ridge_efficiency: float = 1.0
    gemm_latency_s: float = 0.0
    # op -> (latency_s, bandwidth_efficiency); an op not here costs nothing (today's roofline charges none)
    elementwise: dict[str, tuple[float, float]] = field(default_factory=dict)
    # the share of HBM at which a one-layer profile's matmuls that fit in the L2 read their weights
    # (calibrate/fitting/l2_resident.py): fitted apart so that bandwidth_efficiency is HBM's; never priced (a real
    # model's weights are read from HBM); None where no row was judged so
    resident_bandwidth_efficiency: float | None = None

    def gemm_time(self, flops, weight_bytes, hw: HardwareSpec) -> np.ndarray:
        c = np.asarray(flops, dtype=float) / (hw.peak_flops * self.compute_efficiency)
        m = np.asarray(weight_bytes, dtype=float) / (hw.hbm_bytes_per_s * self.bandwidth_efficiency)
        return self.gemm_latency_s + bent_roofs(c, m, ridge_exponent(self.ridge_efficiency))

    def elementwise_time(self, op: str, moved_bytes, hw: HardwareSpec) -> np.ndarray:
        moved = np.asarray(moved_bytes, dtype=float)
        if op not in self.elementwise:
            return np.zeros_like(moved)
        latency, efficiency = self.elementwise[op]
        return latency + moved / (hw.hbm_bytes_per_s * efficiency)

    def predict_ops(self, ops: pd.DataFrame, hw: HardwareSpec) -> np.ndarray:
        """Each operation's seconds, one by one."""
        predicted = np.zeros(len(ops))
        gemm = ops["op"].isin(MATMULS).to_numpy()
        predicted[gemm] = self.gemm_time(ops["flops"][gemm], ops["weight_bytes"][gemm], hw)
        for op in ops["op"][~gemm].unique():
            at = (ops["op"] == op).to_numpy()
            predicted[at] = self.elementwise_time(op, ops["moved_bytes"][at], hw)
        return predicted

    def predict_layers(self, ops: pd.DataFrame, hw: HardwareSpec) -> pd.DataFrame:
        """One layer's non-attention ops at each (model, tp, tokens), measured and predicted as the roofline
        cost model charges them: one bend over the layer's matmuls together, then the elementwise kernels (an
        iteration's own operations, the embedding, final norm and LM head, are no layer's)."""
        layer = ops[~ops["op"].isin(ITERATION_OPS)]
        elementwise = self.predict_ops(layer, hw) * ~layer["op"].isin(GEMMS).to_numpy()
        frame = layer.assign(elementwise_s=elementwise, gemms=layer["op"].isin(GEMMS).astype(int))
        sums = frame.groupby(["model", "tp", "tokens"], as_index=False)[
            ["time_s", "flops", "weight_bytes", "elementwise_s", "gemms"]].sum()
        gemm = self.gemm_time(sums["flops"], sums["weight_bytes"], hw) - self.gemm_latency_s
        predicted = gemm + sums["gemms"] * self.gemm_latency_s + sums["elementwise_s"]
        return sums[["model", "tp", "tokens", "time_s"]].assign(predicted_s=predicted.to_numpy())

    def to_dict(self) -> dict:
        return {"compute_efficiency": self.compute_efficiency, "bandwidth_efficiency": self.bandwidth_efficiency,
                "ridge_efficiency": self.ridge_efficiency, "gemm_latency_s": self.gemm_latency_s,
                "elementwise": {op: {"latency_s": lat, "bandwidth_efficiency": eff}
                                for op, (lat, eff) in self.elementwise.items()},
                **({} if self.resident_bandwidth_efficiency is None
                   else {"resident_bandwidth_efficiency": self.resident_bandwidth_efficiency})}

    @classmethod
    def from_dict(cls, raw: dict) -> LinearFit:
        return cls(raw["compute_efficiency"], raw["bandwidth_efficiency"], raw["ridge_efficiency"],
                   raw["gemm_latency_s"], {op: (v["latency_s"], v["bandwidth_efficiency"])
                                           for op, v in raw.get("elementwise", {}).items()},
                   raw.get("resident_bandwidth_efficiency"))
