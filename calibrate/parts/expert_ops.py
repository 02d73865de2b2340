"""A mixture of experts' layer as a per-operation fit prices it (calibrate/parts/linear_model.LinearFit, the measured
linear part of `cost_model: {kind: transfer}`): the kernels' fixed latencies and bytes beyond the roofline's
matmul term, per iteration, per distinct expert run and per token.

A layer of a mixture runs, over its batch's T tokens:
  attention   QKV and output projections, the norms, the rotary embedding and the residual add over T tokens,
              as a dense layer of its shape does;
  the gate    a hidden x num_experts matmul over all T tokens (its latency here, its FLOPs and weights in the
              roofline's matmul term with the rest);
  experts     the distinct experts its tokens are routed to, D(T) = E (1 - (1 - k/E)^T) of them on average
              (calibrate/work/expert_routing.py: uniform routing), each the dense MLP of the expert's shape (up and
              gate matmul, activation, down matmul) over T k / D tokens on average: D x mlp_ops(T k / D);
  all-reduce  after attention and after the experts, as a dense layer at the same tensor parallelism.

Why D x mlp_ops(T k / D) is the routed tokens' work plus D experts' weight reads and D sets of latencies: the
fitted model prices a matmul of n rows as
    latency + bend(n c, m),   bend(x, y) = (x^p + y^p)^(1/p)   (the hard max at p = inf),
c its seconds per row at its compute share, m its weights' read at its bandwidth share. Its FLOPs are linear in
n and its weight bytes do not depend on n; the bend is not linear in n, but it is homogeneous of degree one,
D bend(x, y) = bend(D x, D y). So D experts of n = T k / D rows each cost
    D latency + D bend(n c, m) = D latency + bend(T k c, D m):
the compute of the T k routed token rows and the weights of D experts, under one bend, and D latencies. The
roofline cost model bends every matmul of an iteration together (their FLOPs summed, their weights summed), so
the experts enter its matmul term as exactly that (roofline.py: compute with the experts each token runs, weights
of the D experts read), whatever D is. An elementwise kernel (the activation) costs latency + n b, linear in n:
D of them cost D latency + T k b. What is left for this module is therefore the latencies, counted per expert,
and the activation's bytes, counted per routed token.

Under expert parallelism (calibrate/work/expert_parallel.py) D is this GPU's own share, D(N T) / EP of the experts
the N ranks' gathered tokens are routed to, each whole; the routed rows are T k / TP as under tensor parallelism
alone (full width where tensor parallelism's are 1/TP wide, the same bytes), so the per-expert latencies here are
counted D(N T) / EP times and the per-token bytes stay as they are (RooflineCostModel.experts_run).

D enters as its expectation over routings, so the latencies' expected price is exact (they are linear in D); the
bend and the weights' read at E[D] is the roofline's own approximation. Not priced, since no public table
measured them: the router's softmax and top-k, the permutation of tokens to their experts, and the weighted sum
of the experts' outputs.
"""
from __future__ import annotations

from dataclasses import dataclass

from calibrate.hardware.hardware import HardwareSpec
from calibrate.parts.linear_model import LinearFit
from calibrate.work.layer_ops import ITERATION_ELEMENTWISE, LAYER_ELEMENTWISE, LayerShape
from engine.core.spec import ModelSpec

ATTENTION_GEMMS = 2  # QKV and output projection, over every token, as the gate (router) is where there is one
EXPERT_GEMMS = 2  # an expert's up (with its gate) and down matmuls
EXPERT_ELEMENTWISE = ("mlp_act",)  # an expert's own elementwise kernel: the rest run over every token


@dataclass(frozen=True)
class ExpertKernels:
    """All layers' measured kernel time beyond the roofline's matmul term: seconds every iteration, per distinct
    expert a layer runs, and per token of the batch."""
    fixed_s: float
    per_expert_s: float
    per_token_s: float


def expert_kernels(model: ModelSpec, linear: LinearFit, hw: HardwareSpec, tp: int = 1,
                   dtype_bytes: int = 2) -> ExpertKernels:
    """`model`'s kernels as `linear` prices them on `hw`, its MLP as experts_per_token of num_experts experts (one
    of one: a dense MLP priced as one expert over every token, without a router)."""
    shape, layers, k = LayerShape.of(model), model.num_layers, model.experts_per_token
    resident = ATTENTION_GEMMS + (1 if model.is_moe else 0)
    fixed = (resident * layers + 1) * linear.gemm_latency_s  # + 1: the LM head
    per_expert = EXPERT_GEMMS * layers * linear.gemm_latency_s
    per_token = 0.0
    moved = shape.elementwise_bytes_per_token(tp, dtype_bytes)
    for ops, times in ((LAYER_ELEMENTWISE, layers), (ITERATION_ELEMENTWISE, 1)):
        for op in ops:
            if op in linear.elementwise and shape.runs(op):
                latency, efficiency = linear.elementwise[op]
                per_row = times * moved[op] / (hw.hbm_bytes_per_s * efficiency)
                if op in EXPERT_ELEMENTWISE:  # once per expert run, over the k rows each token sends
                    per_expert += times * latency
                    per_token += k * per_row
                else:
                    fixed += times * latency
                    per_token += per_row
    return ExpertKernels(fixed, per_expert, per_token)
