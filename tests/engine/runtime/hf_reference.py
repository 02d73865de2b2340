"""An independent forward of every family the engine builds, in float64, from the decoder's weights alone:
Hugging Face's layouts written out op by op (no module of engine.runtime is called), so a mistake in the
engine's layers, shared by its paged and dense paths, still shows here.

    OPT      pre-norm LayerNorm blocks, learned positions (offset 2), biases everywhere, relu, head tied
    LLaMA    RMSNorm, rotary ("rotate half"), SwiGLU, grouped KV heads, no biases
    Qwen2    LLaMA with biases on q, k and v
    phi-2    x + attn(ln x) + mlp(ln x), biases everywhere, tanh GELU, rotary on the first rotary_dim dims,
             head with a bias
    Mixtral  LLaMA's attention; each token's MLP the router-weighted sum of its top-k SwiGLU experts
    Qwen3    LLaMA with heads head_dim wide (q: heads x head_dim, not hidden) and an RMSNorm over each head of
             q and of k before rotary (q_norm, k_norm: one weight per head dimension); a mixture's MLP as
             Mixtral's (Qwen3-MoE with norm_topk_prob)
"""
import math

import torch


def reference_logits(model, tokens: list[int], spec=None) -> torch.Tensor:
    """Logits [len(tokens), vocab] at every position of one sequence, no cache; `spec` (default: the model's)
    says which layout to read the weights as."""
    spec = spec or model.spec
    w = {name: p.detach().double().cpu() for name, p in model.named_parameters()}
    ids = torch.tensor(tokens)
    positions = torch.arange(len(tokens))
    x = w["embed_tokens.weight"][ids]
    if spec.position == "learned":
        x = x + w["embed_positions.weight"][positions + 2]
    for i in range(spec.num_layers):
        x = _layer(spec, w, f"layers.{i}.", x, positions)
    x = _norm(spec, w, "final_norm.", x)
    if spec.family == "opt":
        return (x @ w["embed_tokens.weight"].T).float()
    logits = x @ w["lm_head.weight"].T
    return (logits + w["lm_head.bias"] if "lm_head.bias" in w else logits).float()


def _layer(spec, w, at, x, positions):
    if spec.family == "phi":
        h = _norm(spec, w, at + "input_norm.", x)
        return x + _attention(spec, w, at + "attention.", h, positions) + _mlp(spec, w, at + "mlp.", h)
    x = x + _attention(spec, w, at + "attention.", _norm(spec, w, at + "attention_norm.", x), positions)
    h = _norm(spec, w, at + "mlp_norm.", x)
    return x + (_experts(spec, w, at + "mlp.", h) if spec.is_moe else _mlp(spec, w, at + "mlp.", h))


def _linear(w, name, x):
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if name + ".bias" in w else y


def _norm(spec, w, at, x):
    if spec.norm == "rmsnorm":
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w[at + "weight"]
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w[at + "weight"] + w[at + "bias"]


def _head_norm(x, weight):
    """Qwen3RMSNorm over each head's own head_dim values of x [T, heads, head_dim], eps 1e-6."""
    out = torch.empty_like(x)
    for h in range(x.shape[1]):
        head = x[:, h, :]
        out[:, h, :] = head / torch.sqrt((head * head).mean(-1, keepdim=True) + 1e-6) * weight
    return out


def _rotate(spec, x, positions):
    """Hugging Face's rotate-half rotary on the first rotary_dim dims of x [T, heads, head_dim]."""
    if spec.position != "rotary":
        return x
    d = spec.rotary_dim
    half = d // 2
    freq = torch.tensor([spec.rope_theta ** (-2 * j / d) for j in range(half)], dtype=torch.float64)
    angle = positions.double()[:, None, None] * freq  # [T, 1, half]
    x1, x2, rest = x[..., :half], x[..., half:d], x[..., d:]
    cos, sin = torch.cos(angle), torch.sin(angle)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


def _attention(spec, w, at, x, positions):
    heads, kv_heads, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
    qkv = _linear(w, at + "wqkv", x)
    q = qkv[:, :heads * d].reshape(-1, heads, d)
    k = qkv[:, heads * d:(heads + kv_heads) * d].reshape(-1, kv_heads, d)
    v = qkv[:, (heads + kv_heads) * d:].reshape(-1, kv_heads, d)
    if spec.family == "qwen3":  # Qwen3Attention: q_norm(q_proj(x).view(..., head_dim)), k likewise
        q, k = _head_norm(q, w[at + "q_norm.weight"]), _head_norm(k, w[at + "k_norm.weight"])
    q, k = _rotate(spec, q, positions), _rotate(spec, k, positions)
    length = x.shape[0]
    future = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
    out = torch.empty_like(q)
    for h in range(heads):
        kv = h // (heads // kv_heads)  # query head h reads KV head h // group
        scores = (q[:, h] @ k[:, kv].T) / math.sqrt(d)
        out[:, h] = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v[:, kv]
    return _linear(w, at + "wo", out.reshape(length, heads * d))


def _mlp(spec, w, at, x):
    h = _linear(w, at + "w_in", x)
    if spec.activation == "silu":
        gate, up = h[:, :spec.ffn_dim], h[:, spec.ffn_dim:]
        return _linear(w, at + "w_out", gate * torch.sigmoid(gate) * up)
    if spec.activation == "relu":
        return _linear(w, at + "w_out", h.clamp(min=0))
    # gelu_new: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    gelu = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    return _linear(w, at + "w_out", gelu)


def _experts(spec, w, at, x):
    """Token by token: softmax over every expert's router logit, the top k, renormalized, weighted sum."""
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        probs = torch.softmax(x[t] @ w[at + "gate.weight"].T, dim=-1)
        top = sorted(range(spec.num_experts), key=lambda e: -float(probs[e]))[:spec.experts_per_token]
        total = sum(float(probs[e]) for e in top)
        for e in top:
            out[t] += float(probs[e]) / total * _mlp(spec, w, f"{at}experts.{e}.", x[t:t + 1])[0]
    return out
