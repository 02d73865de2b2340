"""Specs from files and mappings: a model by shipped name or YAML path, a system by preset or mapping.

Shipped model YAMLs are package data in `engine/specs/models/`, found beside this module in any
install (editable, wheel, or a plain checkout); nothing here depends on the caller's folder.
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import yaml

from engine.core.spec import ModelSpec
from engine.core.system import PAPER_SYSTEMS, SystemSpec
from engine.specs.errors import SpecError

MODELS_DIR = Path(__file__).resolve().parent / "models"

# What each family's YAML may leave out: its norm, activation and position encoding.
FAMILIES = {
    "opt": dict(norm="layernorm", activation="relu", position="learned"),
    "llama": dict(norm="rmsnorm", activation="silu", position="rotary"),
}


def read_named_yaml(directory: Path, name_or_path: str | Path, what: str) -> tuple[object, str]:
    """A spec file by name (DIRECTORY/NAME.yaml) or by path: its parsed YAML and its path.

    An unknown name is a SpecError whose source is `what` ("model", "hardware") and lists
    the names that exist.
    """
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = directory / f"{name_or_path}.yaml"
        if not path.exists():
            names = sorted(p.stem for p in directory.glob("*.yaml"))
            raise SpecError(what, str(name_or_path), f"unknown {what}; available: {names}")
    with open(path) as f:
        return yaml.safe_load(f), str(path)


# --- models -----------------------------------------------------------------------------

def available_models() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))


def load_model_spec(name_or_path: str | Path) -> ModelSpec:
    """A shipped model by name (engine/specs/models/NAME.yaml) or any model YAML by path."""
    return model_spec_from_dict(*read_named_yaml(MODELS_DIR, name_or_path, "model"))


def model_spec_from_dict(raw: dict, source: str) -> ModelSpec:
    if not isinstance(raw, dict):
        raise SpecError(source, "", "a model spec must be a mapping of keys to values")
    known = {f.name for f in fields(ModelSpec)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SpecError(source, unknown[0], f"unknown key; valid keys are {sorted(known)}")
    family = raw.get("family")
    if family not in FAMILIES:
        raise SpecError(source, "family", f"{family!r} is not one of {sorted(FAMILIES)}")
    values = dict(FAMILIES[family])
    values.update(raw)
    values.setdefault("num_kv_heads", values.get("num_heads"))
    missing = sorted(known - set(values))
    if missing:
        raise SpecError(source, missing[0], "missing required key")
    spec = ModelSpec(**values)
    _check_model(spec, source)
    return spec


def _check_model(spec: ModelSpec, source: str) -> None:
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.type == "int" and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise SpecError(source, f.name, f"must be a positive integer, got {value!r}")
    if spec.hidden_size % spec.num_heads:
        raise SpecError(source, "num_heads", f"{spec.num_heads} does not divide hidden_size {spec.hidden_size}")
    if spec.num_heads % spec.num_kv_heads:
        raise SpecError(source, "num_kv_heads", f"{spec.num_kv_heads} does not divide num_heads {spec.num_heads}")


# --- systems ----------------------------------------------------------------------------

def system_from_dict(raw: dict | str, source: str, key: str) -> SystemSpec:
    """A preset name, or a mapping with `preset:` and overrides, or a full mapping."""
    if isinstance(raw, str):
        raw = {"preset": raw}
    if not isinstance(raw, dict):
        raise SpecError(source, key, "a system is a preset name or a mapping")
    raw = dict(raw)
    preset = raw.pop("preset", None)
    if preset is not None:
        if preset not in PAPER_SYSTEMS:
            raise SpecError(source, f"{key}.preset", f"{preset!r} is not one of {sorted(PAPER_SYSTEMS)}")
        base = {f.name: getattr(PAPER_SYSTEMS[preset], f.name) for f in fields(SystemSpec)}
    else:
        base = {}
    known = {f.name for f in fields(SystemSpec)}
    for k in raw:
        if k not in known:
            raise SpecError(source, f"{key}.{k}", f"unknown key; valid keys are {sorted(known | {'preset'})}")
    base.update(raw)
    for required in ("name", "kind"):
        if required not in base:
            raise SpecError(source, f"{key}.{required}", "missing (or give preset: one of "
                            f"{sorted(PAPER_SYSTEMS)})")
    spec = SystemSpec(**base)
    spec.validate(source, key)
    return spec
