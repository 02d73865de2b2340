"""The device clock a GPU gets when nobody chose one: its own measured profile where servesim ships one, else the
whole A100 clock carried to it.

A shipped profile imported from public per-operation measurements (calibrate/profiles/: a linear part and measured
attention) prices the GPU it was measured on as measured. Any other GPU gets `a100-80gb.yaml`, the A100's clock
carried to its spec sheet: the attention by its shares, the linear part by regime as every measured GPU held out in
turn chose (calibrate/profiles/carry/held-out-gpus.yaml, read by calibrate/cost_models/transfer_cost.by_regime;
docs/transfer.md).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from calibrate.fitting.profile_file import load_profile
from calibrate.hardware.hardware import HardwareSpec, hardware_for_device
from engine.errors import SpecError

PROFILES = Path(__file__).resolve().parents[1] / "profiles"
CARRIED = "a100-80gb.yaml"


@lru_cache(maxsize=1)
def measured_profiles() -> dict[str, Path]:
    """Shipped imported profiles (a linear part and attention) by the hardware sheet of the GPU they measured."""
    found: dict[str, Path] = {}
    for path in sorted(PROFILES.glob("*.yaml")):
        try:
            profile = load_profile(path)
        except SpecError:
            continue
        if profile.linear is None or profile.attention is None:
            continue
        sheet = hardware_for_device(profile.device_name)
        if sheet is not None:
            found.setdefault(sheet, path)
    return found


def default_device_profile(hardware: HardwareSpec) -> Path:
    """The profile that prices this GPU: its own where shipped, else the A100's carried."""
    return measured_profiles().get(hardware.name, PROFILES / CARRIED)
