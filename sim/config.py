"""Experiment YAML -> typed, validated values. Every error names the file and key path."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from calibrate.hardware import HardwareSpec, load_hardware
from calibrate.memory import GIB, KVPool, kv_pool
from calibrate.roofline import RooflineParams
from engine.core.spec import ModelSpec
from engine.core.system import PAPER_SYSTEMS, SystemSpec
from engine.specs.errors import SpecError
from engine.specs.loader import load_model_spec, system_from_dict
from sim.workload.config import WorkloadConfig
from sim.workload.paths import resolve_data_path

TOP_LEVEL_KEYS = {
    "name": "label for outputs",
    "model": "a shipped model's name (engine/specs/models) or a path",
    "hardware": "a shipped hardware name (calibrate/hardware_specs) or a path",
    "tensor_parallel": "GPUs per replica",
    "dtype_bytes": "bytes per weight/KV element (2 = fp16)",
    "kv_cache_gib": "KV cache per GPU in GiB; null = the paper-era memory rule",
    "swap_space_gib": "CPU swap space per GPU in GiB",
    "cost_model": "roofline, a profile path, or a mapping",
    "workload": "the workload section",
    "systems": "list of presets or system mappings",
    "rates": "request rates in req/s",
    "seeds": "random seeds",
    "warmup_s": "arrivals before this are excluded from latency metrics",
    "max_time_factor": "stop simulating at this multiple of the trace span",
    "replicas": "identical replicas behind a router",
    "router": "round_robin | least_outstanding",
}
ROUTERS = ("round_robin", "least_outstanding")


@dataclass(frozen=True)
class CostModelConfig:
    kind: str  # roofline | profile | transfer
    profile_path: Path | None = None
    roofline: RooflineParams = RooflineParams()
    measured_on: str | None = None  # transfer: the hardware the profile was measured on


@dataclass(frozen=True)
class Experiment:
    name: str
    source: str
    model: ModelSpec
    hardware: HardwareSpec
    tensor_parallel: int
    dtype_bytes: int
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
    router: str
    raw: dict = field(default_factory=dict, compare=False)

    def kv_pool(self, system: SystemSpec) -> KVPool:
        return kv_pool(self.model, self.hardware, self.tensor_parallel, self.dtype_bytes,
                       system.block_size, self.kv_cache_gib, self.swap_space_gib)


# --- small validators ----------------------------------------------------------------
def _positive(value: Any, source: str, key: str, kind: type = float, allow_zero: bool = False) -> Any:
    ok_types = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_types):
        raise SpecError(source, key, f"must be a {'whole ' if kind is int else ''}number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise SpecError(source, key, f"must be {'non-negative' if allow_zero else 'positive'}, got {value!r}")
    return kind(value)


def _list_of(value: Any, source: str, key: str, kind: type) -> tuple:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]  # `rates: 2` means `rates: [2]`
    if not isinstance(value, list) or not value:
        raise SpecError(source, key, f"must be a non-empty list, got {value!r}")
    return tuple(_positive(v, source, f"{key}[{i}]", kind, allow_zero=kind is int) for i, v in enumerate(value))


def apply_overrides(raw: dict, overrides: list[str], source: str) -> dict:
    """--set a.b=value: the value is parsed as YAML (numbers, lists, null)."""
    for item in overrides:
        if "=" not in item:
            raise SpecError(source, item, "an override is key.path=value")
        path, text = item.split("=", 1)
        node = raw
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise SpecError(source, path, f"{key} is not a mapping")
        node[keys[-1]] = yaml.safe_load(text)
    return raw


def _cost_model(raw: Any, source: str, base_dir: Path) -> CostModelConfig:
    if raw is None or raw == "roofline":
        return CostModelConfig("roofline")
    if isinstance(raw, str):
        return CostModelConfig("profile", _resolve(raw, base_dir, source, "cost_model"))
    if not isinstance(raw, dict):
        raise SpecError(source, "cost_model", "must be 'roofline', a profile path, or a mapping")
    raw = dict(raw)
    kind = raw.pop("kind", "roofline")
    if kind in ("profile", "transfer"):
        if "path" not in raw:
            raise SpecError(source, "cost_model.path", f"a {kind} cost model needs the profile's path")
        path = _resolve(raw.pop("path"), base_dir, source, "cost_model.path")
        measured_on = raw.pop("measured_on", None) if kind == "transfer" else None
        for key in raw:
            valid = ["kind", "path"] + (["measured_on"] if kind == "transfer" else [])
            raise SpecError(source, f"cost_model.{key}", f"unknown key; valid keys are {valid}")
        return CostModelConfig(kind, path, measured_on=measured_on)
    if kind != "roofline":
        raise SpecError(source, "cost_model.kind", f"{kind!r} is not one of ['roofline', 'profile', 'transfer']")
    valid = set(RooflineParams.__dataclass_fields__)
    for key, value in raw.items():
        if key not in valid:
            raise SpecError(source, f"cost_model.{key}", f"unknown key; valid keys are {sorted(valid | {'kind'})}")
        _positive(value, source, f"cost_model.{key}", allow_zero=key == "overhead_s")
    return CostModelConfig("roofline", roofline=RooflineParams(**raw))


def _resolve(path: str, base_dir: Path, source: str, key: str) -> Path:
    """A profile path: beside the config, then in the current directory."""
    return resolve_data_path(path, base_dir, source, key)


def _systems(raw: Any, source: str) -> tuple[SystemSpec, ...]:
    if raw is None:
        raw = list(PAPER_SYSTEMS)
    if not isinstance(raw, list) or not raw:
        raise SpecError(source, "systems", f"must be a non-empty list of presets {sorted(PAPER_SYSTEMS)} or mappings")
    systems = tuple(system_from_dict(item, source, f"systems[{i}]") for i, item in enumerate(raw))
    names = [s.name for s in systems]
    for i, name in enumerate(names):
        if names.index(name) != i:
            raise SpecError(source, f"systems[{i}].name", f"duplicate system name {name!r}")
    return systems


def _lookup(loader, value: Any, source: str, key: str, base_dir: Path):
    if not isinstance(value, str):
        raise SpecError(source, key, f"must be a name or a path, got {value!r}")
    candidate = base_dir / value
    try:
        return loader(candidate if candidate.suffix in (".yaml", ".yml") and candidate.exists() else value)
    except SpecError as err:
        if err.source in ("model", "hardware"):
            raise SpecError(source, key, err.message) from None
        raise


# --- the experiment ----------------------------------------------------------------------
def experiment_from_dict(raw: dict, source: str, base_dir: Path) -> Experiment:
    if not isinstance(raw, dict):
        raise SpecError(source, "", "an experiment file must be a YAML mapping")
    for key in raw:
        if key not in TOP_LEVEL_KEYS:
            raise SpecError(source, key, f"unknown key; valid keys are {sorted(TOP_LEVEL_KEYS)}")
    for key in ("model", "hardware", "workload", "rates"):
        if key not in raw:
            raise SpecError(source, key, f"missing required key ({TOP_LEVEL_KEYS[key]})")
    model = _lookup(load_model_spec, raw["model"], source, "model", base_dir)
    hardware = _lookup(load_hardware, raw["hardware"], source, "hardware", base_dir)
    kv_cache_gib = raw.get("kv_cache_gib")
    router = raw.get("router", "round_robin")
    if router not in ROUTERS:
        raise SpecError(source, "router", f"{router!r} is not one of {list(ROUTERS)}")
    exp = Experiment(
        name=str(raw.get("name", Path(source).stem)),
        source=source,
        model=model,
        hardware=hardware,
        tensor_parallel=_positive(raw.get("tensor_parallel", 1), source, "tensor_parallel", int),
        dtype_bytes=_positive(raw.get("dtype_bytes", 2), source, "dtype_bytes", int),
        kv_cache_gib=None if kv_cache_gib is None else _positive(kv_cache_gib, source, "kv_cache_gib"),
        swap_space_gib=_positive(raw.get("swap_space_gib", 20), source, "swap_space_gib", allow_zero=True),
        cost_model=_cost_model(raw.get("cost_model"), source, base_dir),
        workload=WorkloadConfig.from_dict(raw["workload"], source, base_dir),
        systems=_systems(raw.get("systems"), source),
        rates=_list_of(raw["rates"], source, "rates", float),
        seeds=_list_of(raw.get("seeds", [0]), source, "seeds", int),
        warmup_s=_positive(raw.get("warmup_s", 60.0), source, "warmup_s", allow_zero=True),
        max_time_factor=_positive(raw.get("max_time_factor", 2.0), source, "max_time_factor"),
        replicas=_positive(raw.get("replicas", 1), source, "replicas", int),
        router=router,
        raw=raw,
    )
    if any(r <= 0 for r in exp.rates):
        raise SpecError(source, "rates", f"every rate must be positive, got {list(exp.rates)}")
    check_fits(exp)
    return exp


def check_fits(exp: Experiment) -> None:
    """The weights fit the GPUs, and the KV pool holds at least one max-length request."""
    src, model, hw, tp = exp.source, exp.model, exp.hardware, exp.tensor_parallel
    weights = model.weight_bytes(exp.dtype_bytes) / tp
    if weights >= hw.memory_bytes:
        raise SpecError(src, "model", (
            f"{model.name} needs {weights / GIB:.1f} GiB of weights per GPU at tensor_parallel={tp}, "
            f"but {hw.name} has {hw.memory_gib} GiB; raise tensor_parallel or choose larger hardware"))
    for system in exp.systems:
        pool = exp.kv_pool(system)
        if pool.num_slots < model.max_seq_len:
            key = "kv_cache_gib" if exp.kv_cache_gib is not None else "hardware"
            raise SpecError(src, key, (
                f"the KV pool holds {pool.num_slots} tokens ({pool.num_gpu_blocks} blocks of "
                f"{system.block_size}) for {system.name}, less than one {model.max_seq_len}-token request; "
                f"give at least {model.max_seq_len * pool.block_bytes / system.block_size / GIB:.2f} GiB"))


def read_config(path: str | Path, overrides: list[str] | None = None) -> object:
    """A config file's YAML with --set overrides applied; a missing, empty or unparsable file is a
    SpecError naming it."""
    path = Path(path)
    source = str(path)
    if not path.exists():
        raise SpecError(source, "", "no such file")
    try:
        with open(path) as f:
            raw = yaml.safe_load(f)
    except yaml.YAMLError as err:
        raise SpecError(source, "", f"not valid YAML: {err}") from None
    if raw is None:
        raise SpecError(source, "", "the file is empty")
    return apply_overrides(raw, overrides or [], source) if isinstance(raw, dict) else raw


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    path = Path(path)
    return experiment_from_dict(read_config(path, overrides), str(path), path.resolve().parent)
