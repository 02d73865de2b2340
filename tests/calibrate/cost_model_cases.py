"""The cost models the fast paths and the breakdown are checked on, one of each switch of the roofline's expression,
and the batches they are priced on (a helper beside its tests, shared by test_iteration_time_fast_path and
test_breakdown)."""
from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

from hypothesis import strategies as st

from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.cost_models.profile_model import ProfileCostModel, transferred_roofline
from calibrate.hardware.hardware import load_hardware
from calibrate.hardware.precision import Precision
from calibrate.parts.attention_fit import AttentionFit
from calibrate.parts.attention_mixed import MixedFit
from calibrate.parts.attention_waves import WaveFit
from calibrate.parts.fp8_gemm import load_fp8_gemms
from calibrate.work.expert_parallel import ExpertParallel
from engine.core.batch import Batch
from engine.specs.loader import load_model_spec

PROFILES = Path(__file__).resolve().parents[2] / "calibrate" / "profiles"
OPT13B, A100 = load_model_spec("opt-13b"), load_hardware("a100-40gb")
LLAMA7B, A100_80 = load_model_spec("llama-7b"), load_hardware("a100-80gb")
MIXTRAL, H100 = load_model_spec("mixtral-8x7b"), load_hardware("h100-sxm")
FP8 = Precision("fp8", "fp8")

MEASURED = AttentionFit(15e-6, 0.75, 12e-6, 0.45, 0.4, 0.1)
# decode in waves: the A100 fit's geometry, and one block per SM with floors past the slots
WAVES = WaveFit(5e-6, 2e-6, 6e-6, 0.84, 2, (95 / 108, 157 / 108), 1, 4096)
ONE_PER_SM = WaveFit(5e-6, 0.0, 6e-6, 0.8, 1, (1.3,), 2, 2048)
# a mixed step's decodes in their one launch: rereads past the L2 charged, or not, one or two blocks an SM
MIXED = MixedFit(3e-6, 2.5e-6, 2e-9, 2.5, 0.8, 1, (0.64,))
MIXED_TWO_PER_SM = MixedFit(0.0, 3e-6, 4e-9, 1.9, None, 2, (0.7, 1.6))
PRO = load_hardware("rtx-pro-6000-server")


def with_block_reads(cost, overhead_tokens: float = 3.68):
    """`cost` charging a paged kernel's per-block cost over its measured attention (charge_block_reads)."""
    cost.charge_block_reads(overhead_tokens)
    return cost


