"""A real run's engine settings as the simulator's Experiment and SystemSpec: one function, replay_setup.

What the run recorded comes first; an experiment YAML (--config) and --set KEY=VALUE then override any key of it
(they are experiment keys, docs/config.md), and fill in what the run did not record (a vllm bench result records
no engine settings at all). From the run:

- model: its model id through names.MODEL_NAMES; max_model_len where vLLM resolved one.
- hardware: the sheet whose device_names hold its GPU's name (names.py).
- tensor_parallel; data parallel as that many replicas behind the least_outstanding router (vLLM's data-parallel
  front end sends a request to its least loaded engine); enable_expert_parallel as `expert_parallel: true` where the
  model is a mixture of experts (the replicas one data-parallel group whose GPUs hold the experts between them; a
  dense model has none to spread, and vLLM ignores the flag for it too).
- the KV pool: num_gpu_blocks where recorded (exactly: kv_cache_gib is set to that many blocks' bytes), else the
  experiment's memory rule (docs/config.md, kv_cache_gib: null).
- the system: vLLM V1's scheduler (the vllm-v1 preset) with the run's block size, max_num_seqs,
  max_num_batched_tokens, prefix caching and asynchronous scheduling.
- the clock: servesim's default (sim/experiment/config.default_cost_model: the GPU's own measured device clock where
  servesim ships one, else the A100's carried, with vLLM 0.19's engine model), unless the config names another.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from calibrate.hardware.hardware import GIB
from calibrate.hardware.precision import precision_from_config
from engine.core.spec import ModelSpec
from engine.core.system import SystemSpec
from engine.errors import SpecError
from engine.specs.checks import positive_int
from engine.specs.loader import SHIPPED_MODELS, load_model_spec
from engine.specs.paths import resolve_path
from fidelity.runs.names import hardware_name, model_name
from fidelity.runs.real_run import RealRun
from sim.experiment.config import Experiment, apply_overrides, experiment_from_dict, read_config
from sim.experiment.kv_pool import block_bytes

# vLLM V1's defaults for what a run may not record (vllm/config/cache.py: block_size 16; V1 caches prefixes by
# default)
V1_BLOCK_SIZE = 16
V1_PREFIX_CACHING = True
V1_SYSTEM_NAME = "vLLM V1"
DATA_PARALLEL_ROUTER = "least_outstanding"
# An Experiment has a workload; a replay's requests are the run's own, so this one is never drawn (a config's
# workload gives arrivals only to a run that recorded none)
UNREAD_WORKLOAD = {"dataset": "sharegpt", "duration_s": 1.0}
COMMAND_LINE = "command line (--set)"


def v1_scheduler_settings(run: RealRun) -> dict:
    """vLLM V1's scheduler (engine/core/scheduler/vllm.py, prefill_policy v1: the vllm-v1 preset's recompute, no
    watermark), scheduling asynchronously as the run says it did (vLLM 0.19's default where it does not say)."""
    asynchronous = run.settings.async_scheduling
    return {"preset": "vllm-v1", "async_scheduling": True if asynchronous is None else asynchronous}


@dataclass(frozen=True)
class ReplaySetup:
    experiment: Experiment
    system: SystemSpec
    origins: dict[str, str]  # experiment key -> where its value came from
    config_workload: bool  # the config (or --set) gave a workload: arrivals for a run that recorded none
    notes: tuple[str, ...] = field(default_factory=tuple)


def replay_setup(run: RealRun, config: str | Path | None = None, overrides: list[str] | None = None) -> ReplaySetup:
    """The Experiment and its one system that replay `run`, and where each setting came from."""
    source = str(config) if config is not None else COMMAND_LINE
    base_dir = Path(config).resolve().parent if config is not None else Path.cwd()
    given = _given(config, overrides or [], source)
    derived, origins, missing = _from_run(run)
    raw = {**derived, **given}
    origins.update({key: f"{source}" for key in given})
    for key in ("model", "hardware"):
        if key not in raw:
            raise SpecError(run.source, key, f"{missing[key]}; give --config CONFIG with {key}: ..., or --set "
                            f"{key}=NAME")
    if "kv_cache_gib" not in given and run.settings.num_gpu_blocks is not None:
        raw["kv_cache_gib"] = _recorded_pool_gib(run, raw, source, base_dir)
        origins["kv_cache_gib"] = f"{run.settings.num_gpu_blocks} blocks (the run)"
    if "systems" not in given:
        raw["systems"] = [_run_system(run)]
    if "expert_parallel" not in given and run.settings.expert_parallel \
            and _model_spec(raw["model"], source, base_dir).is_moe:
        raw["expert_parallel"], origins["expert_parallel"] = True, "enable_expert_parallel (the run)"
    exp = _experiment(raw, run, given, source, base_dir)
    if len(exp.systems) != 1:
        raise SpecError(source, "systems", f"a replay simulates one system, got {len(exp.systems)}")
    notes = _notes(run, given, exp)
    return ReplaySetup(exp, exp.systems[0], origins, "workload" in given, notes)


def _given(config: str | Path | None, overrides: list[str], source: str) -> dict:
    raw = read_config(config, overrides) if config is not None else apply_overrides({}, overrides, source)
    if not isinstance(raw, dict):
        raise SpecError(source, "", "an experiment file must be a YAML mapping")
    return raw


def _from_run(run: RealRun) -> tuple[dict, dict[str, str], dict[str, str]]:
    """The run's settings as experiment keys, where each came from, and why model or hardware could not be named."""
    s = run.settings
    raw: dict = {"name": run.name, "workload": dict(UNREAD_WORKLOAD), "rates": [1.0], "seeds": [0], "warmup_s": 0.0}
    origins: dict[str, str] = {}
    missing = {}
    for key, (name, why) in (("model", model_name(s.model_id)), ("hardware", hardware_name(s.gpu_name))):
        if name is None:
            missing[key] = why
        else:
            raw[key], origins[key] = name, why
    origins["cost_model"] = "servesim's default: the GPU's device clock and vLLM 0.19's engine model"
    if s.tensor_parallel is not None:
        raw["tensor_parallel"], origins["tensor_parallel"] = s.tensor_parallel, "the run"
    if s.max_model_len is not None:
        raw["max_model_len"], origins["max_model_len"] = s.max_model_len, "the run"
    if (s.data_parallel or 1) > 1:
        raw["replicas"], raw["router"] = s.data_parallel, DATA_PARALLEL_ROUTER
        origins["replicas"] = f"data_parallel {s.data_parallel} (the run), behind {DATA_PARALLEL_ROUTER}"
    precision = _precision(s.dtype)
    if precision is not None:
        raw["precision"], origins["precision"] = precision, f"dtype {s.dtype} (the run)"
    return raw, origins, missing


def _precision(dtype: str | None) -> dict | None:
    """vLLM's dtype as servesim's formats (its KV cache in the same, as kv_cache_dtype auto)."""
    formats = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16"}
    name = formats.get((dtype or "").replace("torch.", ""))
    return None if name is None else {"weights": name, "kv_cache": name}


def _run_system(run: RealRun) -> dict:
    """vLLM with the run's batching and KV settings, on V1's scheduler (v1_scheduler_settings)."""
    s = run.settings
    for key, value in (("max_num_seqs", s.max_num_seqs), ("max_num_batched_tokens", s.max_num_batched_tokens)):
        if value is None:
            raise SpecError(run.source, key, f"not recorded, so the engine's scheduler is unknown; give --config "
                            f"CONFIG with systems: [{{preset: vllm, {key}: ..., ...}}]")
    return {"name": V1_SYSTEM_NAME, **v1_scheduler_settings(run),
            "block_size": s.block_size or V1_BLOCK_SIZE, "max_num_seqs": s.max_num_seqs,
            "max_num_batched_tokens": s.max_num_batched_tokens,
            "prefix_caching": V1_PREFIX_CACHING if s.prefix_caching is None else s.prefix_caching}


def _recorded_pool_gib(run: RealRun, raw: dict, source: str, base_dir: Path) -> float:
    """The recorded num_gpu_blocks as kv_cache_gib, exactly: blocks x a block's bytes is a whole number of bytes,
    and dividing it by 2^30 loses no bit, so the pool the experiment builds has those blocks again."""
    spec = _model_spec(raw["model"], source, base_dir)
    precision = precision_from_config(raw.get("precision"), raw.get("dtype_bytes"), source)
    block_size = run.settings.block_size or V1_BLOCK_SIZE
    tensor_parallel = positive_int(raw.get("tensor_parallel", 1), source, "tensor_parallel")
    per_block = block_bytes(spec, block_size, tensor_parallel, precision)
    return run.settings.num_gpu_blocks * per_block / GIB


def _model_spec(model, source: str, base_dir: Path) -> ModelSpec:
    """The replay's model spec: the run's is a shipped name (names.py), so a bad one is the config's."""
    if not isinstance(model, str) or not model.strip():
        raise SpecError(source, "model", f"must be a name or a path, got {model!r}")
    if Path(model).suffix in (".yaml", ".yml"):
        model = resolve_path(model, base_dir, source, "model", SHIPPED_MODELS)
    try:
        return load_model_spec(model)
    except SpecError as err:
        raise SpecError(source, "model", err.message) from None


def _experiment(raw: dict, run: RealRun, given: dict, source: str, base_dir: Path) -> Experiment:
    """experiment_from_dict's checks; an error about a key the run gave (not the config) names the run."""
    try:
        return experiment_from_dict(raw, source, base_dir, check_warmup=False)
    except SpecError as err:
        top = err.key.split(".")[0].split("[")[0]
        if err.source == source and err.key and top not in given:
            raise SpecError(f"{run.source} (its settings as servesim maps them)", err.key, err.message) from None
        raise


def _notes(run: RealRun, given: dict, exp: Experiment) -> tuple[str, ...]:
    s, notes = run.settings, []
    if "systems" not in given:
        if s.async_scheduling is None:
            notes.append("asynchronous scheduling not recorded: vLLM 0.19's default, on")
        if s.block_size is None:
            notes.append(f"block size not recorded: vLLM V1's default, {V1_BLOCK_SIZE}")
        if s.prefix_caching is None:
            notes.append(f"prefix caching not recorded: vLLM V1's default, {'on' if V1_PREFIX_CACHING else 'off'}")
    if s.num_gpu_blocks is None and "kv_cache_gib" not in given:
        notes.append("KV blocks not recorded: the pool is the experiment's memory rule (docs/config.md kv_cache_gib)")
    if s.expert_parallel and not exp.expert_parallel and "expert_parallel" not in given:
        notes.append(f"expert parallelism recorded, but {exp.model.name} is dense: it has no experts to spread")
    if "workload" in given and run.arrivals_recorded:
        notes.append("the config's workload is not read: the run's own requests are replayed")
    return tuple(notes)
