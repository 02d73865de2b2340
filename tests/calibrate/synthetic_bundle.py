"""LLMServingSim bundles written by hand or made from a known linear part and attention fit, in a temporary folder.

`write_bundle` lays out a variant folder (meta.yaml, tp<N>/ with its CSVs) from text; `synthetic_bundle` times every
row as a known LinearFit and AttentionFit price it on a GPU's sheet, so that a fit on it can be checked to recover
them. None reads the published bundles.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from calibrate.hardware.hardware import load_hardware
from calibrate.parts.attention_fit import AttentionFit, AttentionWork
from calibrate.parts.attention_mixed import MixedFit, MixedGrid
from calibrate.parts.linear_model import LinearFit
from calibrate.tables.bundle_ops import CALLS, LAYER_OPS, TP_STABLE
from calibrate.work.layer_ops import GEMMS, LayerShape, gemm_work
from engine.specs.loader import load_model_spec

META = """\
vllm_version: 0.19.0
cuda_version: '13.0'
gpu: {gpu}
architecture: {architecture}
model: {model}
variant: bf16
tp_degrees: {tps}
engine_effective:
  block_size: 16
  hf_overrides: {{num_hidden_layers: 1, num_attention_heads: {heads}, num_key_value_heads: {kv_heads}}}
measurement_iterations: 3
"""
# Hugging Face id -> (servesim model, the profiler's architecture)
BUNDLE_MODELS = {"meta-llama/Llama-3.1-8B": ("llama-3.1-8b", "llama"), "Qwen/Qwen3-32B": ("qwen3-32b", "qwen3"),
                 "Qwen/Qwen3-30B-A3B-Instruct-2507": ("qwen3-30b-a3b", "qwen3_moe")}
GPU = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
HARDWARE = "rtx-pro-6000-server"
TOKENS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
SEQUENCES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# on the fit's grids (calibrate/fitting/op_fit.py), so the fit can land on them exactly
TRUE_FIT = LinearFit(compute_efficiency=0.8, bandwidth_efficiency=0.9, ridge_efficiency=0.6, gemm_latency_s=3e-6,
                     elementwise={"input_layernorm": (2e-6, 0.5), "post_attention_layernorm": (2e-6, 0.5),
                                  "attn_rope": (2.5e-6, 0.6), "mlp_act": (1.5e-6, 0.7), "qk_norm": (4e-6, 0.3),
                                  "emb": (2e-6, 0.25), "final_layernorm": (2.5e-6, 0.45)})
TRUE_ATTENTION = AttentionFit(decode_latency_s=8e-6, decode_bandwidth_efficiency=0.85, prefill_latency_s=7e-6,
                              prefill_compute_efficiency=0.6, prefill_kv_bandwidth_efficiency=0.3,
                              prefill_output_bandwidth_efficiency=0.5)
# the mixed rows' decodes in their one launch (calibrate/parts/attention_mixed.py), a floor on the fit's grid
TRUE_MIXED = MixedFit(latency_s=3e-6, wave_latency_s=2.5e-6, empty_block_s=2e-9, bandwidth_efficiency=2.5,
                      miss_bandwidth_efficiency=0.8, blocks_per_sm=1, floor_shares=(120 / 188,))
WITH_MIXED = replace(TRUE_ATTENTION, mixed=TRUE_MIXED)


def meta_text(model: str, tps=(1, 2), gpu: str = GPU) -> str:
    spec, architecture = load_model_spec(BUNDLE_MODELS[model][0]), BUNDLE_MODELS[model][1]
    last = tps[-1]
    return META.format(gpu=gpu, architecture=architecture, model=model, tps=list(tps), heads=spec.num_heads // last,
                       kv_heads=spec.num_kv_heads // last)


def write_bundle(folder: Path, meta: str, files: dict[int, dict[str, str]]) -> Path:
    """A variant folder: meta.yaml, and tp<N>/NAME for each text in files[N]."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.yaml").write_text(meta)
    for tp, tables in files.items():
        (folder / f"tp{tp}").mkdir(exist_ok=True)
        for name, text in tables.items():
            (folder / f"tp{tp}" / name).write_text(text)
    return folder


