"""A bench run's meta.json: the engine's settings as recorded, most trusted first: vLLM's whole resolved config
(what it settled on: max_model_len, num_gpu_blocks, ...), then the KV cache it reported, then the arguments it was
given. Runs recorded before the bench kept the first two lack them; those settings stay None (not recorded).

When meta.json names no device, the run's config.json (LLMServingSim's cluster config for the same run) names its
GPU in LLMServingSim's own words (`RTXPRO6000`): read as such, and said so (EngineSettings.gpu_name_from).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.errors import SpecError
from fidelity.runs.fields import flag, fraction, json_file, optional, text, whole
from fidelity.runs.real_run import EngineSettings

CLUSTER_CONFIG = "config.json"  # beside the run's vllm/ folder
R = "resolved_config."


def _count(value: Any, path: Path, key: str) -> int:
    return whole(value, path, key, low=1)


def _sizes(value: Any, path: Path, key: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise SpecError(str(path), key, f"must be a list of batch sizes, got {value!r}")
    return tuple(_count(size, path, f"{key}[{i}]") for i, size in enumerate(value))


# EngineSettings field -> (its check, the places in meta.json that record it, most trusted first)
SETTINGS = {
    "model_id": (text, ("model", "engine_kwargs.model")),
    "gpu_name": (text, ("hardware.device_name",)),
    "tensor_parallel": (_count, (R + "parallel_config.tensor_parallel_size", "engine_kwargs.tensor_parallel_size")),
    "data_parallel": (_count, (R + "parallel_config.data_parallel_size", "engine_kwargs.data_parallel_size")),
    "expert_parallel": (flag, (R + "parallel_config.enable_expert_parallel", "engine_kwargs.enable_expert_parallel")),
    "max_num_seqs": (_count, (R + "scheduler_config.max_num_seqs", "engine_kwargs.max_num_seqs")),
    "max_num_batched_tokens": (_count, (R + "scheduler_config.max_num_batched_tokens",
                                        "engine_kwargs.max_num_batched_tokens")),
    "block_size": (_count, (R + "cache_config.block_size", "kv_cache.block_size")),
    "prefix_caching": (flag, (R + "cache_config.enable_prefix_caching", "kv_cache.enable_prefix_caching")),
    "num_gpu_blocks": (_count, (R + "cache_config.num_gpu_blocks", "kv_cache.num_gpu_blocks")),
    "gpu_memory_utilization": (fraction, (R + "cache_config.gpu_memory_utilization",
                                          "kv_cache.gpu_memory_utilization")),
    "max_model_len": (_count, (R + "model_config.max_model_len", "engine_kwargs.max_model_len")),
    "dtype": (text, ("engine_kwargs.dtype", R + "model_config.dtype")),
    "async_scheduling": (flag, (R + "scheduler_config.async_scheduling",)),
    "cudagraph_capture_sizes": (_sizes, (R + "compilation_config.cudagraph_capture_sizes",)),
}


@dataclass(frozen=True)
class BenchMeta:
    settings: EngineSettings
    dataset_path: str | None
    dataset_hash: str | None
    num_requests: int | None


def read_meta(path: Path) -> BenchMeta:
    meta = json_file(path)
    resolved = _mapping(meta, "resolved_config", path)
    sections = {"": meta, **{name: _mapping(meta, name, path) for name in ("engine_kwargs", "kv_cache", "hardware")},
                **{f"resolved_config.{name}": _mapping(resolved, name, path, "resolved_config.")
                   for name in ("cache_config", "scheduler_config", "parallel_config", "model_config",
                                "compilation_config")}}
    values = {name: _first(sections, places, check, path) for name, (check, places) in SETTINGS.items()}
    version = meta.get("vllm_version")
    settings = EngineSettings(**values, engine_version=f"vllm {version}" if isinstance(version, str) else None,
                              gpu_name_from=f"{path}: hardware.device_name" if values["gpu_name"] else None)
    if settings.gpu_name is None:
        settings = _gpu_from_cluster_config(settings, path.parent.parent / CLUSTER_CONFIG)
    return BenchMeta(settings, optional(meta.get("dataset_path"), text, path, "dataset_path"),
                     optional(meta.get("dataset_hash"), _sha256, path, "dataset_hash"),
                     optional(meta.get("num_requests"), _count, path, "num_requests"))


def _first(sections: dict[str, dict], places: tuple[str, ...], check, path: Path):
    """The setting's value at the first place (section.key) that records it, checked; None where none does."""
    for place in places:
        section, _, key = place.rpartition(".")
        value = sections[section].get(key)
        if value is not None:
            return check(value, path, place)
    return None


def _mapping(raw: dict, key: str, path: Path, prefix: str = "") -> dict:
    """A section that may be absent, null or (collection failed) empty; anything else but a mapping is an error."""
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(str(path), prefix + key, f"must be a mapping, got {type(value).__name__}")
    return value


def _sha256(value: Any, path: Path, key: str) -> str:
    value = text(value, path, key).lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise SpecError(str(path), key, f"must be a sha256 (64 hex digits), got {value!r}")
    return value


def _gpu_from_cluster_config(settings: EngineSettings, path: Path) -> EngineSettings:
    """The GPU LLMServingSim's cluster config for the run names, in its own words; unchanged where it names none
    (the config is the simulator's, not the run's: it is never an error here)."""
    try:
        instance = json_file(path)["nodes"][0]["instances"][0]
        name = instance["hardware"]
    except (SpecError, KeyError, IndexError, TypeError):
        return settings
    if not isinstance(name, str) or not name.strip():
        return settings
    return replace(settings, gpu_name=name, gpu_name_from=f"{path}: nodes[0].instances[0].hardware (LLMServingSim's "
                   "name)")
