"""Model architecture as data: what a decoder looks like, not its weights.

Reading one from YAML, and checking what a user wrote, is engine.specs.loader's job.
"""
from __future__ import annotations

from dataclasses import dataclass


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

