"""The number formats a deployment stores its weights and KV cache in, and what each costs in bytes and FLOP/s.

Weights: fp16, bf16 (2 bytes), fp8, int8 (1 byte), int4 (half a byte); the KV cache: fp16, bf16 (2 bytes) or fp8
(1 byte). Activations, and so the tensor-parallel all-reduce messages, stay 16-bit in every format.

A quantized format covers the decoder layers' matmul weights (ModelSpec.layer_linear_params): the embedding, the
LM head, the norms and the biases stay 16-bit, as vLLM's quantization methods replace only its linear layers
(FP8, AWQ and GPTQ alike; vLLM's FP8 docs: "all Linear modules (except for the final lm_head) have their weights
quantized"; the LM head is left unquantized unless a checkpoint asks otherwise). The group scales
of int4/int8 weight-only formats (AWQ, GPTQ: one 16-bit scale per group of 128 weights) are not counted.

The matmul rate: FP8 weights on a GPU whose spec sheet gives a dense FP8 tensor rate (`peak_flops_fp8`) run
W8A8, activations quantized to FP8 too, at that rate (the roofline prices a dense model's GEMMs as measured FP8
GEMMs reach it: calibrate/parts/fp8_decoder.py); everything else runs at the sheet's 16-bit rate
(`peak_flops`): int8 and int4 weights are weight-only (dequantized to 16 bits before the multiply), and so are
FP8 weights on a GPU without FP8 tensor cores (A100, A10, A40): vLLM's FP8 docs (docs.vllm.ai, features/
quantization/fp8) give W8A8 on Ada, Hopper and Blackwell, and "weight-only W8A16, utilizing FP8 Marlin" on
Turing and Ampere (vllm-project/vllm PR #5975). The LM head, and attention, compute at the 16-bit rate in every format.

The legacy experiment key `dtype_bytes` is kept as it was: every byte count (weights, KV and activations alike)
that many, every matmul at the 16-bit rate (`Precision.uniform`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from calibrate.hardware.hardware import HardwareSpec
from engine.core.spec import ModelSpec
from engine.errors import SpecError
from engine.specs.checks import known_keys

WEIGHT_FORMATS: dict[str, float] = {"fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
KV_CACHE_FORMATS: dict[str, int] = {"fp16": 2, "bf16": 2, "fp8": 1}
SIXTEEN_BIT = ("fp16", "bf16")
ACTIVATION_BYTES = 2
PRECISION_KEYS = ("kv_cache", "weights")


@dataclass(frozen=True)
class Precision:
    """Weights and KV cache formats (WEIGHT_FORMATS, KV_CACHE_FORMATS); `dtype_bytes` set: the legacy key's
    meaning instead, every byte count that many and the formats' names unused."""

    weights: str = "fp16"
    kv_cache: str = "fp16"
    dtype_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.dtype_bytes is not None and (self.weights, self.kv_cache) != ("fp16", "fp16"):
            raise ValueError("dtype_bytes sets every byte count: the formats stay at their defaults")
        if self.weights not in WEIGHT_FORMATS:
            raise ValueError(f"weights {self.weights!r} is not one of {list(WEIGHT_FORMATS)}")
        if self.kv_cache not in KV_CACHE_FORMATS:
            raise ValueError(f"kv_cache {self.kv_cache!r} is not one of {list(KV_CACHE_FORMATS)}")

    @classmethod
    def uniform(cls, dtype_bytes: int) -> Precision:
        """The legacy `dtype_bytes`: weights, KV and activations all this many bytes, matmuls at the 16-bit rate."""
        return cls(dtype_bytes=dtype_bytes)

    @property
    def weight_bytes(self) -> float:
        """Bytes per quantized (decoder matmul) weight."""
        return self.dtype_bytes if self.dtype_bytes is not None else WEIGHT_FORMATS[self.weights]

    @property
    def kv_bytes(self) -> int:
        """Bytes per KV cache element."""
        return self.dtype_bytes if self.dtype_bytes is not None else KV_CACHE_FORMATS[self.kv_cache]

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element, and per weight left unquantized (embedding, LM head, norms, biases)."""
        return self.dtype_bytes if self.dtype_bytes is not None else ACTIVATION_BYTES

    @property
    def is_sixteen_bit(self) -> bool:
        """Weights and KV cache both fp16/bf16 (or the legacy dtype_bytes): what a measured profile can price."""
        return self.dtype_bytes is not None or (self.weights in SIXTEEN_BIT and self.kv_cache in SIXTEEN_BIT)

    @property
    def reads_fp8_rate(self) -> bool:
        """The matmul rate depends on the sheet's peak_flops_fp8 (FP8 weights): W8A8 where it is given."""
        return self.dtype_bytes is None and self.weights == "fp8"

    def runs_w8a8(self, hw: HardwareSpec) -> bool:
        return self.reads_fp8_rate and hw.peak_flops_fp8 is not None

    def matmul_peak_flops(self, hw: HardwareSpec) -> float:
        """The decoder matmuls' peak FLOP/s on `hw`: its FP8 rate for W8A8, else its 16-bit rate."""
        if self.runs_w8a8(hw):
            assert hw.peak_flops_fp8 is not None
            return hw.peak_flops_fp8
        return hw.peak_flops

    def quantized_params(self, model: ModelSpec) -> int:
        """The weights the format covers: every decoder layer's matmuls."""
        return model.num_layers * model.layer_linear_params()

    def weight_memory_bytes(self, model: ModelSpec) -> int:
        """Bytes of all the model's weights: the quantized ones at weight_bytes, the rest 16-bit (rounded up to
        whole bytes); at one byte count for all (dtype_bytes, or fp16/bf16 weights) num_params x it."""
        quantized = self.quantized_params(model)
        return math.ceil(quantized * self.weight_bytes) + (model.num_params() - quantized) * self.activation_bytes

    def describe(self, hw: HardwareSpec, gemms: str | None = None) -> str:
        """For a cost model's source: the formats, and how the matmuls are priced on `hw` (`gemms`: the measured
        FP8 GEMMs' note, else the sheet's rate); nothing for the defaults (fp16 and fp16, or the legacy
        dtype_bytes), whose sources stay as they were."""
        if self.dtype_bytes is not None or (self.weights, self.kv_cache) == ("fp16", "fp16"):
            return ""
        rate = ""
        if self.runs_w8a8(hw):
            rate = f" W8A8: {gemms}" if gemms else f" W8A8 at {hw.peak_flops_fp8 / 1e12:g} TFLOP/s"
        return f"weights={self.weights}{rate}, kv_cache={self.kv_cache}"


