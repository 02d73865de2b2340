"""A roofline cost model from spec sheets, for hardware nobody has measured.

Each part of an iteration runs at the slower of its compute time and its memory time,
at achieved (not peak) FLOP/s and bandwidth:
  linear layers  max(2 * params * tokens / flops, weight bytes / bandwidth), or bent at the ridge
                 (calibrate/ridge.py) when ridge_efficiency < 1
  prefill attn   2 * prompt_len^2 * hidden * layers FLOPs (causal QK^T and AV, halved); a prefill of
                 n tokens after c cached ones (a shared prefix) 2 * n (n + 2c) * hidden * layers FLOPs,
                 plus reading the c cached tokens' KV as a decode reads its context
  decode attn    context * KV bytes per token / bandwidth
  tensor par.    work / tp, plus two all-reduces of the activations per layer: a ring formula, or
                 a measured table (calibrate/all_reduce.py)
The default efficiencies reproduce FasterTransformer's OPT-13B-class timings on one
A100-40GB (decode 22 ms/token at batch 1, 512-token prefill 63 ms; kipply's table).

With a measured linear part (calibrate/linear_model.LinearFit, from an imported profile through
`cost_model: {kind: transfer}`) the matmuls run at its efficiencies and bend instead of the params',
each with its fixed latency, and the elementwise kernels the roofline leaves out (norms, rotary
embedding, activation, residual add, embedding lookup) are charged at their measured latency and
share of bandwidth; attention, copies and swaps stay at the params'. With a profile's host terms the
engine's host work is charged too, in series with the device, as the engine runs them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calibrate.all_reduce import AllReduceTable
from calibrate.costmodel import CostModel, per_step, stretch_context_sums
from calibrate.hardware import HardwareSpec
from calibrate.host import host_time
from calibrate.layer_ops import ITERATION_ELEMENTWISE, LAYER_ELEMENTWISE, LayerShape
from calibrate.linear_model import LinearFit
from calibrate.ridge import bent_roof, ridge_exponent
from engine.core.batch import ShapeMetrics
from engine.core.spec import ModelSpec

ALLREDUCE_LATENCY_S = 10e-6
ALLREDUCES_PER_LAYER = 2  # after attention's output projection and after the MLP
GEMMS_PER_LAYER = 4  # QKV, output projection, MLP up (and gate), MLP down


@dataclass(frozen=True)
class RooflineParams:
    compute_efficiency: float = 0.68  # achieved share of peak FLOP/s in matmuls
    bandwidth_efficiency: float = 0.76  # achieved share of HBM bandwidth
    pcie_efficiency: float = 0.8
    overhead_s: float = 0.0  # fixed per-iteration cost (launches, scheduling)
    # share of the roof the linear layers reach where compute and weight reads take equally long;
    # 1 is the hard max (calibrate/ridge.py)
    ridge_efficiency: float = 1.0


class RooflineCostModel(CostModel):
    def __init__(self, model: ModelSpec, hw: HardwareSpec, tp: int = 1, dtype_bytes: int = 2,
                 block_size: int = 16, params: RooflineParams = RooflineParams(),
                 linear: LinearFit | None = None, all_reduce: AllReduceTable | None = None,
                 host: dict | None = None):
        """`all_reduce`: measured times by GPU count over the target's links (AllReduceTable.scaled);
        `host`: calibrate/host.py's HOST_TERMS."""
        self.model, self.hw, self.tp, self.params = model, hw, tp, params
        self.linear, self.host = linear, host
        self.charge_host = host is not None
        self.source = (f"roofline({hw.name}, tp={tp}, compute_eff={params.compute_efficiency}, "
                       f"bw_eff={params.bandwidth_efficiency}, overhead_s={params.overhead_s}"
                       + (f", ridge_eff={params.ridge_efficiency}" if params.ridge_efficiency != 1 else "") + ")")
        flops = hw.peak_flops * params.compute_efficiency
        bandwidth = hw.hbm_bytes_per_s * params.bandwidth_efficiency
        matmul = linear or params  # the linear layers' efficiencies and bend: measured, or the spec sheet's
        matmul_flops = hw.peak_flops * matmul.compute_efficiency
        matmul_bandwidth = hw.hbm_bytes_per_s * matmul.bandwidth_efficiency
        layers, hidden = model.num_layers, model.hidden_size
        linear_params = layers * model.layer_linear_params() / tp
        head_params = model.vocab_size * hidden / tp
        # per-token and per-batch constants, precomputed for the simulator's hot loop
        self._ridge_p = ridge_exponent(matmul.ridge_efficiency)
        self._s_per_token_linear = 2 * linear_params / matmul_flops
        self._s_per_logit_row = 2 * head_params / matmul_flops
        self._s_weights = (linear_params + head_params) * dtype_bytes / matmul_bandwidth
        self._s_per_prompt_sq = 2 * hidden * layers / tp / flops
        self._s_per_context_token = model.kv_bytes_per_token(dtype_bytes) / tp / bandwidth
        self._s_per_copied_block = 2 * model.kv_bytes_per_token(dtype_bytes) * block_size / tp / bandwidth
        self._s_swap_per_block = model.kv_bytes_per_token(dtype_bytes) * block_size / tp / (
            hw.pcie_bytes_per_s * params.pcie_efficiency)
        self._all_reduce = all_reduce if all_reduce is not None and tp > 1 and all_reduce.covers(tp) else None
        self._message_bytes_per_token = hidden * dtype_bytes
        if tp > 1:
            ring = 2 * (tp - 1) / tp * hidden * dtype_bytes / hw.nvlink_bytes_per_s
            self._s_per_token_comm = ALLREDUCES_PER_LAYER * layers * ring
            self._s_comm_fixed = ALLREDUCES_PER_LAYER * layers * ALLREDUCE_LATENCY_S
        else:
            self._s_per_token_comm = self._s_comm_fixed = 0.0
        self._s_kernels_fixed, self._s_per_token_kernels = self._kernel_terms(dtype_bytes)

    def _kernel_terms(self, dtype_bytes: int) -> tuple[float, float]:
        """(seconds every iteration, seconds per token) of the measured kernels beyond the roofline's."""
        if self.linear is None:
            return 0.0, 0.0
        shape, layers = LayerShape.of(self.model), self.model.num_layers
        fixed = (GEMMS_PER_LAYER * layers + 1) * self.linear.gemm_latency_s  # + 1: the LM head
        per_token = 0.0
        moved = shape.elementwise_bytes_per_token(self.tp, dtype_bytes)
        for ops, times in ((LAYER_ELEMENTWISE, layers), (ITERATION_ELEMENTWISE, 1)):
            for op in ops:
                if op in self.linear.elementwise and shape.runs(op):
                    latency, efficiency = self.linear.elementwise[op]
                    fixed += times * latency
                    per_token += times * moved[op] / (self.hw.hbm_bytes_per_s * efficiency)
        return fixed, per_token

    def iteration_time(self, batch: ShapeMetrics) -> float:
        return self._time(batch, batch.sum_decode_context)

    def decode_iteration_times(self, batch: ShapeMetrics, num_steps: int) -> np.ndarray:
        """Every step is the same sum of the same terms; only the decode contexts read grow, by one per
        decode per step: the one expression over an array of them gives each step's float."""
        return per_step(self._time(batch, stretch_context_sums(batch, num_steps)), num_steps)

    def _time(self, batch: ShapeMetrics, sum_decode_context):
        """iteration_time, for one sum of decode contexts or an array of them."""
        tokens = batch.num_tokens
        logit_rows = batch.num_seqs
        compute = tokens * self._s_per_token_linear + logit_rows * self._s_per_logit_row
        if self._ridge_p == math.inf:
            matmuls = compute if compute > self._s_weights else self._s_weights
        else:
            matmuls = bent_roof(compute, self._s_weights, self._ridge_p)
        cached = batch.sum_prefill_cached
        kv_read = sum_decode_context + cached if cached else sum_decode_context  # read, not computed
        attention = kv_read * self._s_per_context_token
        prefill_sq = batch.sum_prefill_sq
        if prefill_sq:
            attention = prefill_sq * self._s_per_prompt_sq + attention
        comm = self._comm_time(tokens)
        copies = batch.num_copy_blocks * self._s_per_copied_block
        # t > 0 (the weights are read) and attention >= 0, so adding a term that is exactly 0 changes no
        # bit: skipping it (above too) spares an array operation when a decode stretch is priced at once
        t = matmuls + attention
        for term in (comm, copies, self.params.overhead_s):
            if term:
                t = t + term
        if self.linear is not None:
            t += self._s_kernels_fixed + tokens * self._s_per_token_kernels
        if self.charge_host:
            t += host_time(self.host, batch.num_seqs, batch.num_prefill_tokens)
        return t

    def _comm_time(self, tokens: int) -> float:
        if self._all_reduce is None:
            return tokens * self._s_per_token_comm + self._s_comm_fixed
        if tokens == 0:
            return 0.0
        per_message = self._all_reduce.time(self.tp, tokens * self._message_bytes_per_token)
        return ALLREDUCES_PER_LAYER * self.model.num_layers * per_message

    def swap_time(self, num_blocks: int) -> float:
        return num_blocks * self._s_swap_per_block