ROOFLINES = {  # every switch of the inlined expression: ridge bend, overhead, ring or measured all-reduce, copies,
    # dense or paged attention, measured attention, measured kernels, host work, a mixture of experts
    "roofline, mixture of experts, tp 2": RooflineCostModel(MIXTRAL, H100, tp=2),
    "roofline, mixture of experts bent, measured attention": RooflineCostModel(
        MIXTRAL, H100, params=RooflineParams(ridge_efficiency=0.8), attention=MEASURED),
    "transferred, mixture of experts, tp 2": transferred_roofline(PROFILES / "a100-80gb.yaml", None, MIXTRAL, H100,
                                                                 2, 2, 16),
    "roofline, mixture of experts, expert parallel 2 x 2": RooflineCostModel(MIXTRAL, H100, tp=2,
                                                                            expert_parallel=ExpertParallel(2, 2)),
    "roofline, mixture of experts bent, overhead, expert parallel 4 x 1": RooflineCostModel(
        MIXTRAL, H100, params=RooflineParams(ridge_efficiency=0.8, overhead_s=0.0013),
        expert_parallel=ExpertParallel(4, 1)),
    "roofline, mixture of experts, expert parallel in one rank's 2 GPUs": RooflineCostModel(
        MIXTRAL, H100, tp=2, expert_parallel=ExpertParallel(1, 2)),
    "transferred, mixture of experts, expert parallel 4 x 1 (measured all-reduce's latency)": transferred_roofline(
        PROFILES / "a100-80gb.yaml", None, MIXTRAL, H100, 1, 2, 16, expert_parallel=ExpertParallel(4, 1)),
    "roofline": RooflineCostModel(OPT13B, A100),
    "roofline dense": RooflineCostModel(OPT13B, A100, paged=False, block_size=32),
    "roofline bent, overhead, tp 2": RooflineCostModel(OPT13B, A100, tp=2, params=RooflineParams(
        ridge_efficiency=0.8, overhead_s=0.0013)),
    "roofline block size 1": RooflineCostModel(OPT13B, A100, block_size=1),
    "transferred (linear profile)": transferred_roofline(PROFILES / "a100-80gb-linear.yaml", None, LLAMA7B, A100_80,
                                                         1, 2, 16),
    "transferred, tp 4": transferred_roofline(PROFILES / "a100-80gb-linear.yaml", None,
                                              load_model_spec("llama-13b"), A100_80, 4, 2, 16),
    "roofline, measured attention, tp 2": RooflineCostModel(OPT13B, A100, tp=2, attention=MEASURED),
    "roofline, measured attention without its byte terms": RooflineCostModel(OPT13B, A100, attention=replace(
        MEASURED, prefill_kv_bandwidth_efficiency=None, prefill_output_bandwidth_efficiency=None)),
    "roofline, measured attention in waves, tp 2": RooflineCostModel(LLAMA7B, A100_80, tp=2,
                                                                     attention=replace(MEASURED, waves=WAVES)),
    "roofline, measured attention in waves, one block per SM": RooflineCostModel(
        OPT13B, load_hardware("h100-sxm"), attention=replace(MEASURED, waves=ONE_PER_SM)),
    "roofline, measured attention, paged block reads": with_block_reads(RooflineCostModel(OPT13B, A100,
                                                                                          attention=MEASURED)),
    "roofline, measured attention in waves, paged block reads, tp 2": with_block_reads(RooflineCostModel(
        LLAMA7B, A100_80, tp=2, attention=replace(MEASURED, waves=WAVES)), 1.5),
    "transferred (profile with measured attention)": transferred_roofline(PROFILES / "a100-80gb.yaml", None, LLAMA7B,
                                                                         A100_80, 1, 2, 16),
    "roofline, measured attention in waves and a mixed term, rereads past the L2": RooflineCostModel(
        LLAMA7B, PRO, attention=replace(MEASURED, waves=ONE_PER_SM, mixed=MIXED)),
    "roofline, a mixed term, two blocks an SM, tp 2, paged block reads": with_block_reads(RooflineCostModel(
        LLAMA7B, H100, tp=2, attention=replace(MEASURED, mixed=MIXED_TWO_PER_SM))),
    "roofline, a mixed term on a sheet without the L2": RooflineCostModel(
        OPT13B, replace(PRO, l2_cache_bytes=None), attention=replace(MEASURED, waves=WAVES, mixed=MIXED)),
    "transferred (profile with a mixed term), tp 2": transferred_roofline(
        PROFILES / "rtx-pro-6000-server.yaml", None, load_model_spec("qwen3-32b"), PRO, 2, 2, 16),
    "transferred h200 profile (host work)": transferred_roofline(PROFILES / "h200-opt-13b.yaml", None, OPT13B, A100,
                                                                 1, 2, 16),
    # W8A8 priced by the measured FP8 GEMMs: bent, and a hard max with a bent 16-bit head; over the ring all-reduce
    "roofline, FP8 GEMMs measured, tp 2": RooflineCostModel(LLAMA7B, H100, tp=2, precision=FP8),
    "roofline bent, FP8 GEMMs at a hard max, fp8 kv cache": RooflineCostModel(
        LLAMA7B, H100, params=RooflineParams(ridge_efficiency=0.8, overhead_s=0.0007), precision=FP8,
        fp8_gemms=replace(load_fp8_gemms(), fit=replace(load_fp8_gemms().fit, ridge_efficiency=1.0))),
}
PROFILE_MODELS = {
    "h200 profile (host work, serving factor)": ProfileCostModel.from_profile(PROFILES / "h200-opt-13b.yaml"),
    "cpu profile": ProfileCostModel.from_profile(PROFILES / "cpu-opt-125m.yaml"),
}

lengths = st.lists(st.integers(1, 4000), max_size=200)
batches = st.builds(
    lambda decodes, prefills, cached, copies, swaps: Batch(
        prefill_seq_ids=list(range(len(prefills))), prefill_lens=prefills,
        prefill_sample_ids=[(i,) for i in range(len(prefills))],
        prefill_cached_lens=[cached] * len(prefills) if cached else [],
        decode_seq_ids=list(range(100, 100 + len(decodes))), decode_context_lens=decodes,
        blocks_to_copy=[(0, 1)] * copies, blocks_to_swap_in=[(0, 1)] * swaps,
        num_running_groups=len(prefills) + len(decodes)),
    lengths, st.lists(st.integers(1, 3000), max_size=4), st.sampled_from([0, 0, 16, 80, 1000]),
    st.integers(0, 3), st.integers(0, 2))


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


