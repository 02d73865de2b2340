"""A dense decoder's W8A8 matmuls priced GEMM by GEMM with the FP8 fit (calibrate/parts/fp8_gemm.py).

Each layer runs four GEMMs (QKV, output projection, MLP up with its gate, MLP down: calibrate/work/layer_ops.py's
shapes on one of `tp` GPUs), and vLLM quantizes each one's input per token before it (an FP8-dynamic checkpoint's
layers, as the fit's `dynamic_per_token` rows timed them). An iteration of T tokens then costs, per layer,

    sum over the GEMMs of [latency + bent(T c, w + T a) + T q]

with c the GEMM's seconds of compute per token, w its weight's read, a its activation and output bytes per token
and q its input's quantization bytes per token, all at the fit's shares of this GPU's sheet, and the latency the
GEMM's and its quantization's together. The layers are alike, so all of them cost that times their number. The
roofline cost model binds these constants once (RooflineTerms, compiled, repeats the arithmetic to the bit).
"""
from __future__ import annotations

from dataclasses import dataclass

from calibrate.hardware.hardware import HardwareSpec
from calibrate.hardware.precision import Precision
from calibrate.maths.ridge import bent_roof, ridge_exponent
from calibrate.parts.fp8_gemm import Fp8GemmFit, fp8_rate
from calibrate.work.fp8_gemms import gemm_bytes, gemm_flops, quant_bytes
from calibrate.work.layer_ops import GEMMS, LayerShape
from engine.core.spec import ModelSpec


@dataclass(frozen=True)
class GemmSeconds:
    """One GEMM of a layer on this GPU: (compute per token, weight read, bytes per token, quantization per token)."""
    per_token_compute: float
    weights: float
    per_token_bytes: float
    per_token_quant: float

    def as_tuple(self) -> tuple[float, float, float, float]:
        return self.per_token_compute, self.weights, self.per_token_bytes, self.per_token_quant


@dataclass(frozen=True)
class Fp8Decoder:
    gemms: tuple[GemmSeconds, ...]
    layers: int
    latency_s: float  # per GEMM: its own and its input's quantization's
    ridge_p: float

    @classmethod
    def of(cls, fit: Fp8GemmFit, model: ModelSpec, hw: HardwareSpec, tp: int) -> Fp8Decoder:
        if fit.quant is None:
            raise ValueError("the FP8 fit has no input quantization to charge: a served W8A8 layer runs one")
        flops = fp8_rate(hw) * fit.compute_efficiency
        bandwidth = hw.hbm_bytes_per_s * fit.bandwidth_efficiency
        quant_latency, quant_efficiency = fit.quant
        quant_bandwidth = hw.hbm_bytes_per_s * quant_efficiency
        dims = LayerShape.of(model).gemm_dims(tp)
        gemms = []
        for op in GEMMS:
            k, n = dims[op]
            weights = gemm_bytes(0, n, k)
            gemms.append(GemmSeconds(gemm_flops(1, n, k) / flops, weights / bandwidth,
                                     (gemm_bytes(1, n, k) - weights) / bandwidth, quant_bytes(1, k) / quant_bandwidth))
        return cls(tuple(gemms), model.num_layers, fit.gemm_latency_s + quant_latency,
                   ridge_exponent(fit.ridge_efficiency))

    def time(self, tokens: int) -> float:
        """All layers' FP8 matmuls for an iteration of `tokens` tokens, in the order RooflineTerms adds them."""
        layer = 0.0
        for gemm in self.gemms:
            compute = tokens * gemm.per_token_compute
            memory = gemm.weights + tokens * gemm.per_token_bytes
            layer = layer + (self.latency_s + bent_roof(compute, memory, self.ridge_p)) + tokens * gemm.per_token_quant
        return self.layers * layer


def prices_fp8_gemms(model: ModelSpec, hw: HardwareSpec, precision: Precision) -> bool:
    """Whether the FP8 GEMM fit prices this model's decoder: W8A8 weights (FP8 on a sheet with an FP8 rate) of a
    dense model. A mixture of experts' expert GEMMs run vLLM's grouped FP8 kernels, which no measurement here
    times: its matmuls stay on the sheet's FP8 rate."""
    return precision.runs_w8a8(hw) and not model.is_moe
