"""A roofline cost model from spec sheets, for hardware nobody has measured.

Each part of an iteration runs at the slower of its compute time and its memory time,
at achieved (not peak) FLOP/s and bandwidth:
  linear layers  max(2 * params * tokens / flops, weight bytes / bandwidth), or bent at the ridge
                 (calibrate/maths/ridge.py) when ridge_efficiency < 1; a mixture of experts computes with the
                 experts each token runs (experts_per_token) and reads the weights of the distinct experts
                 the batch's tokens are routed to, E (1 - (1 - k/E)^tokens) of them (calibrate/work/expert_routing.py)
  expert par.    a mixture over a data-parallel group with expert parallelism: each GPU reads whole the weights of
                 its own E / EP experts that the group's gathered tokens are routed to, at equal load across the
                 ranks (calibrate/work/expert_parallel.py), and every layer's all-gather and reduce-scatter of the
                 ranks' tokens add their ring formula (calibrate/parts/expert_dispatch.py)
  prefill attn   2 * prompt_len^2 * hidden * layers FLOPs (causal QK^T and AV, halved); a prefill of
                 n tokens after c cached ones (a shared prefix) 2 * n (n + 2c) * hidden * layers FLOPs,
                 plus reading the c cached tokens' KV as a decode reads its context
  decode attn    context * KV bytes per token / bandwidth, plus a cost per KV block read (paged kernels)
  tensor par.    work / tp, plus two all-reduces of the activations per layer: a ring formula, or
                 a measured table (calibrate/parts/all_reduce.py)
  swaps          per block: a latency per copy (K and V of each layer) plus its bytes / PCIe bandwidth
  precision      the decoder matmuls' weight bytes at the weights' format, the LM head's 16-bit; every KV read,
                 write, copy and swap at the KV cache's; the matmuls at the sheet's FP8 rate for W8A8, else its
                 16-bit rate (calibrate/hardware/precision.py)
  FP8 GEMMs      W8A8 weights of a dense model on the spec sheet: each layer's GEMMs as measured FP8 GEMMs price
                 them (calibrate/parts/fp8_decoder.py), each with its latency and its input's quantization, and the
                 LM head apart at 16 bits; a mixture of experts' FP8 matmuls stay on the sheet's FP8 rate (no
                 measurement times its grouped expert GEMMs)
The default efficiencies reproduce FasterTransformer's OPT-13B-class timings on one
A100-40GB (decode 22 ms/token at batch 1, 512-token prefill 63 ms; kipply's table).

With a measured linear part (calibrate/parts/linear_model.LinearFit, from an imported profile through
`cost_model: {kind: transfer}`) the matmuls run at its efficiencies and bend instead of the params',
each with its fixed latency, and the elementwise kernels the roofline leaves out (norms, rotary
embedding, activation, residual add, embedding lookup) are charged at their measured latency and
share of bandwidth; attention, copies and swaps stay at the params'. With a measured attention part
(calibrate/parts/attention_fit.AttentionFit, a profile's `attention`) decode and prefill attention are priced by it
instead: its shares of this hardware's peaks, its latencies per layer once an iteration has decodes /
prefills, and no per-block term on top (the measured kernel's paging is in its times). Where the fit has its
decode waves (calibrate/parts/attention_waves.py) and this hardware's sheet gives its sm_count, decode attention is
the waves': the kernel's grid for the batch's decodes counted over this GPU's SMs, read at the decodes' mean
context (a stretch's batch does not change, so its launch and latencies are one per stretch); a sheet without
an sm_count prices decode attention by the fit's bytes and latency instead, and the source says which. With a
profile's host terms the engine's host work is charged too, in series with the device, as the engine runs them.

The two block-size terms (`decode_block_seconds`, `swap_block_seconds`) and their defaults:

- Per KV block a decode reads, the paper-era paged kernel pays work a dense kernel does not: it loads
  the block's id from the block table before it can load the block, and runs the loop's bounds
  checks once per block. The paper measured the sum (Fig. 18a): its kernel ran 20-26% slower than
  FasterTransformer's dense kernel at block size 16, contexts 64-256, on an A100, and attributes
  the gap to "accessing the block table, executing extra branches, and handling variable sequence
  lengths". Charged all to the blocks, the midpoint (23%) of a 16-token block is 3.68 tokens: each
  block read costs as much as reading 3.68 more tokens' K/V (64 ns per block per layer for OPT-13B
  on an A100-40GB). Small blocks then cost more, as Fig. 18b's left half shows (1-token blocks:
  attention x4.68), and the efficiencies stay those of the dense kernel they were fitted to.
- A swap moves each block as 2 x layers copies (the K and the V of every layer), each its own
  cudaMemcpyAsync, as paper-era vLLM's swap_blocks did. A copy costs a fixed latency before its
  bytes move: 5 us by default, from measurements of cudaMemcpyAsync's per-call cost of small
  copies (5-7 us in DualPath, Wu et al. 2026, sec. 5.2; ~2.3 us on a newer stack, FlexKV PR #193;
  paper-era vLLM's per-block loop reached 3.1 GB/s on an A100-40GB where one kernel reached
  12.6 GB/s, vLLM PR #11531). With 1-token blocks of OPT-13B a swap is then latency-bound (80
  copies of 10 KB per token), with 256-token blocks bandwidth-bound: the paper's Fig. 19a.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from calibrate.clock.breakdown import IterationTime, fold
from calibrate.clock.costmodel import (
    SCALAR_STEPS,
    CostModel,
    per_step,
    stretch_block_list,
    stretch_block_sums,
    stretch_context_sums,
)
from calibrate.clock.mixed_pricing import MixedBound, bind_mixed, reference_mixed_decode
from calibrate.clock.roofline_terms import RooflineTerms, mixed_launch, prefill_pairs
from calibrate.hardware.hardware import HardwareSpec
from calibrate.hardware.precision import Precision
from calibrate.maths.ridge import bent_roof, ridge_exponent
from calibrate.parts.all_reduce import AllReduceTable
from calibrate.parts.attention_fit import AttentionFit, AttentionWork
from calibrate.parts.attention_waves import DecodeGrid, WaveFit, wave_tokens
from calibrate.parts.expert_dispatch import DispatchCost, dispatch_cost
from calibrate.parts.expert_ops import expert_kernels
from calibrate.parts.fp8_decoder import Fp8Decoder, prices_fp8_gemms
from calibrate.parts.fp8_gemm import Fp8GemmProfile, load_fp8_gemms
from calibrate.parts.host import host_parts, host_time
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.mixed_text import describe as describe_mixed
from calibrate.work.expert_parallel import ExpertParallel, expected_local_experts_read
from calibrate.work.expert_routing import expected_experts_read
from calibrate.work.layer_ops import ITERATION_ELEMENTWISE, LAYER_ELEMENTWISE, LayerShape
from engine.core.batch import ShapeMetrics
from engine.core.spec import ModelSpec

ALLREDUCE_LATENCY_S = 10e-6
ALLREDUCES_PER_LAYER = 2  # after attention's output projection and after the MLP
GEMMS_PER_LAYER = 4  # QKV, output projection, MLP up (and gate), MLP down
# a 16-token block's share of Fig. 18a's paged-over-dense gap (23%), as extra tokens read per block
DEFAULT_BLOCK_READ_OVERHEAD_TOKENS = 0.23 * 16
DEFAULT_SWAP_COPY_LATENCY_S = 5e-6  # per cudaMemcpyAsync of one block of one layer's K or V


@dataclass(frozen=True)
class RooflineParams:
    compute_efficiency: float = 0.68  # achieved share of peak FLOP/s in matmuls
    bandwidth_efficiency: float = 0.76  # achieved share of HBM bandwidth
    pcie_efficiency: float = 0.8
    overhead_s: float = 0.0  # fixed per-iteration cost (launches, scheduling)
    # share of the roof the linear layers reach where compute and weight reads take equally long;
    # 1 is the hard max (calibrate/maths/ridge.py)
    ridge_efficiency: float = 1.0
    # each KV block a paged decode reads costs as much as reading this many more tokens' K/V
    block_read_overhead_tokens: float = DEFAULT_BLOCK_READ_OVERHEAD_TOKENS
    swap_copy_latency_s: float = DEFAULT_SWAP_COPY_LATENCY_S  # per copy a swap issues


def decode_block_seconds(model: ModelSpec, bandwidth: float, tp: int, dtype_bytes: int,
                         params: RooflineParams) -> float:
    """Seconds per KV block a paged decode reads (all layers): block_read_overhead_tokens tokens' K/V."""
    return params.block_read_overhead_tokens * model.kv_bytes_per_token(dtype_bytes) / tp / bandwidth


