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
    qkv_bias: bool = False  # Qwen2's q, k and v projections carry biases; its output projection and MLP do not
    # Mistral v0.1 attends to the last 4096 tokens only; recorded, but the simulator keeps and prices every token's KV
    sliding_window: int | None = None
    # a mixture of experts: each layer's MLP is num_experts experts of width ffn_dim behind a router (the gate, a
    # hidden x num_experts matmul), and each token runs experts_per_token of them; 1 and 1 is a dense MLP
    num_experts: int = 1
    experts_per_token: int = 1
    # RoPE's base: the angle of pair i is position / rope_theta ** (2i / rotary_dim). It moves no weight or KV
    # byte, so the simulator never reads it; the engine's rotary does
    rope_theta: float = 10000.0
    # the share of each head's dimensions that rotate (phi-2: 0.4, the first 32 of 80); the rest pass through
    partial_rotary_factor: float = 1.0
    # each head's width; 0 takes hidden_size // num_heads, which every model before Qwen3 has (Qwen3-32B's 64
    # heads of 128 make q 8,192 wide on a 5,120-wide model). Resolved on construction, so it is always the width
    head_dim: int = 0

    def __post_init__(self) -> None:
        if self.head_dim == 0:  # a frozen dataclass: set once, here, as dataclasses document for derived fields
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)

    @property
    def q_dim(self) -> int:
        """Width of the queries, and of attention's output before the output projection: heads x head_dim."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def rotary_dim(self) -> int:
        """Dimensions of each head that rotary turns (engine.specs.loader checks that this is a whole even number)."""
        return round(self.head_dim * self.partial_rotary_factor)

    @property
    def is_gated_mlp(self) -> bool:
        return self.activation == "silu"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def has_qk_norm(self) -> bool:
        """Qwen3 normalizes each head of q and k (an RMSNorm over head_dim, weights shared by the heads) before
        rotary; the other families do not."""
        return self.family == "qwen3"

    def layer_attention_params(self) -> int:
        """Weights of one layer's QKV (hidden x (q_dim + 2 kv_dim)) and output (q_dim x hidden) projections, biases
        excluded."""
        h = self.hidden_size
        return h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h

    def expert_params(self) -> int:
        """Weights of one MLP (one expert of a mixture), biases excluded."""
        return (3 if self.is_gated_mlp else 2) * self.hidden_size * self.ffn_dim

    def gate_params(self) -> int:
        """Weights of one layer's router: none in a dense model."""
        return self.hidden_size * self.num_experts if self.is_moe else 0

    def layer_linear_params(self) -> int:
        """Weights of one layer's matmuls (QKV, output, every expert's MLP, the router), biases excluded."""
        return self.layer_attention_params() + self.num_experts * self.expert_params() + self.gate_params()

    def layer_active_linear_params(self) -> int:
        """Weights of one layer's matmuls that one token runs through: attention, its experts_per_token experts
        and the router (all of them in a dense model)."""
        return self.layer_attention_params() + self.experts_per_token * self.expert_params() + self.gate_params()

    def active_params(self) -> int:
        """Parameters one token computes with: num_params less the experts it does not run."""
        return self.num_params() - self.num_layers * (self.num_experts - self.experts_per_token) * self.expert_params()

    def num_params(self) -> int:
        h = self.hidden_size
        per_layer = self.layer_linear_params() + self._layer_bias_and_norm_params()
        if self.qkv_bias:
            per_layer += self.q_dim + 2 * self.kv_dim
        final_norm = h if self.norm == "rmsnorm" else 2 * h  # LayerNorm has a bias beside its weight
        embed = self.vocab_size * h
        if self.position == "learned":
            embed += (self.max_seq_len + 2) * h
        return self.num_layers * per_layer + embed + self._lm_head_params() + final_norm

    def _layer_bias_and_norm_params(self) -> int:
        h = self.hidden_size
        biases = self.q_dim + 2 * self.kv_dim + 2 * h + self.ffn_dim  # q; k, v; o and fc2; fc1
        if self.family == "opt":  # every linear's bias and two LayerNorms
            return biases + 4 * h
        if self.family == "phi":  # the same biases, and one LayerNorm that attention and MLP read in parallel
            return biases + 2 * h
        if self.family == "qwen3":  # two RMSNorm weights, and the QK-norm's over a head of q and one of k
            return 2 * h + 2 * self.head_dim
        return 2 * h  # two RMSNorm weights, no biases

    def _lm_head_params(self) -> int:
        if self.family == "opt":  # OPT ties the head to the embedding
            return 0
        head = self.vocab_size * self.hidden_size
        return head + self.vocab_size if self.family == "phi" else head  # phi-2's head has a bias

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        return self.num_params() * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """2 (K and V) x layers x kv_heads x head_dim x dtype bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes

