"""A validation YAML -> an Experiment plus the options of the real replay. Every error names file and key.

    name: cpu-opt-125m            # optional; default: the file's stem
    experiment:                   # an experiment mapping, exactly as in configs/*.yaml
      model: opt-125m
      hardware: cpu-host.yaml
      cost_model: ../../calibrate/profiles/cpu-opt-125m.yaml   # a profile measured on this device
      workload: {...}
      systems: [...]
      rates: [...]
      seeds: [0]
    validation:
      device: cpu                 # cpu | cuda: where the real engine runs
      dtype: null                 # null: float32 on cpu, float16 on cuda; must be the profile's
      repeats: 2                  # real replays of every trace (>= 2 reports run-to-run spread)
      num_gpu_blocks: 48          # the KV pool, the same on both sides (null: the experiment's pool)
      num_cpu_blocks: null        # swap space in blocks, both sides (null: as many as num_gpu_blocks)
      max_model_len: 256          # serving cap on prompt + output (null: the model's max_seq_len)
      latency_threshold: 0.5      # s/token: the sustainable rate is where normalized latency crosses it
      warmup_fraction: 0.1        # exclude arrivals in the first 10% of each trace (null: experiment.warmup_s)
      attention_backend: auto     # auto | torch | triton
      torch_threads: null         # torch intra-op threads for the real engine (null: torch's default)
      sampling: greedy            # greedy | random
      speed_correction: true      # simulate each replay at the machine speed its probes measured
      speed_probe_every_s: 1.0    # wall seconds between speed-probe samples during a real replay
      clock: step                 # step: an iteration lasts its whole step, host work included; forward: the forward
      calibrate: false            # true: profile and fit this device first (experiment.cost_model is not read)
      calibrate_grid: null        # the profiler's grid (null: cpu on a CPU, default on a GPU)
      calibrate_repeats: 3        # timed passes over the grid when calibrating
    engine:                       # options of the real engine (engine/runtime/options.py)
      cuda_graphs: null           # true | false | null: decodes replay CUDA graphs (null: on for CUDA)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.hardware.precision import Precision
from engine.errors import SpecError
from engine.runtime.options import EngineOptions, engine_options_from_dict
from engine.specs.checks import choice, known_keys, number, optional, positive
from sim.experiment.config import Experiment, experiment_from_dict, read_config
from sim.experiment.overrides import blamed_on_overrides

TOP_LEVEL_KEYS = {"name": "label for outputs (default: the file's stem)",
                  "experiment": "the experiment mapping (same schema as configs/*.yaml)",
                  "validation": "options of the real-vs-simulated comparison",
                  "engine": "options of the real engine (cuda_graphs)"}
DEVICES = ("cpu", "cuda")
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16",
               "bfloat16": "bfloat16", "bf16": "bfloat16"}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
BACKENDS = ("auto", "torch", "triton")
SAMPLING = ("greedy", "random")
CLOCK_CHOICES = ("step", "forward")


@dataclass(frozen=True)
class ValidationOptions:
    device: str = "cpu"
    dtype: str | None = None
    repeats: int = 2
    num_gpu_blocks: int | None = None
    num_cpu_blocks: int | None = None
    max_model_len: int | None = None
    latency_threshold: float = 0.5
    warmup_fraction: float | None = 0.1
    attention_backend: str = "auto"
    torch_threads: int | None = None
    sampling: str = "greedy"
    speed_correction: bool = True
    speed_probe_every_s: float = 1.0
    clock: str = "step"
    calibrate: bool = False
    calibrate_grid: str | None = None
    calibrate_repeats: int = 3

    @property
    def resolved_dtype(self) -> str:
        """The engine's dtype as the profile names it."""
        if self.dtype is None:
            return "float16" if self.device == "cuda" else "float32"
        return DTYPE_NAMES[self.dtype]


