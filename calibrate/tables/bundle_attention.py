"""An LLMServingSim bundle's attention.csv (calibrate/tables/llmservingsim_bundle.py) as the attention fit reads a
measured table (calibrate/tables/attention_table.AttentionTable), one per tp folder.

Each row times vLLM's Attention module for one layer: the KV-cache write of the step's new tokens and the attention
kernel over the whole batch, in one call. The rows split three ways:
  decode   prefill_chunk 0: n_decode sequences, each reading kv_decode tokens of history and its own new key,
           so a context of kv_decode + 1 (what a servesim decode's context counts: the sequence's length)
  prefill  n_decode 0: a chunk of prefill_chunk new tokens after kv_prefill cached ones
  mixed    both in one call: never fitted; they judge the fit, predicted as its decode part plus its prefill part
           (calibrate/judging/mixed_attention.py), as a cost model prices a chunked-prefill step
The layer per GPU is the model's heads over the tp degree (the profiler emulates tensor parallelism by dividing
them, calibrate/tables/bundle_models.py checks it), the model's head width and the bundle's block size. The
bundle records no block-table width: the longest context stands for the launch's (attention_waves.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from calibrate.tables.attention_table import AttentionShape, AttentionTable
from calibrate.tables.llmservingsim_bundle import Bundle
from engine.core.spec import ModelSpec

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class BundleAttention:
    table: AttentionTable  # the pure decode and pure prefill rows
    mixed: pd.DataFrame  # chunk, cached, batch, context, time_s


def bundle_attention(bundle: Bundle, spec: ModelSpec) -> list[BundleAttention]:
    """Each tp folder's attention rows that has an attention.csv, in tp order."""
    out = []
    for tp, tables in sorted(bundle.tps.items()):
        if tables.attention is None:
            continue
        rows = tables.attention
        shape = AttentionShape(spec.num_heads // tp, spec.num_kv_heads // tp, spec.head_dim, tp, bundle.block_size)
        decode = rows[rows["prefill_chunk"] == 0]
        prefill = rows[rows["n_decode"] == 0]
        mixed = rows[(rows["prefill_chunk"] > 0) & (rows["n_decode"] > 0)]
        table = AttentionTable(str(bundle.path / f"tp{tp}" / "attention.csv"), shape, _decodes(decode),
                               _prefills(prefill))
        out.append(BundleAttention(table, _mixed(mixed)))
    return out


def _prefills(rows: pd.DataFrame) -> pd.DataFrame:
    out = rows.rename(columns={"prefill_chunk": "chunk", "kv_prefill": "cached"})
    return out[["chunk", "cached", "time_s"]].reset_index(drop=True)


def _decodes(rows: pd.DataFrame) -> pd.DataFrame:
    out = rows.rename(columns={"n_decode": "batch"})[["batch", "time_s"]].reset_index(drop=True)
    out.insert(1, "context", rows["kv_decode"].to_numpy() + 1)
    return out


def _mixed(rows: pd.DataFrame) -> pd.DataFrame:
    out = rows.rename(columns={"prefill_chunk": "chunk", "kv_prefill": "cached", "n_decode": "batch"})[
        ["chunk", "cached", "batch", "time_s"]].reset_index(drop=True)
    out.insert(3, "context", rows["kv_decode"].to_numpy() + 1)
    return out
