"""A mixture's measured block (an LLMServingSim bundle's moe.csv) against the expert machinery's price for it.

A row times vLLM's sparse-MoE block of one layer at tp 1 (Qwen3MoeSparseMoeBlock: the router and the experts'
fused kernel) over `tokens` tokens whose routing the profiler forged to touch `activated_experts` distinct experts.
servesim prices a mixture's layer from the dense operations its fit measured (calibrate/parts/expert_ops.py): the
router a hidden x experts matmul over every token, and each activated expert the dense MLP of its shape (up and
gate matmul, activation, down matmul) over tokens x experts_per_token / activated rows. The block is priced here
that way, the activated experts as the row gives them (not the uniform routing's expectation), once by the fitted
linear part and once by the spec-sheet roofline (calibrate/fitting/op_fit.today_roofline), and both are judged on
the rows. Nothing is fitted on them: the model has no term of the block's own (vLLM runs every expert in one
grouped kernel launch, where servesim charges each expert's matmuls their own latency, and it prices no routing:
the softmax and top-k, the permutation of tokens to their experts, the weighted sum of their outputs).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from calibrate.fitting.op_fit import today_roofline
from calibrate.hardware.hardware import HardwareSpec
from calibrate.parts.linear_model import LinearFit
from calibrate.work.layer_ops import LayerShape, gemm_work
from engine.core.spec import ModelSpec

if TYPE_CHECKING:
    import pandas as pd


def moe_block_time(fit: LinearFit, spec: ModelSpec, hw: HardwareSpec, tokens, experts) -> np.ndarray:
    """One layer's mixture block at tp 1 as the cost model prices a layer (calibrate/parts/expert_ops.py): one bend
    over its matmuls together, the router's FLOPs and weights and the `experts` experts' (the tokens' routed rows'
    FLOPs, each expert's weights once), a matmul latency for the router and two for each expert, and each expert's
    activation over its share of the routed rows."""
    tokens, experts = np.asarray(tokens, dtype=float), np.asarray(experts, dtype=float)
    shape = LayerShape.of(spec)
    dims = shape.gemm_dims(1)
    routed = tokens * spec.experts_per_token
    router_flops, router_weights = gemm_work((spec.hidden_size, spec.num_experts), tokens)
    flops, weights = router_flops, router_weights
    for op in ("mlp_up_proj", "mlp_down_proj"):
        expert_flops, expert_weights = gemm_work(dims[op], routed)
        flops, weights = flops + expert_flops, weights + experts * expert_weights
    matmuls = fit.gemm_time(flops, weights, hw) + 2 * experts * fit.gemm_latency_s
    act_bytes = shape.elementwise_bytes_per_token(1)["mlp_act"]
    activation = experts * fit.elementwise_time("mlp_act", routed / experts * act_bytes, hw)
    return matmuls + activation


def moe_errors(fit: LinearFit, spec: ModelSpec, hw: HardwareSpec, rows: pd.DataFrame) -> dict:
    """The fitted linear part's and the roofline's errors on the block's rows (tokens, activated_experts,
    time_s)."""
    measured = rows["time_s"].to_numpy()
    out = {}
    for name, part in (("fit", fit), ("roofline", today_roofline())):
        predicted = moe_block_time(part, spec, hw, rows["tokens"], rows["activated_experts"])
        signed = (predicted - measured) / measured
        out[name] = {"mean": float(np.abs(signed).mean()), "p95": float(np.quantile(np.abs(signed), 0.95)),
                     "signed_mean": float(signed.mean()), "rows": int(len(measured))}
    return out
