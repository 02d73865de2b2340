"""A CostModel from a fitted profile, and the efficiencies it implies for other hardware."""
from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np

from calibrate.clock.breakdown import IterationTime, fold
from calibrate.clock.costmodel import CostModel, per_step, stretch_block_sums, stretch_context_sums
from calibrate.clock.roofline import RooflineParams, swap_block_seconds, swap_copies_per_block, waves_note
from calibrate.fitting.profile_file import DTYPE_BYTES, Profile, load_profile
from calibrate.hardware.hardware import HardwareSpec, hardware_for_device
from calibrate.parts.host import host_parts
from calibrate.parts.host import host_time as host_seconds
from calibrate.work.expert_parallel import ExpertParallel
from engine.core.batch import ShapeMetrics
from engine.core.spec import ModelSpec
from engine.errors import SpecError
from engine.specs.loader import load_model_spec


class ProfileCostModel(CostModel):
    """A fitted profile's times at `block_size` (default the profile's) and `dtype_bytes` (default its dtype's).

    A swap moves each block as swap_copies_per_block copies plus its bytes, at the profile's measured costs;
    where the profile has none, at the roofline's defaults over `hardware`'s PCIe (nothing without hardware)."""

    def __init__(self, profile: Profile, path: str = "", block_size: int | None = None,
                 dtype_bytes: int | None = None, hardware: HardwareSpec | None = None):
        self.profile = profile
        self.block_size = block_size or profile.block_size
        c = profile.coefficients
        self._knots, self._token_costs = list(profile.token_knots), list(profile.token_costs_s)
        self._slope_past_last = (max((self._token_costs[-1] - self._token_costs[-2])
                                     / (self._knots[-1] - self._knots[-2]), 0.0) if len(self._knots) > 1 else 0.0)
        self._prefill_sq, self._context = c["prefill_attention_s"], c["decode_context_s"]
        self._padded_context, self._per_seq = c["decode_padded_context_s"], c["per_sequence_s"]
        self._per_prefill, self._mixed = c["per_prefill_s"], c["mixed_s"]
        self._per_block = c["decode_block_s"]
        self.host = profile.host  # None: not measured; the forward alone is charged
        self.charge_host = profile.host is not None
        # what a shape costs served, against timed alone (calibrate/profiling/serving.py); 1 where not measured
        self.serving_factor = profile.serving["factor"] if profile.serving else 1.0
        self._swap_per_block = swap_seconds_per_block(profile, self.block_size, dtype_bytes, hardware)
        # the times are the profiled device's, whatever the config's hardware says: tell the reader
        elsewhere = (f"; measured on {profile.device_name}, not on {hardware.name}"
                     if hardware is not None and hardware_for_device(profile.device_name) != hardware.name
                     else "")
        self.source = (f"profile({Path(path).name or profile.model}: {profile.model} on {profile.device_name}, "
                       f"{profile.dtype}, held-out MAPE {profile.heldout_mape:.1%}{self._host_note()}{elsewhere}"
                       f"{self._block_note()})")

    def replace_host(self, host: dict) -> None:
        """Charge `host` (HOST_TERMS, e.g. a host model's, calibrate/parts/host_model.py) as the host part, not the
        profile's own."""
        self.host = host
        self.charge_host = True

    def _host_note(self) -> str:
        """A profile fitted in two parts names both errors (older profiles say what they said)."""
        if self.profile.device_part is None:
            return ""
        if not self.host:
            return " (device part; no host part)"
        mape = self.host.get("heldout_mape")
        return f" (device part), host part {mape:.1%}" if mape is not None else " (device part), host part measured"

    def _block_note(self) -> str:
        """Say so where a run's block size is one the profile cannot price apart (see features.TERMS_ADDED_IN_4)."""
        measured = self.profile.block_sizes or [self.profile.block_size]
        if self.block_size in measured or len(measured) > 1:
            return ""
        return f"; timed at block size {measured[0]} only, run at {self.block_size}"

    @classmethod
    def from_profile(cls, path: str | Path, model: ModelSpec | None = None, hardware: HardwareSpec | None = None,
                     tp: int = 1, dtype_bytes: int = 2, block_size: int = 16) -> ProfileCostModel:
        profile = load_profile(path)
        if profile.linear is not None:
            raise SpecError(str(path), "linear", (
                f"this profile times only the linear (non-attention) part of an iteration on {profile.device_name}; "
                f"use cost_model: {{kind: transfer, path: {path}}}, which adds attention from first principles"))
        if model is not None and model.name != profile.model:
            # only a GPU profile's efficiencies carry over (transferred_roofline), so only then suggest it
            transfer = (f" or use cost_model: {{kind: transfer, path: {path}}} to carry its efficiencies over"
                        if profile.device == "cuda" else "")
            raise SpecError(str(path), "model", (
                f"this profile was calibrated for {profile.model} on {profile.device_name}, but the config "
                f"names {model.name}; profile {model.name} (servesim calibrate profile --model {model.name})"
                f"{transfer}"))
        if tp != profile.tensor_parallel:
            raise SpecError(str(path), "tensor_parallel", (
                f"the profile was measured at tensor_parallel={profile.tensor_parallel}, the config asks {tp}"))
        return cls(profile, str(path), block_size, dtype_bytes, hardware)

    def iteration_time(self, batch: ShapeMetrics) -> float:
        blocks = batch.decode_blocks(self.block_size) if self._per_block and batch.decode_context_lens else 0
        return self._time(batch, batch.sum_decode_context, batch.max_decode_context, blocks)

    def decode_iteration_times(self, batch: ShapeMetrics, num_steps: int) -> np.ndarray:
        """Every step is the same sum of the same terms; only the decode contexts grow, each by one per
        step (their sum by the number of decodes, their maximum by one): the one expression over arrays
        of them gives each step's float."""
        longest = batch.max_decode_context
        blocks = (stretch_block_sums(batch, num_steps, self.block_size)
                  if self._per_block and batch.decode_context_lens else 0)
        return per_step(self._time(batch, stretch_context_sums(batch, num_steps),
                                   np.arange(longest, longest + num_steps, dtype=np.int64), blocks), num_steps)

    def device_time(self, batch: ShapeMetrics) -> float:
        """The device part of iteration_time: the forward's fitted device time, x the serving factor."""
        blocks = batch.decode_blocks(self.block_size) if self._per_block and batch.decode_context_lens else 0
        return self._device(batch, batch.sum_decode_context, batch.max_decode_context, blocks)

    def host_time(self, batch: ShapeMetrics) -> float:
        """The host part of iteration_time: the fitted host work, where measured and charge_host asks for it."""
        return host_seconds(self.host, batch.num_seqs, batch.num_prefill_tokens) if self.charge_host else 0.0

    def breakdown(self, batch: ShapeMetrics) -> IterationTime:
        """iteration_time by the profile's fitted terms, each times the serving factor (so they add up to the
        device part within rounding: the clock scales their sum), and the host work by term."""
        blocks = batch.decode_blocks(self.block_size) if self._per_block and batch.decode_context_lens else 0
        parts = self._device_parts(batch, batch.sum_decode_context, batch.max_decode_context, blocks)
        device = {kind: float(value) * self.serving_factor for kind, value in parts}
        host = (self.host_parts_of(batch, host_parts(self.host, batch.num_seqs, batch.num_prefill_tokens))
                if self.charge_host else {})
        swaps = batch.num_swap_blocks
        return IterationTime(device, host, self.device_time(batch), self.host_time(batch),
                             self.swap_time(swaps) if swaps else 0.0, parts_exact=self.serving_factor == 1.0)

    def _device_parts(self, batch: ShapeMetrics, sum_decode_context, max_decode_context, decode_blocks):
        """The fitted device terms of one iteration, before the serving factor, in the order _device adds them.
        A prefill over a cached prefix counts its attention over the cached tokens in sum_prefill_sq (n (n + 2c),
        see engine.core.batch): the profiler times plain prompts only, so this carries the fitted per-pair cost
        over to them; the cached tokens cost no linear-layer work."""
        parts = [("linear", self.token_cost(batch.num_tokens)), ("per_sequence", self._per_seq * batch.num_seqs)]
        if batch.decode_context_lens:
            parts.append(("attention", self._context * sum_decode_context
                          + self._padded_context * batch.num_decodes * max_decode_context))
        if batch.prefill_lens:
            parts.append(("prefill", self._prefill_sq * batch.sum_prefill_sq + self._per_prefill * batch.num_prefills))
            if batch.decode_context_lens:
                parts.append(("mixed", self._mixed))
        if self._per_block and batch.decode_context_lens:
            parts.append(("decode_blocks", self._per_block * decode_blocks))
        return parts

    def _time(self, batch: ShapeMetrics, sum_decode_context, max_decode_context, decode_blocks):
        """iteration_time (device part + host part), for one iteration's decode contexts (their sum, maximum,
        and the KV blocks they span when the profile prices blocks) or arrays of them."""
        t = self._device(batch, sum_decode_context, max_decode_context, decode_blocks)
        if self.charge_host:
            t += host_seconds(self.host, batch.num_seqs, batch.num_prefill_tokens)
        return t

    def _device(self, batch: ShapeMetrics, sum_decode_context, max_decode_context, decode_blocks):
        return fold(value for _, value in self._device_parts(batch, sum_decode_context, max_decode_context,
                                                             decode_blocks)) * self.serving_factor

    def token_cost(self, tokens: int) -> float:
        """The token-cost table at `tokens` (calibrate/work/features.token_costs, one value at a time)."""
        knots, costs = self._knots, self._token_costs
        if tokens <= knots[0]:
            return costs[0]
        if tokens >= knots[-1]:
            return costs[-1] + self._slope_past_last * (tokens - knots[-1])
        i = bisect.bisect_right(knots, tokens)
        k0, k1 = knots[i - 1], knots[i]
        return costs[i - 1] + (costs[i] - costs[i - 1]) * (tokens - k0) / (k1 - k0)

    def swap_time(self, num_blocks: int) -> float:
        return num_blocks * self._swap_per_block


