"""Specs from files and mappings: a model by shipped name or YAML path, a system by preset or mapping.

Shipped model YAMLs are package data in `engine/specs/models/`, found beside this module in any
install (editable, wheel, or a plain checkout); nothing here depends on the caller's folder.
"""
from __future__ import annotations

import copy
import re
from dataclasses import MISSING, fields, replace
from pathlib import Path

import yaml

from engine.core.spec import ModelSpec
from engine.core.speculative import speculative_from_dict
from engine.core.system import CHUNKED_TOKEN_BUDGET, PRESETS, SystemSpec, v1_limits
from engine.errors import SpecError
from engine.specs.checks import choice, known_keys, positive, positive_int, share
from engine.specs.paths import Shipped, names_hint

MODELS_DIR = Path(__file__).resolve().parent / "models"
SHIPPED_MODELS = Shipped(MODELS_DIR, ".yaml", "engine/specs/models", "model")

# What each family's YAML may leave out: its norm, activation and position encoding.
FAMILIES = {
    "opt": dict(norm="layernorm", activation="relu", position="learned"),
    "llama": dict(norm="rmsnorm", activation="silu", position="rotary"),
    "qwen2": dict(norm="rmsnorm", activation="silu", position="rotary"),
    "phi": dict(norm="layernorm", activation="gelu_new", position="rotary"),
    "mixtral": dict(norm="rmsnorm", activation="silu", position="rotary"),  # llama attention, SwiGLU experts
    # llama attention with an RMSNorm over each head of q and k (QK-norm); SwiGLU, or SwiGLU experts
    "qwen3": dict(norm="rmsnorm", activation="silu", position="rotary"),
}


class _Loader(yaml.SafeLoader):
    """YAML as users write numbers: YAML 1.1 reads `1e3` (no dot, no exponent sign) as text; here it is 1000.0."""


# The same loader on libyaml's parser where PyYAML was built with it: the same resolvers and constructors in
# Python, so the same data, ten times faster on a calibrated profile (a run reads several); bad YAML is parsed
# again by _Loader, whose report the error names
_FastLoader: type = type("_FastLoader", (yaml.CSafeLoader,), {}) if yaml.__with_libyaml__ else _Loader

for _loader in {_Loader, _FastLoader}:
    _loader.add_implicit_resolver(
        "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"))


def parse_yaml(text: str, source: str, key: str = "") -> object:
    """Parsed YAML, or a one-line SpecError saying where the text stops making sense."""
    try:
        return yaml.load(text, Loader=_FastLoader)  # a SafeLoader: builds plain data, never objects
    except yaml.YAMLError:
        pass
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        raise SpecError(source, key, f"not valid YAML: {_yaml_problem(err)}") from None


def _yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's several-line report as one line: the problem and where it is."""
    problem = getattr(err, "problem", None) or getattr(err, "context", None)
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    if problem is None:
        return " ".join(str(err).split())
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{problem}{where}"


def read_yaml(path: str | Path, what: str = "file") -> object:
    """A YAML file a user named: a missing file, a folder, binary or non-UTF-8 bytes and bad YAML are
    each a one-line SpecError naming the file (`what` says what it should have been). The same bytes are parsed
    once per process (a run reads its GPU's 32 kB profile three times, 25 ms a parse, and its model and hardware
    specs several); each call gets data of its own, nothing in it shared with another's."""
    path = Path(path)
    source = str(path)
    if path.is_dir():
        raise SpecError(source, "", f"is a folder; give the path of a {what} (a YAML file)")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(source, "", f"no such {what}") from None
    except OSError as err:
        raise SpecError(source, "", f"cannot read it: {err.strerror or err}") from None
    parsed = _PARSED.get(data)  # by the bytes, not the file's time: a file rewritten within a clock tick is read again
    if parsed is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise SpecError(source, "", f"not a text file: byte {data[err.start]:#04x} at offset {err.start} is not "
                            f"UTF-8 (a {what} is YAML text)") from None
        parsed = parse_yaml(text, source)  # an error names this file
        if len(_PARSED) >= 64:
            _PARSED.clear()
        _PARSED[data] = parsed
    return copy.deepcopy(parsed)


_PARSED: dict[bytes, object] = {}  # read_yaml's: YAML files' bytes, parsed


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
            raise SpecError(what, str(name_or_path), f"unknown {what} {str(name_or_path)!r}"
                                                     f"{names_hint(str(name_or_path), names)}")
    return read_yaml(path, f"{what} spec"), str(path)


# --- models -----------------------------------------------------------------------------

def available_models() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))


def load_model_spec(name_or_path: str | Path) -> ModelSpec:
    """A shipped model by name (engine/specs/models/NAME.yaml) or any model YAML by path."""
    return model_spec_from_dict(*read_named_yaml(MODELS_DIR, name_or_path, "model"))


# Keys a spec may leave out: their defaults describe every model that predates them
_OPTIONAL_KEYS = {f.name for f in fields(ModelSpec) if f.default is not MISSING}


