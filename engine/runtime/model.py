"""A decoder built from a ModelSpec: OPT, LLaMA, Qwen2, phi-2, Mixtral and Qwen3 in one readable file (gpt-fast
style).

One forward runs a whole serving iteration. Its tokens are flattened into one batch:
first every prefill's tokens back to back, then one token per decoding sequence.
Prefill tokens attend causally to their own prompt; decode tokens attend to the paged
KV cache through their block tables. Weights are seeded random: serving cost does not
depend on their values, and nothing is downloaded.

The families differ in a few places, each said where it is built: biases (OPT and phi-2 on every linear,
Qwen2 on q, k and v only), phi-2's parallel block (attention and MLP read one LayerNorm) and its partial
rotary, Mixtral's experts (engine.runtime.moe), and Qwen3's QK-norm (an RMSNorm over each head of q and k
before rotary) with heads whose width is not hidden / heads; a Qwen3 mixture of experts routes as Mixtral does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from engine import kernels
from engine.core.spec import ModelSpec
from engine.errors import SpecError
from engine.runtime.mlp import MLP, has_linear_biases
from engine.runtime.moe import SparseMoE
from engine.runtime.rotary import apply_rotary, rotary_cos_sin

OPT_POSITION_OFFSET = 2  # OPT's learned position table starts at index 2 (a fairseq legacy)
INIT_STD = 0.02
QK_NORM_STD = 0.2  # QK-norm weights' spread about 1: wide enough that each head dimension's weight shows
ENGINE_FAMILIES = ("opt", "llama", "qwen2", "phi", "mixtral", "qwen3")  # the decoder layouts built here
Module = TypeVar("Module", bound=nn.Module)


@dataclass
class AttentionMetadata:
    """Where each token of the flattened batch lives, for attention and cache writes.

    Tokens [0, sum(prefill_lens)) are the prefills, one after another; the remaining
    `num_decodes` tokens are decodes. slot_mapping[t] is the cache slot token t's K/V goes
    to (< 0: not written). block_tables / context_lens describe the decodes only.
    A prefill i computes its last prefill_lens[i] tokens after prefill_cached_lens[i] tokens already
    in the cache (a shared prefix; None: none cached). With a cache, all prefills attend in one
    variable-length call: prefill_cu_seqlens marks each one's run of tokens, prefill_context_lens
    is its whole context (cached + new), prefill_block_tables holds one row per prefill.
    """

    prefill_lens: list[int]
    slot_mapping: torch.Tensor | None = None  # int64 [num_tokens]
    block_tables: torch.Tensor | None = None  # int32 [num_decodes, max_blocks]
    context_lens: torch.Tensor | None = None  # int32 [num_decodes]
    backend: str = "auto"  # kernel backend: auto | torch | triton
    prefill_cached_lens: list[int] | None = None
    prefill_block_tables: torch.Tensor | None = None  # int32 [num_prefills, max_blocks]
    prefill_cu_seqlens: torch.Tensor | None = None  # int32 [num_prefills + 1]: 0, then each prefill's end
    prefill_context_lens: torch.Tensor | None = None  # int32 [num_prefills]: cached + new tokens

    def prefill_context_list(self) -> list[int]:
        """Each prefill's whole context (cached + new tokens), on the host."""
        cached = self.prefill_cached_lens or [0] * len(self.prefill_lens)
        return [c + n for c, n in zip(cached, self.prefill_lens)]

    @property
    def num_prefill_tokens(self) -> int:
        return sum(self.prefill_lens)

    @property
    def num_decodes(self) -> int:
        return 0 if self.context_lens is None else int(self.context_lens.shape[0])

    @classmethod
    def dense(cls, num_tokens: int) -> AttentionMetadata:
        """One causal sequence and no cache: the no-cache reference forward."""
        return cls(prefill_lens=[num_tokens])


@dataclass
class LayerKVCache:
    key: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim]
    value: torch.Tensor


# --- building blocks --------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # normalize in fp32: fp16 squares overflow for large activations
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return x32.to(x.dtype) * self.weight


