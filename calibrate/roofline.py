"""A roofline cost model from spec sheets, for hardware nobody has measured.

Each part of an iteration runs at the slower of its compute time and its memory time,
at achieved (not peak) FLOP/s and bandwidth:
  linear layers  max(2 * params * tokens / flops, weight bytes / bandwidth)
  prefill attn   2 * prompt_len^2 * hidden * layers FLOPs (causal QK^T and AV, halved); a prefill of
                 n tokens after c cached ones (a shared prefix) 2 * n (n + 2c) * hidden * layers FLOPs,
                 plus reading the c cached tokens' KV as a decode reads its context
  decode attn    context * KV bytes per token / bandwidth
  tensor par.    work / tp, plus two ring all-reduces of the activations per layer
The default efficiencies reproduce FasterTransformer's OPT-13B-class timings on one
A100-40GB (decode 22 ms/token at batch 1, 512-token prefill 63 ms; kipply's table).
"""
from __future__ import annotations

from dataclasses import dataclass

from calibrate.costmodel import CostModel
from calibrate.hardware import HardwareSpec
from engine.core.batch import ShapeMetrics
from engine.core.spec import ModelSpec

ALLREDUCE_LATENCY_S = 10e-6


@dataclass(frozen=True)
class RooflineParams:
    compute_efficiency: float = 0.68  # achieved share of peak FLOP/s in matmuls
    bandwidth_efficiency: float = 0.76  # achieved share of HBM bandwidth
    pcie_efficiency: float = 0.8
    overhead_s: float = 0.0  # fixed per-iteration cost (launches, scheduling)


class RooflineCostModel(CostModel):
    def __init__(self, model: ModelSpec, hw: HardwareSpec, tp: int = 1, dtype_bytes: int = 2,
                 block_size: int = 16, params: RooflineParams = RooflineParams()):
        self.model, self.hw, self.tp, self.params = model, hw, tp, params
        self.source = (f"roofline({hw.name}, tp={tp}, compute_eff={params.compute_efficiency}, "
                       f"bw_eff={params.bandwidth_efficiency}, overhead_s={params.overhead_s})")
        flops = hw.peak_flops * params.compute_efficiency
        bandwidth = hw.hbm_bytes_per_s * params.bandwidth_efficiency
        layers, hidden = model.num_layers, model.hidden_size
        linear_params = layers * model.layer_linear_params() / tp
        head_params = model.vocab_size * hidden / tp
        # per-token and per-batch constants, precomputed for the simulator's hot loop
        self._s_per_token_linear = 2 * linear_params / flops
        self._s_per_logit_row = 2 * head_params / flops
        self._s_weights = (linear_params + head_params) * dtype_bytes / bandwidth
        self._s_per_prompt_sq = 2 * hidden * layers / tp / flops
        self._s_per_context_token = model.kv_bytes_per_token(dtype_bytes) / tp / bandwidth
        self._s_per_copied_block = 2 * model.kv_bytes_per_token(dtype_bytes) * block_size / tp / bandwidth
        self._s_swap_per_block = model.kv_bytes_per_token(dtype_bytes) * block_size / tp / (
            hw.pcie_bytes_per_s * params.pcie_efficiency)
        if tp > 1:
            ring = 2 * (tp - 1) / tp * hidden * dtype_bytes / hw.nvlink_bytes_per_s
            self._s_per_token_comm = 2 * layers * ring
            self._s_comm_fixed = 2 * layers * ALLREDUCE_LATENCY_S
        else:
            self._s_per_token_comm = self._s_comm_fixed = 0.0

    def iteration_time(self, batch: ShapeMetrics) -> float:
        tokens = batch.num_tokens
        logit_rows = batch.num_seqs
        compute = tokens * self._s_per_token_linear + logit_rows * self._s_per_logit_row
        linear = compute if compute > self._s_weights else self._s_weights
        kv_read = batch.sum_decode_context + batch.sum_prefill_cached  # context the iteration reads, not computes
        attention = batch.sum_prefill_sq * self._s_per_prompt_sq + kv_read * self._s_per_context_token
        comm = tokens * self._s_per_token_comm + self._s_comm_fixed
        copies = batch.num_copy_blocks * self._s_per_copied_block
        return linear + attention + comm + copies + self.params.overhead_s

    def swap_time(self, num_blocks: int) -> float:
        return num_blocks * self._s_swap_per_block
