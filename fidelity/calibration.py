"""`servesim validate --calibrate`: profile and fit the engine on the device at hand, then validate
against that profile. No shipped CPU profile matches a user's CPU, so the shipped CPU validation
config calibrates first (about two minutes for the CPU grid on one core)."""
from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from calibrate.fitting.fit import fit_and_save
from calibrate.profiling.grid import default_grid
from fidelity.config import ValidationConfig


def calibrate_here(cfg: ValidationConfig, out_dir: Path, log: Callable[[str], None] = print) -> Path:
    """Profile the config's model on validation.device (its dtype, threads and attention backend), fit it,
    and write <out>/profile/<device>-<model>.{raw.csv,yaml,png}; returns the profile's path."""
    from calibrate.profiling.profile import profile, save_raw
    from fidelity.real import torch_threads

    exp, opts = cfg.experiment, cfg.options
    folder = Path(out_dir) / "profile"
    stem = f"{opts.device}-{exp.model.name}"
    grid = opts.calibrate_grid or default_grid(opts.device)
    log(f"calibrating {exp.model.name} on this {opts.device} first: grid {grid!r}, "
        f"{opts.calibrate_repeats} passes (validation.calibrate) -> {folder}/{stem}.yaml")
    with torch_threads(opts.torch_threads):
        raw = profile(exp.model, device=opts.device, dtype=opts.resolved_dtype, grid=grid,
                      repeats=opts.calibrate_repeats, attention_backend=opts.attention_backend,
                      cuda_graphs=cfg.engine.cuda_graphs)
    raw_path, path = folder / f"{stem}.raw.csv", folder / f"{stem}.yaml"
    save_raw(raw, raw_path)
    command = "servesim " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "validate --calibrate"
    result = fit_and_save(raw, str(raw_path), command, path)
    log(f"calibrated: {len(raw)} rows, held-out error {result.profile.heldout_mape:.1%} mean, "
        f"{result.profile.heldout_p95_ape:.1%} p95")
    return path


def with_profile(cfg: ValidationConfig, path: Path) -> ValidationConfig:
    """The same validation, its cost model the profile at `path`."""
    exp = cfg.experiment
    cost_model = dataclasses.replace(exp.cost_model, kind="profile", profile_path=path)
    return dataclasses.replace(cfg, experiment=dataclasses.replace(exp, cost_model=cost_model))