def swap_copies_per_block(model: ModelSpec) -> int:
    """Copies one block's swap issues: the K and the V of every layer, each its own (paper-era vLLM)."""
    return 2 * model.num_layers


def swap_block_seconds(model: ModelSpec, hw: HardwareSpec, tp: int, dtype_bytes: int, block_size: int,
                       params: RooflineParams) -> float:
    """Seconds to move one block between GPU and host: a latency per copy, then its bytes over PCIe."""
    block_bytes = model.kv_bytes_per_token(dtype_bytes) * block_size / tp
    return (swap_copies_per_block(model) * params.swap_copy_latency_s
            + block_bytes / (hw.pcie_bytes_per_s * params.pcie_efficiency))


def waves_note(fit: AttentionFit, hw: HardwareSpec) -> str:
    """How decode attention is priced, for a cost model's source: in waves, or why not; and a mixed step's."""
    mixed = describe_mixed(fit.mixed, hw) if fit.mixed is not None else ""
    if fit.waves is None:
        return mixed
    if hw.sm_count is None:
        return f", decode without waves ({hw.name}'s sheet gives no sm_count)" + mixed
    return f", decode in waves over {hw.sm_count} SMs" + mixed


def _decodes_alike(batch: ShapeMetrics, num_decodes: int) -> bool:
    """A decode-only batch of num_decodes decodes, nothing moved: one RooflineTerms prices with another's terms."""
    return (batch.num_decodes == num_decodes and not batch.prefill_lens and not batch.num_swap_blocks
            and not batch.num_copy_blocks)


