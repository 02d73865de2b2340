"""An FP8 (W8A8) GEMM as public measurements of one kernel describe it, and the file that ships the fit.

A GEMM takes a fixed latency plus its compute and its bytes under a roof bent at the ridge (calibrate/maths/
ridge.py): t = latency + (c^p + m^p)^(1/p), c its FLOPs at a share of the sheet's dense FP8 rate (peak_flops_fp8),
m its bytes (calibrate/work/fp8_gemms.py) at a share of the sheet's HBM bandwidth. Quantizing its input per token
is a kernel of its own: a latency plus its bytes at a share of the bandwidth, where the measurements isolate it
(`quant`, None where they do not). Every share is of a spec sheet, so the fit carries to another GPU with FP8
tensor cores by that GPU's sheet; the latencies carry as seconds. research/judging/fp8_gemm_fit.py fits it,
research/judging/fp8_gemm_heldout.py judges it, calibrate/parts/fp8_decoder.py prices a model's layers with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from calibrate.hardware.hardware import HardwareSpec
from calibrate.maths.ridge import bent_roofs, ridge_exponent
from calibrate.work.fp8_gemms import gemm_bytes, gemm_flops, quant_bytes
from engine.errors import SpecError

# the published timings (h100_fp8.csv, read by research/judging/gemm_table.py) and the fit made of them
GEMM_TABLES_DIR = Path(__file__).resolve().parents[1] / "gemm_tables"
H100_FP8_FIT = GEMM_TABLES_DIR / "h100_fp8.fit.yaml"
FORMAT = "servesim-fp8-gemm/1"
FIT_KEYS = ("compute_efficiency", "bandwidth_efficiency", "ridge_efficiency", "gemm_latency_s")


@dataclass(frozen=True)
class Fp8GemmFit:
    """Shares of the sheet's FP8 rate and HBM bandwidth, the bend at the ridge, the GEMM's latency; `quant`: the
    input quantization's (latency_s, bandwidth_efficiency), None where no measurement isolates it."""
    compute_efficiency: float
    bandwidth_efficiency: float
    ridge_efficiency: float
    gemm_latency_s: float
    quant: tuple[float, float] | None = None

    def gemm_time(self, m, n, k, hw: HardwareSpec) -> np.ndarray:
        compute = np.asarray(gemm_flops(m, n, k), dtype=float) / (fp8_rate(hw) * self.compute_efficiency)
        memory = np.asarray(gemm_bytes(m, n, k), dtype=float) / (hw.hbm_bytes_per_s * self.bandwidth_efficiency)
        return self.gemm_latency_s + bent_roofs(compute, memory, ridge_exponent(self.ridge_efficiency))

    def quant_time(self, m, k, hw: HardwareSpec) -> np.ndarray:
        if self.quant is None:
            raise ValueError("this fit has no input quantization: its measurements never isolated it")
        latency, efficiency = self.quant
        return latency + np.asarray(quant_bytes(m, k), dtype=float) / (hw.hbm_bytes_per_s * efficiency)

    def time(self, m, n, k, quantizes, hw: HardwareSpec) -> np.ndarray:
        """Each GEMM's seconds, with its input's quantization where `quantizes` (a bool or an array of them)."""
        gemm = self.gemm_time(m, n, k, hw)
        if not np.any(quantizes):
            return gemm
        return gemm + np.where(quantizes, self.quant_time(m, k, hw), 0.0)

    def to_dict(self) -> dict:
        raw = {key: float(getattr(self, key)) for key in FIT_KEYS}
        if self.quant is not None:
            raw["quant"] = {"latency_s": float(self.quant[0]), "bandwidth_efficiency": float(self.quant[1])}
        return raw

    @classmethod
    def from_dict(cls, raw: dict, source: str) -> Fp8GemmFit:
        for key in FIT_KEYS:
            if not isinstance(raw.get(key), (int, float)):
                raise SpecError(source, f"fit.{key}", f"must be a number, got {raw.get(key)!r}")
        quant = raw.get("quant")
        pair = None if quant is None else (float(quant["latency_s"]), float(quant["bandwidth_efficiency"]))
        return cls(*(float(raw[key]) for key in FIT_KEYS), quant=pair)


@dataclass(frozen=True)
class Fp8GemmProfile:
    """A shipped fit: the kernel and GPU it was measured on, and its held-out errors (fold -> figures)."""
    fit: Fp8GemmFit
    kernel: str
    measured_on: str
    heldout: dict
    path: Path

    def describe(self, hw: HardwareSpec) -> str:
        """For a cost model's source: whose GEMMs, how wrong on rows the fit never saw, and how they reach `hw`."""
        folds = ", ".join(f"{fold['mean']:.1%} mean {fold['what']}" for fold in self.heldout.values())
        note = f"FP8 GEMMs as measured on {self.measured_on} (held-out {folds})"
        if hw.name != self.measured_on:
            note += f", carried to {hw.name} by its sheet's shares (unjudged)"
        return note


def fp8_rate(hw: HardwareSpec) -> float:
    if hw.peak_flops_fp8 is None:
        raise ValueError(f"{hw.name}'s sheet gives no peak_flops_fp8: it has no FP8 tensor cores to run W8A8 on")
    return hw.peak_flops_fp8


@lru_cache(maxsize=4)
def load_fp8_gemms(path: Path = H100_FP8_FIT) -> Fp8GemmProfile:
    """A fit file (H100_FP8_FIT, the shipped one, by default); a bad one is a one-line error naming its key."""
    import yaml

    source = str(path)
    raw = yaml.safe_load(Path(path).read_text())
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise SpecError(source, "format", f"must be {FORMAT!r}")
    for key in ("fit", "kernel", "measured_on", "heldout"):
        if key not in raw:
            raise SpecError(source, key, "missing")
    return Fp8GemmProfile(Fp8GemmFit.from_dict(raw["fit"], source), raw["kernel"], raw["measured_on"],
                          raw["heldout"], Path(path))
