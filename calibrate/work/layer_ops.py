"""One decoder layer's non-attention operations as work: FLOPs and weight bytes of its matmuls, bytes per
token of its elementwise kernels.

The per-operation import (calibrate/tables/op_table.py) reads these from a measured table's architecture columns,
the roofline (calibrate/clock/roofline.py) from a ModelSpec, so that the fit and the cost model count the same work.
Names are the per-operation tables' (Vidur's profiling): `attn_pre_proj` is the QKV matmul, `mlp_up_proj`
the up (and gate) matmul, and so on. Norms and the residual add run whole on every tensor-parallel GPU;
the matmuls, the rotary embedding and the activation are split across them. Three more have no Vidur column and
are timed by LLMServingSim's profiles (calibrate/tables/bundle_ops.py): `qk_norm`, Qwen3's RMSNorm over each head
of q and of k (both kernels), split across the GPUs as the heads are; `final_layernorm`, the norm after the last
layer, once per iteration over every token; and `lm_head`, the LM head's matmul, once per iteration over one row
per sequence (its logits), not per token.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.core.spec import ModelSpec

GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
HEAD_GEMMS = ("lm_head",)  # once per iteration, over a row per sequence
MATMULS = GEMMS + HEAD_GEMMS  # what a fit prices as matmuls (calibrate/fitting/op_fit.py)
# elementwise kernels, once per layer; `emb` (the embedding lookup) and the final norm once per iteration
LAYER_ELEMENTWISE = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add", "qk_norm")
ITERATION_ELEMENTWISE = ("emb", "final_layernorm")
ELEMENTWISE = LAYER_ELEMENTWISE + ITERATION_ELEMENTWISE
ITERATION_OPS = ITERATION_ELEMENTWISE + HEAD_GEMMS  # not a layer's: an iteration runs each once
OPS = GEMMS + ELEMENTWISE


@dataclass(frozen=True)
class LayerShape:
    """What a layer's non-attention work depends on."""
    hidden: int
    num_heads: int
    num_kv_heads: int
    ffn: int
    gated_mlp: bool
    rotary: bool = True
    # each head's width; 0 is hidden // num_heads, as in every measured table (their models have no other)
    head_dim: int = 0
    qk_norm: bool = False  # an RMSNorm over each head of q and of k (Qwen3)

    @classmethod
    def of(cls, model: ModelSpec) -> LayerShape:
        implied = model.head_dim == model.hidden_size // model.num_heads  # kept 0: equal to a table's shape
        return cls(model.hidden_size, model.num_heads, model.num_kv_heads, model.ffn_dim, model.is_gated_mlp,
                   model.position == "rotary", 0 if implied else model.head_dim, model.has_qk_norm)

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden // self.num_heads

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_width

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_width

    def gemm_dims(self, tp: int) -> dict[str, tuple[int, int]]:
        """(inputs, outputs) of each matmul on one of `tp` GPUs: its weight is inputs x outputs. The QKV matmul
        makes q_dim + 2 kv_dim of hidden, the output projection hidden of q_dim (Qwen3's q_dim is not hidden)."""
        h = self.hidden
        up = (2 if self.gated_mlp else 1) * self.ffn
        return {"attn_pre_proj": (h, (self.q_dim + 2 * self.kv_dim) // tp), "attn_post_proj": (self.q_dim // tp, h),
                "mlp_up_proj": (h, up // tp), "mlp_down_proj": (self.ffn // tp, h)}

    def elementwise_bytes_per_token(self, tp: int, dtype_bytes: int = 2) -> dict[str, float]:
        """Bytes each elementwise kernel reads and writes per token on one GPU; a kernel the layer does not
        run (rotary embedding in a model with learned positions, the QK-norm in a model without) moves none."""
        h = self.hidden
        act_width = 3 if self.gated_mlp else 2  # gated: reads gate and up, writes one; else reads one, writes one
        heads_bytes = 2 * (self.q_dim + self.kv_dim) // tp * dtype_bytes  # q and k of a token, read and written
        return {
            "input_layernorm": 2 * h * dtype_bytes,
            "attn_rope": heads_bytes if self.rotary else 0.0,
            "post_attention_layernorm": 2 * h * dtype_bytes,
            "mlp_act": act_width * self.ffn // tp * dtype_bytes,
            "add": 3 * h * dtype_bytes,
            "qk_norm": heads_bytes if self.qk_norm else 0.0,
            "emb": 2 * h * dtype_bytes,
            "final_layernorm": 2 * h * dtype_bytes,
        }

    def runs(self, op: str) -> bool:
        if op == "attn_rope":
            return self.rotary
        return op != "qk_norm" or self.qk_norm


def gemm_work(dims: tuple[int, int], tokens, dtype_bytes: int = 2):
    """(FLOPs, weight bytes) of one matmul over `tokens` rows (a number or an array)."""
    inputs, outputs = dims
    return 2.0 * tokens * inputs * outputs, float(inputs * outputs * dtype_bytes)