OPTION_HELP = {
    "device": "cpu | cuda: where the real engine runs",
    "dtype": "float32 | float16 | bfloat16, or null for the device's default",
    "repeats": "real replays per trace (>= 1; 2 or more report run-to-run spread)",
    "num_gpu_blocks": "KV pool in blocks on both sides (null: the experiment's pool)",
    "num_cpu_blocks": "swap space in blocks on both sides (null: as many as num_gpu_blocks)",
    "max_model_len": "serving cap on prompt + output tokens (null: the model's max_seq_len)",
    "latency_threshold": "normalized latency (s/token) that defines the sustainable rate",
    "warmup_fraction": "exclude arrivals in this leading share of each trace (null: experiment.warmup_s)",
    "attention_backend": "auto | torch | triton",
    "torch_threads": "torch intra-op threads for the real engine (null: torch's default)",
    "sampling": "greedy | random",
    "speed_correction": "true | false: simulate each replay at the machine speed its probes measured "
                        "(against the profile's speed reference); false: as calibrated",
    "speed_probe_every_s": "wall seconds between speed-probe samples during a real replay (> 0)",
    "clock": "step | forward: an iteration on the real engine's clock is its whole step, host work "
             "(scheduling, inputs, completion) included, as a server's users wait for it; or the timed forward alone",
    "calibrate": "true | false: profile and fit the engine on the device at hand first, and validate against "
                 "that profile (experiment.cost_model is then not read); servesim validate --calibrate",
    "calibrate_grid": "the profiler's grid of batch shapes (null: cpu on a CPU, default on a GPU)",
    "calibrate_repeats": "timed passes over the grid when calibrating (>= 1)",
}


@dataclass(frozen=True)
class ValidationConfig:
    name: str
    source: str
    experiment: Experiment
    options: ValidationOptions
    raw: dict
    engine: EngineOptions = EngineOptions()


def _count(value: Any, source: str, key: str, minimum: int = 1, nullable: bool = True) -> int | None:
    if value is None and nullable:
        return None
    return number(value, source, key, low=minimum, whole=True)


def _fraction(value: Any, source: str, key: str) -> float | None:
    return optional(lambda v, s, k: number(v, s, k, low=0, high=1, high_open=True), value, source, key)


