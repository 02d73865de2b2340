"""Per-operation tables in Vidur's format whose times come from a known linear part (calibrate/parts/linear_model.py).

Tests build them in a temporary folder; none reads the published measurements.
"""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibrate.hardware.hardware import load_hardware
from calibrate.parts.linear_model import LinearFit
from calibrate.work.layer_ops import GEMMS, LayerShape, gemm_work

# on the fit's grids (calibrate/fitting/op_fit.py), so the fit can land on them exactly
TRUE_FIT = LinearFit(compute_efficiency=0.7, bandwidth_efficiency=0.8, ridge_efficiency=0.7, gemm_latency_s=5e-6,
                     elementwise={"input_layernorm": (3e-6, 0.45), "attn_rope": (2e-6, 0.5),
                                  "post_attention_layernorm": (3e-6, 0.4), "mlp_act": (2e-6, 0.55),
                                  "add": (1e-6, 0.9), "emb": (3e-6, 0.2)})
HARDWARE = "a100-80gb"
# (label, layer shape): llama-7b's own, a grouped-query one and a narrow ungated one
MODELS = {"meta-llama_Llama-2-7b-hf": LayerShape(4096, 32, 32, 11008, True),
          "synthetic_gqa-20b": LayerShape(6144, 48, 8, 16384, True),
          "synthetic_plain-3b": LayerShape(2560, 32, 32, 10240, False)}
TOKENS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 384, 512, 768, 1024, 2048, 4096)
TP = (1, 2)


def op_time(fit: LinearFit, shape: LayerShape, tp: int, tokens: int, op: str, hardware: str = HARDWARE,
            tile: int = 1) -> float:
    """Seconds of one operation as `fit` prices it on `hardware`'s spec sheet; `tile`: a GEMM computes its token
    rows rounded up to a multiple of it (the steps of a tensor-core kernel's tiles)."""
    hw = load_hardware(hardware)
    if op in GEMMS:
        flops, weight_bytes = gemm_work(shape.gemm_dims(tp)[op], -(-tokens // tile) * tile)
        return float(fit.gemm_time(flops, weight_bytes, hw))
    return float(fit.elementwise_time(op, tokens * shape.elementwise_bytes_per_token(tp)[op], hw))


def table(shape: LayerShape, fit: LinearFit = TRUE_FIT, tps=TP, tokens=TOKENS, hardware: str = HARDWARE,
          tile: int = 1) -> pd.DataFrame:
    rows = []
    for tp in tps:
        for n in tokens:
            row = {f"time_stats.{op}.median": op_time(fit, shape, tp, n, op, hardware, tile) * 1e3  # ms, as Vidur
                   for op in (*GEMMS, *fit.elementwise)}
            row.update({"n_head": shape.num_heads, "n_kv_head": shape.num_kv_heads, "n_embd": shape.hidden,
                        "n_expanded_embd": shape.ffn, "vocab_size": 32000, "use_gated_mlp": shape.gated_mlp,
                        "num_tokens": n, "num_tensor_parallel_workers": tp})
            rows.append(row)
    return pd.DataFrame(rows)


def write_tables(folder: Path, models=MODELS, **kwargs) -> list[Path]:
    paths = []
    for label, shape in models.items():
        path = folder / f"{label}.mlp.csv"
        table(shape, **kwargs).to_csv(path, index=False)
        paths.append(path)
    return paths


def write_all_reduce(path: Path) -> Path:
    """A DGX-like all-reduce table: 20 us plus bytes over 150 GB/s, on 2 and 4 GPUs in one node; rows
    across nodes (devices_per_node 1) ten times slower, to be left out."""
    rows = []
    for workers in (2, 4):
        for size in np.geomspace(2048, 64 << 20, 12).astype(int):
            for devices, slow in ((workers, 1.0), (1, 10.0)):
                ms = slow * (0.020 + size / 150e9 * 1e3)
                rows.append({"time_stats.all_reduce.median": ms, "rank": 0, "num_workers": workers,
                             "size": size, "collective": "all_reduce", "devices_per_node": devices,
                             "max_devices_per_node": 8})
    pd.DataFrame(rows).to_csv(path)
    return path


# a second GPU measured with the same shares and latencies of its own spec sheet, as a two-GPU fit assumes
SECOND_HARDWARE = "h100-sxm"
# the tables' models' layers (calibrate/tables/table_models.py): an iteration is layers x one layer + the embedding
LAYERS = {"meta-llama_Llama-2-7b-hf": 32, "synthetic_gqa-20b": 60, "synthetic_plain-3b": 24}


def write_two_gpus(folder: Path, first: LinearFit = TRUE_FIT, second: LinearFit = TRUE_FIT, tile: int = 1
                   ) -> tuple[list[Path], list[Path]]:
    """Tables of MODELS on HARDWARE (priced by `first`) and on SECOND_HARDWARE (by `second`), each GPU in its
    own subfolder; `tile` as op_time's, on both."""
    out = []
    for name, fit in ((HARDWARE, first), (SECOND_HARDWARE, second)):
        (folder / name).mkdir(parents=True, exist_ok=True)
        out.append(write_tables(folder / name, fit=fit, hardware=name, tile=tile))
    return out[0], out[1]


def assert_same_fit(fit: LinearFit, true: LinearFit) -> None:
    assert fit.ridge_efficiency == pytest.approx(true.ridge_efficiency, abs=1e-9)
    assert fit.gemm_latency_s == pytest.approx(true.gemm_latency_s, abs=1e-12)
    assert fit.compute_efficiency == pytest.approx(true.compute_efficiency, rel=1e-6)
    assert fit.bandwidth_efficiency == pytest.approx(true.bandwidth_efficiency, rel=1e-6)
    assert set(fit.elementwise) == set(true.elementwise)
    for op, (latency, efficiency) in true.elementwise.items():
        assert fit.elementwise[op][0] == pytest.approx(latency, rel=1e-6)
        assert fit.elementwise[op][1] == pytest.approx(efficiency, rel=1e-6)
