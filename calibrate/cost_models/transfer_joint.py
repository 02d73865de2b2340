"""`cost_model: {kind: transfer}` with a profile fitted on two GPUs' per-operation tables
(`servesim calibrate import A100_TABLES... --also H100_TABLES...`).

On either measured GPU (or the same chip with other memory) that GPU's own fit prices every regime: its
own tables judge it there, and its latencies and GEMM bandwidth share are its own (they differ between
the two GPUs, docs/transfer.md). On any other GPU the fit on both prices the regimes where it beat the
spec-sheet roofline in both held-out directions, the roofline the rest (calibrate/cost_models/transfer_cost.by_regime);
the judgement is read from the profile, so a run never needs the held-out tables.
"""
from __future__ import annotations

from calibrate.fitting.profile_file import Profile
from calibrate.hardware.hardware import HardwareSpec, load_hardware
from calibrate.judging.regime_errors import RegimeError, two_gpu_choice
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.transfer import RegimeChoice, same_chip
from engine.errors import SpecError


def stored_judgement(profile: Profile) -> list[RegimeError]:
    """The held-out errors the import wrote (checked when the profile was loaded)."""
    return [RegimeError(e["direction"], e["regime"], int(e["rows"]), float(e["mean"]), float(e["worst"]),
                        float(e["roofline_mean"]), float(e["roofline_worst"]), str(e.get("note", "")))
            for e in (profile.linear or {})["heldout"]["two_gpus"]]


def stored_choice(profile: Profile) -> RegimeChoice:
    return two_gpu_choice(stored_judgement(profile))


def measured_gpus(profile: Profile, source: str) -> list[HardwareSpec]:
    """The shipped spec sheets of the GPUs the profile's own fits were measured on (the first: the all-reduce's)."""
    names = list((profile.linear or {})["gpus"])
    try:
        return [load_hardware(name) for name in names]
    except SpecError as err:
        raise SpecError(source, "linear.gpus", f"names a GPU with no shipped spec sheet ({err})") from None


def fit_for(profile: Profile, source: str, hardware: HardwareSpec) -> tuple[HardwareSpec, LinearFit, str | None]:
    """(the GPU the all-reduce table was measured on, the fit that prices `hardware`, the measured GPU whose own
    fit that is, or None where it is the fit on both)."""
    gpus = measured_gpus(profile, source)
    own = next((gpu for gpu in gpus if same_chip(gpu, hardware)), None)
    if own is not None:
        return gpus[0], LinearFit.from_dict(profile.linear["gpus"][own.name]), own.name  # type: ignore[index]
    return gpus[0], LinearFit.from_dict(profile.linear or {}), None
