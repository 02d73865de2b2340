"""`cost_model: {kind: transfer}` with a profile fitted on two GPUs' per-operation tables
(`servesim calibrate import A100_TABLES... --also H100_TABLES...`).

On either measured GPU (or the same chip with other memory) that GPU's own fit prices every regime: its
own tables judge it there, and its latencies and GEMM bandwidth share are its own (they differ between
the two GPUs, docs/transfer.md). On any other GPU the linear part is priced by regime as every measured GPU held out
in turn chose (calibrate/cost_models/transfer_cost.by_regime): the profile's own two-GPU judgement
(linear.heldout.two_gpus) is kept as a record, but one pair agreeing both ways round did not carry to a third GPU.
"""
from __future__ import annotations

from calibrate.fitting.profile_file import Profile
from calibrate.hardware.hardware import HardwareSpec, load_hardware
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.transfer import same_chip
from engine.errors import SpecError


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