def dense_rows(shape: LayerShape, tp: int, fit: LinearFit, hw, mlp: bool = True,
               l2_share: float | None = None) -> list[tuple[str, int, float]]:
    """(layer, tokens, time_us) of every bundle layer the shape runs, as the profiler records them: a layer's two
    norms as one row (each is the op's time), the QK-norm's row half its op's, tp-stable rows at tp 1's work;
    `mlp` False: a mixture's, whose MLP is its moe.csv's; `l2_share`: the matmuls whose weights and activations fit
    in the sheet's L2 read their weights at this share instead of the fit's."""
    rows = []
    in_l2 = fit if l2_share is None else replace(fit, bandwidth_efficiency=l2_share)
    for layer, ops in LAYER_OPS.items():
        op = ops[0]
        if not shape.runs(op) or (op.startswith("mlp") and not mlp):
            continue
        work_tp = 1 if layer in TP_STABLE else tp
        for n in TOKENS:
            if op in GEMMS:
                dims = shape.gemm_dims(work_tp)[op]
                flops, weights = gemm_work(dims, n)
                fits = hw.l2_cache_bytes is not None and weights + n * sum(dims) * 2 <= hw.l2_cache_bytes
                seconds = (in_l2 if fits else fit).gemm_time(flops, weights, hw)
            else:
                seconds = fit.elementwise_time(op, n * shape.elementwise_bytes_per_token(work_tp)[op], hw)
            rows.append((layer, n, float(seconds) / CALLS.get(layer, 1) * 1e6))
    return rows


def attention_rows(q_heads: int, kv_heads: int, fit: AttentionFit, hw) -> list[tuple[int, int, int, int, float]]:
    """Pure decodes, pure prefills and mixed rows as `fit` prices them; a decode of kv_decode tokens of history reads
    kv_decode + 1 keys. A mixed row is its prefill part plus, where `fit` has a mixed term and the sheet its SM count,
    that term's decodes, else its decode part."""
    work = AttentionWork.of_heads(q_heads, kv_heads, 128)
    rows = []
    for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        for history in (16, 64, 256, 1024, 4096, 16384):
            rows.append((0, 0, batch, history, float(fit.decode_time(work, hw, batch * (history + 1))) * 1e6))
    for chunk in (16, 64, 256, 512, 1024, 2048):
        for cached in (0, 64, 512, 2048, 8192, 16384):
            rows.append((chunk, cached, 0, 0, float(fit.prefill_time(work, hw, chunk, cached)) * 1e6))
    grid = MixedGrid.of_heads(q_heads, kv_heads, 128)
    for chunk in (16, 256, 2048):
        for cached in (0, 512):
            for batch in (1, 2, 4, 8, 16, 32, 64, 128):
                for history in (16, 256, 1024, 4096, 16384):
                    if fit.mixed is not None and hw.sm_count is not None:
                        decode = fit.mixed.decode_time(grid, hw, [batch], [history + 1], [chunk])[0]
                    else:
                        decode = fit.decode_time(work, hw, batch * (history + 1))
                    rows.append((chunk, cached, batch, history, float(fit.prefill_time(work, hw, chunk, cached)
                                                                      + decode) * 1e6))
    return rows


def synthetic_bundle(folder: Path, model: str = "meta-llama/Llama-3.1-8B", tps=(1, 2), fit: LinearFit = TRUE_FIT,
                     attention: AttentionFit = WITH_MIXED, hardware: str = HARDWARE,
                     l2_share: float | None = None) -> Path:
    """A bundle of `model` whose every row `fit` and `attention` price on `hardware`'s sheet (`l2_share`: the
    matmuls that fit in its L2 at that share, dense_rows)."""
    spec, hw = load_model_spec(BUNDLE_MODELS[model][0]), load_hardware(hardware)
    shape, files = LayerShape.of(spec), {}
    for tp in tps:
        dense = pd.DataFrame(dense_rows(shape, tp, fit, hw, not spec.is_moe, l2_share),
                             columns=["layer", "tokens", "time_us"])
        head = [("lm_head", s, float(fit.gemm_time(*gemm_work((spec.hidden_size, spec.vocab_size // tp), s), hw)) * 1e6)
                for s in SEQUENCES] + [("sampler", s, 20.0 + s / 8) for s in SEQUENCES]
        attention_table = pd.DataFrame(attention_rows(spec.num_heads // tp, spec.num_kv_heads // tp, attention, hw),
                                       columns=["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"])
        per_sequence = pd.DataFrame(head, columns=["layer", "sequences", "time_us"])
        files[tp] = {"dense.csv": dense.to_csv(index=False), "per_sequence.csv": per_sequence.to_csv(index=False),
                     "attention.csv": attention_table.to_csv(index=False)}
    return write_bundle(folder, meta_text(model, tps, hw.device_names[0] if hw.device_names else GPU), files)
