"""An experiment's `split`: a prefill pool and a decode pool instead of `replicas` identical ones
(docs/disaggregated.md), checked with one-line errors.

    split:
      prefill: {replicas: 1, hardware: h100-sxm, tensor_parallel: 4, kv_cache_gib: 20, system: vllm}
      decode: {replicas: 2}
      kv_link: nvlink            # or infiniband, pcie, {kind: custom, bytes_per_s, latency_s}, {kind: measured, ...}
      on_decode_full: hold       # or recompute

A pool's keys default to the experiment's (hardware, tensor_parallel, kv_cache_gib) and to the system being run;
each run of the sweep serves its system on both pools, the decode pool without prefix caching (its prompts were
computed by the prefill pool) and the prefill pool without speculation (nothing is proposed where prompts are
computed: the decode pool speculates). A pool's own system is a vLLM one, and every request is one sequence (n and
beam_width 1): a decode replica receives one sequence's KV, prefilled elsewhere, which only vLLM's paged
scheduler does.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.hardware.hardware import SHIPPED_SHEETS, HardwareSpec, load_hardware
from calibrate.parts.kv_link import link_table_found
from engine.core.system import SystemSpec
from engine.errors import SpecError
from engine.specs.checks import choice, known_keys, number, optional, positive, positive_int
from engine.specs.loader import system_from_dict
from engine.specs.paths import resolve_path
from sim.core.split_fleet import ON_DECODE_FULL
from sim.workload.config import WorkloadConfig, recorded, replayed

SPLIT_KEYS = ("prefill", "decode", "kv_link", "on_decode_full")
POOL_KEYS = ("replicas", "hardware", "tensor_parallel", "kv_cache_gib", "system")
MAX_POOL_REPLICAS = 4096


@dataclass(frozen=True)
class PoolConfig:
    """One pool of a split fleet; None: the experiment's own value (system: the run's)."""

    replicas: int
    hardware: HardwareSpec | None = None
    tensor_parallel: int | None = None
    kv_cache_gib: float | None = None
    system: SystemSpec | None = None


@dataclass(frozen=True)
class SplitConfig:
    prefill: PoolConfig
    decode: PoolConfig
    kv_link: Any = "nvlink"  # as written: read against the prefill pool's GPU (sim.experiment.split_run)
    on_decode_full: str = "hold"

    @property
    def replicas(self) -> int:
        return self.prefill.replicas + self.decode.replicas


def split_from_config(value: Any, source: str, base_dir: Path, hardware: HardwareSpec) -> SplitConfig | None:
    """The `split:` section; `hardware` is the experiment's GPU, a pool's own where it names none."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpecError(source, "split", f"must be a mapping with keys {list(SPLIT_KEYS)}, got {value!r}")
    known_keys(value, SPLIT_KEYS, source, "split")
    for key in ("prefill", "decode"):
        if key not in value:
            raise SpecError(source, f"split.{key}", f"missing required key (a pool: {list(POOL_KEYS)})")
    return SplitConfig(
        prefill=_pool(value["prefill"], source, "split.prefill", base_dir, hardware),
        decode=_pool(value["decode"], source, "split.decode", base_dir, hardware),
        kv_link=link_table_found(value.get("kv_link", "nvlink"), source, "split.kv_link", base_dir),
        on_decode_full=choice(value.get("on_decode_full", "hold"), source, "split.on_decode_full", ON_DECODE_FULL),
    )


def _pool(value: Any, source: str, key: str, base_dir: Path, default_hardware: HardwareSpec) -> PoolConfig:
    if not isinstance(value, dict):
        raise SpecError(source, key, f"must be a mapping with keys {list(POOL_KEYS)}, got {value!r}")
    known_keys(value, POOL_KEYS, source, key)
    if "replicas" not in value:
        raise SpecError(source, f"{key}.replicas", "missing required key (how many replicas the pool has)")
    hardware = value.get("hardware")
    if hardware is not None:
        if not isinstance(hardware, str) or not hardware.strip():
            raise SpecError(source, f"{key}.hardware", f"must be a shipped hardware name or a path, got {hardware!r}")
        try:
            if hardware.endswith((".yaml", ".yml")):
                hardware = resolve_path(hardware, base_dir, source, f"{key}.hardware", SHIPPED_SHEETS,
                                        what="a hardware sheet YAML")
            hardware = load_hardware(hardware)
        except SpecError as err:
            raise SpecError(source, f"{key}.hardware", err.message) from None
    system = value.get("system")
    return PoolConfig(
        replicas=number(value["replicas"], source, f"{key}.replicas", low=1, high=MAX_POOL_REPLICAS, whole=True),
        hardware=hardware,
        tensor_parallel=optional(positive_int, value.get("tensor_parallel"), source, f"{key}.tensor_parallel"),
        kv_cache_gib=optional(positive, value.get("kv_cache_gib"), source, f"{key}.kv_cache_gib"),
        system=_pool_system(system, source, f"{key}.system", hardware or default_hardware) if system is not None
        else None,
    )


def _pool_system(value: Any, source: str, key: str, hardware: HardwareSpec) -> SystemSpec:
    """A pool's own system, its defaults derived from the pool's GPU (V1's token budget and batch size are)."""
    system = system_from_dict(value, source, key, hardware.serving_gpu)
    if system.kind != "vllm":
        raise SpecError(source, key, f"{system.name} is {system.kind}: only vLLM (kind vllm) serves in a split pool, "
                        "its decode replicas receiving KV prefilled elsewhere")
    return system


def pool_system(pool: PoolConfig, system: SystemSpec, decode: bool) -> SystemSpec:
    """The system a pool runs for a run of `system`: its own if it names one; the decode pool's without prefix
    caching, the prefill pool's without speculation (its replicas compute prompts and first tokens: the decode
    pool speculates)."""
    chosen = pool.system or system
    if decode and chosen.prefix_caching:
        return dataclasses.replace(chosen, prefix_caching=False)
    if not decode and chosen.speculative is not None:
        return dataclasses.replace(chosen, speculative=None)
    return chosen


def routed_systems(split: SplitConfig | None, systems: tuple[SystemSpec, ...]) -> list[tuple[str, SystemSpec]]:
    """The systems the router places requests on, each with its key: a split fleet's router spreads them over the
    prefill pool, which runs its own system where it names one; a colocated fleet's over the systems' replicas."""
    if split is not None and split.prefill.system is not None:
        return [("split.prefill.system", split.prefill.system)]
    return [(f"systems[{i}]", system) for i, system in enumerate(systems)]


def check_one_sequence(workload: WorkloadConfig, max_seq_len: int, source: str) -> None:
    """A split fleet serves one sequence per request: its decode replicas receive one sequence's KV. A replay's
    samples and beams are its trace's, as replayed (workload.n or beam_width, where given, replace them)."""
    if workload.is_replay:
        trace = replayed(workload, recorded(workload, max_seq_len), None)
        n, beams = int(trace.n.max()), int(trace.beam_width.max())
    else:
        n, beams = workload.n or 1, workload.beam_width or 1
    for count, name, what in ((n, "n", "samples"), (beams, "beam_width", "beams")):
        if count > 1:
            given = getattr(workload, name) is not None
            many = f"{count} {what} per request" if given else \
                f"a request of {Path(str(workload.trace)).name} has {count} {what}"
            raise SpecError(source, f"workload.{name}" if given else "workload.trace", (
                f"{many}: a split fleet serves one sequence per request, its decode replicas receiving one "
                f"sequence's KV; set workload.{name}: 1, or serve it on a colocated fleet"))
