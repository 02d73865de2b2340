"""Model architecture as data: what a decoder looks like, not its weights."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from engine.core.errors import SpecError

CONFIG_ROOT = Path(__file__).resolve().parents[2] / "configs"
MODELS_DIR = CONFIG_ROOT / "models"

FAMILIES = {
    "opt": dict(norm="layernorm", activation="relu", position="learned"),
    "llama": dict(norm="rmsnorm", activation="silu", position="rotary"),
}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    ffn_dim: int
    vocab_size: int
    max_seq_len: int
    norm: str
    activation: str
    position: str

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_gated_mlp(self) -> bool:
        return self.activation == "silu"

    def layer_linear_params(self) -> int:
        """Weights of one layer's matmuls (QKV, output, MLP), biases excluded."""
        h = self.hidden_size
        attn = h * (h + 2 * self.kv_dim) + h * h
        mlp = (3 if self.is_gated_mlp else 2) * h * self.ffn_dim
        return attn + mlp

    def num_params(self) -> int:
        h = self.hidden_size
        per_layer = self.layer_linear_params()
        if self.family == "opt":  # biases (q, o, fc2: h; k, v: kv_dim; fc1: ffn) and two LayerNorms
            per_layer += 3 * h + 2 * self.kv_dim + self.ffn_dim + 4 * h
            final_norm = 2 * h
        else:  # two RMSNorm weights per layer, no biases
            per_layer += 2 * h
            final_norm = h
        embed = self.vocab_size * h
        if self.position == "learned":
            embed += (self.max_seq_len + 2) * h
        lm_head = 0 if self.family == "opt" else self.vocab_size * h  # OPT ties the head
        return self.num_layers * per_layer + embed + lm_head + final_norm

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        return self.num_params() * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """2 (K and V) x layers x kv_heads x head_dim x dtype bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes

    def validate(self, source: str) -> None:
        if self.family not in FAMILIES:
            raise SpecError(source, "family", f"{self.family!r} is not one of {sorted(FAMILIES)}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise SpecError(source, f.name, f"must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise SpecError(source, "num_heads", f"{self.num_heads} does not divide hidden_size {self.hidden_size}")
        if self.num_heads % self.num_kv_heads:
            raise SpecError(source, "num_kv_heads", f"{self.num_kv_heads} does not divide num_heads {self.num_heads}")


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
    spec.validate(source)
    return spec


def available_models() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))


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


def load_model_spec(name_or_path: str | Path) -> ModelSpec:
    """A model by name (configs/models/NAME.yaml) or by path to a YAML file."""
    return model_spec_from_dict(*read_named_yaml(MODELS_DIR, name_or_path, "model"))


def blocks_for(num_tokens: int, block_size: int) -> int:
    return math.ceil(num_tokens / block_size)
