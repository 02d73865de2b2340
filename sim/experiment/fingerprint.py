"""What one run's result depends on, as a digest: a resumed sweep reuses a run only if it matches.

The config text alone is not enough: it names files (a lengths CSV, a trace, a profile) and
specs (model, hardware) whose content can change under the same name. So the digest covers the
config less the sweep lists, the run's own system, rate and seed, the content hash of every data
file the run reads, and the model and hardware specs as loaded (every value they hold).
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path

import yaml

from calibrate.cost_models.registry import PROFILE_KINDS, profile_host_model
from calibrate.hardware.hardware import HardwareSpec
from calibrate.parts.fp8_decoder import prices_fp8_gemms
from calibrate.parts.fp8_gemm import H100_FP8_FIT
from engine.core.spec import ModelSpec
from engine.core.system import SystemSpec
from sim.experiment.config import Experiment
from sim.workload.lengths import shipped_file
from sim.workload.paths import SHAREGPT_CSV
from sim.workload.standin import SHAREGPT_FIG11_STANDIN

# keys that choose which runs a sweep has, not what any one run computes
SWEEP_KEYS = ("name", "systems", "rates", "seeds", "concurrencies")
# a model's rotary settings shape only the engine's numbers, never a simulated time: a run's result cannot depend
# on them, and leaving them out keeps every digest what it was before specs carried them
ENGINE_ONLY_MODEL_FIELDS = ("rope_theta", "partial_rotary_factor")


def data_files(exp: Experiment) -> dict[str, Path]:
    """The files a run reads besides the config and the specs, by the config key that names them."""
    files = {}
    workload = exp.workload
    if workload.is_replay:
        files["workload.trace"] = Path(workload.trace)
    elif shipped_file(workload.dataset, workload.length_filter, workload.tokenizer) is not None:
        files["workload.dataset"] = shipped_file(workload.dataset, workload.length_filter, workload.tokenizer)
    elif workload.dataset == SHAREGPT_FIG11_STANDIN:  # drawn in code, but from the real pairs of the shipped file
        files["workload.dataset"] = SHAREGPT_CSV
    elif Path(workload.dataset).is_file():  # a parametric stand-in is drawn in code and reads no file
        files["workload.dataset"] = Path(workload.dataset)
    if exp.cost_model.profile_path is not None:
        files["cost_model.path"] = Path(exp.cost_model.profile_path)
    if exp.cost_model.kind == "roofline" and prices_fp8_gemms(exp.model, exp.hardware, exp.precision):
        files["precision.weights"] = H100_FP8_FIT  # the measured FP8 GEMMs its W8A8 matmuls are priced by
    if exp.cost_model.host is not None:
        files["cost_model.host"] = Path(exp.cost_model.host)
    elif exp.cost_model.kind in PROFILE_KINDS and exp.cost_model.profile_path is not None:
        default = profile_host_model(Path(exp.cost_model.profile_path))  # the profile's default host model
        if default is not None:
            files["cost_model.host"] = default
    return files


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def spec_values(exp: Experiment) -> dict[str, dict]:
    """The specs a run loads, as values: an edit to a spec file that changes what it says changes these. A sheet's
    FP8 rate counts only where the run's matmuls may read it (FP8 weights), so that every other run's digest
    stays what it was before sheets gave one."""
    specs = {"model": model_values(exp.model), "hardware": sheet_values(exp.hardware, exp.precision.reads_fp8_rate)}
    if exp.cost_model.kind == "transfer":
        specs.update(_transfer_specs(exp))
    return specs


def model_values(model: ModelSpec) -> dict:
    """A model spec's values that a simulated run reads. A head_dim of hidden_size // num_heads is implied by the
    two, as every spec before head_dim was a key implied it: left out, so that their digests stay what they were."""
    values = {key: value for key, value in asdict(model).items() if key not in ENGINE_ONLY_MODEL_FIELDS}
    if model.head_dim == model.hidden_size // model.num_heads:
        del values["head_dim"]
    return values


def _transfer_specs(exp: Experiment) -> dict[str, dict]:
    """A transferred roofline also reads the profiled model's spec and the hardware it was measured on."""
    from calibrate.fitting.profile_file import load_profile
    from calibrate.hardware.hardware import hardware_for_device, load_hardware
    from engine.specs.loader import load_model_spec

    profile = load_profile(exp.cost_model.profile_path)
    specs = {"profile.model": model_values(load_model_spec(profile.model))}
    measured_on = exp.cost_model.measured_on or hardware_for_device(profile.device_name)
    if measured_on is not None:  # else the run itself stops with the error that says so
        specs["cost_model.measured_on"] = sheet_values(load_hardware(measured_on), False)  # measured at 16 bits
    return specs


def sheet_values(hw: HardwareSpec, reads_fp8_rate: bool) -> dict:
    """A hardware sheet's values, its FP8 rate among them only where the run may read it."""
    values = asdict(hw)
    del values["sheet"]  # where it was read from: the figures are what a run depends on
    if not reads_fp8_rate:
        del values["peak_flops_fp8"]
    return values


def input_digest(exp: Experiment) -> dict:
    """Everything the runs of a sweep read besides the config text; computed once per sweep."""
    return {"files": {key: file_hash(path) for key, path in data_files(exp).items()}, "specs": spec_values(exp)}


def system_values(system: SystemSpec) -> dict:
    """A system's values; its speculation (a spec of its own, its draft model's spec in it) only where it speculates,
    so that every other run's digest stays what it was before systems could."""
    values = dict(system.__dict__)
    spec = values.pop("speculative")
    if spec is not None:
        values["speculative"] = {**{k: v for k, v in spec.__dict__.items() if k != "draft"}, "rates": list(spec.rates),
                                 "draft": model_values(spec.draft) if spec.draft is not None else None}
    return values


def config_digest(exp: Experiment, system: SystemSpec, rate: float, seed: int, inputs: dict,
                  concurrency: int | None = None) -> str:
    """One run's fingerprint: the config less the sweep lists, its own key, and what it reads. A run behind a
    client's gate has its concurrency in its key; an ungated run's digest is what it was before gates were."""
    shared = {k: v for k, v in exp.raw.items() if k not in SWEEP_KEYS}
    key = {"rate": rate, "seed": seed, **({} if concurrency is None else {"max_concurrency": concurrency})}
    text = yaml.safe_dump({"experiment": shared, "system": system_values(system), **key, "inputs": inputs},
                          sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