def precision_from_config(raw: Any, dtype_bytes: int | None, source: str) -> Precision:
    """An experiment's `precision:` mapping ({weights, kv_cache}, both defaulting to fp16), or its legacy
    `dtype_bytes` (already checked) where it gave that instead; both is a one-line error naming both keys."""
    if raw is None:
        return Precision.uniform(2 if dtype_bytes is None else dtype_bytes)
    if dtype_bytes is not None:
        raise SpecError(source, "precision", "and dtype_bytes both set the bytes per weight and KV element; "
                        "give one (precision: {weights, kv_cache} sets them apart)")
    if not isinstance(raw, dict):
        raise SpecError(source, "precision", f"must be a mapping with keys {list(PRECISION_KEYS)}, got {raw!r}")
    known_keys(raw, PRECISION_KEYS, source, "precision")
    weights = _format(raw.get("weights", "fp16"), WEIGHT_FORMATS, source, "precision.weights")
    kv_cache = _format(raw.get("kv_cache", "fp16"), KV_CACHE_FORMATS, source, "precision.kv_cache")
    return Precision(weights, kv_cache)


def _format(value: Any, formats: dict, source: str, key: str) -> str:
    if not isinstance(value, str) or value not in formats:
        raise SpecError(source, key, f"{value!r} is not a format; valid: {list(formats)}")
    return str(value)