def model_spec_from_dict(raw: dict, source: str) -> ModelSpec:
    if not isinstance(raw, dict):
        raise SpecError(source, "", "a model spec must be a mapping of keys to values")
    known = {f.name for f in fields(ModelSpec)}
    known_keys(raw, sorted(known), source)
    family = choice(raw.get("family"), source, "family", sorted(FAMILIES))
    values = dict(FAMILIES[family])
    values.update(raw)
    values.setdefault("num_kv_heads", values.get("num_heads"))
    missing = sorted(known - set(values) - _OPTIONAL_KEYS)
    if missing:
        raise SpecError(source, missing[0], "missing required key")
    own_head_dim = "head_dim" in raw
    if own_head_dim:
        _check_head_dim(raw["head_dim"], values.get("position"), source)
    spec = ModelSpec(**values)
    _check_model(spec, source, own_head_dim)
    return _checked_rotary(spec, source)


def _check_head_dim(head_dim: object, position: object, source: str) -> None:
    """A head_dim the file gives, checked before ModelSpec reads 0 as "hidden_size // num_heads"."""
    width = positive_int(head_dim, source, "head_dim")
    if position == "rotary" and width % 2:
        raise SpecError(source, "head_dim", f"{width} is odd; rotary turns pairs of dimensions, so a rotary "
                        "model's head_dim must be even")


def _check_model(spec: ModelSpec, source: str, own_head_dim: bool) -> None:
    for f in fields(spec):
        if f.name == "head_dim":  # given: checked already; else hidden_size // num_heads, checked below
            continue
        value = getattr(spec, f.name)
        if f.type == "int" or (f.type == "int | None" and value is not None):
            positive_int(value, source, f.name)
        elif f.type == "bool" and not isinstance(value, bool):
            raise SpecError(source, f.name, f"must be true or false, got {value!r}")
    if spec.hidden_size % spec.num_heads and not own_head_dim:  # a head_dim of its own needs no division
        raise SpecError(source, "num_heads", f"{spec.num_heads} does not divide hidden_size {spec.hidden_size} "
                        "(or give head_dim)")
    if spec.num_heads % spec.num_kv_heads:
        raise SpecError(source, "num_kv_heads", f"{spec.num_kv_heads} does not divide num_heads {spec.num_heads}")
    if spec.experts_per_token > spec.num_experts:
        raise SpecError(source, "experts_per_token", f"{spec.experts_per_token} is more than num_experts "
                        f"{spec.num_experts}; a token runs 1 to num_experts of them")


def _checked_rotary(spec: ModelSpec, source: str) -> ModelSpec:
    """The rotary keys as floats (YAML reads `500000` as an int), or a SpecError naming the bad one."""
    theta = positive(spec.rope_theta, source, "rope_theta")
    factor = share(spec.partial_rotary_factor, source, "partial_rotary_factor")
    dims = spec.head_dim * factor
    if spec.position == "rotary" and (abs(dims - round(dims)) > 1e-9 or round(dims) % 2):  # learned: none turn
        raise SpecError(source, "partial_rotary_factor", f"{factor:g} x head_dim {spec.head_dim} is {dims:g} "
                        "dimensions; rotary turns pairs of them, so it must be a whole even number")
    return replace(spec, rope_theta=theta, partial_rotary_factor=factor)


# --- systems ----------------------------------------------------------------------------

def system_from_dict(raw: dict | str, source: str, key: str, gpu: tuple[float, tuple[str, ...]] | None = None
                     ) -> SystemSpec:
    """A preset name, or a mapping with `preset:` and overrides, or a full mapping. gpu: (memory GiB, driver
    names) of the GPU it serves on, from which a V1 system derives the token budget and sequence cap it is not
    given, as vLLM does (engine.core.system.v1_limits); None: the smaller GPU's."""
    if isinstance(raw, str):
        raw = {"preset": raw}
    if not isinstance(raw, dict):
        raise SpecError(source, key, "a system is a preset name or a mapping")
    raw = dict(raw)
    preset = raw.pop("preset", None)
    if preset is not None:
        choice(preset, source, f"{key}.preset", sorted(PRESETS))
        base = {f.name: getattr(PRESETS[preset], f.name) for f in fields(SystemSpec)}
    else:
        base = {}
    known = {f.name for f in fields(SystemSpec)}
    known_keys(raw, sorted(known | {"preset"}), source, key)
    base.update(raw)
    if base.get("prefill_policy") == "chunked" and "max_num_batched_tokens" not in raw:
        base["max_num_batched_tokens"] = CHUNKED_TOKEN_BUDGET  # vLLM's own default for chunked prefill
    if base.get("prefill_policy") == "v1":  # vLLM V1's own defaults, by the GPU, where not given
        budget, seqs = v1_limits(*gpu) if gpu is not None else v1_limits(None)
        if "max_num_batched_tokens" not in raw:
            base["max_num_batched_tokens"] = budget
        if "max_num_seqs" not in raw:
            base["max_num_seqs"] = seqs
    for required in ("name", "kind"):
        if required not in base:
            raise SpecError(source, f"{key}.{required}", "missing (or give preset: one of "
                            f"{sorted(PRESETS)})")
    if not isinstance(base["name"], str) or not base["name"].strip():
        raise SpecError(source, f"{key}.name", f"must be a non-empty label, got {base['name']!r}")
    if "speculative" in raw:
        base["speculative"] = speculative_from_dict(raw["speculative"], source, f"{key}.speculative")
    spec = SystemSpec(**base)
    spec.validate(source, key, given=raw.keys())  # only what the user wrote: a preset's values are its own
    return spec
