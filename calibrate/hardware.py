"""Accelerators as spec-sheet numbers: shipped sheets are package data in calibrate/hardware_specs/."""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from engine.specs.checks import number, positive
from engine.specs.errors import SpecError
from engine.specs.loader import read_named_yaml

HARDWARE_DIR = Path(__file__).resolve().parent / "hardware_specs"
GIB = 1 << 30
MAX_MEMORY_GIB = 2.0**20  # a PiB per device: far past any accelerator, and still a whole number of bytes


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    peak_flops: float  # dense fp16/bf16 FLOP/s
    hbm_bytes_per_s: float
    memory_gib: float
    nvlink_bytes_per_s: float  # one direction
    pcie_bytes_per_s: float  # one direction, host <-> device

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)


def available_hardware() -> list[str]:
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml"))


def hardware_from_dict(raw: dict, source: str) -> HardwareSpec:
    if not isinstance(raw, dict):
        raise SpecError(source, "", "a hardware spec must be a mapping")
    known = {f.name for f in fields(HardwareSpec)}
    for key in raw:
        if key not in known:
            raise SpecError(source, key, f"unknown key; valid keys are {sorted(known)}")
    for key in sorted(known - set(raw)):
        raise SpecError(source, key, "missing required key")
    if not isinstance(raw["name"], str) or not raw["name"].strip():
        raise SpecError(source, "name", f"must be a non-empty label, got {raw['name']!r}")
    values = {k: positive(raw[k], source, k) for k in sorted(known - {"name", "memory_gib"})}
    values["memory_gib"] = number(raw["memory_gib"], source, "memory_gib", low=0, low_open=True, high=MAX_MEMORY_GIB)
    return HardwareSpec(name=raw["name"], **values)


def load_hardware(name_or_path: str | Path) -> HardwareSpec:
    """Shipped hardware by name (calibrate/hardware_specs/NAME.yaml) or any hardware YAML by path."""
    return hardware_from_dict(*read_named_yaml(HARDWARE_DIR, name_or_path, "hardware"))
