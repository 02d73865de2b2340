"""An LLMServingSim bundle's per-token and per-sequence modules as the operations a per-operation fit prices
(calibrate/work/layer_ops.py, the names Vidur's tables use), each row with its work beside its time.

  bundle layer      servesim op                          why
  qkv_proj          attn_pre_proj                        QKVParallelLinear
  o_proj            attn_post_proj                       the attention's RowParallelLinear
  gate_up_proj      mlp_up_proj                          MergedColumnParallelLinear: gate and up
  down_proj         mlp_down_proj                        the MLP's RowParallelLinear
  act_fn            mlp_act                              SiluAndMul
  rotary_emb        attn_rope                            rotary on q and k, in place
  embedding         emb                                  VocabParallelEmbedding, once per iteration
  layernorm         input_layernorm and                  the row is the mean of the layer's two RMSNorms' calls
                    post_attention_layernorm             (vLLM's profile merges the two), so each gets it
  qk_norm           qk_norm, twice the row               the row is the mean of q_norm's and k_norm's calls;
                                                         the op is both
  final_layernorm   final_layernorm                      the model's last norm, once per iteration
  lm_head           lm_head, over `sequences` rows       LogitsProcessor: the LM head's matmul on one row per
                                                         sequence
  sampler           not priced                           servesim's device clock has no sampler
vLLM fuses the residual add into the next RMSNorm (fused_add_rms_norm), so a bundle has no `add` and a fit on it
charges none. A tp-stable layer's rows in a tp<N> folder are the profiler's copy of its tp 1 rows (the norms and
the QK-norm, timed once), so they are priced at tp 1's work: the same for the norms, whose width does not split,
and the truth for the QK-norm, whose heads do.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from calibrate.tables.bundle_models import bundle_label
from calibrate.tables.llmservingsim_bundle import Bundle
from calibrate.tables.op_table import OpTable
from calibrate.work.layer_ops import GEMMS, LayerShape, gemm_work
from engine.core.spec import ModelSpec

if TYPE_CHECKING:
    import pandas as pd

LAYER_OPS = {"qkv_proj": ("attn_pre_proj",), "o_proj": ("attn_post_proj",), "gate_up_proj": ("mlp_up_proj",),
             "down_proj": ("mlp_down_proj",), "act_fn": ("mlp_act",), "rotary_emb": ("attn_rope",),
             "embedding": ("emb",), "layernorm": ("input_layernorm", "post_attention_layernorm"),
             "qk_norm": ("qk_norm",), "final_layernorm": ("final_layernorm",)}
CALLS = {"qk_norm": 2}  # calls of the row's kernel the op makes: q's and k's norm
TP_STABLE = ("layernorm", "qk_norm", "final_layernorm")  # timed at tp 1, copied into the other tp folders
SEQUENCE_OPS = {"lm_head": "lm_head"}
NOT_PRICED = ("sampler",)


def bundle_op_table(bundle: Bundle, spec: ModelSpec, max_tokens: int | None = None, dtype_bytes: int = 2) -> OpTable:
    """Every tp folder's dense and per-sequence rows as op rows (tp, tokens, op, time_s, flops, weight_bytes,
    moved_bytes, activation_bytes, model); the LM head's `tokens` are its sequences. A matmul's activation_bytes are
    its input read and its output written, the bytes beside its weights a repetition touches
    (calibrate/fitting/l2_resident.py). Rows above `max_tokens` are left out."""
    import pandas as pd

    shape, label = LayerShape.of(spec), bundle_label(bundle)
    frames = []
    for tp, tables in sorted(bundle.tps.items()):
        frames.append(_dense_rows(tables.dense, shape, tp, dtype_bytes))
        frames.append(_head_rows(tables.per_sequence, spec, tp, dtype_bytes))
    ops = pd.concat(frames, ignore_index=True)
    if max_tokens is not None:
        ops = ops[ops["tokens"] <= max_tokens].reset_index(drop=True)
    return OpTable(label, shape, ops.assign(model=label))


def _dense_rows(dense: pd.DataFrame, shape: LayerShape, tp: int, dtype_bytes: int) -> pd.DataFrame:
    import pandas as pd

    frames = []
    for layer, ops in LAYER_OPS.items():
        rows = dense[dense["layer"] == layer]
        work_tp = 1 if layer in TP_STABLE else tp
        for op in ops:
            if not rows.empty and shape.runs(op):
                frames.append(_op_rows(op, rows["tokens"].to_numpy(), rows["time_s"].to_numpy() * CALLS.get(layer, 1),
                                       shape, tp, work_tp, dtype_bytes))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _op_rows(op: str, tokens: np.ndarray, time_s: np.ndarray, shape: LayerShape, tp: int, work_tp: int,
             dtype_bytes: int) -> pd.DataFrame:
    import pandas as pd

    zeros = np.zeros(len(tokens))
    flops, weight_bytes, moved, activations = zeros, zeros, zeros, zeros
    if op in GEMMS:
        dims = shape.gemm_dims(work_tp)[op]
        flops, weight = gemm_work(dims, tokens.astype(float), dtype_bytes)
        weight_bytes = np.full(len(tokens), weight)
        activations = tokens * float(sum(dims) * dtype_bytes)
    else:
        moved = tokens * float(shape.elementwise_bytes_per_token(work_tp, dtype_bytes)[op])
    return pd.DataFrame({"tp": tp, "tokens": tokens, "op": op, "time_s": time_s, "flops": flops,
                         "weight_bytes": weight_bytes, "moved_bytes": moved, "activation_bytes": activations})


def _head_rows(per_sequence: pd.DataFrame, spec: ModelSpec, tp: int, dtype_bytes: int) -> pd.DataFrame:
    """The LM head's matmul over one row per sequence: hidden x vocabulary / tp (its vocabulary split as vLLM's
    is, and as the profiler's overrides divide it)."""
    import pandas as pd

    rows = per_sequence[per_sequence["layer"].isin(list(SEQUENCE_OPS))]
    sequences = rows["sequences"].to_numpy()
    dims = (spec.hidden_size, spec.vocab_size // tp)
    flops, weight = gemm_work(dims, sequences.astype(float), dtype_bytes)
    return pd.DataFrame({"tp": tp, "tokens": sequences, "op": rows["layer"].map(SEQUENCE_OPS).to_numpy(),
                         "time_s": rows["time_s"].to_numpy(), "flops": flops,
                         "weight_bytes": np.full(len(rows), weight), "moved_bytes": np.zeros(len(rows)),
                         "activation_bytes": sequences * float(sum(dims) * dtype_bytes)})