def make_norm(spec: ModelSpec) -> nn.Module:
    if spec.norm == "rmsnorm":
        return RMSNorm(spec.hidden_size)
    return nn.LayerNorm(spec.hidden_size, eps=1e-5)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """One sequence attending to itself: q [L, H, D], k/v [L, KVH, D] -> [L, H, D]."""
    group = q.shape[1] // k.shape[1]
    if group > 1:  # query head h reads KV head h // group
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, scale=scale)
    return out.transpose(0, 1)


def dense_prefill_attention(q, k, v, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """No cache: each prompt attends causally to its own tokens (the dense reference forward)."""
    if any(meta.prefill_cached_lens or []):
        raise ValueError("a prefill over cached tokens needs the KV cache and its block table")
    out, start = torch.empty_like(q), 0
    for length in meta.prefill_lens:
        out[start:start + length] = causal_attention(q[start:start + length], k[start:start + length],
                                                     v[start:start + length], scale)
        start += length
    return out


def paged_attention(q, k, v, meta: AttentionMetadata, cache: LayerKVCache | None, scale: float):
    """Write this iteration's K/V into the cache, then attend: all prefills in one variable-length
    call over the cache (cached prefix tokens and their own, just written), decodes paged."""
    num_prefill = meta.num_prefill_tokens
    if cache is None:
        if meta.num_decodes:
            raise ValueError("decode tokens need a KV cache to attend to")
        return dense_prefill_attention(q, k, v, meta, scale)
    # bounds were checked on the host when the inputs were built (engine/runtime/inputs.py);
    # checking again in the kernels would cost a device sync per layer inside the timed step
    kernels.write_kv_cache(k, v, cache.key, cache.value, meta.slot_mapping, backend=meta.backend,
                           check_bounds=False)
    parts = []
    if num_prefill:
        if meta.prefill_block_tables is None or meta.prefill_cu_seqlens is None:
            raise ValueError("prefills over the cache need prefill_block_tables and prefill_cu_seqlens")
        context_lens = meta.prefill_context_list()
        parts.append(kernels.prefill_attention(
            q[:num_prefill], cache.key, cache.value, meta.prefill_block_tables, meta.prefill_cu_seqlens,
            meta.prefill_context_lens, scale, backend=meta.backend, check_bounds=False,
            max_query_len=max(meta.prefill_lens), max_context=max(context_lens),
            host_lens=(meta.prefill_lens, context_lens)))
    if meta.num_decodes:
        parts.append(kernels.paged_attention_decode(
            q[num_prefill:], cache.key, cache.value, meta.block_tables, meta.context_lens, scale,
            backend=meta.backend, check_bounds=False))
    # a prefill-only or decode-only iteration (the common ones) returns its kernel's output as is
    return parts[0] if len(parts) == 1 else torch.cat(parts) if parts else torch.empty_like(q)


# --- the decoder ------------------------------------------------------------------


def has_qk_norm(spec: ModelSpec) -> bool:
    """Qwen3 normalizes each head of q and k before rotary (ModelSpec.has_qk_norm); the other families do not."""
    return spec.has_qk_norm


class Attention(nn.Module):
    """q_dim = heads x head_dim wide queries from a hidden-wide input, and back: q_dim is hidden_size in every
    family but Qwen3, whose heads are wider (Qwen3-32B: 64 of 128 on a 5,120-wide model)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        bias = has_linear_biases(spec)
        self.num_heads, self.num_kv_heads, self.head_dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.wqkv = nn.Linear(spec.hidden_size, spec.q_dim + 2 * spec.kv_dim, bias=bias or spec.qkv_bias)
        self.wo = nn.Linear(spec.q_dim, spec.hidden_size, bias=bias)
        self.q_norm = RMSNorm(spec.head_dim) if has_qk_norm(spec) else None
        self.k_norm = RMSNorm(spec.head_dim) if has_qk_norm(spec) else None
        self.scale = self.head_dim ** -0.5

    def forward(self, x, rotary, meta: AttentionMetadata, cache: LayerKVCache | None):
        q_dim, kv_dim = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = self.wqkv(x).split([q_dim, kv_dim, kv_dim], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rotary is not None:
            q, k = apply_rotary(q, rotary), apply_rotary(k, rotary)
        out = paged_attention(q, k.contiguous(), v.contiguous(), meta, cache, self.scale)
        return self.wo(out.reshape(-1, q_dim))


def make_mlp(spec: ModelSpec) -> nn.Module:
    return SparseMoE(spec) if spec.is_moe else MLP(spec, bias=has_linear_biases(spec))


class DecoderLayer(nn.Module):
    """Pre-norm residual block, attention then MLP (OPT-125m and up, LLaMA, Qwen2, Mixtral, Qwen3)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.attention_norm = make_norm(spec)
        self.attention = Attention(spec)
        self.mlp_norm = make_norm(spec)
        self.mlp = make_mlp(spec)

    def forward(self, x, rotary, meta, cache):
        x = x + self.attention(self.attention_norm(x), rotary, meta, cache)
        return x + self.mlp(self.mlp_norm(x))


class ParallelDecoderLayer(nn.Module):
    """phi-2: attention and MLP side by side on one LayerNorm, x + attn(ln x) + mlp(ln x)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.input_norm = make_norm(spec)
        self.attention = Attention(spec)
        self.mlp = make_mlp(spec)

    def forward(self, x, rotary, meta, cache):
        normed = self.input_norm(x)
        return x + self.attention(normed, rotary, meta, cache) + self.mlp(normed)


def make_layer(spec: ModelSpec) -> nn.Module:
    """One decoder layer of the family: phi-2's parallel block, the others' sequential one."""
    return ParallelDecoderLayer(spec) if spec.family == "phi" else DecoderLayer(spec)


class Decoder(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.embed_positions = (nn.Embedding(spec.max_seq_len + OPT_POSITION_OFFSET, spec.hidden_size)
                                if spec.position == "learned" else None)
        self.layers = nn.ModuleList(make_layer(spec) for _ in range(spec.num_layers))
        self.final_norm = make_norm(spec)
        # OPT ties the LM head to the token embedding; the others have their own, phi-2's with a bias
        self.lm_head = None if spec.family == "opt" else nn.Linear(spec.hidden_size, spec.vocab_size,
                                                                    bias=spec.family == "phi")

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_caches: list[LayerKVCache] | None = None) -> torch.Tensor:
        """Hidden states [num_tokens, hidden] after the final norm."""
        x = self.embed_tokens(input_ids)
        if self.embed_positions is not None:
            x = x + self.embed_positions(positions + OPT_POSITION_OFFSET)
        rotary = self.rotary(positions)
        for i, layer in enumerate(self.layers):
            x = layer(x, rotary, meta, None if kv_caches is None else kv_caches[i])
        return self.final_norm(x)

    def rotary(self, positions: torch.Tensor):
        """The rotary embedding's cos and sin at these positions; None where positions are learned (OPT)."""
        if self.embed_positions is not None:
            return None
        return rotary_cos_sin(positions, self.spec.rotary_dim, self.spec.rope_theta)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.lm_head is None:
            return hidden @ self.embed_tokens.weight.t()
        logits = hidden @ self.lm_head.weight.t()
        return logits if self.lm_head.bias is None else logits + self.lm_head.bias


def build_decoder(spec: ModelSpec, device: torch.device | str, dtype: torch.dtype, seed: int) -> Decoder:
    """Seeded random weights and biases, created directly on the device (no fp32 host copy of a 13B model).
    Biases are drawn like weights: a zero bias would let a decoder that dropped one pass every check. So are
    QK-norm weights, around 1: all ones would let one that swapped q's and k's, or read them per channel of the
    model rather than of a head, pass."""
    if spec.family not in ENGINE_FAMILIES:  # a llama-shaped decoder would drop the family's own layers silently
        raise SpecError(spec.name, "family", f"the engine builds {list(ENGINE_FAMILIES)} decoders, not "
                        f"{spec.family!r}")
    device = torch.device(device)
    with torch.device("meta"):
        model = Decoder(spec)
    return seeded(model, device, dtype, seed)


def seeded(module: Module, device: torch.device, dtype: torch.dtype, seed: int) -> Module:
    """A module built on the meta device, cast and given seeded random weights on `device` (build_decoder's
    rules), for inference."""
    module = module.to(dtype).to_empty(device=device)  # cast on meta: free
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                param.normal_(1.0, QK_NORM_STD, generator=generator)
            elif "norm" in name:  # identity norms: LayerNorm weight 1, bias 0
                param.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                param.normal_(0.0, INIT_STD, generator=generator)
    return module.eval().requires_grad_(False)
