"""W8A8 weights priced by the measured FP8 GEMMs: the roofline's linear part is the fitted GEMM model per layer,
16-bit and every other format price to the bit as before, and the source says which GEMMs price it."""
from __future__ import annotations

from pathlib import Path

import pytest
from batches import decode, prefill

from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.hardware.hardware import load_hardware
from calibrate.hardware.precision import Precision
from calibrate.parts.fp8_gemm import Fp8GemmFit, Fp8GemmProfile, load_fp8_gemms
from engine.core.batch import Batch
from engine.specs.loader import load_model_spec

H100, A100, H200 = load_hardware("h100-sxm"), load_hardware("a100-80gb"), load_hardware("h200")
LLAMA3 = load_model_spec("llama-3-8b")
FP8 = Precision("fp8", "fp8")
# round numbers, a hard max (ridge 1), so that the hand computation below is plain arithmetic
HAND = Fp8GemmProfile(Fp8GemmFit(0.5, 0.8, 1.0, 5e-6, quant=(2e-6, 0.5)), "k", "h100-sxm",
                      {"largest_m": {"what": "at M >= 128", "mean": 0.05}}, Path("hand.yaml"))


def test_fp8_pricing_is_the_fitted_gemm_model_per_layer_by_hand():
    tokens = 300
    # Llama-3-8B's GEMMs on one GPU, (K, N): QKV 4096 -> 4096 + 2 x 1024, output 4096 -> 4096, gate and up
    # 4096 -> 2 x 14336, down 14336 -> 4096
    gemms = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)]
    layer = 0.0
    for k, n in gemms:
        compute = 2 * tokens * n * k / (0.5 * 1979e12)
        memory = (n * k + tokens * k + 2 * tokens * n) / (0.8 * 3.35e12)
        quant = 2e-6 + (3 * tokens * k + 4 * tokens) / (0.5 * 3.35e12)
        layer += 5e-6 + max(compute, memory) + quant
    params = RooflineParams()
    head = max(2 * LLAMA3.vocab_size * 4096 / (989e12 * params.compute_efficiency),  # one logit row, 16-bit
               LLAMA3.vocab_size * 4096 * 2 / (3.35e12 * params.bandwidth_efficiency))
    cost = RooflineCostModel(LLAMA3, H100, precision=FP8, fp8_gemms=HAND)
    assert cost.breakdown(prefill([tokens])).device["linear"] == pytest.approx(32 * layer + head, rel=1e-12)
    # and each GEMM as the fit itself prices it
    fitted = sum(float(HAND.fit.time(tokens, n, k, True, H100)) for k, n in gemms)
    assert cost.matmul_time(tokens, 1) == pytest.approx(32 * fitted + head, rel=1e-12)


def test_the_shipped_fit_prices_w8a8_on_an_h100_gemm_by_gemm():
    fit, params, tokens, rows = load_fp8_gemms().fit, RooflineParams(), 48, 3
    dims = [(4096, 3072), (2048, 4096), (4096, 14336), (7168, 4096)]  # tp 2 splits N, or K of the row-parallel two
    decoder = 32 * sum(float(fit.time(tokens, n, k, True, H100)) for k, n in dims)
    head_params = LLAMA3.vocab_size * 4096 / 2
    head = max(rows * 2 * head_params / (989e12 * params.compute_efficiency),
               head_params * 2 / (3.35e12 * params.bandwidth_efficiency))
    cost = RooflineCostModel(LLAMA3, H100, tp=2, precision=FP8)
    assert cost.matmul_time(tokens, rows) == pytest.approx(decoder + head, rel=1e-12)


def test_the_source_says_whose_gemms_price_it_and_where_the_carry_is_unjudged():
    h100 = RooflineCostModel(LLAMA3, H100, precision=FP8).source
    assert "FP8 GEMMs as measured on h100-sxm (held-out" in h100 and "unjudged" not in h100
    assert "carried to h200 by its sheet's shares (unjudged)" in RooflineCostModel(LLAMA3, H200, precision=FP8).source
    assert "FP8 GEMMs" not in RooflineCostModel(LLAMA3, A100, precision=FP8).source  # weight-only there
    mixtral = RooflineCostModel(load_model_spec("mixtral-8x7b"), H100, tp=2, precision=FP8).source
    assert "W8A8 at 1979 TFLOP/s" in mixtral and "FP8 GEMMs" not in mixtral


