"""Measured attention kernels (Vidur's profiling format, `attention.csv`), read into decode and prefill rows.

A table times one attention layer's kernels on one GPU: its shape in `n_embd`, `n_q_head`, `n_kv_head`,
`num_tensor_parallel_workers` and `block_size`; decode rows (`is_prefill` False) a batch of `batch_size`
sequences of `kv_cache_size` context tokens each, prefill rows (batch 1) a chunk of `prefill_chunk_size` new
tokens after `kv_cache_size` cached ones. Each row's time is its kernel (`attn_decode` or `attn_prefill`) plus
the reshapes around it (`attn_input_reshape`, `attn_output_reshape`), medians in milliseconds, per layer:
they run in every attention layer, so they are part of attention's time. Rows measured twice are averaged.
An optional `max_model_len` (one value) is the width of the block table the kernel was launched with: the
paged kernel counts its tiles of keys over it (calibrate/parts/attention_waves.py); without it, the longest context.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from calibrate.tables.columns import checked_column, row_where
from calibrate.tables.op_table import MS, check_columns, read_csv
from engine.errors import SpecError

if TYPE_CHECKING:
    import pandas as pd

SHAPE_COLUMNS = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "block_size")
POINT_COLUMNS = ("batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill")
KERNELS = {False: "attn_decode", True: "attn_prefill"}
RESHAPES = ("attn_input_reshape", "attn_output_reshape")
REQUIRED_COLUMNS = SHAPE_COLUMNS + POINT_COLUMNS + tuple(
    f"time_stats.{op}.median" for op in (*KERNELS.values(), *RESHAPES))
WHAT = "attention table (Vidur's attention.csv)"
LAUNCH_COLUMN = "max_model_len"


@dataclass(frozen=True)
class AttentionShape:
    """The attention layer a table measures, per GPU."""
    q_heads: int  # query heads on one GPU (the model's / tensor-parallel degree)
    kv_heads: int
    head_dim: int
    tp: int
    block_size: int


@dataclass(frozen=True)
class AttentionTable:
    source: str
    shape: AttentionShape
    decode: pd.DataFrame  # batch, context, time_s
    prefill: pd.DataFrame  # chunk, cached, time_s
    launch_tokens: int = 0  # the block table's width in tokens the decodes were launched with


def read_attention_table(path: str | Path) -> AttentionTable:
    import pandas as pd

    source = str(path)
    table = read_csv(path, WHAT)
    check_columns(table, REQUIRED_COLUMNS, source, WHAT)
    if table.empty:
        raise SpecError(source, "", "no rows")
    shape = _shape(table, source)
    prefill = _flags(table, source)
    points = pd.DataFrame({
        "batch": checked_column(table, "batch_size", source, low=1, whole=True),
        "chunk": checked_column(table, "prefill_chunk_size", source, low=0, whole=True),
        "cached": checked_column(table, "kv_cache_size", source, low=0, whole=True),
        "time_s": _time(table, prefill, source)})
    decode = points[~prefill].rename(columns={"cached": "context"})
    _positive(decode, "context", "kv_cache_size", source, "a decode reads at least one token of context")
    prefills = points[prefill]
    _positive(prefills, "chunk", "prefill_chunk_size", source, "a prefill computes at least one new token")
    decode = decode.groupby(["batch", "context"], as_index=False)["time_s"].mean()
    prefills = prefills.groupby(["chunk", "cached"], as_index=False)["time_s"].mean()
    return AttentionTable(source, shape, decode, prefills, _launch_tokens(table, decode, source))


def _launch_tokens(table: pd.DataFrame, decode: pd.DataFrame, source: str) -> int:
    longest = int(decode["context"].max()) if not decode.empty else 1
    if LAUNCH_COLUMN not in table.columns:
        return longest
    widths = set(checked_column(table, LAUNCH_COLUMN, source, low=1, whole=True).tolist())
    if len(widths) != 1:
        raise SpecError(source, f"column {LAUNCH_COLUMN}",
                        f"one table is launched at one width; found {sorted(widths)}")
    width = int(widths.pop())
    if width < longest:
        raise SpecError(source, f"column {LAUNCH_COLUMN}", f"{width} is shorter than the longest context, {longest}")
    return width


def _flags(table: pd.DataFrame, source: str) -> np.ndarray:
    text = table["is_prefill"].astype(str).str.strip().str.lower()
    bad = ~text.isin(["true", "false"])
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise SpecError(source, row_where(row, "is_prefill"),
                        f"{table['is_prefill'].iloc[row]!r} is not a boolean (True or False)")
    return (text == "true").to_numpy()


def _time(table: pd.DataFrame, prefill: np.ndarray, source: str) -> np.ndarray:
    """Each row's kernel plus its reshapes, in seconds; the kernel column of the other kind may be empty."""
    import pandas as pd

    total = np.zeros(len(table))
    for kind, kernel in KERNELS.items():
        rows = prefill == kind
        for op in (kernel, *RESHAPES):
            column = f"time_stats.{op}.median"
            values = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=float)
            bad = rows & (~np.isfinite(values) | (values < 0))
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise SpecError(source, row_where(row, column),
                                f"{table[column].iloc[row]!r} is not a non-negative time in milliseconds")
            total[rows] += values[rows] * MS
    zero = total <= 0
    if zero.any():
        row = int(np.flatnonzero(zero)[0])
        raise SpecError(source, row_where(row, f"time_stats.{KERNELS[bool(prefill[row])]}.median"),
                        "a kernel and its reshapes took no time: not a measurement")
    return total


def _positive(rows: pd.DataFrame, name: str, column: str, source: str, why: str) -> None:
    bad = rows[rows[name] <= 0]
    if not bad.empty:
        row = int(bad.index[0])
        raise SpecError(source, f"row {row + 1} (line {row + 2}), column {column}", f"{bad[name].iloc[0]}: {why}")


def _shape(table: pd.DataFrame, source: str) -> AttentionShape:
    values = {}
    for column in SHAPE_COLUMNS:
        numbers = checked_column(table, column, source, low=1, whole=True)
        if len(set(numbers.tolist())) != 1:
            raise SpecError(source, f"column {column}", f"one table measures one layer; found {sorted(set(numbers))}")
        values[column] = int(numbers[0])
    heads, kv_heads, tp = values["n_q_head"], values["n_kv_head"], values["num_tensor_parallel_workers"]
    if values["n_embd"] % heads:
        raise SpecError(source, "column n_embd", f"{values['n_embd']} is not a whole number of {heads} heads")
    if heads % kv_heads or heads % tp or kv_heads % tp:
        raise SpecError(source, "column n_kv_head", f"{heads} query and {kv_heads} KV heads do not split over "
                        f"{tp} GPUs: each must divide by the tensor-parallel degree, and the KV heads the query heads")
    return AttentionShape(heads // tp, kv_heads // tp, values["n_embd"] // heads, tp, values["block_size"])