def swap_seconds_per_block(profile: Profile, block_size: int, dtype_bytes: int | None,
                           hardware: HardwareSpec | None) -> float:
    """One block's swap: its copies at the profile's cost per copy and its bytes at its cost per byte; where
    the profile measured no swap, the roofline's defaults over `hardware`'s PCIe (0 with no hardware given)."""
    model = load_model_spec(profile.model)
    element = dtype_bytes or DTYPE_BYTES[profile.dtype]
    tp = profile.tensor_parallel
    if profile.swap_s_per_copy is None or profile.swap_s_per_byte is None:
        return swap_block_seconds(model, hardware, tp, element, block_size, RooflineParams()) if hardware else 0.0
    block_bytes = model.kv_bytes_per_token(element) * block_size / tp
    return swap_copies_per_block(model) * profile.swap_s_per_copy + block_bytes * profile.swap_s_per_byte


def implied_efficiency(profile: Profile, measured_on: HardwareSpec, dtype_bytes: int = 2) -> RooflineParams:
    """What share of the measured device's peak the fitted terms reach.

    Compute efficiency from the token-cost table's slope where batches are large (2 FLOPs
    per weight per token), bandwidth efficiency from the decode KV-read cost (bytes per
    context token), and the fixed overhead as what a one-token iteration leaves after
    reading the weights at that bandwidth. Assumes the profiled device ran the same kernels a
    target device would (the roofline shape carries over, the constants do not). The kernel's work per
    KV block as tokens' worth of K/V read (0 where the profile could not tell it apart, its per-token cost
    holding it), and the swap's cost per copy, carry over as measured (0 where not measured).
    """
    model = load_model_spec(profile.model)
    c = profile.coefficients
    tp = profile.tensor_parallel
    flops_per_token = 2 * (model.num_layers * model.layer_linear_params()) / tp
    slope = compute_slope(profile.token_knots, profile.token_costs_s)
    compute_eff = flops_per_token / slope / measured_on.peak_flops if slope > 0 else 1.0
    kv_bytes = model.kv_bytes_per_token(dtype_bytes) / tp
    per_context = c["decode_context_s"] + c["decode_padded_context_s"]  # equal for a uniform batch
    bw_eff = kv_bytes / per_context / measured_on.hbm_bytes_per_s if per_context > 0 else 1.0
    compute_eff, bw_eff = min(compute_eff, 1.0), min(bw_eff, 1.0)
    weights = model.num_layers * model.layer_linear_params() + model.vocab_size * model.hidden_size
    weight_bytes = weights * dtype_bytes / tp
    # a one-token iteration is the weights read once plus the fixed overheads
    overhead = max(profile.token_costs_s[0] - weight_bytes / (bw_eff * measured_on.hbm_bytes_per_s), 0.0)
    block_tokens = c["decode_block_s"] / per_context if per_context > 0 else 0.0
    return RooflineParams(compute_efficiency=compute_eff, bandwidth_efficiency=bw_eff, overhead_s=overhead,
                          block_read_overhead_tokens=block_tokens,
                          swap_copy_latency_s=profile.swap_s_per_copy or 0.0)


