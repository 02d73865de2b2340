"""The EAGLE and MTP heads: one decoder layer of the target's family over the target's hidden states, as vLLM
builds them (vllm/model_executor/models/llama_eagle.py, deepseek_mtp.py).

A head's row at position t reads the target's last hidden state there (after its final norm, what the target's
forward returns) and the embedding of the token after it, x(t+1), in the target's own embedding table; one layer
over them, with its own paged KV cache, gives an output g(t), and the LM head over it predicts x(t+2). Chained,
a row reads the head's own output of the row before in place of the target's hidden state.

- EAGLE: fc([embedding, hidden]) (no bias) through a layer whose input norm is skipped (EAGLE's first layer
  has none), then the target's final norm and LM head. (vLLM's EAGLE-1 Llama head hands its output to the LM
  head unnormalized and EAGLE-3's normalizes with a norm of its own: the same work, other weights.)
- MTP (DeepSeek's multi-token prediction module): eh_proj([enorm(embedding), hnorm(hidden)]) (no bias), a whole
  decoder layer, then the module's own norm (shared_head.norm) and the target's LM head (DeepSeek-V3 shares it).
  As vLLM's, the embedding at position 0 is zeroed.

Norms are of the family's kind (RMSNorm or LayerNorm); positions are the layer's rotary ones, none for OPT's
learned positions (the target's hidden state carries them). Weights are seeded random, as the target's.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from engine.core.spec import ModelSpec
from engine.runtime.model import AttentionMetadata, Decoder, LayerKVCache, make_layer, make_norm, seeded

HEAD_METHODS = ("eagle", "mtp")


def head_kv_spec(target: ModelSpec) -> ModelSpec:
    """The head's KV as a model spec: one layer of the target's attention (for its cache and its pool share)."""
    return dataclasses.replace(target, name=f"{target.name}-head", num_layers=1)


class ProposerHead(nn.Module):
    def __init__(self, spec: ModelSpec, method: str):
        super().__init__()
        if method not in HEAD_METHODS:
            raise ValueError(f"a proposer head is one of {list(HEAD_METHODS)}, got {method!r}")
        self.method = method
        hidden = spec.hidden_size
        self.layer = make_layer(spec)
        if method == "eagle":
            for norm in ("attention_norm", "input_norm"):  # the one a layer of the family has
                if hasattr(self.layer, norm):
                    setattr(self.layer, norm, nn.Identity())
            self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        else:
            self.enorm, self.hnorm, self.shared_norm = make_norm(spec), make_norm(spec), make_norm(spec)
            self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)

    def forward(self, target: Decoder, input_ids: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor,
                meta: AttentionMetadata, cache: LayerKVCache | None) -> torch.Tensor:
        """Outputs g [rows, hidden] of rows (x(t+1), position t, hidden state at t); cache None: one dense
        sequence (a test's reference)."""
        embedded = target.embed_tokens(input_ids)
        if self.method == "eagle":
            x = self.fc(torch.cat([embedded, hidden], dim=-1))
        else:
            embedded = embedded.masked_fill((positions == 0).unsqueeze(1), 0.0)
            x = self.eh_proj(torch.cat([self.enorm(embedded), self.hnorm(hidden)], dim=-1))
        return self.layer(x, target.rotary(positions), meta, cache)

    def logits(self, target: Decoder, outputs: torch.Tensor) -> torch.Tensor:
        """The next token's logits from head outputs: the target's LM head after the head's norm."""
        norm = target.final_norm if self.method == "eagle" else self.shared_norm
        return target.logits(norm(outputs))


def build_head(target: Decoder, method: str, seed: int) -> ProposerHead:
    """The head of `method` over `target`, its own weights seeded random on the target's device and dtype."""
    with torch.device("meta"):
        head = ProposerHead(target.spec, method)
    return seeded(head, target.device, target.dtype, seed)
