"""The clock's one way in: a cost model built from its config.

Where a second of simulated time comes from, in order:
1. an experiment's `cost_model` (sim/experiment/config.py reads it into a CostModelConfig) names a kind;
2. `build_cost_model` calls that kind's builder here (BUILDERS), for the config's model, hardware,
   tensor parallelism, precision (calibrate/hardware/precision.py) and a system's block size and attention kernel
   (Clock), with the host time of the engine `cost_model.host` names (calibrate/parts/host_model.py) in place of the
   kind's own where it names one;
3. the simulator asks the CostModel (calibrate/clock/costmodel.py) for each iteration's `step_time(batch)`;
4. the model's `breakdown(batch)` (calibrate/clock/breakdown.py) is that time by device kernel kind and host term,
   the one formula its fast copies (RooflineTerms, a decode stretch's arrays) are checked against to the bit.

The kinds: `roofline`, spec-sheet physics at stated efficiencies (calibrate/clock/roofline.py); `profile`, an
engine's fitted measurements of one model on one device (calibrate/cost_models/profile_model.py); `transfer`, a
measured profile's efficiencies carried to the config's model and hardware, by regime where a held-out GPU judged
the carry (calibrate/cost_models/profile_model.py transferred_roofline, calibrate/cost_models/transfer_cost.py).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from calibrate.clock.costmodel import CostModel
from calibrate.clock.engine_clock import EngineCostModel
from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.cost_models.label import device_label, engine_label
from calibrate.cost_models.profile_model import ProfileCostModel, transferred_roofline
from calibrate.cost_models.transfer_cost import RegimeCostModel
from calibrate.fitting.profile_file import load_profile
from calibrate.hardware.hardware import HardwareSpec
from calibrate.hardware.precision import Precision
from calibrate.parts.cuda_graphs import vllm_capture_sizes
from calibrate.parts.custom_all_reduce import load_custom_all_reduce
from calibrate.parts.host_model import HostModel, charged_host, host_model_path, load_host_model
from calibrate.work.expert_parallel import ExpertParallel
from engine.core.spec import ModelSpec
from engine.errors import SpecError


@dataclass(frozen=True)
class CostModelConfig:
    """An experiment's `cost_model`, read and checked (sim/experiment/config.py)."""

    kind: str  # one of BUILDERS
    profile_path: Path | None = None  # profile and transfer: the profile file
    roofline: RooflineParams = RooflineParams()  # roofline: its efficiencies and costs
    measured_on: str | None = None  # transfer: the hardware the profile was measured on (else its device_name's)
    # transfer: each KV block a paged decode reads costs as much as this many more tokens' K/V, over the attention
    # the profile prices (RooflineCostModel.charge_block_reads); None: the profile's own (none over measured
    # attention, the roofline's default per-block term otherwise)
    block_read_overhead_tokens: float | None = None
    host: Path | None = None  # any kind: a host model's file (calibrate/parts/host_model.py), charged as the host time
    # false: the engine model's CUDA-graph padding switched off (an engine run eager); None: as its engine model says
    cuda_graphs: bool | None = None


@dataclass(frozen=True)
class Clock:
    """What a cost model prices: one replica's model on its hardware, and the system's KV blocks and kernel."""

    model: ModelSpec
    hardware: HardwareSpec
    tensor_parallel: int = 1
    precision: Precision = Precision()
    block_size: int = 16
    paged: bool = True  # the paged attention kernel (vLLM's, and the Orca baselines'); False: a dense one (FT's)
    # the system's scheduler, as an engine model's mechanisms read it: whether it schedules asynchronously, and the
    # limits that size its CUDA graphs
    async_scheduling: bool = False
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    # a mixture served with expert parallelism over this data-parallel group (None: its experts split by tensor
    # parallelism alone, or a dense model)
    expert_parallel: ExpertParallel | None = None


def _roofline(config: CostModelConfig, clock: Clock, host: dict | None) -> CostModel:
    return RooflineCostModel(clock.model, clock.hardware, clock.tensor_parallel, block_size=clock.block_size,
                             params=config.roofline, host=host, paged=clock.paged, precision=clock.precision,
                             expert_parallel=clock.expert_parallel)


def _profile(config: CostModelConfig, clock: Clock, host: dict | None) -> CostModel:
    # an engine's profile timed its own kernel: the system's `paged` does not change what it measured
    cost = ProfileCostModel.from_profile(_path(config), clock.model, clock.hardware, clock.tensor_parallel,
                                         clock.precision.kv_bytes, clock.block_size)
    if host is not None:
        cost.replace_host(host)
    return cost


def _transfer(config: CostModelConfig, clock: Clock, host: dict | None) -> CostModel:
    cost = transferred_roofline(_path(config), config.measured_on, clock.model, clock.hardware,
                                clock.tensor_parallel, clock.precision.kv_bytes, clock.block_size,
                                clock.paged, host, clock.expert_parallel)
    if config.block_read_overhead_tokens is not None:
        if not isinstance(cost, (RooflineCostModel, RegimeCostModel)):
            raise SpecError(str(config.profile_path), "cost_model.block_read_overhead_tokens",
                            "only a transfer priced by a roofline charges a paged kernel's per-block cost")
        cost.charge_block_reads(config.block_read_overhead_tokens)
    return cost


# each builder gets the config's host model resolved for the clock (HOST_TERMS), or None: the kind's own host work
BUILDERS: dict[str, Callable[[CostModelConfig, Clock, dict | None], CostModel]] = {
    "roofline": _roofline, "profile": _profile, "transfer": _transfer}
