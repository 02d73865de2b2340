"""Experiment YAML -> typed, validated values. Every error names the file and key path."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calibrate.clock.costmodel import CostModel
from calibrate.clock.roofline import RooflineParams
from calibrate.clock.speculative_pricing import SpeculativeCostModel
from calibrate.cost_models.default_clock import default_device_profile
from calibrate.cost_models.registry import KINDS, PROFILE_KINDS, Clock, CostModelConfig, build_cost_model
from calibrate.fitting.profile_file import SHIPPED_PROFILES
from calibrate.hardware.hardware import SHIPPED_SHEETS, HardwareSpec, available_hardware, load_hardware
from calibrate.hardware.precision import Precision, precision_from_config
from calibrate.parts.host_model import SHIPPED_HOST_MODELS, available_host_models, host_model_path, load_host_model
from calibrate.parts.kv_link import KVLink, check_moves_a_token, kv_bytes, link_from_config
from calibrate.work.expert_parallel import ExpertParallel
from engine.core.spec import ModelSpec
from engine.core.system import CHUNKED_POLICIES, PAPER_SYSTEMS, PRESETS, SystemSpec
from engine.errors import SpecError
from engine.specs.checks import choice, known_keys, non_negative, number, share
from engine.specs.loader import SHIPPED_MODELS, load_model_spec, read_yaml, system_from_dict
from engine.specs.paths import Shipped, names_hint, resolve_path
from sim.core.routers import ROUTER_KINDS, RouterSpec
from sim.experiment.acceptance_table import with_table_rates
from sim.experiment.closed_loop import concurrencies_from_config, listed, rate_value
from sim.experiment.expert_parallel_config import expert_parallel_from_config, expert_parallel_group
from sim.experiment.goodput import check_slos
from sim.experiment.keys import read_keys
from sim.experiment.kv_pool import GIB, KVPool, block_bytes, kv_cache_bytes_by_rule, kv_pool, weight_bytes_per_gpu
from sim.experiment.overrides import apply_overrides, blamed_on_overrides
from sim.experiment.proposer_memory import proposer_memory
from sim.experiment.router_config import check_router, router_from_config
from sim.experiment.speculation import check_prefill_pool, check_requests, check_trace, proposer_model, with_drafts
from sim.experiment.split_config import (
    POOL_KEYS,
    PoolConfig,
    SplitConfig,
    check_one_sequence,
    pool_system,
    routed_systems,
    split_from_config,
)
from sim.workload.config import MAX_DURATION_S, WorkloadConfig, recorded, replayed
from sim.workload.lengths import data_path, load_lengths, longest_prefix

# the engine a config that names no cost model is priced as: vLLM 0.19's V1 engine (calibrate/host_models/)
DEFAULT_ENGINE = "vllm-0.19"
ROUTERS = ROUTER_KINDS
# Sizes past which a run would exhaust memory or time before it reports anything: every KV block (GPU and swap) an
# entry in a free list, and a generated workload's arrivals are drawn up front (the replicas': sim/experiment/keys.py).
MAX_KV_BLOCKS = 2**25
MAX_REQUESTS = 10_000_000


@dataclass(frozen=True)
class Experiment:
    name: str
    source: str
    model: ModelSpec
    hardware: HardwareSpec
    tensor_parallel: int
    precision: Precision
    kv_cache_gib: float | None
    swap_space_gib: float
    cost_model: CostModelConfig
    workload: WorkloadConfig
    systems: tuple[SystemSpec, ...]
    rates: tuple[float, ...]
    seeds: tuple[int, ...]
    warmup_s: float
    max_time_factor: float
    replicas: int
    router: RouterSpec
    raw: dict = field(default_factory=dict, compare=False)
    breakdown: bool = False  # each iteration's breakdown in the iterations file, its shares in the summary
    trace_events: bool = False  # each run's trace.json.gz too
    split: SplitConfig | None = None  # a prefill pool and a decode pool (sim/experiment/split_config.py)
    # the replicas are one data-parallel group with expert parallelism (sim/experiment/expert_parallel_config.py)
    expert_parallel: bool = False
    vllm_bench: bool = False  # each run's vllm_bench.json too (sim/experiment/vllm_bench.py)
    # goodput's objectives in ms by vLLM's metric names (sim/experiment/goodput.py), as pairs: a value, hashable
    goodput: tuple[tuple[str, float], ...] = ()
    # each run's client gate (sim/experiment/closed_loop.py): the swept values, or workload.max_concurrency's one
    concurrencies: tuple[int | None, ...] = (None,)

    @property
    def num_gpus(self) -> int:
        """GPUs the fleet takes: its replicas' tensor-parallel groups, pool by pool for a split fleet."""
        if self.split is None:
            return self.replicas * self.tensor_parallel
        return sum(pool.replicas * (pool.tensor_parallel or self.tensor_parallel)
                   for pool in (self.split.prefill, self.split.decode))

    @property
    def expert_parallel_group(self) -> ExpertParallel | None:
        """The data-parallel group whose GPUs hold the experts between them; None without expert parallelism."""
        return expert_parallel_group(self.expert_parallel, self.replicas, self.tensor_parallel)

    def at_concurrency(self, concurrency: int | None) -> Experiment:
        """The experiment whose every run is gated at `concurrency` (None: not gated): one of `concurrencies`."""
        if self.workload.max_concurrency == concurrency:
            return self
        return dataclasses.replace(self, workload=dataclasses.replace(self.workload, max_concurrency=concurrency))

    def kv_pool(self, system: SystemSpec) -> KVPool:
        group = self.expert_parallel_group
        proposer = proposer_memory(system.speculative, self.model, self.precision, self.tensor_parallel,
                                   system.block_size, group)
        return kv_pool(self.model, self.hardware, self.tensor_parallel, self.precision,
                       system.block_size, self.kv_cache_gib, self.swap_space_gib, group, proposer)


