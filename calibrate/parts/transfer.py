"""Device time carried from a measured GPU to another by regime: what each kind of kernel achieves,
as shares of the spec sheet, plus fixed latencies that no spec sheet scales.

A kernel's device time is split three ways:
  latency   a fixed cost per kernel (launch, setup, the tail of a small grid): carried as measured,
            since it does not shrink with a faster memory or more FLOP/s
  memory    bytes moved / (the GPU's peak bandwidth x the kind's bandwidth share)
  compute   FLOPs / (the GPU's peak FLOP/s x the kind's compute share)
with memory and compute overlapping (the bent roofline, calibrate/maths/ridge.py). The shares belong to a kind
of kernel (GEMM, each elementwise kernel, attention, all-reduce) and are fitted where it was measured
(calibrate/fitting/op_fit.py for GEMMs and elementwise kernels); another GPU's time is its spec sheet at the
same shares. The host part is carried as measured, scaled by the host CPU's speed where both are known.

Whether the carried shares beat the spec-sheet roofline is a question for a GPU the fit never saw: each measured
GPU held out in turn (research/judging/gpu_holdout.py) answers it per regime, and `RegimeChoice` keeps the roofline
in every regime where no carry beat it on every held-out GPU (calibrate/judging/carry_rule.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from calibrate.hardware.hardware import HardwareSpec
from calibrate.maths.ridge import bent_roofs, ridge_exponent
from calibrate.parts.linear_model import LinearFit
from calibrate.work.layer_ops import GEMMS, LAYER_ELEMENTWISE, LayerShape, gemm_work
from engine.errors import SpecError
from engine.specs.checks import known_keys

MEMORY_BOUND, RIDGE, COMPUTE_BOUND = "memory-bound decode", "ridge", "compute-bound prefill"
REGIMES = (MEMORY_BOUND, RIDGE, COMPUTE_BOUND)
LATENCY = "fixed latency"
# the regimes a judge with per-operation tables on both GPUs tells apart (calibrate/judging/transfer_two_gpus.py)
FINE_REGIMES = (LATENCY, *REGIMES)
# a batch is memory-bound below half the ridge's tokens, compute-bound above twice them: within a factor
# of two of the ridge neither roof holds alone (the bend, calibrate/maths/ridge.py)
RIDGE_BAND = 2.0
# below a sixteenth of the ridge's tokens the elementwise kernels move a few bytes each (LLaMA-7B on an A100:
# 9 tokens' norms, rotary embedding and activation take ~1 us at peak against ~17 us of fixed latencies), so
# what sets the time beyond the weights' read is the kernels' fixed cost
LATENCY_BAND = 16.0
KINDS = ("gemm", "elementwise", "attention", "all_reduce")
# what each kind needs from a spec sheet: its FLOP/s and the bandwidth its bytes move over
KIND_FIELDS = {"gemm": ("peak_flops", "hbm_bytes_per_s"), "elementwise": ("hbm_bytes_per_s",),
               "attention": ("peak_flops", "hbm_bytes_per_s"), "all_reduce": ("nvlink_bytes_per_s",)}


def ridge_tokens(hw: HardwareSpec, dtype_bytes: int = 2) -> float:
    """Tokens at which a linear layer's FLOPs at peak take as long as reading its weights at peak: 2 FLOPs
    per weight per token against dtype_bytes per weight. A100-80GB 153, H100 SXM 295, H200 206."""
    return hw.peak_flops * dtype_bytes / (2.0 * hw.hbm_bytes_per_s)


def regime_of(tokens: float, hw: HardwareSpec, dtype_bytes: int = 2, latency: bool = False) -> str:
    """The regime of a batch of `tokens` on `hw`, relative to its own ridge (not another GPU's token bands);
    `latency`: the smallest of the memory-bound batches are the fixed-latency regime."""
    ridge = ridge_tokens(hw, dtype_bytes)
    if latency and tokens < ridge / LATENCY_BAND:
        return LATENCY
    if tokens < ridge / RIDGE_BAND:
        return MEMORY_BOUND
    return COMPUTE_BOUND if tokens > ridge * RIDGE_BAND else RIDGE


def regimes_of(tokens, hw: HardwareSpec, dtype_bytes: int = 2, latency: bool = False) -> np.ndarray:
    """regime_of over an array of token counts."""
    return np.array([regime_of(float(t), hw, dtype_bytes, latency) for t in np.asarray(tokens, dtype=float)],
                    dtype=object)


def require_spec(hw, kind: str, source: str = "hardware") -> None:
    """A one-line error naming the spec-sheet field a kind of kernel needs and the sheet lacks."""
    if kind not in KIND_FIELDS:
        raise SpecError(source, "kind", f"unknown kernel kind {kind!r}; valid kinds are {list(KINDS)}")
    for name in KIND_FIELDS[kind]:
        value = getattr(hw, name, None)
        if not isinstance(value, (int, float)) or not value > 0:
            raise SpecError(source, name, f"missing or not positive; a {kind} transfer needs it")


@dataclass(frozen=True)
class KernelShares:
    """What one kind of kernel achieves: shares of the peaks, a fixed latency, and the bend at the ridge."""
    compute_share: float = 1.0
    bandwidth_share: float = 1.0
    latency_s: float = 0.0
    ridge_efficiency: float = 1.0


@dataclass(frozen=True)
class Terms:
    """A device time split into what carries differently: latency (fixed), memory and compute (scaled by
    the spec sheet), and their total as the bent roofline overlaps the last two."""
    latency_s: float
    memory_s: float
    compute_s: float
    total_s: float


def kernel_terms(shares: KernelShares, kind: str, flops: float, moved_bytes: float, hw: HardwareSpec,
                 count: int = 1) -> Terms:
    """`count` kernels of `kind`, together doing `flops` and moving `moved_bytes`, on `hw`."""
    require_spec(hw, kind)
    bandwidth = hw.nvlink_bytes_per_s if kind == "all_reduce" else hw.hbm_bytes_per_s
    memory = moved_bytes / (bandwidth * shares.bandwidth_share)
    compute = flops / (hw.peak_flops * shares.compute_share) if flops else 0.0
    overlapped = float(bent_roofs(compute, memory, ridge_exponent(shares.ridge_efficiency)))
    latency = count * shares.latency_s
    return Terms(latency, memory, compute, latency + overlapped)


@dataclass(frozen=True)
class RegimeTransfer:
    """Each measured kind's shares, from the GPU they were measured on."""
    measured_on: str
    kinds: dict[str, KernelShares] = field(default_factory=dict)

    @classmethod
    def from_linear_fit(cls, fit: LinearFit, measured_on: str) -> RegimeTransfer:
        """A per-operation fit's GEMM and elementwise kernels (one kind per elementwise op)."""
        kinds = {"gemm": KernelShares(fit.compute_efficiency, fit.bandwidth_efficiency, fit.gemm_latency_s,
                                      fit.ridge_efficiency)}
        for op, (latency, share) in fit.elementwise.items():
            kinds[f"elementwise.{op}"] = KernelShares(1.0, share, latency)
        return cls(measured_on, kinds)

    def shares(self, kind: str) -> KernelShares:
        if kind not in self.kinds:
            raise SpecError(self.measured_on, kind, f"not measured on {self.measured_on}; measured kinds: "
                            f"{sorted(self.kinds)}")
        return self.kinds[kind]

    def layer_terms(self, shape: LayerShape, tokens: int, hw: HardwareSpec, tp: int = 1,
                    dtype_bytes: int = 2) -> dict[str, Terms]:
        """One layer's non-attention kernels on `hw` at `tokens`: the GEMMs together (one bend over their
        sums, as the roofline cost model charges them) and each elementwise kernel it measured."""
        dims = shape.gemm_dims(tp)
        work = [gemm_work(dims[op], tokens, dtype_bytes) for op in GEMMS]
        out = {"gemm": kernel_terms(self.shares("gemm"), "gemm", sum(f for f, _ in work),
                                    sum(b for _, b in work), hw, count=len(GEMMS))}
        moved = shape.elementwise_bytes_per_token(tp, dtype_bytes)
        for op in LAYER_ELEMENTWISE:
            kind = f"elementwise.{op}"
            if kind in self.kinds and shape.runs(op):
                out[kind] = kernel_terms(self.kinds[kind], "elementwise", 0.0, tokens * moved[op], hw)
        return out

    def layer_time(self, shape: LayerShape, tokens: int, hw: HardwareSpec, tp: int = 1,
                   dtype_bytes: int = 2) -> float:
        return sum(t.total_s for t in self.layer_terms(shape, tokens, hw, tp, dtype_bytes).values())


@dataclass(frozen=True)
class CarriedFit:
    """A linear part carried to a GPU nobody measured: its name (the GPUs it was fitted on) and its parameters."""
    name: str
    fit: LinearFit


@dataclass(frozen=True)
class RegimeChoice:
    """Which model prices each regime on hardware the profile was not measured on, and why."""
    use_transfer: frozenset[str]  # regimes where the transfer beat the roofline on a held-out GPU
    reasons: dict[str, str] = field(default_factory=dict)  # regime -> one line
    regimes: tuple[str, ...] = REGIMES  # the regimes it tells apart: FINE_REGIMES adds the fixed-latency one
    # regime -> the carried fit that prices it (calibrate/cost_models/carry_file.py); a regime in use_transfer
    # without one is priced by the profile's own fit
    carried: dict[str, CarriedFit] = field(default_factory=dict)

    @property
    def fine(self) -> bool:
        return LATENCY in self.regimes

    @classmethod
    def everywhere(cls) -> RegimeChoice:
        """The measured GPU itself (or the same chip): the fit is judged there by held-out models."""
        return cls(frozenset(REGIMES), {r: "measured on this chip" for r in REGIMES})

    def uses_transfer(self, regime: str) -> bool:
        return regime in self.use_transfer

    def describe(self) -> str:
        parts = []
        for regime in self.regimes:
            which = "transfer" if regime in self.use_transfer else "roofline"
            if regime in self.use_transfer and regime in self.carried:
                which = f"the {self.carried[regime].name} fit"
            why = self.reasons.get(regime, "")
            parts.append(f"{regime}: {which}" + (f" ({why})" if why else ""))
        return "; ".join(parts)


def same_chip(measured: HardwareSpec, target: HardwareSpec) -> bool:
    """The same silicon with other memory (A100 40GB and 80GB): the kernels, clocks and so the achieved
    shares are the fitted GPU's own, so the transfer needs no held-out GPU to be trusted there."""
    return measured.name == target.name or (
        measured.name.split("-")[0] == target.name.split("-")[0] and measured.peak_flops == target.peak_flops)


def carried_host(host: dict | None, measured_cpu_speed: float | None = None,
                 target_cpu_speed: float | None = None) -> dict | None:
    """The engine's host terms (calibrate/parts/host.py) carried as measured; scaled by measured / target CPU
    speed where both are known (a host twice as fast halves them). The hook for profiles that record it."""
    if host is None or not measured_cpu_speed or not target_cpu_speed:
        return host
    factor = measured_cpu_speed / target_cpu_speed
    from calibrate.parts.host import HOST_TERMS
    return {k: (v * factor if k in HOST_TERMS else v) for k, v in host.items()}


def shares_from_dict(raw: dict, source: str) -> KernelShares:
    """KernelShares from a mapping, each field named in the error when missing."""
    known = {f.name for f in fields(KernelShares)}
    known_keys(raw, sorted(known), source)
    return KernelShares(**{k: float(v) for k, v in raw.items()})
