"""One measured GPU's per-operation rows as the held-out judge reads them (transfer_two_gpus.GpuTables): from
Vidur's tables (one `<org>_<model>.mlp.csv` a model) or from LLMServingSim's bundles (one folder a model).

vLLM fuses the residual add into the next RMSNorm (calibrate/tables/bundle_ops.py), so a bundle's norm rows time
the add too and a bundle has no add row. A fit made on Vidur's tables prices the add apart, and the cost model
charges it on every GPU (calibrate/clock/roofline.py); so on a bundle GPU's iterations the add is charged too, as
a row of its own with its bytes and no measured time (`fused_add`), which no fit ever sees.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.hardware.hardware import load_hardware
from calibrate.judging.bundle_import import read_gpu_bundles
from calibrate.judging.op_import import load_tables
from calibrate.judging.transfer_two_gpus import GpuTables
from calibrate.tables.bundle_ops import bundle_op_table
from calibrate.tables.op_table import OpTable

MAX_TOKENS = 4096  # as every shipped import fits: batches of 1 to 4,096 tokens


def table_gpu(paths: list[Path], hardware: str, max_tokens: int = MAX_TOKENS) -> GpuTables:
    """A GPU's Vidur tables, every model's rows together; the layer counts are table_models.LAYERS."""
    ops = pd.concat([t.ops for t in load_tables(paths, max_tokens)], ignore_index=True)
    return GpuTables(load_hardware(hardware), ops)


def bundle_gpu(paths: list[Path], measured_on: str | None = None, max_tokens: int = MAX_TOKENS) -> GpuTables:
    """A GPU's LLMServingSim bundles as bundle_import fits them, with each model's layer count and the fused add."""
    bundles, specs, hw = read_gpu_bundles(paths, measured_on)
    tables = [bundle_op_table(b, s, max_tokens) for b, s in zip(bundles, specs)]
    ops = pd.concat([t.ops for t in tables], ignore_index=True)
    layers = {t.label: s.num_layers for t, s in zip(tables, specs)}
    return GpuTables(hw, ops, layers, pd.concat([fused_add(t) for t in tables], ignore_index=True))


def fused_add(table: OpTable, dtype_bytes: int = 2) -> pd.DataFrame:
    """A residual add at each (tp, tokens) the layer's first norm was timed at: its bytes, no time of its own."""
    norm = table.ops[table.ops["op"] == "input_layernorm"]
    per_token = np.array([table.shape.elementwise_bytes_per_token(int(tp), dtype_bytes)["add"] for tp in norm["tp"]])
    return norm.assign(op="add", time_s=0.0, flops=0.0, weight_bytes=0.0,
                       moved_bytes=norm["tokens"].to_numpy(float) * per_token).reset_index(drop=True)