# iteration_time's float on main before FP8 GEMMs were measured, (a mixed batch, a decode batch), as float.hex: every
# format the measured GEMMs do not price must give them still
BEFORE = {
    "llama-3-8b fp16 h100": ("0x1.ff80b48bbc8f6p-7", "0x1.8b285b0f582dap-8"),
    "llama-3-70b bf16 fp8-kv h100 tp4 bent": ("0x1.7b33218372f31p-5", "0x1.f5ebba5f845e2p-7"),
    "llama-3-8b int4 h100": ("0x1.ff80b48bbc8f6p-7", "0x1.f6b63bfd28e76p-10"),
    "llama-3-8b fp8 a100": ("0x1.92c3b43e2bf81p-5", "0x1.5ad4e4418c116p-8"),
    "mixtral fp8 h100 tp2": ("0x1.62f29f5a13f6ep-7", "0x1.92ca7e22ff7cbp-8"),
    "llama-3-8b legacy dtype_bytes 2": ("0x1.ff80b48bbc8f6p-7", "0x1.8b285b0f582dap-8"),
    "llama-3-8b fp8 h100, the sheet's rate (fp8_gemms=False)": ("0x1.02e3a0a56d3ebp-7", "0x1.a633e91408590p-9"),
}
CASES = {
    "llama-3-8b fp16 h100": ("llama-3-8b", H100, 1, Precision(), RooflineParams(), True),
    "llama-3-70b bf16 fp8-kv h100 tp4 bent": ("llama-3-70b", H100, 4, Precision("bf16", "fp8"),
                                              RooflineParams(ridge_efficiency=0.8), True),
    "llama-3-8b int4 h100": ("llama-3-8b", H100, 1, Precision("int4"), RooflineParams(), True),
    "llama-3-8b fp8 a100": ("llama-3-8b", A100, 1, FP8, RooflineParams(), True),
    "mixtral fp8 h100 tp2": ("mixtral-8x7b", H100, 2, Precision("fp8"), RooflineParams(), True),
    "llama-3-8b legacy dtype_bytes 2": ("llama-3-8b", H100, 1, Precision.uniform(2), RooflineParams(), True),
    "llama-3-8b fp8 h100, the sheet's rate (fp8_gemms=False)": ("llama-3-8b", H100, 1, FP8, RooflineParams(), False),
}


def mixed() -> Batch:
    return Batch(prefill_seq_ids=[0, 1], prefill_lens=[700, 33], prefill_sample_ids=[(0,), (1,)],
                 decode_seq_ids=[10, 11, 12], decode_context_lens=[100, 2000, 17], num_running_groups=5)


@pytest.mark.parametrize("name", list(CASES))
def test_every_other_format_prices_to_the_bit_as_before(name):
    model, hw, tp, precision, params, measured = CASES[name]
    cost = RooflineCostModel(load_model_spec(model), hw, tp=tp, params=params, precision=precision,
                             fp8_gemms=measured)
    batches = (mixed(), decode([100, 2000, 17]))
    got = tuple(cost.iteration_time(batch).hex() for batch in batches)
    assert got == BEFORE[name]
    assert tuple(cost.reference_iteration_time(batch).hex() for batch in batches) == BEFORE[name]


def test_measured_fp8_gemms_cost_more_than_the_sheets_rate_at_a_decode():
    """The latencies and the quantization the sheet's rate left out: a decode of one costs more."""
    measured, sheet = (RooflineCostModel(LLAMA3, H100, precision=FP8, fp8_gemms=m) for m in (True, False))
    one = decode([500])
    assert measured.iteration_time(one) > sheet.iteration_time(one)
    fixed = 32 * 4 * (load_fp8_gemms().fit.gemm_latency_s + load_fp8_gemms().fit.quant[0])
    assert measured.breakdown(one).device["linear"] > fixed