class RooflineCostModel(CostModel):
    """`paged=False` prices decode attention as a dense kernel (FasterTransformer's): no per-block term."""

    def __init__(self, model: ModelSpec, hw: HardwareSpec, tp: int = 1, dtype_bytes: int = 2,
                 block_size: int = 16, params: RooflineParams = RooflineParams(),
                 linear: LinearFit | None = None, all_reduce: AllReduceTable | None = None,
                 host: dict | None = None, paged: bool = True, attention: AttentionFit | None = None,
                 precision: Precision | None = None, expert_parallel: ExpertParallel | None = None,
                 fp8_gemms: Fp8GemmProfile | bool = True):
        """`all_reduce`: measured times by GPU count over the target's links (AllReduceTable.scaled);
        `host`: calibrate/parts/host.py's HOST_TERMS; `paged=False` prices decode attention as a dense kernel
        (FasterTransformer's): no per-block term; `attention`: decode and prefill attention as that fit prices
        them (the kernel it measured, paged or not as measured) instead of at params'; `precision`: the weights'
        and KV cache's formats (calibrate/hardware/precision.py), in place of `dtype_bytes` for every byte count;
        `expert_parallel`: a mixture served with expert parallelism over that group (vLLM's DP x TP), ignored by a
        dense model; `fp8_gemms`: the measured FP8 GEMMs that price W8A8 decoder matmuls (True: the shipped H100
        fit; False: none, every matmul on the sheet's rate as before they were measured)."""
        self.model, self.hw, self.tp, self.params = model, hw, tp, params
        self.expert_parallel = expert_parallel if model.is_moe else None
        self.attention = attention
        self.precision = precision if precision is not None else Precision.uniform(dtype_bytes)
        # weight bytes for the decoder matmuls, KV bytes for the cache, activation bytes for the rest (the LM
        # head's weights, messages, elementwise kernels)
        weight_bytes, kv_bytes = self.precision.weight_bytes, self.precision.kv_bytes
        dtype_bytes = self.precision.activation_bytes
        self._paged, self._kv_bytes = paged, kv_bytes
        self.linear, self.host = linear, host
        self.fp8_gemms = self._priced_fp8(fp8_gemms)
        self._charge_host = host is not None
        self.block_size = block_size
        kernel = f"block_read={params.block_read_overhead_tokens:g} tokens" if paged else "dense attention"
        self.source = (f"roofline({hw.name}, tp={tp}, compute_eff={params.compute_efficiency}, "
                       f"bw_eff={params.bandwidth_efficiency}, overhead_s={params.overhead_s}"
                       + (f", ridge_eff={params.ridge_efficiency}" if params.ridge_efficiency != 1 else "")
                       + f", {kernel if attention is None else 'attention measured' + waves_note(attention, hw)}"
                       + f", swap_latency_s={params.swap_copy_latency_s:g}"
                       + "".join(f", {note}" for note in [self.precision.describe(hw, self._fp8_note())] if note)
                       + (f", {self.expert_parallel.describe()}" if self.expert_parallel is not None else "") + ")")
        flops = hw.peak_flops * params.compute_efficiency
        bandwidth = hw.hbm_bytes_per_s * params.bandwidth_efficiency
        matmul = linear or params  # the linear layers' efficiencies and bend: measured, or the spec sheet's
        head_flops = hw.peak_flops * matmul.compute_efficiency  # the LM head stays 16-bit
        matmul_flops = self.precision.matmul_peak_flops(hw) * matmul.compute_efficiency
        matmul_bandwidth = hw.hbm_bytes_per_s * matmul.bandwidth_efficiency
        layers, hidden = model.num_layers, model.hidden_size
        linear_params = layers * model.layer_active_linear_params() / tp  # a dense model's every weight
        head_params = model.vocab_size * hidden / tp
        # per-token and per-batch constants, precomputed for the simulator's hot loop
        self._ridge_p = ridge_exponent(matmul.ridge_efficiency)
        self._s_per_token_linear = 2 * linear_params / matmul_flops
        self._s_per_logit_row = 2 * head_params / head_flops
        # at one byte count for all, the sum of the two products is (linear + head) x bytes to the bit: both
        # byte counts are powers of two, and scaling by one is exact
        self._s_weights = (linear_params * weight_bytes + head_params * dtype_bytes) / matmul_bandwidth
        self._s_head_weights = head_params * dtype_bytes / matmul_bandwidth  # read apart where FP8 GEMMs price
        self._fp8 = None if self.fp8_gemms is None else Fp8Decoder.of(self.fp8_gemms.fit, model, hw, tp)
        self._s_per_expert_read = 0.0  # all layers' weights of one expert, for a mixture of experts
        self._s_per_expert_kernels = 0.0  # all layers' measured latencies of one expert run
        if model.is_moe:  # the weights read every iteration are those of attention, router and head alone
            resident_params = layers * (model.layer_attention_params() + model.gate_params()) / tp
            self._s_weights = (resident_params * weight_bytes + head_params * dtype_bytes) / matmul_bandwidth
            # tensor parallelism reads 1/tp of each routed expert; expert parallelism its own experts whole
            shards = tp if self.expert_parallel is None else 1
            self._s_per_expert_read = layers * model.expert_params() / shards * weight_bytes / matmul_bandwidth
        # a prompt's causal attention: QK^T and PV over half its L^2 pairs, 4 FLOPs a pair per query dimension
        self._s_per_prompt_sq = 2 * model.q_dim * layers / tp / flops
        self._s_per_context_token = model.kv_bytes_per_token(kv_bytes) / tp / bandwidth
        self._s_per_copied_block = 2 * model.kv_bytes_per_token(kv_bytes) * block_size / tp / bandwidth
        self._s_per_decode_block = (decode_block_seconds(model, bandwidth, tp, kv_bytes, params)
                                    if paged else 0.0)
        self._s_swap_per_block = swap_block_seconds(model, hw, tp, kv_bytes, block_size, params)
        self._fitted_terms = (0.0, 0.0, 0.0, 0.0, 0.0)
        self._waves: WaveFit | None = None
        self._wave_launches: dict[int, tuple[int, int, float]] = {}
        self._mixed: MixedBound | None = None
        if attention is not None:
            self._bind_fitted_attention(attention, kv_bytes)
        self._all_reduce = all_reduce if all_reduce is not None and tp > 1 and all_reduce.covers(tp) else None
        self._message_bytes_per_token = hidden * dtype_bytes
        if tp > 1:
            ring = 2 * (tp - 1) / tp * hidden * dtype_bytes / hw.nvlink_bytes_per_s
            self._s_per_token_comm = ALLREDUCES_PER_LAYER * layers * ring
            self._s_comm_fixed = ALLREDUCES_PER_LAYER * layers * ALLREDUCE_LATENCY_S
        else:
            self._s_per_token_comm = self._s_comm_fixed = 0.0
        self._dispatch = self._dispatch_cost(all_reduce, dtype_bytes)
        self._s_kernels_fixed, self._s_per_token_kernels = self._kernel_terms(dtype_bytes)
        self._bind_scalar_terms()

    def _dispatch_cost(self, all_reduce: AllReduceTable | None, dtype_bytes: int) -> DispatchCost | None:
        """Expert parallelism's all-gather and reduce-scatter over the ranks, over tensor parallelism's link, each at
        the measured all-reduce's latency for that many GPUs where the table has it; None where nothing is gathered
        (no expert parallelism, or one rank)."""
        group = self.expert_parallel
        if group is None or group.data_parallel == 1:
            return None
        ranks = group.data_parallel
        latency = all_reduce.latency(ranks) if all_reduce is not None and all_reduce.covers(ranks) \
            else ALLREDUCE_LATENCY_S
        return dispatch_cost(self.model, group, dtype_bytes, self.hw.nvlink_bytes_per_s, latency)

    def _priced_fp8(self, given: Fp8GemmProfile | bool) -> Fp8GemmProfile | None:
        """The FP8 GEMMs that price this model's decoder matmuls: only W8A8 weights of a dense model on the spec
        sheet's roofline (a measured linear part was measured at 16 bits)."""
        if given is False or self.linear is not None or not prices_fp8_gemms(self.model, self.hw, self.precision):
            return None
        return load_fp8_gemms() if given is True else given

    def _fp8_note(self) -> str | None:
        return None if self.fp8_gemms is None else self.fp8_gemms.describe(self.hw)

    def _bind_fitted_attention(self, fit: AttentionFit, dtype_bytes: int) -> None:
        """All layers' seconds per unit of the fit's terms on this hardware: its shares of this sheet's peaks."""
        work, layers, hw = AttentionWork.of_model(self.model, self.tp, dtype_bytes), self.model.num_layers, self.hw

        def per_byte(share: float | None) -> float:
            return 0.0 if share is None else layers / (hw.hbm_bytes_per_s * share)

        self._s_per_context_token = work.kv_bytes_per_token * per_byte(fit.decode_bandwidth_efficiency)
        self._s_per_decode_block = 0.0  # the measured kernel's paging is in its times
        self._fitted_terms = (layers * fit.decode_latency_s,
                              layers * work.flops_per_pair / (hw.peak_flops * fit.prefill_compute_efficiency),
                              work.kv_bytes_per_token * per_byte(fit.prefill_kv_bandwidth_efficiency),
                              work.output_bytes_per_token * per_byte(fit.prefill_output_bandwidth_efficiency),
                              layers * fit.prefill_latency_s)
        if fit.mixed is not None:
            self._mixed = bind_mixed(fit.mixed, self.model, self.tp, hw, dtype_bytes)
        if fit.waves is not None and hw.sm_count is not None:
            model, tp = self.model, self.tp
            self._waves = fit.waves
            self._grid = DecodeGrid.of_heads(max(model.num_heads // tp, 1), max(model.num_kv_heads // tp, 1),
                                             model.head_dim, dtype_bytes)
            self._s_per_head_token = self._grid.head_bytes_per_token * per_byte(fit.waves.bandwidth_efficiency)

    def charge_block_reads(self, overhead_tokens: float) -> None:
        """Each KV block a paged decode reads costs as much as reading `overhead_tokens` more tokens' K/V, on top of
        the attention this model prices: with measured attention, a paged kernel's overhead over the measured one
        (the paper-era kernel's over a dense one, Fig. 18a, where a config asks for it); nothing for a dense kernel
        (paged=False)."""
        if not self._paged:
            return
        # a token's K/V costs what the decodes' own reads achieve: the waves' bandwidth where they price decode
        share = (self._waves.bandwidth_efficiency if self._waves is not None
                 else self.attention.decode_bandwidth_efficiency if self.attention is not None
                 else self.params.bandwidth_efficiency)
        per_token = self.model.kv_bytes_per_token(self._kv_bytes) / self.tp / (self.hw.hbm_bytes_per_s * share)
        self._s_per_decode_block = overhead_tokens * per_token
        self.source += f"; a paged block read costs {overhead_tokens:g} tokens' K/V more (config)"
        self._bind_scalar_terms()

    def _wave_launch(self, decodes: int) -> tuple[int, int, float]:
        """(splits, tiles per split, all layers' launch latencies) of a launch of `decodes` sequences, kept per
        batch size: the split heuristic runs once per size a run meets."""
        known = self._wave_launches.get(decodes)
        if known is None:
            assert self._waves is not None and self.hw.sm_count is not None
            launch = self._waves.launch(self._grid, self.hw.sm_count, decodes)
            known = (launch.splits, launch.tiles_per_split,
                     self.model.num_layers * self._waves.launch_seconds(launch))
            self._wave_launches[decodes] = known
        return known

    def _kernel_terms(self, dtype_bytes: int) -> tuple[float, float]:
        """(seconds every iteration, seconds per token) of the measured kernels beyond the roofline's; a mixture
        of experts' latencies per expert run are kept apart (calibrate/parts/expert_ops.py)."""
        if self.linear is None:
            return 0.0, 0.0
        if self.model.is_moe:
            kernels = expert_kernels(self.model, self.linear, self.hw, self.tp, dtype_bytes)
            self._s_per_expert_kernels = kernels.per_expert_s
            return kernels.fixed_s, kernels.per_token_s
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
        """_time of one iteration (reference_iteration_time), as the same float: the same operations in the
        same order on doubles, with its constants bound once (RooflineTerms, compiled where the control plane
        is), since the simulator asks this once per iteration it does not fast-forward."""
        return self._terms.iteration_time(batch, batch.num_copy_blocks, self.block_size)

    def reference_iteration_time(self, batch: ShapeMetrics) -> float:
        """iteration_time as _time computes it (the expression a decode stretch is priced with); the test
        of iteration_time's inlined arithmetic compares the two bit for bit."""
        blocks = batch.decode_blocks(self.block_size) if self._paged_decodes(batch) else None
        return self._time(batch, batch.sum_decode_context, blocks)

    @property
    def terms(self) -> RooflineTerms:
        """The floats it prices an iteration with, bound (calibrate/clock/roofline_terms.py): bound afresh when a term
        changes, so read at each use."""
        return self._terms

    @property
    def charge_host(self) -> bool:  # bound into _terms too
        return self._charge_host

    @charge_host.setter
    def charge_host(self, value: bool) -> None:
        self._charge_host = value
        self._bind_scalar_terms()

    def _bind_scalar_terms(self) -> None:
        """The floats iteration_time and a short stretch read, bound once into RooflineTerms (again when
        charge_host is set, or any term changes: token_time's known counts are forgotten then)."""
        self._token_times: dict[tuple[int, int], float] = {}
        host = self.host or {"per_iteration_s": 0.0, "per_sequence_s": 0.0, "per_prefill_token_s": 0.0}
        self._terms = RooflineTerms(
            self._s_per_token_linear, self._s_per_logit_row, self._s_weights, self._ridge_p,
            self._s_per_context_token, self._s_per_decode_block, self._s_per_prompt_sq, self._s_per_copied_block,
            self.params.overhead_s, self._s_per_token_comm, self._s_comm_fixed,
            self._comm_time if self._all_reduce is not None else None,
            self.linear is not None, self._s_kernels_fixed, self._s_per_token_kernels, self._charge_host,
            host["per_iteration_s"], host["per_sequence_s"], host["per_prefill_token_s"],
            self.attention is not None, *self._fitted_terms, *self._wave_terms(),
            num_experts=self.model.num_experts, experts_per_token=self.model.experts_per_token,
            s_per_expert_read=self._s_per_expert_read, s_per_expert_kernels=self._s_per_expert_kernels,
            mixed=self._mixed.terms() if self._mixed is not None else None, **self._expert_parallel_terms(),
            **self._fp8_terms())

    def _expert_parallel_terms(self) -> dict:
        """RooflineTerms' expert-parallel arguments: none without expert parallelism."""
        group, dispatch = self.expert_parallel, self._dispatch
        if group is None:
            return {}
        terms: dict = {"gathered_ranks": group.data_parallel, "expert_degree": group.degree}
        if dispatch is not None:
            terms.update(dispatch=True, s_per_token_dispatch=dispatch.per_token_s, s_dispatch_fixed=dispatch.fixed_s)
        return terms

    def _fp8_terms(self) -> dict:
        """RooflineTerms' FP8 GEMM arguments: none where the decoder's matmuls are not priced GEMM by GEMM."""
        if self._fp8 is None:
            return {}
        return {"fp8_gemms": [gemm.as_tuple() for gemm in self._fp8.gemms], "fp8_layers": self._fp8.layers,
                "fp8_latency": self._fp8.latency_s, "fp8_ridge_p": self._fp8.ridge_p,
                "s_head_weights": self._s_head_weights}

    def _wave_terms(self) -> tuple:
        """RooflineTerms' decode-wave arguments: none where decode attention is not the waves'."""
        if self._waves is None:
            return ()
        assert self.hw.sm_count is not None
        return (self._wave_launch, self._grid.heads, self._grid.tile, self.hw.sm_count, self._waves.blocks_per_sm,
                self._waves.floors(self.hw.sm_count), self._s_per_head_token)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_terms"]  # a compiled object, and a bound method of this one: bound again on arrival
        del state["_token_times"]  # forgotten with it
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._bind_scalar_terms()

    def decode_iteration_times(self, batch: ShapeMetrics, num_steps: int) -> np.ndarray:
        """Every step is the same sum of the same terms; only the decode contexts read grow, by one per
        decode per step (and the blocks they span with them): the one expression over arrays of them
        gives each step's float."""
        if num_steps <= SCALAR_STEPS:
            return np.array(self._stretch_on_floats(batch, num_steps), dtype=float)
        return self.reference_decode_iteration_times(batch, num_steps)

    def decode_step_time_list(self, batch: ShapeMetrics, num_steps: int) -> list[float]:
        """A short stretch without swaps priced on Python floats alone, as decode_step_times would give them
        (its swap-free default adds nothing to decode_iteration_times' floats); else as CostModel does."""
        if num_steps <= SCALAR_STEPS and not batch.num_swap_blocks and type(self).step_time is CostModel.step_time:
            return self._stretch_on_floats(batch, num_steps)
        return super().decode_step_time_list(batch, num_steps)

    def decode_step_time_lists(self, stretches: Sequence[tuple[ShapeMetrics, int]]) -> list[list[float]]:
        """Each run of short decode-only stretches alike but for their contexts (as many steps, as many decodes,
        nothing moved: a speculating stretch's proposer forwards, k an iteration) priced on Python floats with their
        shared terms once (RooflineTerms.stretches_times), as decode_step_time_list gives each."""
        if (type(self).step_time is not CostModel.step_time
                or type(self).decode_step_time_list is not RooflineCostModel.decode_step_time_list):
            return super().decode_step_time_lists(stretches)
        lists: list[list[float]] = []
        at = 0
        while at < len(stretches):
            first, num_steps = stretches[at]
            end = at + 1
            decodes = first.num_decodes
            if num_steps <= SCALAR_STEPS and _decodes_alike(first, decodes):
                while (end < len(stretches) and stretches[end][1] == num_steps
                       and _decodes_alike(stretches[end][0], decodes)):
                    end += 1
            if end == at + 1:
                lists.append(self.decode_step_time_list(first, num_steps))
            else:
                run = [batch for batch, _ in stretches[at:end]]
                blocks = ([stretch_block_list(batch, num_steps, self.block_size) for batch in run]
                          if self._s_per_decode_block and decodes else [])
                lists.extend(self._terms.stretches_times(first, 0, [batch.sum_decode_context for batch in run],
                                                         num_steps, blocks))
            at = end
        return lists

    def iteration_time_list(self, batches: Sequence[ShapeMetrics]) -> list[float]:
        """Each run of prefill-only iterations alike but for their cached lengths (the same prompts' lengths, logit
        rows and copies: a speculating stretch's verify steps) priced with their shared terms once
        (RooflineTerms.chunks_times); the others a call each."""
        if type(self).iteration_time is not RooflineCostModel.iteration_time:
            return super().iteration_time_list(batches)
        terms, block_size = self._terms, self.block_size
        times: list[float] = []
        at = 0
        while at < len(batches):
            first = batches[at]
            end = at + 1
            lens, copies, rows = first.prefill_lens, first.num_copy_blocks, first.num_logit_rows
            if lens and not first.decode_context_lens:
                while (end < len(batches) and batches[end].prefill_lens == lens
                       and not batches[end].decode_context_lens and batches[end].num_copy_blocks == copies
                       and batches[end].num_logit_rows == rows):
                    end += 1
            if end == at + 1:
                times.append(terms.iteration_time(first, copies, block_size))
            else:
                times.extend(terms.chunks_times(first, copies, batches[at:end]))
            at = end
        return times

    def reference_decode_iteration_times(self, batch: ShapeMetrics, num_steps: int) -> np.ndarray:
        """decode_iteration_times on numpy arrays: _time over the stretch's context and block sums."""
        blocks = stretch_block_sums(batch, num_steps, self.block_size) if self._paged_decodes(batch) else None
        return per_step(self._time(batch, stretch_context_sums(batch, num_steps), blocks), num_steps)

    def _stretch_on_floats(self, batch: ShapeMetrics, num_steps: int) -> list[float]:
        """_time of each step of a short stretch as a Python float (RooflineTerms.stretch_times)."""
        paged = bool(self._s_per_decode_block and batch.num_decodes)
        blocks = stretch_block_list(batch, num_steps, self.block_size) if paged else []
        return self._terms.stretch_times(batch, batch.num_copy_blocks, num_steps, blocks)

    def _paged_decodes(self, batch: ShapeMetrics) -> bool:
        return bool(self._s_per_decode_block and batch.decode_context_lens)

    def _time(self, batch: ShapeMetrics, sum_decode_context, decode_blocks):
        """iteration_time, for one iteration's decode contexts (their sum, and the KV blocks they span when
        the paged kernel's per-block cost applies, else None) or arrays of them: the device's kinds added in
        order (_device_parts), then the host work in series."""
        t = fold(value for _, value in self._device_parts(batch, sum_decode_context, decode_blocks))
        if self.charge_host:
            t += host_time(self.host, batch.num_seqs, batch.num_prefill_tokens)
        return t

    def _device_parts(self, batch: ShapeMetrics, sum_decode_context, decode_blocks) -> list[tuple[str, object]]:
        """The device's seconds by kind (calibrate/clock/breakdown.DEVICE_KINDS), in the order the clock adds them:
        the one formula of this model, which iteration_time's and a stretch's fast copies (RooflineTerms) are
        checked against to the bit."""
        tokens = batch.num_tokens
        matmuls = self.matmul_time(tokens, batch.num_logit_rows)
        if self.attention is not None:
            attention = self._fitted_attention(batch, sum_decode_context)
            if decode_blocks is not None:  # a paged kernel's overhead over the measured one (charge_block_reads)
                attention = attention + decode_blocks * self._s_per_decode_block
        else:
            cached = batch.sum_prefill_cached
            kv_read = sum_decode_context + cached if cached else sum_decode_context  # read, not computed
            attention = kv_read * self._s_per_context_token
            if decode_blocks is not None:  # the paged kernel's work per KV block it visits
                attention = attention + decode_blocks * self._s_per_decode_block
            prefill_sq = batch.sum_prefill_sq
            if prefill_sq:
                attention = prefill_sq * self._s_per_prompt_sq + attention
        # t > 0 (the weights are read) and attention >= 0, so a term that is exactly 0 changes no bit of the
        # sum: fold skips it, which spares an array operation when a decode stretch is priced at once
        parts: list[tuple[str, object]] = [("linear", matmuls), ("attention", attention),
                                           ("all_reduce", self._comm_time(tokens))]
        if self._dispatch is not None:
            parts.append(("expert_dispatch", self._dispatch.seconds(tokens)))
        parts += [("block_copies", batch.num_copy_blocks * self._s_per_copied_block),
                  ("overhead", self.params.overhead_s)]
        if self.linear is not None:
            parts.append(("other_kernels", self.kernels_time(tokens)))
        return parts

    def token_time(self, tokens: int, logit_rows: int) -> float:
        """The device seconds of an iteration that follow its token count, as _device_parts prices them: the linear
        layers (the LM head on logit_rows), the all-reduces and the measured per-token kernels. A CUDA graph's
        padding rows run through exactly these (calibrate/clock/engine_clock.py), twice an iteration it pads: each
        count a run meets is priced once, the same float every later time (forgotten when a term changes)."""
        known = self._token_times.get((tokens, logit_rows))
        if known is None:
            time = self.matmul_time(tokens, logit_rows) + self._comm_time(tokens)
            if self._dispatch is not None:
                time = time + self._dispatch.seconds(tokens)
            known = time + self.kernels_time(tokens) if self.linear is not None else time
            self._token_times[(tokens, logit_rows)] = known
        return known

    def matmul_time(self, tokens: int, logit_rows: int) -> float:
        """The linear layers and the LM head (on logit_rows): under one roof from the params' or a measured linear
        part's efficiencies; with FP8 GEMMs, the decoder's GEMM by GEMM (calibrate/parts/fp8_decoder.py) and the
        16-bit head under its own roof."""
        head = logit_rows * self._s_per_logit_row
        if self._fp8 is not None:
            return self._fp8.time(tokens) + bent_roof(head, self._s_head_weights, self._ridge_p)
        compute = tokens * self._s_per_token_linear + head
        weights = self.weights_time(tokens)
        if self._ridge_p == math.inf:
            return compute if compute > weights else weights
        return bent_roof(compute, weights, self._ridge_p)

    def kernels_time(self, tokens: int) -> float:
        """Seconds of the measured kernels beyond the matmul term: latencies and elementwise bytes, a mixture of
        experts' expert latencies for the distinct experts its tokens are expected to be routed to."""
        if self._s_per_expert_kernels:
            experts = self.experts_run(tokens)
            return self._s_kernels_fixed + experts * self._s_per_expert_kernels + tokens * self._s_per_token_kernels
        return self._s_kernels_fixed + tokens * self._s_per_token_kernels

    def weights_time(self, tokens: int) -> float:
        """Seconds to read the weights an iteration of `tokens` tokens uses: all of a dense model's; of a mixture
        of experts, its attention, routers and head and the experts its tokens are expected to be routed to."""
        if not self.model.is_moe:
            return self._s_weights
        return self._s_weights + self.experts_run(tokens) * self._s_per_expert_read

    def experts_run(self, tokens: int) -> float:
        """The distinct experts a layer of a mixture is expected to run on this GPU for `tokens` tokens: those the
        batch is routed to, each split over the tensor-parallel GPUs; under expert parallelism this GPU's own, for
        every rank's tokens at equal load (calibrate/work/expert_parallel.py)."""
        model = self.model
        if self.expert_parallel is None:
            return expected_experts_read(model.num_experts, model.experts_per_token, tokens)
        return expected_local_experts_read(model.num_experts, model.experts_per_token, tokens, self.expert_parallel)

    def breakdown(self, batch: ShapeMetrics) -> IterationTime:
        """iteration_time by kind and term (calibrate/clock/breakdown.py): its parts add up to it to the bit."""
        blocks = batch.decode_blocks(self.block_size) if self._paged_decodes(batch) else None
        device = {kind: float(value) for kind, value in self._device_parts(batch, batch.sum_decode_context, blocks)}
        host = self.host_parts_of(batch, self.host_parts(batch)) if self.charge_host else {}
        swaps = batch.num_swap_blocks
        return IterationTime(device, host, fold(device.values()), self.host_time(batch),
                             self.swap_time(swaps) if swaps else 0.0)

    def device_time(self, batch: ShapeMetrics) -> float:
        """The device part of iteration_time, as the clock adds it up before the host work (so that device_time +
        host_time is iteration_time to the bit, which a difference of the two would not be)."""
        blocks = batch.decode_blocks(self.block_size) if self._paged_decodes(batch) else None
        return fold(value for _, value in self._device_parts(batch, batch.sum_decode_context, blocks))

    def host_parts(self, batch: ShapeMetrics) -> dict[str, float]:
        """host_time by term, in the order it adds them (calibrate/parts/host.py)."""
        return host_parts(self.host, batch.num_seqs, batch.num_prefill_tokens)

    def _fitted_attention(self, batch: ShapeMetrics, sum_decode_context):
        """Attention as the measured fit prices it, for one iteration's decode context sum or an array of them: a
        mixed step's decodes as their one launch prices them where the fit has that term (calibrate/clock/
        mixed_pricing.py)."""
        if self._mixes(batch):
            return self._fitted_mixed(batch, sum_decode_context) + self._fitted_prefill(batch)
        attention = self._fitted_decode(batch, sum_decode_context)
        if batch.prefill_lens:
            attention = attention + self._fitted_prefill(batch)
        return attention

    def _mixes(self, batch: ShapeMetrics) -> bool:
        return self._mixed is not None and mixed_launch(batch.num_decodes, batch.prefill_lens)

    def _fitted_mixed(self, batch: ShapeMetrics, sum_decode_context):
        assert self._mixed is not None
        return reference_mixed_decode(self._mixed, batch.num_decodes, batch.prefill_lens, sum_decode_context)

    def _fitted_decode(self, batch: ShapeMetrics, sum_decode_context):
        """The decodes' attention: in waves where the fit has them and this sheet its SM count, else the fit's
        bytes and latency."""
        decodes = batch.num_decodes
        if self._waves is not None and decodes:
            assert self.hw.sm_count is not None
            splits, per_split, latency = self._wave_launch(decodes)
            read = wave_tokens(sum_decode_context / decodes, decodes * self._grid.heads, self._grid.tile, splits,
                                per_split, self.hw.sm_count, self._waves.blocks_per_sm,
                                np.asarray(self._waves.floors(self.hw.sm_count)))
            return read * self._s_per_head_token + latency
        attention = sum_decode_context * self._s_per_context_token
        if decodes:
            attention = attention + self._fitted_terms[0]
        return attention

    def _fitted_prefill(self, batch: ShapeMetrics) -> float:
        """Each new token against every key (n (n + c) pairs: n^2 + the causal count's n (n + 2c), halved), the
        K/V of new and cached tokens, the new tokens' output reshaped, and the latency."""
        _, s_pair, s_kv, s_out, latency = self._fitted_terms
        tokens = batch.num_prefill_tokens
        pairs = prefill_pairs(batch.prefill_lens, batch.prefill_cached_lens)
        return pairs * s_pair + (tokens + batch.sum_prefill_cached) * s_kv + tokens * s_out + latency

    def host_time(self, batch) -> float:
        """The host part of iteration_time (CostModel.device_time is the rest): the host work in series."""
        return host_time(self.host, batch.num_seqs, batch.num_prefill_tokens) if self.charge_host else 0.0

    def use_all_reduce(self, table) -> None:
        """Price the all-reduces by `table` from now on (its covers and time, as an AllReduceTable's: an engine's
        own all-reduce, calibrate/parts/custom_all_reduce.py), where it covers this tensor-parallel degree."""
        if self.tp > 1 and table.covers(self.tp):
            self._all_reduce = table
            self._bind_scalar_terms()

    def ring_message_time(self, workers: int, size_bytes: float) -> float:
        """One all-reduce of size_bytes by the ring formula this model prices without a measured table: its
        bandwidth term over the sheet's GPU-to-GPU link, and its latency."""
        return 2 * (workers - 1) / workers * size_bytes / self.hw.nvlink_bytes_per_s + ALLREDUCE_LATENCY_S

    @property
    def all_reduce_table(self) -> AllReduceTable | None:
        """The measured all-reduce times this model prices its tensor-parallel degree with; None: the ring formula."""
        return self._all_reduce

    def _comm_time(self, tokens: int) -> float:
        if self._all_reduce is None:
            return tokens * self._s_per_token_comm + self._s_comm_fixed
        if tokens == 0:
            return 0.0
        per_message = self._all_reduce.time(self.tp, tokens * self._message_bytes_per_token)
        return ALLREDUCES_PER_LAYER * self.model.num_layers * per_message

    def decode_attention_time(self, batch: ShapeMetrics) -> float:
        """The KV bytes the decodes read, plus the paged kernel's work per block it visits (with a measured
        fit: its K/V bytes and its latency)."""
        if self.attention is not None:
            if self._mixes(batch):
                return float(self._fitted_mixed(batch, batch.sum_decode_context))
            return float(self._fitted_decode(batch, batch.sum_decode_context))
        t = batch.sum_decode_context * self._s_per_context_token
        if self._paged_decodes(batch):
            t += batch.decode_blocks(self.block_size) * self._s_per_decode_block
        return t

    def prefill_attention_time(self, batch: ShapeMetrics) -> float:
        """The prefills' causal attention work, plus reading a cached prefix's KV as a decode reads its context
        (with a measured fit: its terms and latency)."""
        if self.attention is not None:
            return self._fitted_prefill(batch) if batch.prefill_lens else 0.0
        return batch.sum_prefill_sq * self._s_per_prompt_sq + batch.sum_prefill_cached * self._s_per_context_token

    def swap_time(self, num_blocks: int) -> float:
        return num_blocks * self._s_swap_per_block
