"""A mixture of experts' MLP (Mixtral, Qwen3-MoE): a router picks experts_per_token of num_experts SwiGLU experts
for each token, and the token's output is its experts' outputs weighted by the router.

Routing follows Hugging Face's Mixtral exactly: a softmax over every expert's router logit, the top k of those
probabilities, renormalized to sum to 1. Hugging Face's Qwen3-MoE routes the same way when its config's
norm_topk_prob is true, as every Qwen3 mixture's is (Qwen3-30B-A3B's), and no spec key turns it off. Each
expert runs once per forward on the tokens routed to it, as a grouped GEMM would; how many that is is read on the
host (one sync per layer), so a forward through this layer cannot be captured in a CUDA graph
(engine.runtime.graphs runs a mixture of experts eagerly).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.core.spec import ModelSpec
from engine.runtime.mlp import MLP


class SparseMoE(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.top_k = spec.experts_per_token
        self.gate = nn.Linear(spec.hidden_size, spec.num_experts, bias=False)  # the router
        self.experts = nn.ModuleList(MLP(spec) for _ in range(spec.num_experts))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each token's experts [T, k] and their weights [T, k] (in x's dtype, summing to 1 per token)."""
        probs = F.softmax(self.gate(x), dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return experts, weights.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        experts, weights = self.route(x)
        chosen = experts.reshape(-1)  # token t's j-th pick at t * k + j
        order = torch.argsort(chosen, stable=True)  # the picks grouped by expert
        counts = torch.bincount(chosen, minlength=len(self.experts)).tolist()
        tokens, token_weights = order // self.top_k, weights.reshape(-1)[order]
        out = torch.zeros_like(x)
        for expert, rows, row_weights in zip(self.experts, tokens.split(counts), token_weights.split(counts)):
            if rows.numel():
                out.index_add_(0, rows, expert(x[rows]) * row_weights[:, None])
        return out