# --- small validators ----------------------------------------------------------------
def _name(value: Any, source: str) -> str:
    """The experiment's name: results/<name> is its default output folder, so a plain folder name."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SpecError(source, "name", f"must be a plain name (it names results/<name>), got {value!r}")
    name = str(value)
    if not name.strip() or name in (".", "..") or any(sep in name for sep in ("/", "\\", "\0")):
        raise SpecError(source, "name", f"must be a plain name without / (it names the folder results/<name>), "
                        f"got {name!r}")
    return name


def _list_of(value: Any, source: str, key: str, check) -> tuple:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]  # `rates: 2` means `rates: [2]`
    if not isinstance(value, list) or not value:
        raise SpecError(source, key, f"must be a non-empty list, got {value!r}")
    return tuple(check(v, source, f"{key}[{i}]") for i, v in enumerate(value))


def _seed(value: Any, source: str, key: str) -> int:
    return number(value, source, key, low=0, whole=True)


def default_cost_model(hardware: HardwareSpec, precision: Precision) -> CostModelConfig:
    """What prices a config that names no cost model: the GPU's device clock (its own measured profile where servesim
    ships one, else the A100's carried: calibrate/cost_models/default_clock.py; the roofline for weights or a KV cache
    below 16 bits, which no profile measured) and vLLM 0.19's engine model (DEFAULT_ENGINE), the engine users run
    today."""
    engine = host_model_path(DEFAULT_ENGINE)
    if not precision.is_sixteen_bit:
        return CostModelConfig("roofline", host=engine)
    return CostModelConfig("transfer", default_device_profile(hardware), host=engine)


def _cost_model(raw: Any, source: str, base_dir: Path) -> CostModelConfig:
    if raw is None or raw == "roofline":
        return CostModelConfig("roofline")
    if isinstance(raw, str):
        return CostModelConfig("profile", _resolve(raw, base_dir, source, "cost_model"))
    if not isinstance(raw, dict):
        raise SpecError(source, "cost_model", "must be 'roofline', a profile path, or a mapping")
    raw = dict(raw)
    kind = raw.pop("kind", "roofline")
    _check_cost_model_keys(kind, raw, source)
    host = _host_model(raw.pop("host"), base_dir, source) if "host" in raw else None
    graphs = _cuda_graphs(raw.pop("cuda_graphs"), host, source) if "cuda_graphs" in raw else None
    if kind in PROFILE_KINDS:
        if "path" not in raw:
            raise SpecError(source, "cost_model.path", f"a {kind} cost model needs the profile's path")
        path = _resolve(raw.pop("path"), base_dir, source, "cost_model.path")
        measured_on = raw.pop("measured_on", None)
        if measured_on is not None:
            choice(measured_on, source, "cost_model.measured_on", available_hardware())
        block_reads = raw.pop("block_read_overhead_tokens", None)
        if block_reads is not None:
            non_negative(block_reads, source, "cost_model.block_read_overhead_tokens")
        return CostModelConfig(kind, path, measured_on=measured_on, host=host, block_read_overhead_tokens=block_reads,
                               cuda_graphs=graphs)
    if "swap_transfer_latency_s" in raw and "swap_copy_latency_s" not in raw:  # its name before: still read
        raw["swap_copy_latency_s"] = raw.pop("swap_transfer_latency_s")
    for key, value in raw.items():
        # an efficiency is a share of the spec sheet's peak: none is nothing, more than all is a typo
        (share if key.endswith("_efficiency") else non_negative)(value, source, f"cost_model.{key}")
    return CostModelConfig("roofline", roofline=RooflineParams(**raw), host=host, cuda_graphs=graphs)


def _check_cost_model_keys(kind: Any, raw: dict, source: str) -> None:
    """A cost model mapping's kind and its other keys (`raw`), checked before any file it names is looked for: a
    missing file would hide a mistyped key."""
    choice(kind, source, "cost_model.kind", list(KINDS))
    if kind in PROFILE_KINDS:
        valid = ["cuda_graphs", "host", "kind", "path"] + (["block_read_overhead_tokens", "measured_on"]
                                                           if kind == "transfer" else [])
    else:
        valid = sorted(set(RooflineParams.__dataclass_fields__) | {"kind", "host", "cuda_graphs"})
    former = {"swap_transfer_latency_s"} if kind == "roofline" else set()  # a key's name before, still read
    known_keys([key for key in raw if key not in former], valid, source, "cost_model")


def _cuda_graphs(value: Any, host: Path | None, source: str) -> bool:
    """cost_model.cuda_graphs: false runs the engine model's iterations eager (no padding to captured sizes)."""
    if not isinstance(value, bool):
        raise SpecError(source, "cost_model.cuda_graphs", f"must be true or false, got {value!r}")
    if host is None or not load_host_model(host).engine.cuda_graphs:
        raise SpecError(source, "cost_model.cuda_graphs", "only an engine model that replays CUDA graphs reads it "
                        "(cost_model.host naming one, e.g. a vLLM V1 engine model); remove the key")
    return value


