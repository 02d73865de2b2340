"""What validation refuses before anything runs: a profile for another model, device or dtype; a pool
that cannot hold one request; a trace request the engine cannot serve (reported by row); a speculating
system compared with a cost model (its exact replay alone is built)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from calibrate.fitting.profile_file import Profile, load_profile
from calibrate.hardware.device import device_name
from engine.core.blocks import blocks_for
from engine.core.spec import ModelSpec
from engine.core.system import SystemSpec
from engine.errors import SpecError
from fidelity.config import DTYPE_NAMES, ValidationConfig
from sim.workload.trace import Trace


@dataclass(frozen=True)
class Pool:
    """The KV pool both data planes get, in blocks."""
    num_gpu_blocks: int
    num_cpu_blocks: int
    block_size: int

    @property
    def num_slots(self) -> int:
        return self.num_gpu_blocks * self.block_size


def check_profile(cfg: ValidationConfig) -> Profile:
    """The profile must be measured for the config's model, on its device, in its dtype."""
    exp, opts = cfg.experiment, cfg.options
    path = str(exp.cost_model.profile_path)
    profile = load_profile(path)
    profile_dtype = DTYPE_NAMES.get(profile.dtype, profile.dtype)
    want = f"{exp.model.name} on {opts.device} ({opts.resolved_dtype})"
    have = f"{profile.model} on {profile.device} ({profile.device_name}, {profile_dtype})"
    hint = (f"; calibrate one with `servesim calibrate profile --model {exp.model.name} --device {opts.device} "
            f"--out raw.csv && servesim calibrate fit raw.csv --out profile.yaml`")
    if profile.model != exp.model.name:
        raise SpecError(path, "model", f"this profile was calibrated for {have}, but {cfg.source} validates "
                        f"{want}{hint}")
    if profile.device != opts.device:
        raise SpecError(path, "device", f"this profile was calibrated for {have}, but {cfg.source} runs the "
                        f"engine for {want}{hint}")
    if profile_dtype != opts.resolved_dtype:
        raise SpecError(path, "dtype", f"this profile was calibrated for {have}, but {cfg.source} runs the "
                        f"engine in {opts.resolved_dtype} (validation.dtype){hint}")
    here = device_name(opts.device)
    if profile.device_name != here:
        raise SpecError(path, "device_name", (
            f"this profile was measured on {profile.device_name}, but this machine's {opts.device} is {here}: "
            f"a profile describes one device; run `servesim validate {cfg.source} --calibrate` to profile this "
            f"one first, or point experiment.cost_model at a profile made here"))
    threads = profile.torch_threads
    if opts.device == "cpu" and threads and opts.torch_threads and threads != opts.torch_threads:
        # a different thread count is a different machine speed: the probe would "correct" it away
        raise SpecError(path, "torch_threads", (
            f"this profile was measured with {threads} torch thread(s), but {cfg.source} runs the engine with "
            f"{opts.torch_threads} (validation.torch_threads); profile with --threads {opts.torch_threads} or "
            f"set validation.torch_threads: {threads}"))
    return profile


def serving_spec(cfg: ValidationConfig) -> ModelSpec:
    """The model as both sides serve it: max_seq_len capped at validation.max_model_len (the weights are
    the same; only the longest request admitted, and so Orca (Max)'s and FasterTransformer's reservation, change)."""
    model, cap = cfg.experiment.model, cfg.options.max_model_len
    if cap is None:
        return model
    if cap > model.max_seq_len:
        raise SpecError(cfg.source, "validation.max_model_len",
                        f"{cap} exceeds {model.name}'s max_seq_len {model.max_seq_len}")
    return replace(model, max_seq_len=cap)


def pool_for(cfg: ValidationConfig, system: SystemSpec, spec: ModelSpec) -> Pool:
    opts, exp = cfg.options, cfg.experiment
    gpu = opts.num_gpu_blocks if opts.num_gpu_blocks is not None else exp.kv_pool(system).num_gpu_blocks
    cpu = opts.num_cpu_blocks if opts.num_cpu_blocks is not None else gpu
    pool = Pool(gpu, cpu, system.block_size)
    if pool.num_slots < spec.max_seq_len:
        need = blocks_for(spec.max_seq_len, system.block_size)
        raise SpecError(cfg.source, "validation.num_gpu_blocks", (
            f"the pool holds {pool.num_slots} tokens ({gpu} blocks of {system.block_size}), less than one "
            f"{spec.max_seq_len}-token request, which {system.name} may reserve; give at least {need} blocks "
            f"or lower validation.max_model_len"))
    return pool


def check_trace(trace: Trace, spec: ModelSpec, source: str, what: str = "trace") -> None:
    """Every request must fit the served model: reported by row, with its lengths, before anything runs.
    And none is a beam search: its forks are each plane's own choice, so schedules differ by design."""
    if trace.has_beams:
        row = int(trace.beam_width.argmax())
        raise SpecError(source, f"{what} row {row}", (
            f"beam_width {int(trace.beam_width[row])}: a beam search cannot be validated (the engine forks its "
            "beams from its scores, the simulator from sim/core/beams.py's model); replay a trace without beams"))
    total = trace.prompt_len + trace.output_len
    bad = [int(i) for i in (total > spec.max_seq_len).nonzero()[0]]
    if not bad:
        return
    rows = ", ".join(f"row {i} (prompt {int(trace.prompt_len[i])} + output {int(trace.output_len[i])} = "
                     f"{int(total[i])} tokens)" for i in bad[:5])
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    raise SpecError(source, f"{what} row {bad[0]}", (
        f"{len(bad)} request(s) exceed {spec.name}'s max length of {spec.max_seq_len} tokens "
        f"(prompt + output): {rows}{more}; drop them, shorten them, or raise validation.max_model_len"))


def check_speculation_compared(cfg: ValidationConfig) -> None:
    """A speculating system is validated by its exact replay alone (--exact): the real iterations' batches, which the
    cost model's errors and the served fits read, keep no proposals to price a verify step by."""
    for i, system in enumerate(cfg.experiment.systems):
        if system.speculative is not None:
            raise SpecError(cfg.source, f"experiment.systems[{i}].speculative", (
                f"{system.name} speculates: only its exact replay is validated (the engine's times and accepted "
                "counts fed to the simulator), not a cost model's prediction of it; run with --exact, or remove "
                "the key"))