def compute_slope(knots: list[int], costs: list[float]) -> float:
    """Seconds per token where the batch is compute-bound: the table's slope over its upper half
    (from the knot nearest half the largest to the largest)."""
    if len(knots) < 2:
        return 0.0
    top = knots[-1]
    lower = min(range(len(knots) - 1), key=lambda i: abs(knots[i] - top / 2))
    return max((costs[-1] - costs[lower]) / (top - knots[lower]), 0.0)


def transferred_roofline(path: str | Path, measured_on: str | None, model: ModelSpec, hardware: HardwareSpec,
                         tp: int, dtype_bytes: int, block_size: int, paged: bool = True, host: dict | None = None,
                         expert_parallel: ExpertParallel | None = None):
    """The roofline of (model, hardware, tp) at the efficiencies a profile measured elsewhere; `paged=False`
    prices decode attention as a dense kernel (FasterTransformer's). `host` (HOST_TERMS) is charged in series
    instead of the profile's own host work where given; `expert_parallel`: a mixture's experts spread over that
    group (RooflineCostModel's)."""
    from calibrate.clock.roofline import RooflineCostModel
    from calibrate.hardware.hardware import load_hardware

    profile = load_profile(path)
    if profile.device != "cuda":
        raise SpecError(str(path), "device", (
            f"the profile was measured on {profile.device_name} ({profile.device}); only a GPU profile's "
            f"efficiencies carry over to {hardware.name}"))
    if profile.linear is not None and profile.linear.get("gpus"):
        return _two_gpu_roofline(profile, path, model, hardware, tp, dtype_bytes, block_size, paged, host,
                                 expert_parallel)
    name = measured_on or hardware_for_device(profile.device_name)
    if name is None:
        raise SpecError(str(path), "device_name", (
            f"cannot tell which shipped hardware spec {profile.device_name!r} is; set cost_model.measured_on"))
    measured = load_hardware(name)
    if profile.linear is not None:
        from calibrate.cost_models.transfer_cost import (
            by_regime,  # off the measured chip: the roofline where it is no worse
        )

        host = profile.host if host is None else host
        cost = _measured_linear_roofline(profile, Path(path).name, measured, model, hardware, tp, dtype_bytes,
                                         block_size, paged, host=host, expert_parallel=expert_parallel)
        return by_regime(cost, path, measured, model, hardware, tp, dtype_bytes, block_size, paged, host)
    params = implied_efficiency(profile, measured, dtype_bytes)
    cost = RooflineCostModel(model, hardware, tp, dtype_bytes, block_size, params, host=host, paged=paged,
                             expert_parallel=expert_parallel)
    cost.source = (f"roofline({hardware.name}, tp={tp}) at efficiencies from {Path(path).name} "
                   f"({profile.model} on {profile.device_name}: compute {params.compute_efficiency:.2f}, "
                   f"bandwidth {params.bandwidth_efficiency:.2f}, overhead {params.overhead_s * 1e3:.2f} ms)"
                   + (f"; {cost.expert_parallel.describe()}" if cost.expert_parallel is not None else ""))
    return cost


def _two_gpu_roofline(profile: Profile, path: str | Path, model: ModelSpec, hardware: HardwareSpec, tp: int,
                      dtype_bytes: int, block_size: int, paged: bool, host: dict | None,
                      expert_parallel: ExpertParallel | None = None):
    """A profile fitted on two GPUs (calibrate/cost_models/transfer_joint.py): on either of them its own fit in every
    regime; elsewhere by regime as the shipped choice of carry chose (calibrate/cost_models/transfer_cost.by_regime).
    `host` as transferred_roofline's."""
    from calibrate.cost_models.transfer_cost import by_regime
    from calibrate.cost_models.transfer_joint import fit_for

    all_reduce_on, fit, own = fit_for(profile, str(path), hardware)
    cost = _measured_linear_roofline(profile, Path(path).name, all_reduce_on, model, hardware, tp, dtype_bytes,
                                     block_size, paged, fit=fit, host=host, expert_parallel=expert_parallel)
    if own is not None:
        cost.source += f"; {own}'s own fit of the two, in every regime: measured on this chip"
        return cost
    carried = by_regime(cost, path, all_reduce_on, model, hardware, tp, dtype_bytes, block_size, paged,
                        profile.host if host is None else host)
    gpus = " and ".join(profile.linear["gpus"])  # type: ignore[index]
    carried.source = carried.source.replace(f"was measured on {all_reduce_on.name}", f"was measured on {gpus}", 1)
    return carried