def _host_model(value: Any, base_dir: Path, source: str) -> Path:
    """cost_model.host: a shipped host model's name, or a host model YAML's path (resolved as a profile's)."""
    key = "cost_model.host"
    if not isinstance(value, str) or not value.strip():
        raise SpecError(source, key, f"must be a shipped host model's name {available_host_models()} or a host "
                        f"model YAML's path, got {value!r}")
    if Path(value).suffix in (".yaml", ".yml"):
        return resolve_path(value, base_dir, source, key, SHIPPED_HOST_MODELS, what="a host model YAML")
    if value not in available_host_models():
        shipped = names_hint(value, available_host_models(), "shipped")
        raise SpecError(source, key, f"unknown host model {value!r}{shipped} (or a host model YAML's path)")
    return host_model_path(value)


def _resolve(path: Any, base_dir: Path, source: str, key: str) -> Path:
    """A profile: a path (beside the config, then in the current folder) or a shipped profile's name."""
    if not isinstance(path, str) or not path.strip():
        raise SpecError(source, key, f"must be a profile's path or a shipped profile's name, got {path!r}")
    return resolve_path(path, base_dir, source, key, SHIPPED_PROFILES, what="a profile YAML")


def _systems(raw: Any, source: str, hardware: HardwareSpec) -> tuple[SystemSpec, ...]:
    if raw is None:
        raw = list(PAPER_SYSTEMS)
    if not isinstance(raw, list) or not raw:
        raise SpecError(source, "systems", f"must be a non-empty list of presets {sorted(PRESETS)} or mappings")
    systems = tuple(system_from_dict(item, source, f"systems[{i}]", hardware.serving_gpu) for i, item in enumerate(raw))
    names = [s.name for s in systems]
    for i, name in enumerate(names):
        if names.index(name) != i:
            raise SpecError(source, f"systems[{i}].name", f"duplicate system name {name!r}")
    return systems


def _lookup(loader, value: Any, source: str, key: str, base_dir: Path, shipped: Shipped):
    """A shipped spec by name, or a YAML file beside the config, then in the current folder."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(source, key, f"must be a name or a path, got {value!r}")
    if Path(value).suffix in (".yaml", ".yml"):
        value = resolve_path(value, base_dir, source, key, shipped, what=f"a {shipped.what} YAML")
    try:
        return loader(value)
    except SpecError as err:
        if err.source in ("model", "hardware"):
            raise SpecError(source, key, err.message) from None
        raise


def _served_model(raw: dict, source: str, base_dir: Path) -> ModelSpec:
    """The model as it is served: its spec, with max_model_len (a server's own cap, vLLM's --max-model-len, which a
    GPU too small for the model's whole context needs) in place of its max_seq_len where the config gives one."""
    model = _lookup(load_model_spec, raw["model"], source, "model", base_dir, SHIPPED_MODELS)
    cap = raw.get("max_model_len")
    if cap is None:
        return model
    cap = number(cap, source, "max_model_len", low=2, high=model.max_seq_len, whole=True)
    return dataclasses.replace(model, max_seq_len=cap)


# --- the experiment ----------------------------------------------------------------------
def experiment_from_dict(raw: dict, source: str, base_dir: Path, *, check_warmup: bool = True,
                         check_profile: bool = True) -> Experiment:
    """A checked experiment. A validation turns off the checks of what it replaces: warmup_s (by its
    warmup_fraction) and the profile (by one it calibrates first)."""
    if not isinstance(raw, dict):
        raise SpecError(source, "", "an experiment file must be a YAML mapping")
    given = read_keys(raw, source)
    hardware = _lookup(load_hardware, raw["hardware"], source, "hardware", base_dir, SHIPPED_SHEETS)
    # `precision: {weights, kv_cache}`, or the legacy `dtype_bytes` (every byte count), not both
    precision = precision_from_config(given["precision"], given["dtype_bytes"], source)
    model = _served_model(raw, source, base_dir)
    exp = Experiment(
        name=_name(raw.get("name", Path(source).stem), source),
        source=source,
        model=model,
        hardware=hardware,
        tensor_parallel=given["tensor_parallel"],
        precision=precision,
        kv_cache_gib=given["kv_cache_gib"],
        swap_space_gib=given["swap_space_gib"],
        cost_model=(_cost_model(given["cost_model"], source, base_dir) if given["cost_model"] is not None
                    else default_cost_model(hardware, precision)),
        workload=WorkloadConfig.from_dict(given["workload"], source, base_dir, model),
        systems=_systems(given["systems"], source, hardware),
        rates=_list_of(listed(given["rates"]), source, "rates", rate_value),
        seeds=_list_of(given["seeds"], source, "seeds", _seed),
        warmup_s=given["warmup_s"],
        max_time_factor=given["max_time_factor"],
        replicas=given["replicas"],
        router=router_from_config(given["router"], source),
        raw=raw,
        breakdown=given["breakdown"] or given["trace_events"],
        trace_events=given["trace_events"],
        split=split_from_config(given["split"], source, base_dir, hardware),
        vllm_bench=given["vllm_bench"] or given["goodput"] is not None,
        goodput=tuple(check_slos(given["goodput"], source, "goodput").items()) if given["goodput"] is not None
        else (),
    )
    exp = dataclasses.replace(exp, concurrencies=concurrencies_from_config(raw, exp.workload, source))
    exp = _with_proposers(exp, base_dir)
    if "expert_parallel" in raw:
        exp = dataclasses.replace(exp, expert_parallel=expert_parallel_from_config(
            raw["expert_parallel"], exp.model, exp.replicas, exp.tensor_parallel, exp.split is not None, source))
    check_router(exp.router, routed_systems(exp.split, exp.systems), source)
    check_parallelism(exp)
    check_batching(exp)
    check_requests(exp.systems, exp.workload, source)
    check_fits(exp)
    check_split(exp)
    if check_profile:
        check_cost_model(exp)
    check_closed_loop(exp, check_warmup)
    check_workload(exp, check_warmup)
    return exp


def _with_proposers(exp: Experiment, base_dir: Path) -> Experiment:
    """Each speculating system with its draft model loaded and its table's acceptance read: the systems run, and a
    split's decode pool's own system (the pool that speculates)."""
    def resolved(systems: tuple[SystemSpec, ...], keys: tuple[str, ...] | None) -> tuple[SystemSpec, ...]:
        systems = with_drafts(systems, exp.model, exp.source, lambda value, key: _lookup(
            load_model_spec, value, exp.source, key, base_dir, SHIPPED_MODELS), keys)
        return with_table_rates(systems, exp.model.name, exp.source, base_dir, keys)
    if any(system.speculative is not None for system in exp.systems):
        exp = dataclasses.replace(exp, systems=resolved(exp.systems, None))
    split = exp.split
    if split is not None and split.decode.system is not None and split.decode.system.speculative is not None:
        (system,) = resolved((split.decode.system,), ("split.decode.system",))
        exp = dataclasses.replace(exp, split=dataclasses.replace(split, decode=dataclasses.replace(split.decode,
                                                                                                  system=system)))
    return exp


def pool_experiment(exp: Experiment, pool: PoolConfig) -> Experiment:
    """The experiment as one pool sees it: its replicas, and its own GPU, tensor parallelism and KV cache where
    it names them."""
    return dataclasses.replace(
        exp, replicas=pool.replicas, hardware=pool.hardware or exp.hardware,
        tensor_parallel=pool.tensor_parallel or exp.tensor_parallel,
        kv_cache_gib=pool.kv_cache_gib if pool.kv_cache_gib is not None else exp.kv_cache_gib, split=None)


def check_split(exp: Experiment) -> None:
    """A split fleet's replicas are counted per pool, and keep no breakdown; its pools (check_pools)."""
    if exp.split is None:
        return
    if exp.replicas != 1:
        raise SpecError(exp.source, "replicas", "a split fleet counts its replicas per pool (split.prefill.replicas, "
                        "split.decode.replicas); leave replicas out")
    if exp.breakdown:
        raise SpecError(exp.source, "breakdown", "a split fleet's runs keep no per-iteration breakdown (nor "
                        "trace_events); leave both out with split")
    if exp.split.prefill.system is not None:
        check_prefill_pool(exp.split.prefill.system, exp.source, "split.prefill.system")
    check_pools(exp)


def check_pools(exp: Experiment) -> None:
    """Each pool's parallelism and memory, as the experiment's own are checked, its keys named; the link; the
    systems and the requests a split serves (vLLM, one sequence each). The splits a capacity search makes of a
    config are checked here too (sim.capacity.split)."""
    split = exp.split
    if split is None:
        return
    for name, pool in (("prefill", split.prefill), ("decode", split.decode)):
        variant = pool_experiment(exp, pool)
        if pool.system is not None:  # the pool runs its own system, whatever the experiment's are
            variant = dataclasses.replace(variant, systems=(pool.system,))
        if name == "prefill":  # its replicas never speculate: its memory holds no proposer
            variant = dataclasses.replace(variant, systems=tuple(pool_system(pool, s, False) for s in variant.systems))
        try:
            check_parallelism(variant)
            check_batching(variant)
            check_fits(variant)
        except SpecError as err:
            raise SpecError(exp.source, _pool_key(name, pool, err.key), err.message) from None
    kv_link_of(exp, split)
    check_split_systems(exp)
    check_one_sequence(exp.workload, exp.model.max_seq_len, exp.source)


def _pool_key(name: str, pool: PoolConfig, key: str) -> str:
    """The key a pool's check names: the pool's own where the pool has it (split.decode.kv_cache_gib,
    split.decode.system.max_num_seqs), the pool itself for its weights (split.decode: its GPU or its tensor
    parallelism), else the experiment's (workload.n, swap_space_gib, systems[0].max_num_batched_tokens)."""
    if pool.system is not None and key.startswith("systems[0]"):
        key = "system" + key.removeprefix("systems[0]")
    if key == "model":
        return f"split.{name}"
    return f"split.{name}.{key}" if key.split(".")[0] in POOL_KEYS else key


def check_split_systems(exp: Experiment) -> None:
    """A split fleet's decode replicas take requests prefilled elsewhere, which only vLLM's paged scheduler does."""
    for i, system in enumerate(exp.systems):
        if system.kind != "vllm":
            raise SpecError(exp.source, f"systems[{i}]", (
                f"{system.name} is {system.kind}: only vLLM (kind vllm) serves a prefill:decode split, its decode "
                "replicas receiving KV prefilled elsewhere"))


def pool_label(exp: Experiment, pool: PoolConfig) -> str:
    """A split pool as the command's header says it: replicas x GPUs each x GPU."""
    return (f"{pool.replicas} x {pool.tensor_parallel or exp.tensor_parallel} x "
            f"{(pool.hardware or exp.hardware).name}")


def kv_link_of(exp: Experiment, split: SplitConfig) -> KVLink:
    """The split fleet's KV link, read against the prefill pool's GPU (calibrate/parts/kv_link.py): one that takes
    longer than the longest workload to copy a single token's KV is refused, since none of its copies could end
    in a run (and a long prompt's time would overflow)."""
    key = "split.kv_link"
    link = link_from_config(split.kv_link, split.prefill.hardware or exp.hardware, exp.source, key=key)
    token_bytes = kv_bytes(exp.model, 1, exp.precision.kv_bytes)
    check_moves_a_token(link, token_bytes, kv_copy_parallel(exp, split), MAX_DURATION_S,
                        f"the longest workload ({MAX_DURATION_S:g} s of arrivals)", exp.source, key)
    return link


def kv_copy_parallel(exp: Experiment, split: SplitConfig) -> int:
    """The GPUs a request's KV copy runs over at once: the smaller pool's tensor parallelism (each of its GPUs
    sends, or receives, its share over its own link)."""
    return min(split.prefill.tensor_parallel or exp.tensor_parallel,
               split.decode.tensor_parallel or exp.tensor_parallel)


def check_cost_model(exp: Experiment) -> None:
    """The cost model is built now, as every run will build it: a profile's numbers, its model and its tensor
    parallelism, and a host model resolved for them, are checked before anything is simulated."""
    clock_for(exp, exp.systems[0])


def clock_for(exp: Experiment, system: SystemSpec) -> CostModel:
    """The cost model one of the experiment's systems runs on (calibrate/cost_models/registry.py): FasterTransformer
    ran its own dense attention kernel in the paper; vLLM and the Orca baselines the paged one. A speculating
    system's prices its verify steps and its proposer on it (calibrate/clock/speculative_pricing.py)."""
    clock = Clock(exp.model, exp.hardware, exp.tensor_parallel, exp.precision, system.block_size,
                  paged=system.kind != "fastertransformer", async_scheduling=system.async_scheduling,
                  max_num_seqs=system.max_seqs_per_batch, max_num_batched_tokens=system.max_num_batched_tokens,
                  expert_parallel=exp.expert_parallel_group)
    cost_model = build_cost_model(exp.cost_model, clock, exp.source)
    spec = system.speculative
    if spec is None:
        return cost_model
    plain = dataclasses.replace(system, speculative=None)
    proposer = proposer_model(spec, exp.model)
    if proposer is None:
        return SpeculativeCostModel(cost_model, spec.method, None)
    # a draft is a dense model of its own; a head is a layer of the target, its experts placed as the target's
    variant = dataclasses.replace(exp, model=proposer, expert_parallel=exp.expert_parallel and spec.method != "draft")
    return SpeculativeCostModel(cost_model, spec.method, clock_for(variant, plain))


def check_parallelism(exp: Experiment) -> None:
    """Tensor parallelism splits attention by heads: every GPU gets whole heads, and whole KV heads."""
    model, tp = exp.model, exp.tensor_parallel
    for heads, what in ((model.num_heads, "attention heads"), (model.num_kv_heads, "KV heads")):
        if heads % tp:
            common = math.gcd(model.num_heads, model.num_kv_heads)
            valid = [d for d in range(1, common + 1) if common % d == 0]
            raise SpecError(exp.source, "tensor_parallel", f"{tp} does not divide {model.name}'s {heads} {what}; "
                            f"valid: {valid}")


def check_batching(exp: Experiment) -> None:
    """vLLM prefills a prompt in one iteration, so its token cap must hold the longest one (the paper-era
    engine refused a smaller cap): else the mixed scheduler would leave a longer prompt waiting for good and the
    separate one ignore it, so the config is refused here, naming chunked prefill, which splits a prompt. And
    every system must be able to batch one request's n samples."""
    model = exp.model
    for i, system in enumerate(exp.systems):
        cap = system.max_num_batched_tokens
        # chunked prefill splits a prompt over iterations: its budget may be smaller than one
        if system.kind == "vllm" and system.prefill_policy not in CHUNKED_POLICIES and cap is not None \
                and cap < model.max_seq_len:
            raise SpecError(exp.source, f"systems[{i}].max_num_batched_tokens", (
                f"{cap} tokens per iteration cannot prefill a {model.max_seq_len}-token prompt ({model.name}'s "
                f"max_seq_len) under prefill_policy {system.prefill_policy}, which prefills a prompt in one "
                f"iteration; give at least {model.max_seq_len}, null for no cap, or prefill_policy: chunked, "
                "which splits a prompt over iterations"))
        if exp.workload.n is not None and exp.workload.n > seqs_per_batch(system):
            raise SpecError(exp.source, "workload.n", (
                f"{exp.workload.n} samples per request can never run together: {system.name} batches at most "
                f"{seqs_per_batch(system)} sequences (systems[{i}]); give at most {seqs_per_batch(system)}"))
        v1 = system.kind == "vllm" and system.prefill_policy == "v1"
        if exp.workload.n is not None and exp.workload.n > 1 and v1:
            raise SpecError(exp.source, "workload.n", (
                f"{exp.workload.n} samples per request: {system.name} (systems[{i}]) is vLLM V1, which fans a request "
                "of n samples out into n requests of one sample that share the prompt's cached blocks; simulate them "
                "as such (n: 1 at n times the rate, with prefix caching), or give a vllm system of another "
                "prefill_policy"))
        width = exp.workload.beam_width
        if width is not None and width > 1 and v1:
            raise SpecError(exp.source, "workload.beam_width", (
                f"{width} beams per request: {system.name} (systems[{i}]) is vLLM V1, whose engine searches no "
                "beams (its beam search is a loop of one-token requests outside the scheduler); give 1, or a vllm "
                "system of another prefill_policy"))
        if width is not None and width > seqs_per_batch(system):
            raise SpecError(exp.source, "workload.beam_width", (
                f"{width} beams per request can never run together: {system.name} batches at most "
                f"{seqs_per_batch(system)} sequences (systems[{i}]); give at most {seqs_per_batch(system)}"))


def seqs_per_batch(system: SystemSpec) -> int:
    """The most sequences one iteration runs: FasterTransformer's B, else max_num_seqs."""
    return system.max_seqs_per_batch


def check_fits(exp: Experiment) -> None:
    """The weights and the KV cache fit the GPUs, the pools fit the simulator's memory, and the KV pool
    holds at least one max-length request."""
    src, model, hw, tp = exp.source, exp.model, exp.hardware, exp.tensor_parallel
    weights = weight_bytes_per_gpu(model, exp.precision, tp, exp.expert_parallel_group)
    if weights >= hw.memory_bytes:
        raise SpecError(src, "model", (
            f"{model.name} needs {weights / GIB:.1f} GiB of weights per GPU at tensor_parallel={tp}, "
            f"but {hw.name} has {hw.memory_gib} GiB; raise tensor_parallel or choose larger hardware"))
    if exp.kv_cache_gib is not None and weights + exp.kv_cache_gib * GIB > hw.memory_bytes:
        raise SpecError(src, "kv_cache_gib", (
            f"{exp.kv_cache_gib:g} GiB of KV cache and {weights / GIB:.1f} GiB of weights per GPU do not fit "
            f"{hw.name}'s {hw.memory_gib:g} GiB; at most {(hw.memory_bytes - weights) / GIB:.2f}"))
    for system in exp.systems:
        _check_pool_size(exp, system)
        pool = exp.kv_pool(system)
        if pool.num_slots < model.max_seq_len:
            key = "kv_cache_gib" if exp.kv_cache_gib is not None else "hardware"
            raise SpecError(src, key, (
                f"the KV pool holds {pool.num_slots} tokens ({pool.num_gpu_blocks} blocks of "
                f"{system.block_size}) for {system.name}, less than one {model.max_seq_len}-token request; "
                f"give at least {model.max_seq_len * pool.block_bytes / system.block_size / GIB:.2f} GiB"))


def _check_pool_size(exp: Experiment, system: SystemSpec) -> None:
    """Counted in floats before the pool is built: a huge swap_space_gib would not even convert to blocks."""
    per_block = block_bytes(exp.model, system.block_size, exp.tensor_parallel, exp.precision)
    gpu = max(kv_cache_bytes_by_rule(exp.model, exp.hardware, exp.tensor_parallel, exp.precision,
                                     expert_parallel=exp.expert_parallel_group), 0) \
        if exp.kv_cache_gib is None else exp.kv_cache_gib * GIB
    swap = exp.swap_space_gib * GIB
    blocks = exp.replicas * (gpu + swap) / per_block
    if blocks > MAX_KV_BLOCKS:
        key = "swap_space_gib" if swap > gpu else ("kv_cache_gib" if exp.kv_cache_gib is not None else "hardware")
        replicas = f" on each of {exp.replicas} replicas" if exp.replicas > 1 else ""
        raise SpecError(exp.source, key, (
            f"{gpu / GIB:g} GiB of KV cache and {exp.swap_space_gib:g} GiB of swap{replicas} make about "
            f"{blocks:.3g} blocks of {system.block_size} tokens for {system.name}, more than the simulator holds "
            f"({MAX_KV_BLOCKS:,}); lower kv_cache_gib or swap_space_gib, or raise block_size"))


def concurrency_key(exp: Experiment) -> str:
    """The key that set the gate, for an error about it."""
    return "concurrencies" if exp.raw.get("concurrencies") is not None else "workload.max_concurrency"


def check_closed_loop(exp: Experiment, check_warmup: bool = True) -> None:
    """An infinite rate has a count of requests to send (the generated workload's num_requests, or the replayed
    trace's), and, sent all at 0 s with no gate, no warm-up to leave out; a gate is put before colocated replicas."""
    workload = exp.workload
    for i, rate in enumerate(exp.rates):
        if rate == math.inf and not workload.is_replay and workload.num_requests is None:
            raise SpecError(exp.source, f"rates[{i}]", (
                "inf sends every request at 0 s (vLLM's --request-rate inf), so the requests must be counted, not "
                "drawn for workload.duration_s: give workload.num_requests (vLLM's --num-prompts)"))
    if check_warmup and workload.all_at_once(max(exp.rates)) and None in exp.concurrencies and exp.warmup_s > 0:
        raise SpecError(exp.source, "warmup_s", (
            f"{exp.warmup_s:g} s of warm-up leaves nothing to measure at rate inf, which sends every request at 0 s "
            "with no gate (workload.max_concurrency); set warmup_s: 0, as vLLM measures every request"))
    gated = [c for c in exp.concurrencies if c is not None]
    if gated and exp.split is not None:
        raise SpecError(exp.source, concurrency_key(exp), (
            "a client's gate is simulated before colocated replicas, not before a split fleet's prefill pool; "
            "remove it, or split"))


def check_workload(exp: Experiment, check_warmup: bool = True) -> None:
    """A generated workload draws a bounded number of arrivals; a replay is read now (as each run will
    read it), so an empty or unscalable trace is refused before anything runs; and some arrival comes
    after the warm-up, or nothing would be measured."""
    workload, max_rate = exp.workload, max(exp.rates)
    # the shortest request is the prefix, one input token and one output token, under max_seq_len
    # (the generator's strict rule: prompt + output < max_seq_len)
    longest = exp.model.max_seq_len - 3
    if workload.prefix_tokens > longest:
        raise SpecError(exp.source, "workload.prefix_tokens", (
            f"a prefix of {workload.prefix_tokens} tokens leaves no room for an input and an output within "
            f"{exp.model.name}'s max_seq_len of {exp.model.max_seq_len}; must be at most {longest}"))
    # a replay's room for its prefix is its own trace's (sim.workload.config.recorded, below)
    if workload.prefix_tokens and not workload.is_replay:
        check_prefix_room(workload, exp.model.max_seq_len, exp.source, "workload.prefix_tokens")
    if workload.system_prompt is not None:  # the same room question for a system prompt
        key, tokens = "workload.system_prompt.tokens", workload.system_prompt.tokens
        if tokens > longest:
            raise SpecError(exp.source, key, (
                f"a system prompt of {tokens} tokens leaves no room for a user turn and an answer within "
                f"{exp.model.name}'s max_seq_len of {exp.model.max_seq_len}; must be at most {longest}"))
        if not workload.is_replay:
            check_prefix_room(workload, exp.model.max_seq_len, exp.source, key, tokens)
    if not workload.is_replay:
        if workload.num_requests is not None:  # a count of arrivals: their span is the rate's to decide
            if workload.num_requests > MAX_REQUESTS:
                raise SpecError(exp.source, "workload.num_requests", (
                    f"{workload.num_requests:,} requests are more than one run simulates ({MAX_REQUESTS:,})"))
            return
        if max_rate * workload.duration_s > MAX_REQUESTS:
            raise SpecError(exp.source, "rates", (
                f"{max_rate:g} req/s for {workload.duration_s:g} s (workload.duration_s) is about "
                f"{max_rate * workload.duration_s:.3g} requests, more than one run simulates ({MAX_REQUESTS:,})"))
        if check_warmup and exp.warmup_s >= workload.duration_s:
            raise SpecError(exp.source, "warmup_s", (
                f"{exp.warmup_s:g} s of warm-up leaves nothing to measure in {workload.duration_s:g} s of arrivals "
                f"(workload.duration_s); must be less than workload.duration_s"))
        return
    trace = recorded(workload, exp.model.max_seq_len)
    check_trace(exp.systems, workload.n or int(trace.n.max()), workload.beam_width or int(trace.beam_width.max()),
                Path(workload.trace).name, exp.source)
    caps = {s.name: seqs_per_batch(s) for s in exp.systems}
    if workload.n is None and (workload.beam_width or 1) == 1 and int(trace.n.max()) > min(caps.values()):
        name = min(caps, key=caps.get)
        raise SpecError(exp.source, "workload.trace", (
            f"a request of {Path(workload.trace).name} has {int(trace.n.max())} samples, more than {name} ever "
            f"batches ({caps[name]} sequences); set workload.n or raise max_num_seqs"))
    raw = exp.raw.get("workload") if isinstance(exp.raw.get("workload"), dict) else {}
    if raw.get("beam_continue") is not None and workload.beam_width is None \
            and ((workload.n or 1) > 1 or not trace.has_beams):
        raise SpecError(exp.source, "workload.beam_continue", (
            f"applies only to beam search, and no request of {Path(workload.trace).name} searches beams as "
            "replayed; set workload.beam_width above 1, or drop beam_continue"))
    # n: 1 leaves the trace's beams as they are (only n > 1 replaces them): the beams meet max_num_seqs
    if workload.beam_width is None and (workload.n or 1) == 1 and int(trace.beam_width.max()) > min(caps.values()):
        name = min(caps, key=caps.get)
        raise SpecError(exp.source, "workload.trace", (
            f"a request of {Path(workload.trace).name} has {int(trace.beam_width.max())} beams, more than {name} "
            f"ever batches ({caps[name]} sequences); set workload.beam_width or raise max_num_seqs"))
    for rate in exp.rates:
        last_s = float(replayed(workload, trace, rate).arrival_s[-1])
        if check_warmup and exp.warmup_s > last_s:
            raise SpecError(exp.source, "warmup_s", (
                f"{exp.warmup_s:g} s of warm-up leaves nothing to measure: replayed at {rate:g} req/s, the last "
                f"request of {Path(workload.trace).name} arrives at {last_s:.4g} s; must be at most that"))


def check_prefix_room(workload: WorkloadConfig, max_seq_len: int, source: str, key: str,
                      prefix: int | None = None) -> None:
    """A shared prefix (prefix_tokens, or `prefix` tokens of a system prompt) leaves max_seq_len - prefix
    tokens for each drawn prompt and output: some of the dataset's pairs must fit there (a conversation
    dataset has no prefix: WorkloadConfig refuses it)."""
    prefix = workload.prefix_tokens if prefix is None else prefix
    lengths = load_lengths(workload.dataset, workload.length_filter, workload.tokenizer)
    longest = longest_prefix(lengths, max_seq_len)
    if prefix > longest:
        where = data_path(workload.dataset, workload.length_filter, workload.tokenizer)
        raise SpecError(source, key, (
            f"a prefix of {prefix} tokens leaves {max_seq_len - prefix} of "
            f"max_seq_len {max_seq_len} for a prompt and an output, and (almost) no pair of {workload.dataset} "
            f"({where}) is that short; must be at most {max(longest, 0)}"))


def read_config(path: str | Path, overrides: list[str] | None = None) -> object:
    """A config file's YAML with --set overrides applied; a missing, empty, unreadable or unparsable
    file is a SpecError naming it."""
    source = str(path)
    raw = read_yaml(path, "config")
    if raw is None:
        raise SpecError(source, "", "the file is empty")
    return apply_overrides(raw, overrides or [], source) if isinstance(raw, dict) else raw


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    path = Path(path)
    raw = read_config(path, overrides)
    with blamed_on_overrides(str(path), overrides or []):
        return experiment_from_dict(raw, str(path), path.resolve().parent)