KINDS = tuple(BUILDERS)
PROFILE_KINDS = ("profile", "transfer")  # the kinds read from a profile file (cost_model.path)


def build_cost_model(config: CostModelConfig, clock: Clock, source: str = "") -> CostModel:
    """The cost model a config (the file `source`) asks for; an unknown kind is a one-line error naming the key."""
    builder = BUILDERS.get(config.kind)
    if builder is None:
        raise SpecError(source, "cost_model.kind", f"{config.kind!r} is not one of {list(KINDS)}")
    if config.kind in PROFILE_KINDS:
        check_measured_precision(clock.precision, config.kind, source)
    if config.kind == "profile" and clock.expert_parallel is not None:
        raise SpecError(source, "expert_parallel", "a profile cost model prices its own engine's measured iterations, "
                        "none of them expert-parallel; use cost_model roofline or transfer")
    host_path, defaulted = config.host, False
    if host_path is None and config.kind in PROFILE_KINDS:
        host_path = profile_host_model(_path(config))
        defaulted = host_path is not None
    group = clock.expert_parallel if clock.model.is_moe else None  # a dense model has no experts to spread
    device = device_label(config.kind, config.profile_path.name if config.profile_path is not None else None,
                          clock.hardware.name, clock.tensor_parallel, group.degree if group is not None else None)
    if host_path is None:
        cost = builder(config, clock, None)
        cost.label = device
        return cost
    host, named = charged_host(host_path, clock.model, clock.tensor_parallel)
    cost = builder(config, clock, host)
    cost.source = f"{cost.source}; {named}" + (", the profile's default host model" if defaulted else "")
    engine_model = load_host_model(host_path)
    cost.name_host_terms(partial(engine_model.breakdown, clock.model, clock.tensor_parallel))
    cost, applied = with_engine(cost, engine_model, config, clock)
    cost.label = device + engine_label(engine_model.name, applied)
    return cost


def with_engine(cost: CostModel, engine_model: HostModel, config: CostModelConfig, clock: Clock
                ) -> tuple[CostModel, list[str]]:
    """The cost model under its engine's mechanisms (calibrate/clock/engine_clock.py), and the mechanisms that apply
    here: vLLM's custom all-reduce where it runs for this tensor-parallel group, the host overlapping the GPU where
    the engine and the system both schedule asynchronously (its serial terms still in series), CUDA-graph padding
    unless the config turns it off; the cost model itself where neither of the last two applies."""
    engine = engine_model.engine
    custom = engine.custom_all_reduce and with_custom_all_reduce(cost, clock)
    overlap = engine.overlap and clock.async_scheduling
    graphs = engine.cuda_graphs and config.cuda_graphs is not False
    sizes = vllm_capture_sizes(clock.max_num_seqs, clock.max_num_batched_tokens) if graphs else ()
    applied = [tag for tag, on in (("async", overlap), ("CUDA graphs", bool(sizes)), ("custom all-reduce", custom))
               if on]
    if not overlap and not sizes:
        return cost, applied
    serial = partial(engine_model.serial_time, clock.model, clock.tensor_parallel) if engine.serial else None
    return EngineCostModel(cost, overlap, sizes, serial), applied


def with_custom_all_reduce(cost: CostModel, clock: Clock) -> bool:
    """Every roofline inside the cost model all-reduces its small messages with vLLM's custom kernel, where vLLM
    runs it for this tensor-parallel group (calibrate/parts/custom_all_reduce.py); whether it applies."""
    custom = load_custom_all_reduce()
    if not custom.applies(clock.hardware, clock.tensor_parallel):
        return False
    for model in roofline_models(cost):
        nccl = model.all_reduce_table
        beyond = nccl.time if nccl is not None else model.ring_message_time
        model.use_all_reduce(custom.on(clock.hardware, beyond))
    cost.source += (f"; all-reduces up to {custom.max_bytes / 2**20:g} MiB by vLLM's custom kernel, as measured on "
                    f"{custom.measured_on.name}" + ("" if custom.measured_on.name == clock.hardware.name
                                                    else f" and carried to {clock.hardware.name}'s links"))
    return True


def roofline_models(cost: CostModel) -> list[RooflineCostModel]:
    """The rooflines a cost model prices with: itself, or each of a regime model's."""
    if isinstance(cost, RegimeCostModel):
        return list(cost.models)
    return [cost] if isinstance(cost, RooflineCostModel) else []


def check_measured_precision(precision: Precision, kind: str, source: str) -> None:
    """A profile was measured at 16 bits (or at the legacy dtype_bytes, all bytes alike): quantized weights or
    an FP8 KV cache are the roofline's to price, not measured times scaled by a guess."""
    if not precision.is_sixteen_bit:
        raise SpecError(source, "precision", (
            f"weights {precision.weights}, kv_cache {precision.kv_cache}: a {kind} cost model's profile was measured "
            "at 16 bits and does not price other formats; the roofline prices them (cost_model: roofline)"))


def profile_host_model(path: Path) -> Path | None:
    """The host model a profile names as its default (Profile.host_model), or None."""
    name = load_profile(path).host_model
    return host_model_path(name) if name is not None else None


def _path(config: CostModelConfig) -> Path:
    if config.profile_path is None:
        raise SpecError("", "cost_model.path", f"a {config.kind} cost model needs the profile's path")
    return config.profile_path