def _measured_linear_roofline(profile: Profile, name: str, measured: HardwareSpec, model: ModelSpec,
                              hardware: HardwareSpec, tp: int, dtype_bytes: int, block_size: int,
                              paged: bool = True, fit=None, host: dict | None = None,
                              expert_parallel: ExpertParallel | None = None):
    """The roofline of (model, hardware, tp) with an imported profile's linear part (its efficiencies and
    bend, its kernels' latencies and bandwidths; `fit` in its place where given), its all-reduce table (over
    links as fast as the target's, relative to the measured GPU's) and `host` in series (None: the profile's
    own host work); attention from the profile's measured attention kernels where it has them
    (calibrate/parts/attention_fit.py: their shares of the target's peaks), else from the roofline."""
    from calibrate.clock.roofline import RooflineCostModel
    from calibrate.parts.all_reduce import AllReduceTable
    from calibrate.parts.attention_fit import AttentionFit
    from calibrate.parts.linear_model import LinearFit

    fit = fit or LinearFit.from_dict(profile.linear)
    host = profile.host if host is None else host
    table = None
    if profile.all_reduce is not None:
        table = AllReduceTable.from_dict(profile.all_reduce).scaled(
            hardware.nvlink_bytes_per_s / measured.nvlink_bytes_per_s)
    measured_attention = AttentionFit.from_dict(profile.attention) if profile.attention is not None else None
    # block copies and swaps (and attention, where none was measured) at the roofline's own efficiencies
    cost = RooflineCostModel(model, hardware, tp, dtype_bytes, block_size, RooflineParams(), linear=fit,
                             all_reduce=table, host=host, paged=paged, attention=measured_attention,
                             expert_parallel=expert_parallel)
    if tp == 1:
        comm = ""
    elif table is not None and table.covers(tp):
        comm = f", all-reduce measured on {tp} GPUs" + ("" if hardware.name == measured.name
                                                       else f" of {measured.name}, scaled to {hardware.name}'s NVLink")
    else:
        comm = f", all-reduce by the ring formula (none measured on {tp} GPUs)"
    in_series = ", host work in series" if host is not None else ""
    if measured_attention is not None:
        attention = (f"attention measured in {name} (held-out error {measured_attention.heldout_summary()}; "
                     f"paged as measured, block size {measured_attention.block_size}"
                     f"{waves_note(measured_attention, hardware)})")
    else:
        kernel = (f"paged ({RooflineParams().block_read_overhead_tokens:g} tokens' K/V a block read)" if paged
                  else "dense")
        attention = f"attention at the roofline's defaults, {kernel}"
    experts = (f"; {model.num_experts} experts, {model.experts_per_token} a token, each the measured dense MLP of its "
               f"shape over its routed tokens, routing uniform" if model.is_moe else "")
    if cost.expert_parallel is not None:
        experts += f", {cost.expert_parallel.describe()} at equal load"
    cost.source = (f"roofline({hardware.name}, tp={tp}) with the linear part measured in {name} "
                   f"(on {profile.device_name}: compute {fit.compute_efficiency:.2f}, bandwidth "
                   f"{fit.bandwidth_efficiency:.2f}, ridge {fit.ridge_efficiency:.2f}, held-out error "
                   f"{profile.heldout_mape:.1%}{comm}; {attention}{in_series}{experts})")
    return cost