def _flag(value: Any, source: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(source, key, f"must be true or false, got {value!r}")
    return value


def options_from_dict(raw: Any, source: str) -> ValidationOptions:
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise SpecError(source, "validation", f"must be a mapping; valid keys are {sorted(OPTION_HELP)}")
    known_keys(raw, sorted(OPTION_HELP), source, "validation")
    d = ValidationOptions()
    k = "validation."
    dtype = raw.get("dtype", d.dtype)
    if dtype is not None:
        choice(dtype, source, k + "dtype", list(DTYPE_NAMES))
    return ValidationOptions(
        device=choice(raw.get("device", d.device), source, k + "device", DEVICES),
        dtype=dtype,
        repeats=_count(raw.get("repeats", d.repeats), source, k + "repeats", nullable=False),
        num_gpu_blocks=_count(raw.get("num_gpu_blocks"), source, k + "num_gpu_blocks"),
        num_cpu_blocks=_count(raw.get("num_cpu_blocks"), source, k + "num_cpu_blocks", minimum=0),
        max_model_len=_count(raw.get("max_model_len"), source, k + "max_model_len", minimum=2),
        latency_threshold=positive(raw.get("latency_threshold", d.latency_threshold), source,
                                    k + "latency_threshold"),
        warmup_fraction=_fraction(raw.get("warmup_fraction", d.warmup_fraction), source, k + "warmup_fraction"),
        attention_backend=choice(raw.get("attention_backend", d.attention_backend), source,
                                  k + "attention_backend", BACKENDS),
        torch_threads=_count(raw.get("torch_threads"), source, k + "torch_threads"),
        sampling=choice(raw.get("sampling", d.sampling), source, k + "sampling", SAMPLING),
        speed_correction=_flag(raw.get("speed_correction", d.speed_correction), source, k + "speed_correction"),
        speed_probe_every_s=positive(raw.get("speed_probe_every_s", d.speed_probe_every_s), source,
                                      k + "speed_probe_every_s"),
        clock=choice(raw.get("clock", d.clock), source, k + "clock", CLOCK_CHOICES),
        calibrate=_flag(raw.get("calibrate", d.calibrate), source, k + "calibrate"),
        calibrate_grid=_grid(raw.get("calibrate_grid"), source, k + "calibrate_grid"),
        calibrate_repeats=_count(raw.get("calibrate_repeats", d.calibrate_repeats), source, k + "calibrate_repeats",
                                 nullable=False),
    )


def _grid(value: Any, source: str, key: str) -> str | None:
    from calibrate.profiling.grid import GRIDS

    return optional(lambda v, s, k: choice(v, s, k, list(GRIDS)), value, source, key)


def validation_from_dict(raw: Any, source: str, base_dir: Path) -> ValidationConfig:
    if not isinstance(raw, dict):
        raise SpecError(source, "", "a validation file must be a YAML mapping with `experiment:` and `validation:`")
    known_keys(raw, sorted(TOP_LEVEL_KEYS), source, note="experiment keys go under `experiment:`")
    if "experiment" not in raw:
        raise SpecError(source, "experiment", f"missing required key ({TOP_LEVEL_KEYS['experiment']})")
    name = str(raw.get("name", Path(source).stem))
    experiment_raw = raw["experiment"]
    if not isinstance(experiment_raw, dict):
        raise SpecError(source, "experiment", "must be a mapping (model, hardware, workload, rates, ...)")
    experiment_raw = {"name": name, **experiment_raw}
    options = options_from_dict(raw.get("validation"), source)
    try:
        exp = experiment_from_dict(experiment_raw, source, base_dir, check_warmup=options.warmup_fraction is None,
                                   check_profile=not options.calibrate)
    except SpecError as err:  # say where the key lives in this file
        if err.source == source and err.key:
            raise SpecError(source, f"experiment.{err.key}", err.message) from None
        raise
    if exp.replicas != 1:
        raise SpecError(source, "experiment.replicas", "validation replays one engine; set replicas: 1")
    if exp.tensor_parallel != 1:
        raise SpecError(source, "experiment.tensor_parallel", "the real engine runs on one device; set 1")
    if exp.cost_model.kind != "profile" and not options.calibrate:
        raise SpecError(source, "experiment.cost_model", "validation measures a calibrated profile: give the "
                        "path of a profile measured on validation.device (servesim calibrate profile/fit), or "
                        "calibrate on this device first (validation.calibrate: true, or --calibrate)")
    check_engine_precision(exp.precision, options.resolved_dtype, source)
    if (exp.workload.beam_width or 1) > 1:
        raise SpecError(source, "experiment.workload.beam_width", (
            "validation compares schedules, and a beam search's forks are each plane's own choice (the engine's "
            "from its scores, the simulator's from sim/core/beams.py's model), so they differ by design; set 1"))
    if len(exp.seeds) != 1:
        raise SpecError(source, "experiment.seeds", f"validation replays one trace per rate; give one seed, "
                        f"got {list(exp.seeds)}")
    block_sizes = {s.block_size for s in exp.systems}
    if options.num_gpu_blocks is None and len(block_sizes) > 1:
        raise SpecError(source, "validation.num_gpu_blocks", "systems differ in block_size: give the pool in blocks")
    return ValidationConfig(name, source, exp, options, raw, engine_options_from_dict(raw.get("engine"), source))


def check_engine_precision(precision: Precision, engine_dtype: str, source: str) -> None:
    """The engine stores weights and KV in its one torch dtype (fp16, bf16, or fp32 on a CPU): an experiment's
    formats must be that dtype's, which rules out quantized weights and an FP8 KV cache."""
    dtype_bytes = DTYPE_BYTES[engine_dtype]
    if precision.dtype_bytes is None:
        if not precision.is_sixteen_bit or dtype_bytes != 2:
            raise SpecError(source, "experiment.precision", (
                f"weights {precision.weights}, kv_cache {precision.kv_cache}: the engine runs {engine_dtype} "
                f"weights and KV cache only; set dtype_bytes: {dtype_bytes} in its place (`servesim run` prices other "
                "formats on the roofline)"))
        return
    if precision.dtype_bytes != dtype_bytes:
        raise SpecError(source, "experiment.dtype_bytes", (
            f"is {precision.dtype_bytes}, but the engine runs {engine_dtype} ({dtype_bytes} bytes); "
            f"set dtype_bytes: {dtype_bytes}"))


def load_validation(path: str | Path, overrides: list[str] | None = None) -> ValidationConfig:
    """Read a validation YAML; --set overrides address it whole (experiment.rates=[1,2], validation.repeats=1)."""
    path = Path(path)
    raw = read_config(path, overrides)
    with blamed_on_overrides(str(path), overrides or []):
        return validation_from_dict(raw, str(path), path.resolve().parent)
