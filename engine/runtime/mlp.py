"""A decoder layer's MLP, one per family: OPT's relu, phi-2's tanh GELU, and the SwiGLU of LLaMA, Qwen2, Qwen3
and each expert of Mixtral and of a Qwen3 mixture."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.core.spec import ModelSpec
from engine.errors import SpecError

ACTIVATIONS = {
    "relu": F.relu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),  # Hugging Face's "gelu_new": GPT-2's tanh approximation
}


def has_linear_biases(spec: ModelSpec) -> bool:
    """OPT and phi-2 put a bias on every linear; LLaMA, Qwen2 (past its q/k/v), Mixtral and Qwen3 on none."""
    return spec.family in ("opt", "phi")


class MLP(nn.Module):
    """Gated (SwiGLU): w_out(silu(gate x) * up x), gate and up fused in w_in. Else w_out(act(w_in x))."""

    def __init__(self, spec: ModelSpec, bias: bool = False):
        super().__init__()
        self.gated = spec.is_gated_mlp
        if not self.gated and spec.activation not in ACTIVATIONS:
            raise SpecError(spec.name, "activation", f"the engine builds silu (gated) and {sorted(ACTIVATIONS)} "
                            f"MLPs, not {spec.activation!r}")
        self.activation = None if self.gated else ACTIVATIONS[spec.activation]
        width = 2 * spec.ffn_dim if self.gated else spec.ffn_dim
        self.w_in = nn.Linear(spec.hidden_size, width, bias=bias)
        self.w_out = nn.Linear(spec.ffn_dim, spec.hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.w_in(x)
        if self.activation is None:
            gate, up = h.chunk(2, dim=-1)
            return self.w_out(F.silu(gate) * up)
        return self.w_out(self.activation(h))
